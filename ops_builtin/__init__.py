"""The builtin operators, registered through the same pluggy hooks as any third-party plugin.

One module per op family (``shape_ops``, ``tensor_ops``, ``elementwise``, ``activations``,
``reduction``, ``linalg``, ``nn``, ``resize``, ``rnn``, ``control_flow``, ``quantization``,
``attention``, ``normalization``, ``loss``, ``detection``, ``image``, ``sequence``,
``signal``, ``text``, ``ml``, ``training``, ``random``), the fused ops the rewrites make
(``fusions``) and the graph rewrites (``rewrites``); each holds an
:class:`~dynashape.records.OpLibrary` named ``lib``. Find an op by its ONNX name there.
"""
from __future__ import annotations

import importlib

from dynashape.hookspecs import hookimpl

FAMILIES = ("shape_ops", "tensor_ops", "elementwise", "activations", "reduction", "linalg",
            "nn", "resize", "rnn", "control_flow", "quantization", "attention", "normalization", "loss",
            "detection", "image", "sequence", "signal", "text", "ml", "training", "random",
            "fusions", "rewrites")


def _libraries():
    for name in FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        yield module.lib


@hookimpl
def dynashape_register_ops():
    return [op for lib in _libraries() for op in lib.ops]


@hookimpl
def dynashape_register_kernels():
    return [k for lib in _libraries() for k in lib.kernels]


@hookimpl
def dynashape_register_rewrites():
    return [r for lib in _libraries() for r in lib.rewrites]
