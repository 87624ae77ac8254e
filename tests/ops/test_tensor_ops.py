"""Tests of the tensor data-movement family (ops_builtin/tensor_ops.py).

Values are checked against onnx.reference.ReferenceEvaluator (or hand-computed values);
symbolic shape rules through the registered OpDefs with symbolic input shapes.
"""
from __future__ import annotations

import dynashape
import ml_dtypes
import numpy as np
import onnx
import pytest
from dynashape.dtypes import onnx_type
from dynashape.model import Node
from dynashape.records import InferContext
from dynashape.registry import get_registry
from dynashape.symbolic import dim_max, dim_min, evaluate, sym
from dynashape.testing import infer_node, run_node
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.conftest import assert_broadcast_mismatch, assert_runs_match_ort, one_node_model

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
rng = np.random.default_rng(0)


def reference(op, inputs, attrs=None, *, opset=21, n_outputs=1):
    """Outputs of onnx's ReferenceEvaluator for one node."""
    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, onnx_type(np.asarray(x).dtype), None)
         for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(o, 0, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs) if n}
    return ReferenceEvaluator(model).run(None, feeds)


def check(op, inputs, attrs=None, *, opset=21, n_outputs=1):
    got = run_node(op, inputs, attrs, opset=opset, n_outputs=n_outputs)
    want = reference(op, inputs, attrs, opset=opset, n_outputs=n_outputs)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)
    return got


def sym_infer(op, shapes, dtypes=None, values=None, attrs=None, *, opset=21, n_outputs=1):
    """infer_shape of the registered OpDef on symbolic shapes / partial values."""
    names = tuple(f"in{i}" for i in range(len(shapes)))
    node = Node(f"{op}_sym", op, "", names, tuple(f"out{i}" for i in range(n_outputs)), dict(attrs or {}))
    dtypes = dtypes or [np.dtype(np.float32)] * len(shapes)
    values = values or [None] * len(shapes)
    ctx = InferContext(node, opset, list(shapes), list(dtypes), list(values), symbolic=True)
    opdef = get_registry().resolve_op("", op, opset)
    return list(opdef.infer_shape(ctx)), opdef, ctx


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


# registration ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
                                "ScatterElements", "Scatter", "ScatterND", "Transpose", "Tile", "Pad",
                                "DepthToSpace", "SpaceToDepth", "OneHot", "Trilu", "Where", "NonZero",
                                "TopK", "CumSum"])
def test_every_spec_version_registered(op):
    want = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                   if s.name == op and s.domain == ""})
    have = sorted(o.since_version for o in get_registry().schemas("", op))
    assert have == want


# Concat ---------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_concat_axes(axis):
    check("Concat", [f32(2, 3), f32(2, 3), f32(2, 3)], {"axis": axis}, opset=13)


def test_concat_dtypes_and_empty():
    for dt in (np.int32, np.bool_, np.uint8, np.float16):
        check("Concat", [np.ones((2, 1), dt), np.zeros((2, 2), dt)], {"axis": 1})
    (y,) = run_node("Concat", [i64(1, 2), np.zeros((0,), np.int64), i64(3)], {"axis": 0})
    np.testing.assert_array_equal(y, [1, 2, 3])
    bf = np.ones((1, 2), ml_dtypes.bfloat16)
    (y,) = run_node("Concat", [bf, bf], {"axis": 0})
    assert y.dtype == bf.dtype and y.shape == (2, 2)
    s = np.array(["a", "b"], dtype=object)
    (y,) = run_node("Concat", [s, s], {"axis": 0})
    assert y.tolist() == ["a", "b", "a", "b"]


def test_concat_empty_other_rank_skipped_and_opset1_default_axis():
    (y,) = run_node("Concat", [np.zeros((0,), np.float32), np.ones((2, 3), np.float32)], {"axis": 1})
    assert y.shape == (2, 3)
    (y,) = run_node("Concat", [f32(2, 1), f32(2, 2)], {}, opset=1)
    assert y.shape == (2, 3)


def test_concat_mismatch_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match=r"input 1 has dim 4 on axis 0.*concat axis 1") as e:
        run_node("Concat", [f32(2, 3), f32(4, 3)], {"axis": 1})
    assert e.value.kind == "ConcatShapeMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="input 1 has rank 1") as e:
        run_node("Concat", [f32(2, 3), f32(3)], {"axis": 0})
    assert e.value.kind == "ConcatShapeMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="axis 2 is out of range"):
        run_node("Concat", [f32(2, 3), f32(2, 3)], {"axis": 2})
    with pytest.raises(dynashape.ShapeInferenceError, match="'axis' is required"):
        run_node("Concat", [f32(2, 3)], {}, opset=13)


