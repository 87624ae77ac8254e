"""The builtin operators, registered through the same pluggy hooks as any third-party plugin.

One module per op family (``shape_ops``, ``tensor_ops``, ``elementwise``, ``activations``,
``reduction``, ``linalg``, ``nn``, ``resize``, ``rnn``, ``control_flow``, ``quantization``,
``attention``, ``normalization``, ``loss``, ``detection``, ``image``, ``sequence``,
``signal``, ``text``, ``training``, ``random``, and the ``ai.onnx.ml`` families ``ml``, ``ml_linear``,
``ml_tree``, ``ml_svm``, ``ml_maps``, ``ml_encode``, ...), the fused ops the rewrites make
(``fusions``) and the graph rewrites (``rewrites``); each holds an
:class:`~dynashape.records.OpLibrary` named ``lib``. Find an op by its ONNX name there.

The families are lazy libraries (:class:`~dynashape.records.LazyLibrary`): a family is
imported when a model first uses one of its ops, ``rewrites`` when the rewrites first run.
:mod:`.index` lists the ops of each; regenerate it after adding or removing an op::

    python -m dynashape.ops_builtin
"""
from __future__ import annotations

from dynashape.hookspecs import hookimpl

FAMILIES = ("shape_ops", "tensor_ops", "elementwise", "activations", "reduction", "linalg",
            "nn", "resize", "rnn", "control_flow", "quantization", "attention", "normalization", "loss",
            "detection", "image", "sequence", "signal", "text", "training", "random",
            "ml",
            "ml_linear",
            "ml_tree",
            "ml_svm",
            "ml_maps",
            "ml_encode",
            "fusions", "rewrites")
#: the command that regenerates :mod:`.index`
INDEX_COMMAND = "python -m dynashape.ops_builtin"


def family_modules() -> list[str]:
    return [f"{__name__}.{name}" for name in FAMILIES]


@hookimpl
def dynashape_register_libraries():
    from dynashape.libindex import libraries

    from .index import INDEX
    return libraries(INDEX)
