"""A catalogue of bad inputs: feeds, values reaching shape computations at run time, and models.

Each entry (:class:`Bad`) names the exception type dynashape must raise and the words its
message must contain (the node, the input, the axis, what was expected), and shows that
nothing is left broken afterwards:

* ``feed`` and ``shape value`` entries: ONE session per entry and allocator runs a good feed,
  then the bad one (which must raise), then the good feed again and a good feed of other
  shapes; the good results are onnxruntime's.
* ``model`` entries: loading (or, for ``stage="run"`` entries whose check dynashape makes at
  the first run, loading and running) must raise; then a good model loads and runs correctly
  in the same process.

Every error raised must be a ``dynashape.DynashapeError`` whose class lives in
``dynashape.errors``: no raw MemoryError, numpy ValueError, IndexError or RecursionError may
escape. Where onnxruntime rejects the same input, ``test_onnxruntime_rejects_*`` checks that it
does (so an entry is bad by ORT's judgement too, not only by dynashape's).

Entries marked ``reported`` show a misbehaviour of dynashape today; they keep the right
expectation and are strict xfails until the source is fixed.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape as ds
from dynashape.validate import MAX_NESTING
from tests.conftest import ort_predates, ort_session, spec_run
from tests.reliability.builders import nested_if as _nested_if

ort = pytest.importorskip("onnxruntime")

#: many entries feed shapes that break a declared dim_param on purpose (hints by default)
pytestmark = pytest.mark.filterwarnings("ignore:dynashape. dim_param .* declared dim_params are hints")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
OPSET = 18
CATEGORIES = ("feed", "shape value", "model")
#: validation mode (DYNASHAPE_VALIDATE_MEMORY=1) checks every plan against per-node inference,
#: which applies some shape rules that the default, symbolic-program plans skip
VALIDATING = os.environ.get("DYNASHAPE_VALIDATE_MEMORY", "") in ("1", "true")


# --- building blocks -------------------------------------------------------------------------

def _vi(name: str, dims=None, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def _model(nodes, inputs, outputs, inits=(), opset=OPSET, domains=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *domains])


def _one(op: str, inputs, outputs, name: str, inits=(), **attrs) -> Callable[[], onnx.ModelProto]:
    """A builder of a one-node model; ``inputs`` are (name, dims, elem) of the graph inputs (a
    name "" is an absent optional input; initializers follow them as node inputs), ``outputs``
    (name, elem)."""
    def build():
        names = [n for n, _, _ in inputs] + [t.name for t in inits]
        node = helper.make_node(op, names, [n for n, _ in outputs], name=name, **attrs)
        return _model([node], [_vi(n, d, e) for n, d, e in inputs if n], [_vi(n, None, e) for n, e in outputs], inits)
    return build


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def _f32(shape, start: float = 0.0) -> np.ndarray:
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float32) * 0.5 + start).reshape(shape)


X23, X45 = _f32((2, 3)), _f32((4, 5), -3.0)
X4 = _f32((1, 1, 2, 2))


@dataclass
class Bad:
    """One bad input.

    ``build_model()`` makes the model (for ``model`` entries ``build_model(tmp_path)`` makes
    the thing given to ``InferenceSession``); ``bad_feed`` is the bad run's feed (``model``
    entries of ``stage="run"``: the feed of the first run); ``error`` the class (or classes)
    that must be raised, its message holding every one of ``words`` (``{dir}`` stands for the
    test's tmp_path); ``node``, where given, the error's ``.node``. ``good_feed``: good feeds,
    run before and after the bad one on the same session (the first one before, all of them
    after). ``session``: keyword arguments of the session. ``ort_rejects``: onnxruntime
    rejects the bad input too. ``good_model(tmp_path)``: ``(model, feeds list)`` run after a
    bad model (default: :func:`_good_model`). ``want(model, feeds)``: the good feeds' outputs
    (default: onnxruntime's). ``reported``: the misbehaviour, for a strict xfail
    (``reported_unless_validating``: only outside validation mode, where dynashape is right).
    """

    category: str
    name: str
    build_model: Callable[..., Any]
    bad_feed: Any
    error: Any
    words: tuple
    good_feed: tuple = ()
    node: Optional[str] = None
    session: dict = field(default_factory=dict)
    output_names: Optional[list] = None
    ort_rejects: bool = True
    stage: str = "load"
    good_model: Optional[Callable[[Path], tuple]] = None
    want: Optional[Callable[[Any, dict], list]] = None
    reported: str = ""
    reported_unless_validating: bool = False

    @property
    def id(self) -> str:
        return f"{self.category}:{self.name}"


# --- feed entries --------------------------------------------------------------------------

_add = _one("Add", [("x", ["b", "s"], F), ("y", ["b", "s"], F)], [("z", F)], "add")
_ADD_GOOD = ({"x": X23, "y": X23 * 2}, {"x": X45, "y": X45 + 1})
_neg_int = _one("Neg", [("x", ["n"], I64)], [("z", I64)], "neg")
_NEG_GOOD = ({"x": _i64(1, -2, 3)}, {"x": _i64(4, 5, 6, 7, 8)})
_relu_fixed = _one("Relu", [("x", ["b", 3], F)], [("z", F)], "relu")
_matmul = _one("MatMul", [("a", ["m", "k"], F), ("b", ["k", "n"], F)], [("z", F)], "mm")
_concat = _one("Concat", [("a", ["m", "k"], F), ("b", ["n", "k"], F)], [("z", F)], "cat", axis=0)
_where = _one("Where", [("c", ["n"], B), ("x", ["n"], F), ("y", ["n"], F)], [("z", F)], "where")
_einsum = _one("Einsum", [("a", ["i", "j"], F), ("b", ["j", "k"], F)], [("z", F)], "es", equation="ij,jk->ik")
_gather_rows = _one("Gather", [("x", ["b", "s"], F), ("i", ["k"], I64)], [("z", F)], "gather", axis=0)
_gather_elements = _one("GatherElements", [("x", ["b", "s"], F), ("i", ["b", "k"], I64)], [("z", F)], "ge",
                        axis=1)
_scatter_nd = _one("ScatterND", [("x", ["b", "s"], F), ("i", ["k", 1], I64), ("u", ["k", "s"], F)], [("z", F)],
                   "snd")
_argmax = _one("ArgMax", [("x", ["b", "s"], F)], [("z", I64)], "am", axis=1)
_conv = _one("Conv", [("x", ["n", "c", "h", "w"], F)], [("z", F)], "conv",
             inits=[numpy_helper.from_array(_f32((1, 2, 1, 1), 1.0), "w")])


def _seq_length():
    return helper.make_model(helper.make_graph(
        [helper.make_node("SequenceLength", ["s"], ["n"], name="seqlen")], "g",
        [helper.make_tensor_sequence_value_info("s", F, ["b", "k"])], [_vi("n", [], I64)]),
        opset_imports=[helper.make_opsetid("", OPSET)])


def _if_neg_abs():
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t")])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [_vi("e")])
    return _model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                  [_vi("x", ["n"]), _vi("c", None, B)], [_vi("y")])


def _scan_two():
    body = helper.make_graph([helper.make_node("Add", ["s", "a"], ["s2"]), helper.make_node("Mul", ["a", "b"], ["o"])],
                             "body", [_vi("s", [2]), _vi("a", [2]), _vi("b", [2])], [_vi("s2", [2]), _vi("o", [2])])
    return _model([helper.make_node("Scan", ["s0", "A", "B"], ["sf", "os"], name="scan", num_scan_inputs=2,
                                    body=body)],
                  [_vi("s0", [2]), _vi("A", ["n", 2]), _vi("B", ["m", 2])], [_vi("sf"), _vi("os")])


def _loop_slices():
    """Loop t times; iteration i emits x[:i + k] as a scan output (one shape only while k >= len(x))."""
    zero = numpy_helper.from_array(_i64(0), "zero")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Add", ["i", "k"], ["e"]),
         helper.make_node("Unsqueeze", ["e", "zero"], ["e1"]),
         helper.make_node("Slice", ["x", "zero", "e1"], ["part"])],
        "body", [_vi("i", [], I64), _vi("cond", [], B)], [_vi("cond_out", [], B), _vi("part")], [zero])
    return _model([helper.make_node("Loop", ["t", ""], ["ys"], name="loop", body=body)],
                  [_vi("x", ["n"]), _vi("k", [], I64), _vi("t", [], I64)], [_vi("ys")])


_SKIPPED_RULE = ("The op's shape rule has the check (validation mode, which runs per-node inference, raises the "
                 "right ShapeInferenceError), but the default plan comes from the symbolic program, where the "
                 "rule skips the check for a symbolic dim instead of recording it with ctx.assume")
FEEDS = [
    Bad("feed", "missing input", _add, {"x": X23}, ds.InputNameError,
        ("missing input 'y'", "tensor(float)", "'b'", "'s'"), _ADD_GOOD),
    Bad("feed", "unknown input name", _add, {"x": X23, "y": X23, "w": X23}, ds.InputNameError,
        ("unknown input name", "'w'", "['x', 'y']"), _ADD_GOOD),
    Bad("feed", "integer keys", _add, {0: X23, 1: X23}, ds.InputNameError,
        ("unknown input name", "[0, 1]", "['x', 'y']"), _ADD_GOOD),
    Bad("feed", "feeds as a list", _add, [X23, X23], ds.InvalidFeedError,
        ("input_feed must be a dict", "list"), _ADD_GOOD),
    Bad("feed", "float64 for float32", _add, {"x": X23, "y": X23.astype(np.float64)}, ds.InputDtypeMismatch,
        ("input 'y'", "tensor(float)", "float32", "float64"), _ADD_GOOD),
    Bad("feed", "int32 array for float32", _add, {"x": X23, "y": X23.astype(np.int32)}, ds.InputDtypeMismatch,
        ("input 'y'", "float32", "int32"), _ADD_GOOD),
    Bad("feed", "complex64 for float32", _add, {"x": X23.astype(np.complex64), "y": X23}, ds.InputDtypeMismatch,
        ("input 'x'", "float32", "complex64"), _ADD_GOOD),
    Bad("feed", "a string for float32", _add, {"x": X23, "y": "hello"}, ds.InputDtypeMismatch,
        ("input 'y'", "float32", "str"), _ADD_GOOD),
    Bad("feed", "a list of strings for float32", _add, {"x": X23, "y": [["a", "b", "c"], ["d", "e", "f"]]},
        ds.InputDtypeMismatch, ("input 'y'", "float32", "list"), _ADD_GOOD),
    Bad("feed", "an object array", _add, {"x": X23, "y": np.array([[object()] * 3] * 2)}, ds.InputDtypeMismatch,
        ("input 'y'", "float32", "object"), _ADD_GOOD),
    Bad("feed", "None for a tensor", _add, {"x": X23, "y": None}, ds.InvalidFeedError,
        ("input 'y'", "got None", "tensor(float)"), _ADD_GOOD),
    Bad("feed", "a ragged list", _add, {"x": X23, "y": [[1.0, 2.0, 3.0], [4.0]]}, ds.InvalidFeedError,
        ("input 'y'", "cannot make a tensor(float) tensor", "list"), _ADD_GOOD),
    Bad("feed", "rank too low", _add, {"x": X23, "y": X23[0]}, ds.InputRankMismatch,
        ("input 'y'", "expected rank 2", "got rank 1", "[3]"), _ADD_GOOD),
    Bad("feed", "rank too high", _add, {"x": X23[None], "y": X23}, ds.InputRankMismatch,
        ("input 'x'", "expected rank 2", "got rank 3", "[1, 2, 3]"), _ADD_GOOD),
    Bad("feed", "shapes that do not broadcast", _add, {"x": X23, "y": _f32((2, 4))}, ds.ShapeInferenceError,
        ("Add node 'add'", "3 and 4", "axis 1", "cannot be broadcast"), _ADD_GOOD, node="add"),
    Bad("feed", "dim_param bound twice (strict)", _add, {"x": X23, "y": _f32((2, 1))}, ds.DimParamMismatch,
        ("dim_param 's'", "bound to 3 by input 'x' axis 1", "to 1 by input 'y' axis 1"), _ADD_GOOD,
        session={"strict_dim_params": True}, ort_rejects=False),
    Bad("feed", "unknown output name", _add, {"x": X23, "y": X23}, ds.InputNameError,
        ("unknown output name 'nope'", "['z']"), _ADD_GOOD, output_names=["nope"]),
    Bad("feed", "fixed dim mismatch", _relu_fixed, {"x": _f32((2, 4))}, ds.InputFixedDimMismatch,
        ("input 'x'", "axis 1", "expected 3", "got 4"), ({"x": X23}, {"x": _f32((5, 3), -4.0)})),
    Bad("feed", "int32 array for int64", _neg_int, {"x": np.array([1, 2], np.int32)}, ds.InputDtypeMismatch,
        ("input 'x'", "int64", "int32"), _NEG_GOOD),
    Bad("feed", "bool array for int64", _neg_int, {"x": np.array([True, False])}, ds.InputDtypeMismatch,
        ("input 'x'", "int64", "bool"), _NEG_GOOD),
    Bad("feed", "a list of floats for int64", _neg_int, {"x": [1.5, 2.0]}, ds.InputDtypeMismatch,
        ("input 'x'", "int64", "float64"), _NEG_GOOD, ort_rejects=False),   # ORT truncates 1.5 to 1
    Bad("feed", "MatMul inner dims differ", _matmul, {"a": X23, "b": _f32((4, 2))}, ds.ShapeInferenceError,
        ("MatMul node 'mm'", "inner dims", "3 != 4"), ({"a": X23, "b": _f32((3, 2))}, {"a": X45, "b": _f32((5, 1))}),
        node="mm"),
    Bad("feed", "Concat dims differ off the axis", _concat, {"a": X23, "b": _f32((4, 2))}, ds.ShapeInferenceError,
        ("Concat node 'cat'", "input 1", "dim 2 on axis 1", "input 0 has 3"),
        ({"a": X23, "b": _f32((4, 3))}, {"a": X45, "b": _f32((1, 5))}), node="cat"),
    Bad("feed", "Where shapes do not broadcast", _where,
        {"c": np.array([True, False]), "x": _f32((3,)), "y": _f32((3,))}, ds.ShapeInferenceError,
        ("Where node 'where'", "2 and 3", "cannot be broadcast"),
        ({"c": np.array([True, False, True]), "x": _f32((3,)), "y": _f32((3,), 9.0)},
         {"c": np.array([False]), "x": _f32((1,)), "y": _f32((1,), 2.0)}), node="where"),
    Bad("feed", "Einsum label sizes differ", _einsum, {"a": X23, "b": _f32((4, 2))}, ds.ShapeInferenceError,
        ("Einsum node 'es'", "label 'j'", "3 and 4"), ({"a": X23, "b": _f32((3, 2))}, {"a": X45, "b": _f32((5, 3))}),
        node="es"),
    Bad("feed", "an array for a sequence input", _seq_length, {"s": X23}, ds.InvalidFeedError,
        ("input 's'", "seq(tensor(float))", "a list of arrays"), ({"s": [X23, X23]}, {"s": [X45, X45, X45]})),
    Bad("feed", "a sequence element of another dtype", _seq_length, {"s": [X23, X23.astype(np.int64)]},
        ds.InputDtypeMismatch, ("input 's' element 1", "float32", "int64"), ({"s": [X23, X23]}, {"s": [X45]})),
    Bad("feed", "If cond of two elements", _if_neg_abs, {"x": _f32((2,)), "c": np.array([True, False])},
        ds.ShapeInferenceError, ("If node 'if'", "cond", "exactly one element", "(2,)"),
        ({"x": _f32((2,), -1.0), "c": np.array(True)}, {"x": _f32((5,), -1.0), "c": np.array(False)}), node="if"),
    Bad("feed", "Gather row index out of range", _gather_rows, {"x": X23, "i": _i64(0, 5)}, ds.ShapeInferenceError,
        ("Gather node 'gather'", "index 5", "size 2", "[-2, 1]"), ({"x": X23, "i": _i64(1, -1)},
                                                                  {"x": X45, "i": _i64(3, 0, -4)}), node="gather"),
    Bad("feed", "GatherElements index out of range", _gather_elements, {"x": X23, "i": _i64(0, 7).reshape(2, 1)},
        ds.ShapeInferenceError, ("GatherElements node 'ge'", "index 7", "size 3"),
        ({"x": X23, "i": _i64(0, 2).reshape(2, 1)}, {"x": X45, "i": _i64(4, 0, 1, 2, 3, 4, 0, -1).reshape(4, 2)}),
        node="ge"),
    Bad("feed", "ScatterND index out of range", _scatter_nd,
        {"x": X23, "i": _i64(4).reshape(1, 1), "u": _f32((1, 3))}, ds.ShapeInferenceError,
        ("ScatterND node 'snd'", "index 4"),
        ({"x": X23, "i": _i64(1).reshape(1, 1), "u": _f32((1, 3), 7.0)},
         {"x": X45, "i": _i64(3, 0).reshape(2, 1), "u": _f32((2, 5), 9.0)}), node="snd"),
    Bad("feed", "ArgMax over an empty axis", _argmax, {"x": _f32((2, 0))}, ds.ShapeInferenceError,
        ("ArgMax node 'am'", "axis 1", "size 0"), ({"x": X23}, {"x": X45}), node="am"),
    Bad("feed", "Scan inputs of different lengths", _scan_two,
        {"s0": _f32((2,)), "A": _f32((3, 2)), "B": _f32((4, 2))}, ds.ShapeInferenceError,
        ("Scan node 'scan'", "different sequence lengths", "3", "4"),
        ({"s0": _f32((2,)), "A": _f32((3, 2)), "B": _f32((3, 2), 1.0)},
         {"s0": _f32((2,), 5.0), "A": _f32((6, 2)), "B": _f32((6, 2), -2.0)}), node="scan"),
    Bad("feed", "Loop scan output changes shape", _loop_slices,
        {"x": _f32((5,)), "k": np.array(1), "t": np.array(3)}, ds.ExecutionError,
        ("Loop node 'loop'", "scan output 0", "changes shape"),
        ({"x": _f32((5,)), "k": np.array(10), "t": np.array(3)}, {"x": _f32((7,), 1.0), "k": np.array(7),
                                                                   "t": np.array(2)})),
    Bad("feed", "Conv input channels differ from the weight's", _conv, {"x": _f32((1, 3, 2, 2))},
        ds.ShapeInferenceError, ("Conv node 'conv'", "channels", "3", "2"),
        ({"x": _f32((1, 2, 2, 2))}, {"x": _f32((2, 2, 3, 1))}), node="conv"),
]


# --- shape-value entries: bad values that reach shape computations at run time ---------------

_reshape = _one("Reshape", [("x", ["b", "s"], F), ("shape", [None], I64)], [("y", F)], "rs")
_reshape_any = _one("Reshape", [("x", ["b", "s"], F), ("shape", None, I64)], [("y", F)], "rs")
_RESHAPE_GOOD = ({"x": X23, "shape": _i64(3, -1)}, {"x": X45, "shape": _i64(0, 5, 1)})
_expand = _one("Expand", [("x", ["b", "s"], F), ("shape", [None], I64)], [("y", F)], "ex")
_EXPAND_GOOD = ({"x": X23, "shape": _i64(2, 2, 1)}, {"x": _f32((1, 5)), "shape": _i64(3, 1)})
_slice = _one("Slice", [("x", ["b", "s"], F), ("starts", [None], I64), ("ends", [None], I64),
                        ("axes", [None], I64), ("steps", [None], I64)], [("y", F)], "sl")
_slice_any = _one("Slice", [("x", ["b", "s"], F), ("starts", None, I64), ("ends", None, I64)], [("y", F)], "sl")


def _sl(x, starts, ends, axes, steps):
    return {"x": x, "starts": _i64(*starts), "ends": _i64(*ends), "axes": _i64(*axes), "steps": _i64(*steps)}


_SLICE_GOOD = (_sl(X23, [0], [2], [1], [1]), _sl(X45, [-1, 0], [0, 5], [0, 1], [-1, 2]))
_tile = _one("Tile", [("x", ["b", "s"], F), ("repeats", [None], I64)], [("y", F)], "tile")
_tile_any = _one("Tile", [("x", ["b", "s"], F), ("repeats", None, I64)], [("y", F)], "tile")
_TILE_GOOD = ({"x": X23, "repeats": _i64(1, 2)}, {"x": X45, "repeats": _i64(2, 1)})
_range = _one("Range", [("start", [], I64), ("limit", [], I64), ("delta", [], I64)], [("y", I64)], "range")


def _rg(start, limit, delta):
    return {"start": np.array(start), "limit": np.array(limit), "delta": np.array(delta)}


_RANGE_GOOD = (_rg(0, 5, 1), _rg(10, -3, -4))
_cos = _one("ConstantOfShape", [("shape", [None], I64)], [("y", F)], "cos")
_COS_GOOD = ({"shape": _i64(2, 3)}, {"shape": _i64(4)})
_split = _one("Split", [("x", ["b", "s"], F), ("split", [None], I64)], [("p", F), ("q", F)], "split", axis=1)
_SPLIT_GOOD = ({"x": X23, "split": _i64(1, 2)}, {"x": X45, "split": _i64(5, 0)})
_pad = _one("Pad", [("x", ["b", "s"], F), ("pads", [None], I64)], [("y", F)], "pad")
_PAD_GOOD = ({"x": X23, "pads": _i64(0, 1, 1, 0)}, {"x": X45, "pads": _i64(1, -2, 0, 2)})
_squeeze = _one("Squeeze", [("x", ["b", "s"], F), ("axes", [None], I64)], [("y", F)], "sq")
_SQUEEZE_GOOD = ({"x": _f32((1, 3)), "axes": _i64(0)}, {"x": _f32((4, 1)), "axes": _i64(-1)})
_unsqueeze = _one("Unsqueeze", [("x", ["b", "s"], F), ("axes", [None], I64)], [("y", F)], "usq")
_UNSQUEEZE_GOOD = ({"x": X23, "axes": _i64(0)}, {"x": X45, "axes": _i64(-1, 1)})
_reduce = _one("ReduceSum", [("x", ["b", "s"], F), ("axes", [None], I64)], [("y", F)], "rsum")
_REDUCE_GOOD = ({"x": X23, "axes": _i64(1)}, {"x": X45, "axes": _i64(0, -1)})
_topk = _one("TopK", [("x", ["b", "s"], F), ("k", [None], I64)], [("values", F), ("indices", I64)], "topk", axis=1)
_TOPK_GOOD = ({"x": X23, "k": _i64(2)}, {"x": X45, "k": _i64(5)})
_onehot = _one("OneHot", [("indices", ["n"], I64), ("depth", [None], I64), ("values", [2], F)], [("y", F)], "onehot")


def _oh(indices, depth):
    return {"indices": _i64(*indices), "depth": _i64(*depth), "values": np.array([0.0, 3.0], np.float32)}


_ONEHOT_GOOD = (_oh([0, 2], [3]), _oh([1, 0, -1, 4], [5]))
_cumsum = _one("CumSum", [("x", ["b", "s"], F), ("axis", [], I64)], [("y", F)], "cumsum")
_CUMSUM_GOOD = ({"x": X23, "axis": np.array(1)}, {"x": X45, "axis": np.array(-2)})
_resize_sizes = _one("Resize", [("x", ["n", "c", "h", "w"], F), ("", None, F), ("", None, F), ("sizes", [None], I64)],
                     [("y", F)], "resize", mode="nearest")
_resize_scales = _one("Resize", [("x", ["n", "c", "h", "w"], F), ("", None, F), ("scales", [None], F)], [("y", F)],
                      "resize", mode="nearest")
#: onnxruntime 1.32 cannot load a Resize whose 'sizes' is a graph input (its shape inference
#: reads 0 elements: "Number of elements of input 'sizes' (0) must be same as rank"), so the
#: good results of the Resize entries are the ONNX spec's (onnx.reference)
_RESIZE_REF = {"want": spec_run, "ort_rejects": False}
_RESIZE_SCALES_REF = {"want": spec_run}
_RESIZE_SIZES_GOOD = ({"x": X4, "sizes": _i64(1, 1, 4, 3)}, {"x": _f32((2, 1, 3, 3)), "sizes": _i64(2, 1, 1, 6)})
_RESIZE_SCALES_GOOD = ({"x": X4, "scales": np.array([1, 1, 2, 2], np.float32)},
                       {"x": _f32((2, 1, 3, 3)), "scales": np.array([1, 1, 0.5, 2], np.float32)})


def _reshape_from_shape():
    """y = Reshape(x, [dim 0 of x, k]): the target mixes a Shape-computed dim and a fed one."""
    zero, one = numpy_helper.from_array(_i64(0), "zero"), numpy_helper.from_array(_i64(1), "one")
    return _model([helper.make_node("Shape", ["x"], ["sh"], name="shape"),
                   helper.make_node("Slice", ["sh", "zero", "one"], ["b"], name="take_b"),
                   helper.make_node("Concat", ["b", "k"], ["target"], name="target", axis=0),
                   helper.make_node("Reshape", ["x", "target"], ["y"], name="rs")],
                  [_vi("x", ["b", "s"]), _vi("k", [1], I64)], [_vi("y")], [zero, one])


def _cos_of_gathered_dim():
    """y = ConstantOfShape([dim i of x]): the Gather's index is a feed."""
    return _model([helper.make_node("Shape", ["x"], ["sh"], name="shape"),
                   helper.make_node("Gather", ["sh", "i"], ["d"], name="pick_dim", axis=0),
                   helper.make_node("ConstantOfShape", ["d"], ["y"], name="cos")],
                  [_vi("x", ["b", "s"]), _vi("i", [1], I64)], [_vi("y")])


def _cos_of_square():
    """y = ConstantOfShape(k * k): int64 arithmetic in the shape computation."""
    return _model([helper.make_node("Mul", ["k", "k"], ["kk"], name="square"),
                   helper.make_node("ConstantOfShape", ["kk"], ["y"], name="cos")], [_vi("k", [1], I64)], [_vi("y")])


_SHAPE_2D = "dynashape accepts it and runs; ONNX says the input is 1-D and onnxruntime rejects it"
SHAPE_VALUES = [
    Bad("shape value", "Reshape element count differs", _reshape, {"x": X23, "shape": _i64(4, 2)},
        ds.ShapeInferenceError, ("Reshape node 'rs'", "6 elements", "[4, 2]", "8"), _RESHAPE_GOOD, node="rs"),
    Bad("shape value", "Reshape with two -1", _reshape, {"x": X23, "shape": _i64(-1, -1)}, ds.ShapeInferenceError,
        ("Reshape node 'rs'", "more than one -1", "[0, 1]"), _RESHAPE_GOOD, node="rs"),
    Bad("shape value", "Reshape with -2", _reshape, {"x": X23, "shape": _i64(-2, 3)}, ds.ShapeInferenceError,
        ("Reshape node 'rs'", "-2 at index 0"), _RESHAPE_GOOD, node="rs"),
    Bad("shape value", "Reshape 0 past the input rank", _reshape, {"x": X23, "shape": _i64(0, 0, 0)},
        ds.ShapeInferenceError, ("Reshape node 'rs'", "0 at index 2", "rank 2"), _RESHAPE_GOOD, node="rs"),
    Bad("shape value", "Reshape target computed from Shape and a feed", _reshape_from_shape,
        {"x": X23, "k": _i64(5)}, ds.ShapeInferenceError, ("Reshape node 'rs'", "6 elements", "[2, 5]"),
        ({"x": X23, "k": _i64(3)}, {"x": X45, "k": _i64(-1)}), node="rs"),
    Bad("shape value", "Reshape target of rank 2", _reshape_any, {"x": X23, "shape": _i64(2, 3).reshape(1, 2)},
        ds.ShapeInferenceError, ("Reshape node 'rs'", "1-D"), _RESHAPE_GOOD, node="rs"),
    Bad("shape value", "Expand shape that does not broadcast", _expand, {"x": X23, "shape": _i64(4, 2)},
        ds.ShapeInferenceError, ("Expand node 'ex'", "2 and 4", "axis 0", "cannot be broadcast"), _EXPAND_GOOD,
        node="ex"),
    Bad("shape value", "Expand negative dim", _expand, {"x": X23, "shape": _i64(-1, 3)}, ds.ShapeInferenceError,
        ("Expand node 'ex'", "[-1, 3]", "negative"), _EXPAND_GOOD, node="ex"),
    Bad("shape value", "Expand to a huge shape", _expand, {"x": X23, "shape": _i64(10**7, 10**6, 1, 1)},
        ds.ResourceLimitError, ("Expand node 'ex'", "(10000000, 1000000, 2, 3)", "memory_limit"), _EXPAND_GOOD,
        node="ex", ort_rejects=False),
    Bad("shape value", "Expand past the session's memory_limit", _expand, {"x": X23, "shape": _i64(65536, 2, 1)},
        ds.ResourceLimitError, ("Expand node 'ex'", "(65536, 2, 3)", "memory_limit of 1.0 MiB"), _EXPAND_GOOD,
        node="ex", session={"memory_limit": "1MiB"}, ort_rejects=False),
    Bad("shape value", "Slice step 0", _slice, _sl(X23, [0], [2], [0], [0]), ds.ShapeInferenceError,
        ("Slice node 'sl'", "steps [0]", "must not contain 0"), _SLICE_GOOD, node="sl"),
    Bad("shape value", "Slice axis out of range", _slice, _sl(X23, [0], [2], [5], [1]), ds.ShapeInferenceError,
        ("Slice node 'sl'", "axes 5", "rank 2", "[-2, 1]"), _SLICE_GOOD, node="sl"),
    Bad("shape value", "Slice negative axis out of range", _slice, _sl(X23, [0], [2], [-3], [1]),
        ds.ShapeInferenceError, ("Slice node 'sl'", "axes -3", "[-2, 1]"), _SLICE_GOOD, node="sl"),
    Bad("shape value", "Slice duplicate axes", _slice, _sl(X23, [0, 0], [2, 2], [0, 0], [1, 1]),
        ds.ShapeInferenceError, ("Slice node 'sl'", "axes [0, 0]", "duplicates"), _SLICE_GOOD, node="sl"),
    Bad("shape value", "Slice starts and ends of different lengths", _slice, _sl(X23, [0, 0], [2], [0], [1]),
        ds.ShapeInferenceError, ("Slice node 'sl'", "starts (2 values)", "ends (1 values)"), _SLICE_GOOD, node="sl"),
    Bad("shape value", "Slice starts of rank 2", _slice_any,
        {"x": X23, "starts": _i64(0).reshape(1, 1), "ends": _i64(1).reshape(1, 1)}, ds.ShapeInferenceError,
        ("Slice node 'sl'", "starts", "1-D"),
        ({"x": X23, "starts": _i64(1), "ends": _i64(2)}, {"x": X45, "starts": _i64(0, 1), "ends": _i64(3, 9)}),
        node="sl"),
    Bad("shape value", "Tile negative repeats", _tile, {"x": X23, "repeats": _i64(-1, 2)}, ds.ShapeInferenceError,
        ("Tile node 'tile'", "repeats [-1, 2]", ">= 0"), _TILE_GOOD, node="tile"),
    Bad("shape value", "Tile repeats longer than the rank", _tile, {"x": X23, "repeats": _i64(1, 2, 3)},
        ds.ShapeInferenceError, ("Tile node 'tile'", "3 values", "rank 2"), _TILE_GOOD, node="tile"),
    Bad("shape value", "Tile repeats of rank 2", _tile_any, {"x": X23, "repeats": _i64(1, 2).reshape(1, 2)},
        ds.ShapeInferenceError, ("Tile node 'tile'", "repeats", "1-D"), _TILE_GOOD, node="tile"),
    Bad("shape value", "Tile to a huge shape", _tile, {"x": X23, "repeats": _i64(10**9, 10**9)},
        ds.ResourceLimitError, ("Tile node 'tile'", "(2000000000, 3000000000)", "memory_limit"), _TILE_GOOD,
        node="tile", ort_rejects=False),
    Bad("shape value", "Range delta 0", _range, _rg(0, 5, 0), ds.ShapeInferenceError,
        ("Range node 'range'", "delta must not be 0"), _RANGE_GOOD, node="range"),
    Bad("shape value", "Range of a huge length", _range, _rg(0, 10**15, 1), ds.ResourceLimitError,
        ("Range node 'range'", "(1000000000000000,)", "memory_limit"), _RANGE_GOOD, node="range", ort_rejects=False),
    Bad("shape value", "Range length overflowing int64", _range, _rg(-2**63, 2**63 - 1, 1), ds.ResourceLimitError,
        ("Range node 'range'", "overflows int64"), _RANGE_GOOD, node="range", ort_rejects=False),
    Bad("shape value", "ConstantOfShape negative dim", _cos, {"shape": _i64(-1, 2)}, ds.ShapeInferenceError,
        ("ConstantOfShape node 'cos'", "[-1, 2]", "negative"), _COS_GOOD, node="cos"),
    Bad("shape value", "ConstantOfShape huge", _cos, {"shape": _i64(10**12)}, ds.ResourceLimitError,
        ("ConstantOfShape node 'cos'", "(1000000000000,)", "memory_limit"), _COS_GOOD, node="cos", ort_rejects=False),
    Bad("shape value", "ConstantOfShape element count overflowing int64", _cos, {"shape": _i64(2**40, 2**40)},
        ds.ResourceLimitError, ("ConstantOfShape node 'cos'", "(1099511627776, 1099511627776)", "overflows int64"),
        _COS_GOOD, node="cos", ort_rejects=False),
    Bad("shape value", "ConstantOfShape of a huge computed dim", _cos_of_square, {"k": _i64(2**31 + 1)},
        ds.ResourceLimitError, ("ConstantOfShape node 'cos'", "(4611686022722355201,)", "memory_limit"),
        ({"k": _i64(3)}, {"k": _i64(1)}), node="cos", ort_rejects=False),
    Bad("shape value", "Gather of a dim with an index out of range", _cos_of_gathered_dim, {"x": X23, "i": _i64(5)},
        ds.ShapeInferenceError, ("Gather node 'pick_dim'", "index 5", "size 2"),
        ({"x": X23, "i": _i64(1)}, {"x": X45, "i": _i64(-2)}), node="pick_dim"),
    Bad("shape value", "Split sizes not summing to the dim", _split, {"x": X23, "split": _i64(1, 1)},
        ds.ShapeInferenceError, ("Split node 'split'", "[1, 1]", "sums to 2", "3"), _SPLIT_GOOD, node="split"),
    Bad("shape value", "Split sizes more than the outputs", _split, {"x": X23, "split": _i64(1, 1, 1)},
        ds.ShapeInferenceError, ("Split node 'split'", "3 entries", "2 outputs"), _SPLIT_GOOD, node="split"),
    Bad("shape value", "Split negative size", _split, {"x": X23, "split": _i64(-1, 4)}, ds.ShapeInferenceError,
        ("Split node 'split'", "[-1, 4]", "negative"), _SPLIT_GOOD, node="split"),
    Bad("shape value", "Pad pads of a wrong length", _pad, {"x": X23, "pads": _i64(1, 1, 1)}, ds.ShapeInferenceError,
        ("Pad node 'pad'", "3 values", "2 * 2"), _PAD_GOOD, node="pad"),
    Bad("shape value", "Pad removing more than the dim", _pad, {"x": X23, "pads": _i64(0, -5, 0, 0)},
        ds.ShapeInferenceError, ("Pad node 'pad'", "axis 1", "negative size -2"), _PAD_GOOD, node="pad"),
    Bad("shape value", "Squeeze axis of dim 2", _squeeze, {"x": X23, "axes": _i64(0)}, ds.ShapeInferenceError,
        ("Squeeze node 'sq'", "axis 0", "dim is 2", "expected 1"), _SQUEEZE_GOOD, node="sq"),
    Bad("shape value", "Squeeze axis out of range", _squeeze, {"x": _f32((1, 3)), "axes": _i64(4)},
        ds.ShapeInferenceError, ("Squeeze node 'sq'", "axis 4", "rank 2"), _SQUEEZE_GOOD, node="sq"),
    Bad("shape value", "Unsqueeze axis out of range", _unsqueeze, {"x": X23, "axes": _i64(5)}, ds.ShapeInferenceError,
        ("Unsqueeze node 'usq'", "axis 5", "output rank 3"), _UNSQUEEZE_GOOD, node="usq"),
    Bad("shape value", "Unsqueeze duplicate axes", _unsqueeze, {"x": X23, "axes": _i64(0, 0)}, ds.ShapeInferenceError,
        ("Unsqueeze node 'usq'", "[0, 0]", "duplicates"), _UNSQUEEZE_GOOD, node="usq"),
    Bad("shape value", "ReduceSum axis out of range", _reduce, {"x": X23, "axes": _i64(2)}, ds.ShapeInferenceError,
        ("ReduceSum node 'rsum'", "axes 2", "rank 2"), _REDUCE_GOOD, node="rsum"),
    # onnxruntime reduces a repeated axis once; the ONNX reference evaluator raises (numpy's "duplicate value")
    Bad("shape value", "ReduceSum duplicate axes", _reduce, {"x": X23, "axes": _i64(0, 0)}, ds.ShapeInferenceError,
        ("ReduceSum node 'rsum'", "[0, 0]", "duplicates"), _REDUCE_GOOD, node="rsum", ort_rejects=False),
    Bad("shape value", "TopK k larger than the axis", _topk, {"x": X23, "k": _i64(5)}, ds.ShapeInferenceError,
        ("TopK node 'topk'", "k = 5", "[0, 3]", "axis 1"), _TOPK_GOOD, node="topk"),
    Bad("shape value", "TopK negative k", _topk, {"x": X23, "k": _i64(-1)}, ds.ShapeInferenceError,
        ("TopK node 'topk'", "k = -1"), _TOPK_GOOD, node="topk"),
    Bad("shape value", "TopK k of two values", _topk, {"x": X23, "k": _i64(1, 2)}, ds.ShapeInferenceError,
        ("TopK node 'topk'", "one value", "2"), _TOPK_GOOD, node="topk"),
    Bad("shape value", "OneHot negative depth", _onehot, _oh([0, 1], [-2]), ds.ShapeInferenceError,
        ("OneHot node 'onehot'", "depth -2", ">= 0"), _ONEHOT_GOOD, node="onehot"),
    Bad("shape value", "OneHot depth of two values", _onehot, _oh([0, 1], [2, 3]), ds.ShapeInferenceError,
        ("OneHot node 'onehot'", "depth", "one value", "2"), _ONEHOT_GOOD, node="onehot"),
    Bad("shape value", "OneHot huge depth", _onehot, _oh([0, 1], [10**12]), ds.ResourceLimitError,
        ("OneHot node 'onehot'", "(2, 1000000000000)", "memory_limit"), _ONEHOT_GOOD, node="onehot",
        ort_rejects=False),
    Bad("shape value", "CumSum axis out of range", _cumsum, {"x": X23, "axis": np.array(4)}, ds.ShapeInferenceError,
        ("CumSum node 'cumsum'", "axis 4", "rank 2"), _CUMSUM_GOOD, node="cumsum"),
    Bad("shape value", "Resize sizes of a wrong length", _resize_sizes, {"x": X4, "sizes": _i64(1, 1, 4)},
        ds.ShapeInferenceError, ("Resize node 'resize'", "'sizes' has 3 elements", "expected 4"), _RESIZE_SIZES_GOOD,
        node="resize", **_RESIZE_REF),
    Bad("shape value", "Resize negative sizes", _resize_sizes, {"x": X4, "sizes": _i64(1, 1, -4, 4)},
        ds.ShapeInferenceError, ("Resize node 'resize'", "'sizes'", "non-negative", "-4"), _RESIZE_SIZES_GOOD,
        node="resize", **_RESIZE_REF),
    Bad("shape value", "Resize negative scales", _resize_scales,
        {"x": X4, "scales": np.array([1, 1, -2, 2], np.float32)},
        ds.ShapeInferenceError, ("Resize node 'resize'", "'scales'", "> 0", "-2.0"), _RESIZE_SCALES_GOOD,
        node="resize", **_RESIZE_SCALES_REF),
    Bad("shape value", "Resize scales of a wrong length", _resize_scales,
        {"x": X4, "scales": np.array([1, 1, 2], np.float32)}, ds.ShapeInferenceError,
        ("Resize node 'resize'", "'scales' has 3 elements", "expected 4"), _RESIZE_SCALES_GOOD, node="resize",
        **_RESIZE_SCALES_REF),
]


# --- model entries ----------------------------------------------------------------------------

W = np.array([1.0, 2.0, 3.0], np.float32)


def _good_model(tmp: Path) -> tuple:
    """y = Reshape(Transpose(x + 1.5), [batch, -1]), over x[batch, seq]."""
    inits = [numpy_helper.from_array(np.array([1.5], np.float32), "w"), numpy_helper.from_array(_i64(0), "zero"),
             numpy_helper.from_array(_i64(-1), "minus_one")]
    m = _model([helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Transpose", ["a"], ["t"]),
                helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Gather", ["sh", "zero"], ["b"], axis=0),
                helper.make_node("Concat", ["b", "minus_one"], ["target"], axis=0),
                helper.make_node("Reshape", ["t", "target"], ["y"])],
               [_vi("x", ["batch", "seq"])], [_vi("y")], inits)
    return m, [{"x": X23}, {"x": X45}]


def _good_model_want(feeds: dict) -> list:
    x = feeds["x"]
    return [(x + np.float32(1.5)).T.reshape(x.shape[0], -1)]


def _relu(**attrs):
    return _model([helper.make_node("Relu", ["x"], ["y"], name="r", **attrs)], [_vi("x", ["n"])], [_vi("y")])


def _relu_at_opset(opset: int) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", ["n"])], [_vi("y")], opset=opset)


def _no_opset() -> onnx.ModelProto:
    m = _relu()
    del m.opset_import[:]
    return m


def _with(model: onnx.ModelProto, **fields) -> onnx.ModelProto:
    for k, v in fields.items():
        setattr(model, k, v)
    return model


def _float_attr_flatten(tmp):
    node = helper.make_node("Flatten", ["x"], ["y"], name="flat")
    node.attribute.append(helper.make_attribute("axis", 1.0))
    return _model([node], [_vi("x", ["n"])], [_vi("y")])


def _if_with_int_branch(tmp):
    node = helper.make_node("If", ["c"], ["y"], name="if",
                            else_branch=helper.make_graph([], "else", [], [_vi("x")]))
    node.attribute.append(helper.make_attribute("then_branch", 1))
    return _model([node], [_vi("c", [], B), _vi("x", ["n"])], [_vi("y")])


def _dup_in_subgraph(tmp):
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="r1"),
                              helper.make_node("Neg", ["x"], ["t"], name="r2")], "then", [], [_vi("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e")])
    return _model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                  [_vi("x", ["n"]), _vi("c", [], B)], [_vi("y")])