def test_concat_symbolic_shape_and_value():
    b, s = sym("batch"), sym("seq")
    (out,), _, _ = sym_infer("Concat", [(b, s, 4), (b, 3, 4)], attrs={"axis": 1})
    assert out == (b, s + 3, 4)
    (out,), _, _ = sym_infer("Concat", [(b, 2), (1, 2)], attrs={"axis": 0})
    assert out == (b + 1, 2)
    vals = [np.array([b, s], dtype=object), i64(-1, 64)]
    _, opdef, ctx = sym_infer("Concat", [(2,), (2,)], [np.dtype(np.int64)] * 2, vals, {"axis": 0})
    (v,) = opdef.propagate_value(ctx)
    assert v.tolist() == [b, s, -1, 64]


# Split ----------------------------------------------------------------------------------

def test_split_forms():
    x = f32(6, 4)
    check("Split", [x], {"axis": 0, "split": [1, 2, 3]}, opset=11, n_outputs=3)
    check("Split", [x], {"axis": 0}, opset=11, n_outputs=3)
    check("Split", [x, i64(2, 2)], {"axis": -1}, opset=13, n_outputs=2)
    check("Split", [x], {"axis": 1}, opset=13, n_outputs=2)
    outs = run_node("Split", [f32(7, 2)], {"axis": 0, "num_outputs": 3}, opset=18, n_outputs=3)
    assert [o.shape[0] for o in outs] == [3, 3, 1]
    check("Split", [f32(7, 2)], {"axis": 0, "num_outputs": 3}, opset=18, n_outputs=3)
    outs = run_node("Split", [x, i64(4, 2)], {"axis": 0}, opset=1, n_outputs=2)
    assert [o.shape[0] for o in outs] == [4, 2]


def test_split_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="sums to 5") as e:
        run_node("Split", [f32(6), i64(2, 3)], {}, opset=13, n_outputs=2)
    assert e.value.kind == "SplitSumMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="evenly"):
        run_node("Split", [f32(7)], {}, opset=13, n_outputs=2)
    with pytest.raises(dynashape.ShapeInferenceError, match="2 entries but the node has 3"):
        run_node("Split", [f32(6)], {"split": [3, 3]}, opset=11, n_outputs=3)


def test_split_symbolic():
    s = sym("s")
    outs, _, _ = sym_infer("Split", [(2, s * 3)], attrs={"axis": 1}, opset=13, n_outputs=3)
    assert outs == [(2, s)] * 3
    outs, _, _ = sym_infer("Split", [(s, 8), (2,)], [np.dtype(np.float32), np.dtype(np.int64)],
                           [None, i64(3, 5)], {"axis": 1}, opset=13, n_outputs=2)
    assert outs == [(s, 3), (s, 5)]


# Slice ----------------------------------------------------------------------------------

SLICE_CASES = [
    ([0, 1], [3, 4], None, None),
    ([1], [INT64_MAX], [1], None),
    ([-1], [INT64_MIN], [0], [-1]),
    ([-3, 0], [-1, 100], [0, 1], [1, 2]),
    ([5], [1], [1], [-2]),
    ([100], [200], [0], None),
    ([0], [-100], [-1], None),
    ([2, 1], [0, 0], [0, 1], [-1, -1]),
    ([-100], [100], [0], [3]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICE_CASES)
def test_slice_inputs_form(starts, ends, axes, steps):
    x = f32(5, 7)
    ins = [x, i64(*starts), i64(*ends), None if axes is None else i64(*axes),
           None if steps is None else i64(*steps)]
    while ins[-1] is None:
        ins.pop()
    check("Slice", ins, opset=13)


def test_slice_attr_form_and_int32_values():
    x = f32(4, 5, 6)
    check("Slice", [x], {"starts": [1, 0], "ends": [3, -1], "axes": [0, 2]}, opset=1)
    check("Slice", [x], {"starts": [0, 1], "ends": [1000, 1000]}, opset=9)
    check("Slice", [x, np.array([1], np.int32), np.array([-1], np.int32), np.array([-1], np.int32)], opset=13)


def test_slice_empty_and_strings():
    (y,) = run_node("Slice", [f32(0, 3), i64(0), i64(2), i64(1)])
    assert y.shape == (0, 2)
    s = np.array(["a", "b", "c"], dtype=object)
    (y,) = run_node("Slice", [s, i64(-1), i64(INT64_MIN), i64(0), i64(-1)])
    assert y.tolist() == ["c", "b", "a"]


def test_slice_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="must not contain 0"):
        run_node("Slice", [f32(3), i64(0), i64(2), i64(0), i64(0)])
    with pytest.raises(dynashape.ShapeInferenceError, match="equal length"):
        run_node("Slice", [f32(3), i64(0, 1), i64(2)])
    with pytest.raises(dynashape.ShapeInferenceError, match="duplicates"):
        run_node("Slice", [f32(3, 3), i64(0, 0), i64(2, 2), i64(0, -2)])
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        run_node("Slice", [f32(3, 3), i64(0), i64(2), i64(2)])


