"""The example plugin's RelativePositionBias (com.microsoft), T5's attention bias as
onnxruntime's transformer optimizer writes it, against onnxruntime.

onnxruntime has a CUDA kernel only for this op, so the reference is the computation it fuses,
built with onnx.helper from ONNX ops as torch exports Hugging Face's
``T5Attention.compute_bias`` (Range, Sub, Abs / Min, Log, Div, Mul, Cast, Where, Gather,
Transpose) and run by onnxruntime's CPU kernels on the (num_buckets, num_heads) embedding weight;
the plugin's node gets that weight as the optimizer stores it (its transpose's memory, read
column-major). The lengths come from a graph input's shape (Shape -> Gather, as in the
optimized graph: symbolic at import) or are fed (data-dependent). A bias is a gather of the
table, so the outputs must be equal, not close. A T5 attention block (RelativePositionBias
feeding com.microsoft Attention with a padding mask) is compared with the same block whose
bias is the ONNX-op computation, run by onnxruntime (float32 within rtol 1e-4, atol 1e-5).

This is part of the plugin's own test suite: dynashape's public API, numpy, onnx, onnxruntime
and pytest only (``python -m pytest plugins_example/tests``).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.testing import check_op

pytest.importorskip("dynashape_example")
ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
ELEM = {F32: TensorProto.FLOAT, F16: TensorProto.FLOAT16}
IR_VERSION = 8
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
#: sequence lengths run on one session: the exact buckets only, past the first log buckets,
#: past T5's exact power cases (p = 16, 32, 64 of 8 exact buckets) and max_distance 128, a repeat
LENGTHS = (7, 1, 40, 150, 7)


def ort_session(model):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def column_major(weight: np.ndarray) -> np.ndarray:
    """The table as the optimizer stores it: dims (num_buckets, num_heads), memory the
    (num_heads, num_buckets) transpose (FusionRelativePositionBiasBlock)."""
    return np.ascontiguousarray(weight.T).reshape(weight.shape)


def _c(name, value, dtype):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype), name))


def bias_nodes(weight: str, length: str, out: str, num_buckets: int, max_distance: int, bidirectional: bool):
    """ONNX ops computing T5's relative position bias (1, heads, L, L) from the embedding
    ``weight`` (num_buckets, heads) and the int64 scalar ``length``, as torch exports
    transformers' T5Attention.compute_bias / _relative_position_bucket."""
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    nodes = [_c("rb_zero", 0, np.int64), _c("rb_one", 1, np.int64), _c("rb_ax0", [0], np.int64),
             _c("rb_ax1", [1], np.int64), _c("rb_exact", exact, np.int64), _c("rb_exact_f", exact, np.float32),
             _c("rb_logmax", math.log(max_distance / exact), np.float32), _c("rb_span", n - exact, np.float32),
             _c("rb_last", n - 1, np.int64),
             helper.make_node("Range", ["rb_zero", length, "rb_one"], ["rb_pos"]),
             helper.make_node("Unsqueeze", ["rb_pos", "rb_ax1"], ["rb_query"]),
             helper.make_node("Unsqueeze", ["rb_pos", "rb_ax0"], ["rb_key"]),
             helper.make_node("Sub", ["rb_key", "rb_query"], ["rb_rel"])]
    if bidirectional:
        nodes += [_c("rb_half", n, np.int64),
                  helper.make_node("Greater", ["rb_rel", "rb_zero"], ["rb_after"]),
                  helper.make_node("Cast", ["rb_after"], ["rb_after64"], to=TensorProto.INT64),
                  helper.make_node("Mul", ["rb_after64", "rb_half"], ["rb_base"]),
                  helper.make_node("Abs", ["rb_rel"], ["rb_dist"])]
    else:
        nodes += [helper.make_node("Min", ["rb_rel", "rb_zero"], ["rb_neg"]),
                  helper.make_node("Neg", ["rb_neg"], ["rb_dist"])]
    nodes += [helper.make_node("Less", ["rb_dist", "rb_exact"], ["rb_small"]),
              helper.make_node("Cast", ["rb_dist"], ["rb_dist_f"], to=TensorProto.FLOAT),
              helper.make_node("Div", ["rb_dist_f", "rb_exact_f"], ["rb_ratio"]),
              helper.make_node("Log", ["rb_ratio"], ["rb_log"]),
              helper.make_node("Div", ["rb_log", "rb_logmax"], ["rb_frac"]),
              helper.make_node("Mul", ["rb_frac", "rb_span"], ["rb_scaled"]),
              helper.make_node("Cast", ["rb_scaled"], ["rb_scaled64"], to=TensorProto.INT64),
              helper.make_node("Add", ["rb_scaled64", "rb_exact"], ["rb_large0"]),
              helper.make_node("Min", ["rb_large0", "rb_last"], ["rb_large"]),
              helper.make_node("Where", ["rb_small", "rb_dist", "rb_large"],
                               ["rb_bucket" if bidirectional else "rb_buckets"])]
    if bidirectional:
        nodes.append(helper.make_node("Add", ["rb_base", "rb_bucket"], ["rb_buckets"]))
    nodes += [helper.make_node("Gather", [weight, "rb_buckets"], ["rb_values"], axis=0),     # (L, L, heads)
              helper.make_node("Transpose", ["rb_values"], ["rb_heads"], perm=[2, 0, 1]),
              helper.make_node("Unsqueeze", ["rb_heads", "rb_ax0"], [out])]
    return nodes