def _loop_body_undefined_output(tmp):
    body = helper.make_graph([helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
                             [_vi("i", [], I64), _vi("cond", [], B), _vi("v")], [_vi("cond_out", [], B), _vi("v_out")])
    return _model([helper.make_node("Loop", ["t", "c", "v"], ["vo"], name="loop", body=body)],
                  [_vi("t", [], I64), _vi("c", [], B), _vi("v", ["n"])], [_vi("vo")])


def _loop_float_cond(tmp):
    body = helper.make_graph([helper.make_node("Identity", ["cond"], ["cond_out"]),
                              helper.make_node("Identity", ["v"], ["v_out"])], "body",
                             [_vi("i", [], I64), _vi("cond", [], B), _vi("v")], [_vi("cond_out", [], B), _vi("v_out")])
    return _model([helper.make_node("Loop", ["t", "c", "v"], ["vo"], name="loop", body=body)],
                  [_vi("t", [], I64), _vi("c", [], F), _vi("v", ["n"])], [_vi("vo")])


def _add_w(w: TensorProto, sparse=None) -> onnx.ModelProto:
    """y = x + w over x[3]."""
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g", [_vi("x", [3])], [_vi("y")],
                          [] if w is None else [w], sparse_initializer=[] if sparse is None else [sparse])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def _external_w(location: str, offset: int = 0, length: Optional[int] = None) -> TensorProto:
    t = numpy_helper.from_array(W, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", location), ("offset", str(offset))] + ([("length", str(length))] if length else []):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def _save(model: onnx.ModelProto, d: Path) -> str:
    d.mkdir(parents=True, exist_ok=True)
    path = d / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def _external(location: str, *, as_bytes: bool = False, sub: str = "model", **kw) -> Callable[[Path], Any]:
    """A model whose w lies in tmp/model/data.bin (and a decoy tmp/data.bin); ``location`` may
    hold ``{dir}`` for tmp/model."""
    def build(tmp: Path):
        d = tmp / sub
        d.mkdir(parents=True, exist_ok=True)
        (d / "data.bin").write_bytes(W.tobytes())
        (tmp / "data.bin").write_bytes((W * 100).tobytes())
        model = _add_w(_external_w(location.format(dir=d), **kw))
        return model.SerializeToString() if as_bytes else _save(model, d)
    return build


def _external_good(tmp: Path) -> tuple:
    d = tmp / "model"
    d.mkdir(parents=True, exist_ok=True)
    (d / "data.bin").write_bytes(W.tobytes())
    return _save(_add_w(_external_w("data.bin")), d), [{"x": np.zeros(3, np.float32)}, {"x": W}]


def _raw_of(nbytes: int) -> TensorProto:
    return TensorProto(name="w", data_type=F, dims=[3], raw_data=b"\0" * nbytes)


_LOADS = "dynashape loads it"
MODELS = [
    Bad("model", "garbage bytes", lambda tmp: b"\x00\xffthis is not an ONNX model", None, ds.ModelLoadError,
        ("could not parse the ONNX model",)),
    Bad("model", "truncated bytes", lambda tmp: _relu().SerializeToString()[:-7], None, ds.ModelLoadError,
        ("could not parse the ONNX model",)),
    Bad("model", "empty bytes (no graph)", lambda tmp: b"", None, ds.ModelLoadError, ("graph",)),
    Bad("model", "missing file", lambda tmp: str(tmp / "nowhere.onnx"), None, ds.ModelLoadError,
        ("{dir}/nowhere.onnx", "does not exist")),
    Bad("model", "a directory for a file", lambda tmp: str(tmp), None, ds.ModelLoadError, ("{dir}", "directory")),
    Bad("model", "an int for a model", lambda tmp: 42, None, ds.ModelLoadError,
        ("from int", "a path, bytes or onnx.ModelProto")),
    Bad("model", "None for a model", lambda tmp: None, None, ds.ModelLoadError,
        ("from NoneType", "a path, bytes or onnx.ModelProto")),
    Bad("model", "two nodes write one name", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")],
        [_vi("x", ["n"])], [_vi("y")]), None, ds.DuplicateNameError, ("'y'", "node 'a' (Relu)", "node 'b' (Neg)")),
    Bad("model", "node output shadows a graph input", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["x"], name="r"), helper.make_node("Neg", ["x"], ["y"])],
        [_vi("x", ["n"])], [_vi("y")]), None, ds.DuplicateNameError, ("node 'r' (Relu)", "'x'", "graph input")),
    Bad("model", "duplicate graph inputs", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n"]), _vi("x", ["n"])], [_vi("y")]), None,
        ds.DuplicateNameError, ("input 'x' twice",)),
    Bad("model", "duplicate initializers", lambda tmp: _model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [3])], [_vi("y")],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(W * 2, "w")]), None,
        ds.DuplicateNameError, ("initializer 'w' twice",), ort_rejects=False),   # ORT warns and takes the last
    Bad("model", "duplicate name inside a subgraph", _dup_in_subgraph, None, ds.DuplicateNameError,
        ("g/if.then_branch", "'t'", "'r1'")),
    Bad("model", "graph output nothing produces", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n"])], [_vi("y"), _vi("z")]), None,
        ds.UndefinedValueError, ("output 'z'", "not produced")),
    Bad("model", "node reads an undefined name", lambda tmp: _model(
        [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.UndefinedValueError, ("node 'add'", "'nowhere'")),
    Bad("model", "Loop body output nothing produces", _loop_body_undefined_output, None, ds.UndefinedValueError,
        ("g/loop.body", "output 'v_out'", "not produced")),
    Bad("model", "a cycle", lambda tmp: _model(
        [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
         helper.make_node("Relu", ["a"], ["y"])], [_vi("x", ["n"])], [_vi("y")]), None, ds.UndefinedValueError,
        ("cycle", "'n1'", "'n2'")),
    Bad("model", "float attribute for an int", _float_attr_flatten, None, ds.InvalidAttributeError,
        ("Flatten node 'flat'", "'axis' must be INT", "FLOAT")),
    Bad("model", "string attribute for an int", lambda tmp: _model(
        [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis="zero")], [_vi("x", ["n"])], [_vi("y")]),
        None, ds.InvalidAttributeError, ("Concat node 'cat'", "'axis' must be INT", "STRING")),
    Bad("model", "ints attribute for an int", lambda tmp: _model(
        [helper.make_node("Flatten", ["x"], ["y"], name="flat", axis=[1, 2])], [_vi("x", ["n"])], [_vi("y")]),
        None, ds.InvalidAttributeError, ("Flatten node 'flat'", "'axis' must be INT", "INTS")),
    Bad("model", "int attribute for a graph", _if_with_int_branch, None, ds.InvalidAttributeError,
        ("If node 'if'", "'then_branch' must be GRAPH", "INT")),
    Bad("model", "required attribute missing", lambda tmp: _model(
        [helper.make_node("Cast", ["x"], ["y"], name="cast")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.InvalidAttributeError, ("Cast node 'cast'", "required attribute 'to'")),
    Bad("model", "If without else_branch", lambda tmp: _model(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=helper.make_graph([], "t", [], [_vi("x")]))],
        [_vi("c", [], B), _vi("x", ["n"])], [_vi("y")]), None, ds.InvalidAttributeError,
        ("If node 'if'", "required attribute 'else_branch'")),
    Bad("model", "unknown attribute", lambda tmp: _relu(alpha=0.5), None, ds.InvalidAttributeError,
        ("Relu node 'r'", "'alpha'", "does not define")),
    Bad("model", "Split-18 with neither split nor num_outputs", lambda tmp: _model(
        [helper.make_node("Split", ["x"], ["a", "b"], axis=0, name="split")], [_vi("x", [4])], [_vi("a"), _vi("b")]),
        None, ds.InvalidAttributeError, ("Split node 'split'", "'split'", "'num_outputs'", "neither")),
    Bad("model", "Cast to an element type that does not exist", lambda tmp: _model(
        [helper.make_node("Cast", ["x"], ["y"], name="cast", to=999)], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.InvalidAttributeError, ("Cast node 'cast'", "'to'", "999")),
    Bad("model", "unknown operator", lambda tmp: _model(
        [helper.make_node("FooBar", ["x"], ["y"], name="fb")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.UnsupportedOperatorError, ("FooBar", "'ai.onnx'", "node 'fb'")),
    Bad("model", "unknown domain", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.nowhere")], [_vi("x", ["n"])], [_vi("y")],
        domains=[helper.make_opsetid("com.nowhere", 1)]), None, ds.UnsupportedOperatorError,
        ("Relu", "'com.nowhere'", "node 'r'")),
    Bad("model", "operator newer than the model's opset", lambda tmp: _model(
        [helper.make_node("Gelu", ["x"], ["y"], name="gelu")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.UnsupportedOperatorError, ("Gelu", "opset 18", "node 'gelu'", "20")),
    Bad("model", "Add with one input", lambda tmp: _model(
        [helper.make_node("Add", ["x"], ["y"], name="add")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.InvalidModelError, ("Add node 'add'", "input")),
    Bad("model", "Relu with two inputs", lambda tmp: _model(
        [helper.make_node("Relu", ["x", "x"], ["y"], name="r")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.InvalidModelError, ("Relu node 'r'", "input")),
    Bad("model", "Relu with two outputs", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["y", "z"], name="r")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.InvalidModelError, ("Relu node 'r'", "output")),
    Bad("model", "a required input left empty", lambda tmp: _model(
        [helper.make_node("Add", ["x", ""], ["y"], name="add")], [_vi("x", ["n"])], [_vi("y")]), None,
        ds.InvalidModelError, ("Add node 'add'", "input")),
    Bad("model", "opset newer than any ONNX defines", lambda tmp: _relu_at_opset(99), None, ds.DynashapeError,
        ("opset", "99")),
    Bad("model", "no opset_import", lambda tmp: _no_opset(), None,
        ds.ModelLoadError, ("opset",)),
    Bad("model", "IR version newer than any ONNX defines", lambda tmp: _with(_relu(), ir_version=99), None,
        ds.ModelLoadError, ("IR version", "99")),
    Bad("model", "nesting too deep", lambda tmp: _nested_if(MAX_NESTING + 1), None, ds.NestingLimitError,
        (f"nested {MAX_NESTING + 1} levels", f"at most {MAX_NESTING}")),   # ORT: its protobuf parser's limit
    Bad("model", "external data through '..'", _external("../data.bin"), None, ds.ExternalDataError,
        ("'..' is not allowed", "'w'"), good_model=_external_good),
    Bad("model", "external data at an absolute path", _external("{dir}/data.bin"), None, ds.ExternalDataError,
        ("absolute path is not allowed", "'w'"), good_model=_external_good),
    Bad("model", "external data file missing", _external("missing.bin"), None, ds.ExternalDataError,
        ("missing.bin", "no such file"), good_model=_external_good),
    Bad("model", "external data past the end of the file", _external("data.bin", offset=8, length=12), None,
        ds.ExternalDataError, ("'w'", "past the end"), good_model=_external_good),
    Bad("model", "external data in bytes without external_data_dir", _external("data.bin", as_bytes=True), None,
        ds.ExternalDataError, ("external_data_dir",), good_model=_external_good),
    Bad("model", "raw_data of a wrong size", lambda tmp: _add_w(_raw_of(8)), None, ds.ModelLoadError,
        ("'w'",)),
    Bad("model", "sparse initializer index out of range", lambda tmp: _add_w(None, helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0], np.float32), "w"), numpy_helper.from_array(_i64(7), "w_indices"),
        [3])), None, ds.ModelLoadError, ("'w'", "7")),
    Bad("model", "Add of float and an int64 initializer", lambda tmp: _model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", ["n"])], [_vi("y")],
        [numpy_helper.from_array(_i64(1, 2, 3), "w")]), {"x": W}, (ds.InvalidModelError, ds.ShapeInferenceError),
        ("Add node 'add'", "'w'", "tensor(int64)", "tensor(float)"), stage="run"),
    Bad("model", "Constant without a value", lambda tmp: _model(
        [helper.make_node("Constant", [], ["y"], name="k")], [], [_vi("y")]), {},
        (ds.InvalidModelError, ds.ShapeInferenceError), ("Constant node 'k'", "exactly one of the attributes"),
        stage="run"),
    Bad("model", "If branch with more outputs than the node", lambda tmp: _model(
        [helper.make_node("If", ["c"], ["y"], name="if",
                          then_branch=helper.make_graph([], "t", [], [_vi("x"), _vi("x")]),
                          else_branch=helper.make_graph([], "e", [], [_vi("x")]))],
        [_vi("c", [], B), _vi("x", ["n"])], [_vi("y")]), {"c": np.array(True), "x": W},
        (ds.InvalidModelError, ds.ShapeInferenceError), ("If node 'if'", "then_branch has 2 outputs", "expected 1"),
        stage="run"),
    Bad("model", "EyeLike dtype that does not exist", lambda tmp: _model(
        [helper.make_node("EyeLike", ["x"], ["y"], name="eye", dtype=12345)], [_vi("x", [2, 2])], [_vi("y")]),
        {"x": np.eye(2, dtype=np.float32)}, (ds.InvalidModelError, ds.ShapeInferenceError),
        ("EyeLike node 'eye'", "12345"), stage="run"),
    Bad("model", "ConstantOfShape value of three elements", lambda tmp: _model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos", value=numpy_helper.from_array(W))],
        [_vi("s", [1], I64)], [_vi("y")]), {"s": _i64(2)}, (ds.InvalidModelError, ds.ShapeInferenceError),
        ("ConstantOfShape node 'cos'", "exactly one element", "(3,)"), stage="run"),
    Bad("model", "Relu of a string input", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", ["n"], TensorProto.STRING)],
        [_vi("y", None, TensorProto.STRING)]), {"x": np.array(["a"], object)},
        (ds.InvalidModelError, ds.ShapeInferenceError), ("Relu node 'r'", "'x'", "tensor(string)"), stage="run"),
    Bad("model", "Reshape shape given as float", lambda tmp: _model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [_vi("x", ["n"])], [_vi("y")],
        [numpy_helper.from_array(np.array([3.0], np.float32), "s")]), {"x": W},
        (ds.InvalidModelError, ds.ShapeInferenceError), ("Reshape node 'rs'", "'s'", "int64"), stage="run"),
    Bad("model", "Loop cond declared float", _loop_float_cond,
        {"t": np.array(2), "c": np.array(1.0, np.float32), "v": W}, (ds.InvalidModelError, ds.ShapeInferenceError),
        ("Loop node 'loop'", "bool"), stage="run"),
]