def spec_slice_len(d, start, end, step):
    """Output length by the spec's clamping rules (written independently of the module)."""
    start, end = start + d if start < 0 else start, end + d if end < 0 else end
    if step > 0:
        start, end = np.clip(start, 0, d), np.clip(end, 0, d)
        return max(0, -(-(end - start) // step))
    if d == 0:
        return 0
    start, end = np.clip(start, 0, d - 1), np.clip(end, -1, d - 1)
    return max(0, -(-(start - end) // -step))


def test_slice_negative_step_start_before_begin_clamps_to_zero():
    # Slice-13: for negative steps, starts clamp into [0, dim-1] (onnxruntime agrees; the
    # reference evaluator's Python slicing gives an empty result instead)
    (y,) = run_node("Slice", [np.array([7.0], np.float32), i64(-2), i64(-6), i64(0), i64(-1)])
    assert y.tolist() == [7.0]


def _slice_sym(dim_shape, starts, ends, axes=None, steps=None):
    vals = [None, np.asarray(starts, dtype=object if any(not isinstance(v, int) for v in starts) else np.int64),
            np.asarray(ends, dtype=object if any(not isinstance(v, int) for v in ends) else np.int64),
            None if axes is None else i64(*axes), None if steps is None else i64(*steps)]
    shapes = [dim_shape, (len(starts),), (len(ends),)] + \
             ([(len(axes),)] if axes is not None else [None]) + ([(len(steps),)] if steps is not None else [None])
    names_n = 3 + (axes is not None or steps is not None) + (steps is not None)
    shapes, vals = shapes[:names_n], vals[:names_n]
    (out,), _, _ = sym_infer("Slice", shapes, None, vals, opset=13)
    return out


@pytest.mark.parametrize("starts,ends,steps", [
    ([0], [INT64_MAX], [1]), ([1], [INT64_MAX], [1]), ([0], [3], [1]), ([2], [5], [1]),
    ([-1], [INT64_MAX], [1]), ([-4], [-1], [1]), ([1], [-1], [1]), ([-3], [2], [1]),
    ([0], [INT64_MAX], [2]), ([1], [7], [3]), ([-1], [INT64_MIN], [-1]), ([4], [0], [-1]),
    ([-2], [-6], [-2]), ([INT64_MAX], [INT64_MIN], [-3]),
])
def test_slice_symbolic_dim_matches_concrete(starts, ends, steps):
    n = sym("n")
    out = _slice_sym((n, 3), starts, ends, [0], steps)
    assert out[1] == 3
    for value in range(9):
        want = spec_slice_len(value, starts[0], ends[0], steps[0])
        assert evaluate(out[0], {"n": value}) == want, (value, out[0])


def test_slice_symbolic_simple_forms():
    n = sym("n")
    assert _slice_sym((n,), [0], [INT64_MAX]) == (n,)
    assert _slice_sym((n,), [1], [INT64_MAX]) == (dim_max(n - 1, 0),)
    assert _slice_sym((n,), [0], [4]) == (dim_min(n, 4),)
    assert _slice_sym((n,), [-1], [INT64_MAX]) == (dim_min(n, 1),)
    assert _slice_sym((n,), [-1], [INT64_MIN], [0], [-1]) == (n,)


def test_slice_symbolic_bounds_values():
    past, seq = sym("past"), sym("seq")
    total = past + seq
    # attention-mask style: mask[:, :, past:past+seq, :past+seq] on a fixed 1024 buffer
    out = _slice_sym((1, 1, 1024, 1024), [past, 0], [total, total], [2, 3])
    assert out[0:2] == (1, 1)
    assert evaluate(out[2], {"past": 3, "seq": 5}) == 5
    assert evaluate(out[3], {"past": 3, "seq": 5}) == 8
    # a bound of unknown sign gives a fresh dim
    out = _slice_sym((seq,), [0], [seq - 2])
    assert out[0] != seq and str(out[0]).startswith("unk__")
    # unknown ends: fresh dim on the sliced axis only
    (o,), _, _ = sym_infer("Slice", [(seq, 4), (1,), (1,), (1,)], None, [None, i64(0), None, i64(1)], opset=13)
    assert o[0] == seq and str(o[1]).startswith("unk__")


def test_slice_propagates_shape_values():
    b, s = sym("b"), sym("s")
    shape_val = np.array([b, s, 768], dtype=object)
    _, opdef, ctx = sym_infer("Slice", [(3,), (1,), (1,)], [np.dtype(np.int64)] * 3,
                              [shape_val, i64(0), i64(2)], opset=13)
    (v,) = opdef.propagate_value(ctx)
    assert v.tolist() == [b, s]
    _, opdef, ctx = sym_infer("Slice", [(3,), (1,), (1,)], [np.dtype(np.int64)] * 3,
                              [shape_val, i64(-1), i64(INT64_MAX)], opset=13)
    assert opdef.propagate_value(ctx)[0].tolist() == [768]


# Gather family ----------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(axis):
    x = f32(3, 4, 5)
    check("Gather", [x, i64(0, -1, 2)], {"axis": axis})
    check("Gather", [x, np.array([[0, 1], [-2, 1]], np.int32)], {"axis": axis}, opset=11)


def test_gather_scalar_index_and_empty():
    x = f32(3, 4)
    (y,) = run_node("Gather", [x, np.array(-1, np.int64)], {"axis": 1})
    assert y.shape == (3,)
    np.testing.assert_array_equal(y, x[:, -1])
    (y,) = run_node("Gather", [x, np.zeros((0,), np.int64)], {"axis": 0})
    assert y.shape == (0, 4)
    s = np.array(["a", "b", "c"], dtype=object)
    (y,) = run_node("Gather", [s, i64(2, 0)])
    assert y.tolist() == ["c", "a"]


def test_gather_out_of_range():
    with pytest.raises(dynashape.ShapeInferenceError, match=r"index 3 is out of range.*\[-3, 2\]") as e:
        run_node("Gather", [f32(3, 2), i64(0, 3)])
    assert e.value.kind == "GatherIndexOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError, match="-4 is out of range"):
        run_node("Gather", [f32(3, 2), i64(-4)])
    # at run time (indices unknown at inference)
    reg = get_registry()
    kernel = reg.resolve_kernel("", "Gather", 13, np.dtype(np.float32))
    node = Node("g1", "Gather", "", ("a", "b"), ("c",), {})
    ctx = InferContext(node, 13, [(3, 2), (1,)], [np.dtype(np.float32), np.dtype(np.int64)], [None, None])
    ctx.output_shapes = [(1, 2)]
    with pytest.raises(dynashape.ShapeInferenceError, match="Gather node 'g1': index 5") as e:
        kernel.compute([f32(3, 2), i64(5)], [np.empty((1, 2), np.float32)], kernel.prepare(ctx))
    assert e.value.kind == "GatherIndexOutOfRange"


def test_gather_symbolic_shape_and_value():
    b, s = sym("b"), sym("s")
    (out,), _, _ = sym_infer("Gather", [(b, s, 8), ()], [np.dtype(np.float32), np.dtype(np.int64)],
                             attrs={"axis": 1})
    assert out == (b, 8)
    # Shape -> Gather(scalar) -> value
    _, opdef, ctx = sym_infer("Gather", [(3,), ()], [np.dtype(np.int64)] * 2,
                              [np.array([b, s, 8], dtype=object), np.array(1, np.int64)])
    (v,) = opdef.propagate_value(ctx)
    assert v.shape == () and v.item() == s
    _, opdef, ctx = sym_infer("Gather", [(3,), (2,)], [np.dtype(np.int64)] * 2,
                              [np.array([b, s, 8], dtype=object), i64(-1, 0)])
    assert opdef.propagate_value(ctx)[0].tolist() == [8, b]


def test_gather_elements():
    x = f32(3, 4)
    check("GatherElements", [x, np.array([[0, -1, 1, 1], [2, 1, 0, 0]], np.int64)], {"axis": 0})
    # indices smaller than data on a non-gather axis (as torch.gather / onnxruntime allow)
    (y,) = run_node("GatherElements", [x, np.array([[0, -1], [2, 1]], np.int64)], {"axis": 0})
    np.testing.assert_array_equal(y, [[x[0, 0], x[2, 1]], [x[2, 0], x[1, 1]]])
    check("GatherElements", [x, np.array([[0, -1, 3], [2, 1, 0], [0, 0, 0]], np.int32)], {"axis": 1})
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        run_node("GatherElements", [x, np.array([[4]], np.int64)], {"axis": 1})
    with pytest.raises(dynashape.ShapeInferenceError, match="same rank"):
        run_node("GatherElements", [x, i64(0)])


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims):
    x = f32(2, 3, 4)
    idx = np.array([[[0, 1], [1, -1]], [[1, 2], [0, 0]]], np.int64)
    check("GatherND", [x, idx], {"batch_dims": batch_dims}, opset=13)
    check("GatherND", [x, np.array([[1], [0]], np.int64)], {"batch_dims": batch_dims}, opset=12)


def test_gather_nd_errors_and_opset11():
    check("GatherND", [f32(2, 2), np.array([[0, 0], [1, 1]], np.int64)], opset=11)
    with pytest.raises(dynashape.ShapeInferenceError, match="indices.shape\\[-1\\] = 3"):
        run_node("GatherND", [f32(2, 2), np.zeros((1, 3), np.int64)])
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range") as e:
        run_node("GatherND", [f32(2, 2), np.array([[2, 0]], np.int64)])
    assert e.value.kind == "GatherIndexOutOfRange"


# Scatter family ---------------------------------------------------------------------------

@pytest.mark.parametrize("reduction,opset", [("none", 11), ("none", 18), ("add", 16), ("mul", 16),
                                             ("max", 18), ("min", 18)])
def test_scatter_elements(reduction, opset):
    x = f32(3, 4)
    idx = np.array([[1, 0, -1], [0, 2, 2]], np.int64)
    upd = f32(2, 3)
    attrs = {"axis": 1} if reduction == "none" and opset < 16 else {"axis": 1, "reduction": reduction}
    if reduction == "none":
        idx = np.array([[1, 0, -1], [0, 2, 3]], np.int64)  # no duplicates
    check("ScatterElements", [x, idx, upd], attrs, opset=opset)


def test_scatter_elements_bf16_add_and_deprecated_scatter():
    x = np.ones((2, 3), ml_dtypes.bfloat16)
    idx = np.array([[0, 0]], np.int64)
    upd = np.full((1, 2), 2.0, ml_dtypes.bfloat16)
    (y,) = run_node("ScatterElements", [x, idx, upd], {"axis": 1, "reduction": "add"}, opset=18)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(np.float32), [[5, 1, 1], [1, 1, 1]])
    sc = [f32(3, 3), np.array([[1, 0, 2]], np.int64), f32(1, 3)]
    (y,) = run_node("Scatter", sc, {"axis": 0}, opset=11)
    np.testing.assert_array_equal(y, reference("ScatterElements", sc, {"axis": 0}, opset=11)[0])
    with pytest.raises(dynashape.ShapeInferenceError, match="reduction 'max'"):
        run_node("ScatterElements", [x, idx, upd], {"axis": 1, "reduction": "max"}, opset=16)
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range") as e:
        run_node("ScatterElements", [f32(2, 2), np.array([[2]], np.int64), f32(1, 1)])
    assert e.value.kind == "ScatterIndexOutOfRange"


@pytest.mark.parametrize("reduction,opset", [("none", 11), ("none", 13), ("add", 16), ("mul", 16),
                                             ("max", 18), ("min", 18)])
def test_scatter_nd(reduction, opset):
    x = f32(4, 3)
    idx = np.array([[1], [-1]], np.int64) if reduction == "none" else np.array([[1], [1], [3]], np.int64)
    upd = f32(idx.shape[0], 3)
    attrs = {} if opset < 16 else {"reduction": reduction}
    check("ScatterND", [x, idx, upd], attrs, opset=opset)


def test_scatter_nd_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="updates must have shape") as e:
        run_node("ScatterND", [f32(4, 3), np.array([[1]], np.int64), f32(1, 4)])
    assert e.value.kind == "ScatterShapeMismatch"


# Transpose, Tile ----------------------------------------------------------------------------

def test_transpose():
    x = f32(2, 3, 4)
    check("Transpose", [x])
    check("Transpose", [x], {"perm": [1, 0, 2]}, opset=13)
    check("Transpose", [np.array(3.0, np.float32)], opset=1)
    with pytest.raises(dynashape.ShapeInferenceError, match="not a permutation"):
        run_node("Transpose", [x], {"perm": [0, 0, 1]})
    b = sym("b")
    (out,), _, _ = sym_infer("Transpose", [(b, 3, 4)], attrs={"perm": [2, 0, 1]})
    assert out == (4, b, 3)


def test_tile():
    x = f32(2, 3)
    check("Tile", [x, i64(2, 3)], opset=13)
    check("Tile", [x, i64(1, 0)], opset=6)
    check("Tile", [np.array([True, False]), i64(3)], opset=13)
    (y,) = run_node("Tile", [x, np.array(3, np.int64), np.array(1, np.int64)], opset=1)
    np.testing.assert_array_equal(y, np.tile(x, (1, 3)))
    with pytest.raises(dynashape.ShapeInferenceError, match="repeats has 1 values but the input has rank 2"):
        run_node("Tile", [x, i64(2)])
    b = sym("b")
    (out,), _, _ = sym_infer("Tile", [(b, 3), (2,)], [np.dtype(np.float32), np.dtype(np.int64)],
                             [None, i64(2, 1)])
    assert out == (b * 2, 3)


# Pad ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode):
    x = f32(3, 4)
    check("Pad", [x, i64(1, 2, 2, 1)], {"mode": mode}, opset=19)
    check("Pad", [x, i64(0, 2, 1, 0), None, i64(-1, 0)], {"mode": mode}, opset=21)


def test_pad_forms_and_values():
    x = f32(2, 3)
    check("Pad", [x, i64(1, 0, 0, 2), np.array(1.5, np.float32)], opset=11)
    (y,) = run_node("Pad", [x], {"pads": [0, 1, 0, 1], "value": 7.0}, opset=2)
    np.testing.assert_array_equal(y[:, 0], [7, 7])
    (y,) = run_node("Pad", [x], {"paddings": [1, 0, 0, 0]}, opset=1)
    assert y.shape == (3, 3)
    (y,) = run_node("Pad", [x, i64(0, -1, 0, 1)], opset=13)  # negative pad crops
    np.testing.assert_array_equal(y, np.pad(x[:, 1:], ((0, 0), (0, 1))))
    (y,) = run_node("Pad", [np.array([1, 2], np.int32), i64(1, 1), np.array(9, np.int32)], opset=18)
    assert y.tolist() == [9, 1, 2, 9]
    s = np.array(["a"], dtype=object)
    (y,) = run_node("Pad", [s, i64(1, 0)], opset=13)
    assert y.tolist() == ["", "a"]
    bf = np.ones((2,), ml_dtypes.bfloat16)
    (y,) = run_node("Pad", [bf, i64(1, 1), np.array(2, ml_dtypes.bfloat16)], opset=21)
    assert y.dtype == bf.dtype and y.astype(np.float32).tolist() == [2, 1, 1, 2]


def test_pad_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="pads has 3 values") as e:
        run_node("Pad", [f32(2, 3), i64(1, 1, 1)])
    assert e.value.kind == "PadsLengthMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="negative size"):
        run_node("Pad", [f32(2, 3), i64(-3, 0, 0, 0)])
    with pytest.raises(dynashape.ShapeInferenceError, match="mode 'wrap'"):
        run_node("Pad", [f32(2, 3), i64(1, 0, 0, 0)], {"mode": "wrap"}, opset=18)