def length_nodes(source: str, out: str):
    """``out`` = the int64 scalar dim 1 of ``source`` (Shape -> Gather, as the optimized graph)."""
    return [helper.make_node("Shape", [source], ["ln_shape"]), _c("ln_index", 1, np.int64),
            helper.make_node("Gather", ["ln_shape", "ln_index"], [out], axis=0)]


def bias_models(weight: np.ndarray, max_distance: int, bidirectional: bool, dtype=F32, name="rpb"):
    """(plugin model, reference model): bias (1, heads, L, L) of the length L of input ``x``
    (batch, L)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "L"])
    y = helper.make_tensor_value_info("bias", ELEM[np.dtype(dtype)], None)
    attrs = {"max_distance": max_distance, "is_bidirectional": int(bidirectional)}
    mine = helper.make_graph(
        length_nodes("x", "len") + [helper.make_node("RelativePositionBias", ["table", "len", "len"], ["bias"],
                                                     domain=MS, name=name, **attrs)],
        "rpb", [x], [y], [numpy_helper.from_array(column_major(weight).astype(dtype), "table")])
    ref = helper.make_graph(length_nodes("x", "len") + bias_nodes("weight", "len", "bias", weight.shape[0],
                                                                  max_distance, bidirectional),
                            "rpb_ref", [x], [y], [numpy_helper.from_array(weight.astype(dtype), "weight")])
    return tuple(helper.make_model(g, ir_version=IR_VERSION, opset_imports=OPSETS) for g in (mine, ref))


def numpy_buckets(length: int, num_buckets: int, max_distance: int, bidirectional: bool) -> np.ndarray:
    """transformers' _relative_position_bucket element by element in Python floats (float64)."""
    out = np.empty((length, length), np.int64)
    for i in range(length):
        for j in range(length):
            d, n, base = j - i, num_buckets, 0
            if bidirectional:
                n //= 2
                base = n if d > 0 else 0
                d = abs(d)
            else:
                d = -min(d, 0)
            exact = n // 2
            if d < exact:
                out[i, j] = base + d
            else:
                out[i, j] = base + min(exact + int(math.log(d / exact) / math.log(max_distance / exact) * (n - exact)),
                                       n - 1)
    return out


def feeds_for(length: int, batch: int = 2):
    return {"x": np.zeros((batch, length), np.float32)}


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (6, 11)], ids=["t5", "small", "odd"])
@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_relative_position_bias_equals_the_onnx_op_computation_run_by_ort(num_buckets, max_distance, bidirectional):
    heads = 3
    weight = np.random.default_rng(num_buckets).standard_normal((num_buckets, heads)).astype(np.float32)
    mine, ref = bias_models(weight, max_distance, bidirectional)
    sess = dynashape.InferenceSession(mine)
    assert [o.shape for o in sess.get_inferred_outputs()] == [[1, heads, "L", "L"]]
    results = [sess.run(None, feeds_for(n))[0] for n in LENGTHS]
    reference = ort_session(ref)
    for n, got in zip(LENGTHS, results):
        want = reference.run(None, feeds_for(n))[0]
        assert got.dtype == want.dtype and got.shape == want.shape == (1, heads, n, n)
        np.testing.assert_array_equal(got, want, err_msg=f"length {n}")
        by_hand = weight[numpy_buckets(n, num_buckets, max_distance, bidirectional)].transpose(2, 0, 1)[None]
        np.testing.assert_array_equal(got, by_hand, err_msg=f"length {n} (transformers' formula)")
    assert sess.stats.cache_hits >= 1


def test_relative_position_bias_float16_table():
    weight = np.random.default_rng(3).standard_normal((32, 4)).astype(np.float16)
    mine, ref = bias_models(weight, 128, True, dtype=F16)
    sess = dynashape.InferenceSession(mine)
    reference = ort_session(ref)
    for n in (5, 70):
        got, want = sess.run(None, feeds_for(n))[0], reference.run(None, feeds_for(n))[0]
        assert got.dtype == F16
        np.testing.assert_array_equal(got, want)


def test_relative_position_bias_with_fed_lengths_has_data_dependent_dims():
    weight = np.random.default_rng(4).standard_normal((32, 2)).astype(np.float32)
    node = helper.make_node("RelativePositionBias", ["table", "q", "k"], ["bias"], domain=MS, name="rpb_fed",
                            max_distance=128, is_bidirectional=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in "qk"],
                              [helper.make_tensor_value_info("bias", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(column_major(weight), "table")])
    sess = dynashape.InferenceSession(helper.make_model(graph, ir_version=IR_VERSION, opset_imports=OPSETS))
    shape = sess.get_inferred_outputs()[0].shape      # data-dependent: not reported as dim_params
    assert shape is None or (shape[:2] == [1, 2] and shape[2] == shape[3])
    for n in (9, 0, 3):
        got = sess.run(None, {"q": np.array(n, np.int64), "k": np.array(n, np.int64)})[0]
        assert got.shape == (1, 2, n, n)
        np.testing.assert_array_equal(got, weight[numpy_buckets(n, 32, 128, True)].transpose(2, 0, 1)[None])
    with pytest.raises(Exception, match="query_length 4 != key_length 5"):
        sess.run(None, {"q": np.array(4, np.int64), "k": np.array(5, np.int64)})