CATALOGUE = FEEDS + SHAPE_VALUES + MODELS
RUNTIME = [b for b in CATALOGUE if b.category != "model"]


def _param(bad: Bad, with_marks: bool = True):
    marks = []
    if bad.reported and with_marks:
        marks.append(pytest.mark.xfail(not (bad.reported_unless_validating and VALIDATING), strict=True,
                                       reason=f"REPORTED: {bad.reported}"))
    return pytest.param(bad, id=bad.id, marks=marks)


# --- checks ------------------------------------------------------------------------------------

_ORT: dict = {}


def _want(bad: Bad, model, feeds: dict) -> list:
    """The expected outputs: ``bad.want``'s, else onnxruntime's (one cached session per entry)."""
    if bad.want is not None:
        return bad.want(model, feeds)
    sess = _ORT.get(bad.id)
    if sess is None:
        sess = _ORT[bad.id] = ort_session(model)
    return sess.run(None, feeds)


def _assert_outputs(got: list, want: list, where: str) -> None:
    assert len(got) == len(want), (where, len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (where, k, g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=f"{where}, output {k}")


def _assert_error(err: BaseException, bad: Bad, tmp: Optional[Path] = None) -> None:
    assert isinstance(err, ds.DynashapeError), (type(err), err)
    assert type(err).__module__ == "dynashape.errors", type(err)
    msg = str(err)
    words = [w.format(dir=tmp) if tmp is not None else w for w in bad.words]
    missing = [w for w in words if w not in msg]
    assert not missing, f"{missing} not in the message {msg!r}"
    if bad.node is not None:
        assert getattr(err, "node", None) == bad.node, (getattr(err, "node", None), bad.node, msg)


@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("bad", [_param(b) for b in RUNTIME])
def test_bad_run_input(bad: Bad, allocator: str):
    """Good run, bad run (raises the typed error with its words), then good runs again on the SAME session."""
    model = bad.build_model()
    sess = ds.InferenceSession(model, allocator=allocator, **bad.session)
    first = bad.good_feed[0]
    _assert_outputs(sess.run(None, first), _want(bad, model, first), "good run before the bad one")
    with pytest.raises(bad.error) as info:
        sess.run(bad.output_names, bad.bad_feed)
    _assert_error(info.value, bad)
    assert len(bad.good_feed) >= 2, "a second good feed, of other shapes"
    for k, feeds in enumerate(bad.good_feed):
        _assert_outputs(sess.run(None, feeds), _want(bad, model, feeds), f"good run {k} after the bad one")


@pytest.mark.parametrize("bad", [_param(b, with_marks=False) for b in RUNTIME if b.ort_rejects])
def test_onnxruntime_rejects_the_bad_run_input_too(bad: Bad):
    model = bad.build_model()
    sess = ort_session(model)
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime raises its own exception types
        sess.run(bad.output_names, bad.bad_feed)


def _load_and_run_good(make_good, tmp: Path) -> None:
    if make_good is None:
        model, feeds_list = _good_model(tmp)
        want = _good_model_want
    else:
        model, feeds_list = make_good(tmp)
        want = None
    for allocator in ("pool", "naive"):
        sess = ds.InferenceSession(model, allocator=allocator)
        for k, feeds in enumerate(feeds_list):
            expected = want(feeds) if want is not None else ort_session(model).run(None, feeds)
            _assert_outputs(sess.run(None, feeds), expected, f"{allocator} good model run {k}")


@pytest.mark.parametrize("bad", [_param(b) for b in MODELS])
def test_bad_model(bad: Bad, tmp_path: Path):
    """The bad model is rejected with the typed error and its words; a good model then loads and runs."""
    model = bad.build_model(tmp_path)
    if bad.stage == "load":
        with pytest.raises(bad.error) as info:
            ds.InferenceSession(model)
    else:   # a check dynashape may make at the load or at the first run
        with pytest.raises(bad.error) as info:
            ds.InferenceSession(model).run(None, bad.bad_feed)
    _assert_error(info.value, bad, tmp_path)
    _load_and_run_good(bad.good_model, tmp_path)


def _ort_load(model):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


#: models onnxruntime 1.23 (tox -e lowest) still loads: it checks external-data paths and sparse
#: indices only in later releases
_REJECTED_FROM_ORT_1_32 = {"external data through '..'", "external data at an absolute path",
                           "sparse initializer index out of range"}


@pytest.mark.parametrize("bad", [_param(b, with_marks=False) for b in MODELS if b.ort_rejects])
def test_onnxruntime_rejects_the_bad_model_too(bad: Bad, tmp_path: Path):
    if bad.name in _REJECTED_FROM_ORT_1_32 and ort_predates((1, 32)):
        pytest.skip(f"onnxruntime {ort.__version__} loads it (later releases reject it)")
    model = bad.build_model(tmp_path)
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime raises its own exception types
        sess = _ort_load(model)
        if bad.stage == "run":
            sess.run(None, bad.bad_feed)


def test_catalogue_size(capsys):
    counts = Counter(b.category for b in CATALOGUE)
    with capsys.disabled():
        print("\nbad-input catalogue: " + ", ".join(f"{c}: {counts[c]}" for c in CATEGORIES)
              + f"; total {len(CATALOGUE)}; reported (xfail): {sum(1 for b in CATALOGUE if b.reported)}")
    assert set(counts) == set(CATEGORIES), counts
    assert len(CATALOGUE) >= 60, len(CATALOGUE)
    assert all(counts[c] >= 15 for c in CATEGORIES), counts
    ids = [b.id for b in CATALOGUE]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for b in CATALOGUE:
        assert b.words and b.error, b.id
        if b.category != "model":
            assert len(b.good_feed) >= 2, b.id