def test_pad_symbolic():
    b, s = sym("b"), sym("s")
    (out,), _, _ = sym_infer("Pad", [(b, s), (4,)], [np.dtype(np.float32), np.dtype(np.int64)],
                             [None, i64(0, 1, 0, 2)], opset=13)
    assert out == (b, s + 3)


# DepthToSpace / SpaceToDepth ---------------------------------------------------------------

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(mode):
    x = f32(2, 8, 3, 4)
    check("DepthToSpace", [x], {"blocksize": 2, "mode": mode}, opset=13)
    x = f32(2, 3, 4, 6)
    y = check("SpaceToDepth", [x], {"blocksize": 2, "mode": mode}, opset=28)[0]
    (back,) = run_node("DepthToSpace", [y], {"blocksize": 2, "mode": mode}, opset=28)
    np.testing.assert_array_equal(back, x)


def test_depth_space_opset1_and_errors():
    check("DepthToSpace", [f32(1, 4, 2, 2)], {"blocksize": 2}, opset=1)
    check("SpaceToDepth", [f32(1, 1, 4, 2)], {"blocksize": 2}, opset=13)
    with pytest.raises(dynashape.ShapeInferenceError, match="not divisible by blocksize\\^2"):
        run_node("DepthToSpace", [f32(1, 6, 2, 2)], {"blocksize": 2})
    with pytest.raises(dynashape.ShapeInferenceError, match="height 3 is not divisible"):
        run_node("SpaceToDepth", [f32(1, 1, 3, 2)], {"blocksize": 2})
    with pytest.raises(dynashape.ShapeInferenceError, match="rank 4"):
        run_node("SpaceToDepth", [f32(1, 4, 2)], {"blocksize": 2})
    h = sym("h")
    (out,), _, _ = sym_infer("DepthToSpace", [(1, 16, h, 5)], attrs={"blocksize": 2})
    assert out == (1, 4, h * 2, 10)


