"""Small example models by name, as onnxruntime's ``onnxruntime.datasets`` offers them (its
documentation's snippets load them with ``get_example``): ``sigmoid.onnx`` (``y = Sigmoid(x)``,
float ``[3, 4, 5]``), ``mul_1.onnx`` (``Y = X * W``, X float ``[3, 2]``, W the constant
``[[1, 2], [3, 4], [5, 6]]``) and ``logreg_iris.onnx`` (a three-class logistic regression of
four features, ``float_input [N, 4]`` -> ``label`` int64 ``[N]`` and ``probabilities``, a ZipMap
``seq(map(int64, float))``). Where an onnxruntime distribution is installed, its own
example file of that name is returned (found through its ``.dist-info``; onnxruntime is not
imported), so code from onnxruntime's documentation and tests gets the very numbers it
expects. Otherwise they are dynashape's own models of those names, built with ``onnx.helper``
the first time they are asked for and kept in dynashape's cache directory
(``DYNASHAPE_CACHE_DIR``; a temporary directory when the cache is off): the same graphs, not
onnxruntime's files (the logistic regression has its own coefficients, and four features
where onnxruntime's declares two).
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable

__all__ = ["get_example"]


def _sigmoid():
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "sigmoid",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=4)


def _mul():
    from onnx import TensorProto, helper

    w = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    graph = helper.make_graph([helper.make_node("Mul", ["X", "W"], ["Y"])], "mul_1",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=4)


#: the logistic regression's coefficients (class-major, 3 classes x 4 features) and intercepts
LOGREG_COEFFICIENTS = (-0.42, 0.96, -2.52, -1.08, 0.53, -0.32, -0.20, -0.94, -0.11, -0.64, 2.72, 2.02)
LOGREG_INTERCEPTS = (9.85, 2.24, -12.09)


def _logreg():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("LinearClassifier", ["float_input"], ["label", "scores"], domain="ai.onnx.ml",
                              classlabels_ints=[0, 1, 2], coefficients=list(LOGREG_COEFFICIENTS),
                              intercepts=list(LOGREG_INTERCEPTS), post_transform="LOGISTIC", multi_class=0),
             helper.make_node("Normalizer", ["scores"], ["normalized"], domain="ai.onnx.ml", norm="L1"),
             helper.make_node("ZipMap", ["normalized"], ["probabilities"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])]
    probabilities = helper.make_value_info("probabilities", helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None))))
    graph = helper.make_graph(nodes, "logreg_iris",
                              [helper.make_tensor_value_info("float_input", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [None]), probabilities])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9), helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=4)


EXAMPLES: dict[str, Callable] = {"sigmoid.onnx": _sigmoid, "mul_1.onnx": _mul, "logreg_iris.onnx": _logreg}


def _folder() -> str:
    from ..usercache import cache_dir

    base = cache_dir()
    folder = os.path.join(str(base), "examples") if base is not None else os.path.join(tempfile.gettempdir(),
                                                                                      "dynashape-examples")
    os.makedirs(folder, exist_ok=True)
    return folder


#: the distributions that install the ``onnxruntime`` package (and its ``datasets`` folder)
ONNXRUNTIME_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino")


def _onnxruntime_example(name: str) -> str | None:
    """The path of an installed onnxruntime's example ``name``, or None."""
    from ..distributions import dist_info

    for distribution in ONNXRUNTIME_DISTRIBUTIONS:
        folder = dist_info(distribution)
        path = None if folder is None else folder.parent / "onnxruntime" / "datasets" / name
        if path is not None and path.is_file():
            return str(path.resolve())
    return None


def get_example(name: str) -> str:
    """The absolute path of the example model ``name`` (``"logreg_iris.onnx"``), written on
    first use.

    Raises:
        FileNotFoundError: no example of that name.
        OSError: the example cannot be written.
    """
    make = EXAMPLES.get(name)
    if make is None:
        raise FileNotFoundError(f"Unable to find example '{name}' (examples: {sorted(EXAMPLES)})")
    installed = _onnxruntime_example(name)
    if installed is not None:
        return installed
    path = os.path.join(_folder(), name)
    if not os.path.isfile(path):
        data = make().SerializeToString()
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, path)      # (another process may write the same file: the last whole one stays)
    return path