@pytest.mark.parametrize("attrs,table,match", [
    ({}, (32, 2), "max_distance' is required"),
    ({"max_distance": 0}, (32, 2), "max_distance 0 must be > 0"),
    ({"max_distance": 128, "is_bidirectional": 1}, (3, 2), "3 buckets, fewer than 4"),
    ({"max_distance": 128}, (1, 2), "1 buckets, fewer than 2"),
    ({"max_distance": 8, "is_bidirectional": 1}, (32, 2), "max_distance 8 must exceed the 8 exact buckets"),
    ({"max_distance": 128}, (32,), "bias_table must have rank 2"),
])
def test_relative_position_bias_invalid_nodes_raise_naming_the_node(attrs, table, match):
    node = helper.make_node("RelativePositionBias", ["table", "len", "len"], ["bias"], domain=MS, name="rpb_bad",
                            **attrs)
    graph = helper.make_graph(length_nodes("x", "len") + [node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "L"])],
                              [helper.make_tensor_value_info("bias", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.zeros(table, np.float32), "table")])
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=OPSETS)
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        dynashape.InferenceSession(model).run(None, feeds_for(4))
    assert info.value.node == "rpb_bad"


def test_relative_position_bias_check_op_over_random_sizes():
    def make(rng, buckets, heads, n):
        return [rng.standard_normal((buckets, heads)).astype(np.float32), np.array(n, np.int64),
                np.array(n, np.int64)]
    result = check_op("RelativePositionBias", make, {"buckets": (4, 40), "heads": (1, 5), "n": (0, 60)},
                      {"max_distance": 128, "is_bidirectional": 1}, domain=MS, opset=1, trials=10, seed=5)
    assert len(result.draws) == 10


# ----------------------------------------------------------------------------------------
# a T5 encoder attention block as the optimizer fuses it
# ----------------------------------------------------------------------------------------

HIDDEN, HEADS = 16, 4


def t5_attention_models(weight: np.ndarray, qkv: np.ndarray):
    """(plugin model, reference model): x (batch, L, hidden) and an int64 padding mask (batch,
    L) -> Attention(x, qkv, mask, attention_bias = RelativePositionBias(L)), scale 1 and
    mask_filter_value float32's lowest, as FusionT5Attention writes it; the reference's bias is
    the ONNX-op computation."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "L", HIDDEN]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "L"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    head = length_nodes("x", "len") + [helper.make_node("Cast", ["mask"], ["mask32"], to=TensorProto.INT32)]
    attention = helper.make_node("Attention", ["x", "qkv", "", "mask32", "", "bias"], ["y"], domain=MS,
                                 num_heads=HEADS, scale=1.0, mask_filter_value=float(np.finfo(np.float32).min))
    mine = helper.make_graph(
        head + [helper.make_node("RelativePositionBias", ["table", "len", "len"], ["bias"], domain=MS,
                                 max_distance=128, is_bidirectional=1), attention],
        "t5_block", inputs, outputs,
        [numpy_helper.from_array(column_major(weight), "table"), numpy_helper.from_array(qkv, "qkv")])
    ref = helper.make_graph(head + bias_nodes("weight", "len", "bias", weight.shape[0], 128, True) + [attention],
                            "t5_block_ref", inputs, outputs,
                            [numpy_helper.from_array(weight, "weight"), numpy_helper.from_array(qkv, "qkv")])
    return tuple(helper.make_model(g, ir_version=IR_VERSION, opset_imports=OPSETS) for g in (mine, ref))


def test_t5_attention_block_with_relative_position_bias_matches_ort():
    rng = np.random.default_rng(11)
    weight = rng.standard_normal((32, HEADS)).astype(np.float32)
    qkv = (rng.standard_normal((HIDDEN, 3 * HIDDEN)) * 0.3).astype(np.float32)
    mine, ref = t5_attention_models(weight, qkv)
    sess = dynashape.InferenceSession(mine)
    assert [o.shape for o in sess.get_inferred_outputs()] == [["batch", "L", HIDDEN]]
    feeds = []
    for b, n in ((1, 7), (2, 12), (3, 40), (1, 7)):
        mask = np.ones((b, n), np.int64)
        for r in range(1, b):
            mask[r, n - 2 * r:] = 0                          # right padding
        feeds.append({"x": rng.standard_normal((b, n, HIDDEN)).astype(np.float32), "mask": mask})
    results = [sess.run(None, f)[0] for f in feeds]
    reference = ort_session(ref)
    for k, (got, f) in enumerate(zip(results, feeds)):
        want = reference.run(None, f)[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"run {k}")