# OneHot, Trilu, Where, NonZero ------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot(axis):
    idx = np.array([[0, 3, -1], [5, -7, 2]], np.int64)
    check("OneHot", [idx, np.array(5, np.int64), np.array([0, 1], np.float32)], {"axis": axis}, opset=11)
    check("OneHot", [idx.astype(np.float32), np.array(5.0, np.float32), np.array([2, 7], np.int32)],
          {"axis": axis}, opset=9)


def test_onehot_errors_and_symbolic():
    with pytest.raises(dynashape.ShapeInferenceError, match="2 elements"):
        run_node("OneHot", [i64(1), np.array(3, np.int64), np.array([0, 1, 2], np.float32)])
    (out,), _, _ = sym_infer("OneHot", [(sym("b"),), (), (2,)], values=[None, None, None])
    assert out[0] == sym("b") and str(out[1]).startswith("unk__")


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1, -5])
def test_trilu(upper, k):
    x = f32(2, 4, 5)
    ins = [x] if k is None else [x, np.array(k, np.int64)]
    check("Trilu", ins, {"upper": upper}, opset=14)
    check("Trilu", [np.ones((3, 3), np.bool_)] + ins[1:], {"upper": upper}, opset=14)


def test_trilu_rank_error():
    with pytest.raises(dynashape.ShapeInferenceError, match="rank >= 2"):
        run_node("Trilu", [f32(3)])


def test_where():
    cond = np.array([[True], [False]])
    check("Where", [cond, f32(1, 3), f32(2, 1)], opset=9)
    check("Where", [np.array(True), np.array([1, 2], np.int64), np.array(5, np.int64)], opset=16)
    s = np.array(["a", "b"], dtype=object)
    (y,) = run_node("Where", [np.array([True, False]), s, np.array(["x", "y"], dtype=object)])
    assert y.tolist() == ["a", "y"]
    with pytest.raises(dynashape.ShapeInferenceError, match="cannot be broadcast"):
        run_node("Where", [np.ones(3, bool), f32(2), f32(3)])


def test_where_symbolic_broadcast_runs_match_ort():
    """cond [R, S], X [P, L], Y [Q, M]: three-way broadcast with 1 vs N and 0 vs 1 (-> 0)."""
    shapes = [((2, 1), (1, 3), (2, 3)), ((1, 1), (0, 3), (1, 3)), ((0, 1), (1, 3), (1, 1)),
              ((1, 1), (1, 1), (4, 0)), ((3, 1), (1, 0), (1, 1)), ((1, 0), (2, 1), (1, 1)),
              ((2, 2), (2, 2), (2, 2))]
    runs = [{"in0": rng.random(c) < 0.5, "in1": f32(*x), "in2": f32(*y)} for c, x, y in shapes]
    model, _ = one_node_model("Where", list(runs[0].values()), {}, 16, out_dtype=np.float32,
                              dims=[["R", "S"], ["P", "L"], ["Q", "M"]], node_name="where")
    sess = assert_runs_match_ort(model, runs)
    assert sess.get_outputs()[0].shape == ["broadcast(P, Q, R)", "broadcast(L, M, S)"]
    assert (sess.stats.symbolic_plans, sess.stats.resolved_plans) == (len(runs), 0)
    assert_broadcast_mismatch(sess, {"in0": np.ones((2, 1), bool), "in1": f32(3, 3), "in2": f32(1, 3)}, "where")
    assert_broadcast_mismatch(sess, {"in0": np.ones((0, 1), bool), "in1": f32(2, 3), "in2": f32(1, 3)}, "where")
    cond, x, y = np.array([[True], [False]]), f32(1, 0), f32(2, 1)
    (out,) = sess.run(None, {"in0": cond, "in1": x, "in2": y})
    assert out.shape == (2, 0)


def test_split_sizes_from_the_shape_of_a_broadcast():
    """Split sizes read from Shape(Add(a [P, L], b [Q, M])): with P = 0 against Q = 1 the
    size is 0 (a planner writing max(P, Q) = 1 reports a false Split size error)."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Shape", ["s"], ["sh"]),
             helper.make_node("Slice", ["sh", "zero", "one"], ["rows"]),
             helper.make_node("Concat", ["rows", "rows"], ["sizes"], axis=0),
             helper.make_node("Split", ["x", "sizes"], ["u", "v"], axis=0)]
    graph = helper.make_graph(nodes, "g", [vi("a", onnx.TensorProto.FLOAT, ["P", "L"]),
                                           vi("b", onnx.TensorProto.FLOAT, ["Q", "M"]),
                                           vi("x", onnx.TensorProto.FLOAT, ["X", 2])],
                              [vi("u", onnx.TensorProto.FLOAT, None), vi("v", onnx.TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(i64(0), "zero"),
                               onnx.numpy_helper.from_array(i64(1), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    runs = [{"a": f32(2, 3), "b": f32(1, 3), "x": f32(4, 2)}, {"a": f32(0, 3), "b": f32(1, 3), "x": f32(0, 2)},
            {"a": f32(1, 1), "b": f32(0, 5), "x": f32(0, 2)}, {"a": f32(1, 4), "b": f32(3, 1), "x": f32(6, 2)}]
    sess = assert_runs_match_ort(model, runs)
    assert [o.shape for o in sess.get_outputs()] == [["broadcast(P, Q)", 2]] * 2
    assert sess.stats.resolved_plans == 0


def test_where_symbolic_value():
    b = sym("b")
    vals = [np.array([True, False]), np.array([b, 4], dtype=object), i64(7, 8)]
    _, opdef, ctx = sym_infer("Where", [(2,), (2,), (2,)], [np.dtype(bool), np.dtype(np.int64),
                                                            np.dtype(np.int64)], vals)
    assert opdef.propagate_value(ctx)[0].tolist() == [b, 8]
    ctx.input_values[0] = np.array([sym("c"), 1], dtype=object)
    assert opdef.propagate_value(ctx) == [None]


def test_nonzero():
    x = np.array([[1, 0, 2], [0, 0, 3]], np.float32)
    check("NonZero", [x], opset=13)
    check("NonZero", [np.zeros((0, 2), np.int32)], opset=9)
    (y,) = run_node("NonZero", [np.array(5, np.int64)])
    assert y.shape == (1, 1)
    (out,), opdef, _ = sym_infer("NonZero", [(sym("b"), 4)])
    assert opdef.data_dependent and out[0] == 2 and str(out[1]).startswith("unk__")


# TopK, CumSum -------------------------------------------------------------------------------

@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0])
def test_topk(largest, axis):
    x = np.array([[3, 1, 3, 2], [5, 5, 0, 5], [1, 1, 1, 1]], np.float32)
    got = run_node("TopK", [x, i64(2)], {"axis": axis, "largest": largest}, opset=11, n_outputs=2)
    want = reference("TopK", [x, i64(2)], {"axis": axis, "largest": largest}, opset=11, n_outputs=2)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[1].dtype == np.int64


def test_topk_ties_lower_index_first_and_forms():
    x = np.array([1, 5, 5, 2, 5], np.int32)
    vals, idx = run_node("TopK", [x, i64(3)], opset=11, n_outputs=2)
    assert idx.tolist() == [1, 2, 4] and vals.tolist() == [5, 5, 5]
    vals, idx = run_node("TopK", [x, i64(2)], {"largest": 0}, opset=11, n_outputs=2)
    assert idx.tolist() == [0, 3]
    vals, idx = run_node("TopK", [np.array([2, 9, 9], np.uint8)], {"k": 2}, opset=1, n_outputs=2)
    assert idx.tolist() == [1, 2]
    vals, idx = run_node("TopK", [np.array([1, 3, 2], ml_dtypes.bfloat16), i64(1)], opset=24, n_outputs=2)
    assert vals.dtype == ml_dtypes.bfloat16 and idx.tolist() == [1]
    vals, idx = run_node("TopK", [f32(3, 4), i64(0)], opset=10, n_outputs=2)
    assert vals.shape == (3, 0)


def test_topk_errors_and_symbolic():
    with pytest.raises(dynashape.ShapeInferenceError, match="k = 5 must be in") as e:
        run_node("TopK", [f32(4), i64(5)], n_outputs=2)
    assert e.value.kind == "TopKInvalidK"
    outs, _, _ = sym_infer("TopK", [(sym("b"), 10), (1,)], [np.dtype(np.float32), np.dtype(np.int64)],
                           [None, None], n_outputs=2)
    assert outs[0][0] == sym("b") and str(outs[0][1]).startswith("unk__") and outs[0] == outs[1]


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(exclusive, reverse, axis):
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    check("CumSum", [x, np.array(axis, np.int64)], {"exclusive": exclusive, "reverse": reverse}, opset=14)
    check("CumSum", [x.astype(np.int32), np.array(axis, np.int32)],
          {"exclusive": exclusive, "reverse": reverse}, opset=11)


def test_cumsum_dtypes_and_errors():
    (y,) = run_node("CumSum", [np.ones(4, np.float16), np.array(0, np.int64)])
    assert y.dtype == np.float16 and y.tolist() == [1, 2, 3, 4]
    (y,) = run_node("CumSum", [np.ones(3, ml_dtypes.bfloat16), np.array(0, np.int64)], {"exclusive": 1})
    assert y.dtype == ml_dtypes.bfloat16 and y.astype(np.float32).tolist() == [0, 1, 2]
    (y,) = run_node("CumSum", [np.zeros((0,), np.int64), np.array(0, np.int64)])
    assert y.shape == (0,)
    with pytest.raises(dynashape.ShapeInferenceError, match="axis 2 is out of range"):
        run_node("CumSum", [f32(2, 2), np.array(2, np.int64)])


def test_infer_node_dtypes():
    shapes, dtypes = infer_node("TopK", [f32(2, 5), i64(3)], n_outputs=2)
    assert shapes == [(2, 3), (2, 3)] and dtypes == [np.float32, np.int64]
    shapes, dtypes = infer_node("OneHot", [i64(1, 2), np.array(4, np.int64), np.array([0, 1], np.int32)])
    assert shapes == [(2, 4)] and dtypes == [np.int32]


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_partition_path_ties(largest):
    # k much smaller than the axis takes the partition path; ties must still keep lower indices
    x = np.random.default_rng(3).integers(0, 5, size=(4, 200)).astype(np.float32)
    vals, idx = run_node("TopK", [x, i64(7)], {"largest": largest}, n_outputs=2)
    order = np.lexsort((np.broadcast_to(np.arange(200), x.shape), -x if largest else x), axis=-1)[:, :7]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, order, axis=-1))
    x[0, 3] = np.nan  # a NaN row falls back to the full sort
    vals, idx = run_node("TopK", [x, i64(7)], {"largest": largest}, n_outputs=2)
    assert idx.shape == (4, 7)
