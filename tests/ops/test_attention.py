"""LLM operators (ops_builtin/attention.py): Attention 23/24/25, RotaryEmbedding, TensorScatter,
SwiGLU, LinearAttention, CausalConvWithState and FlexAttention (ai.onnx.preview).

The node tests cover the spec's examples; here: symbolic dims through changing shapes on
one session (both allocators, validation mode on), against onnxruntime where it implements
the op (Attention, RotaryEmbedding, TensorScatter, LinearAttention, CausalConvWithState)
and onnx.reference elsewhere (SwiGLU, FlexAttention, and the few Attention cases where
onnxruntime deviates); error cases by type and message.
"""
from __future__ import annotations

import dynashape
import ml_dtypes
import numpy as np
import pytest
from dynashape.errors import ExecutionError, ShapeInferenceError
from dynashape.testing import infer_node, run_node
from onnx import TensorProto, helper

from tests.conftest import one_node_model, ort_or_spec, ort_predates, ort_run, spec_run

rng = np.random.default_rng(7)
ALLOCATORS = ["pool", "naive"]

# The first onnxruntime releases that get these cases right; older ones are compared with the
# ONNX spec (onnx.reference) instead.
#: Attention with present_key or qk_matmul_output requested but no past_key is rejected:
#: https://github.com/microsoft/onnxruntime/issues/26262
ORT_ATTENTION_PRESENT_WITHOUT_PAST = (1, 24)
#: Attention with an integer attn_mask falls back to the function body, which adds it to a float
#: causal mask and fails to load, as in https://github.com/microsoft/onnxruntime/issues/27891
ORT_ATTENTION_INT_MASK = (1, 24)
#: RotaryEmbedding on 4-D input with rotary_embedding_dim requires num_heads (3-D only in the
#: spec): https://github.com/microsoft/onnxruntime/pull/26044
ORT_ROPE_4D_ROTARY_DIM = (1, 24)
#: Attention's 3-D/4-D attn_mask must broadcast over kv_num_heads instead of q_num_heads
#: ("attn_mask must be broadcastable to (batch_size, kv_num_heads, ...)"; no issue found)
ORT_ATTENTION_MASK_Q_HEADS = (1, 25)
#: Attention-24 ignores nonpad_kv_seqlen: https://github.com/microsoft/onnxruntime/pull/27384
ORT_ATTENTION_NONPAD = (1, 25)
#: TensorScatter-24 has no kernel: https://github.com/microsoft/onnxruntime/pull/27389
ORT_TENSOR_SCATTER = (1, 25)
#: Attention's qk_matmul_output modes and softcap ordering differ from the spec:
#: https://github.com/microsoft/onnxruntime/pull/28379
ORT_ATTENTION_QK_OUTPUT = (1, 27)
#: With is_causal, Attention's rows whose keys are all masked are not zero and the causal frontier
#: is not bottom-right aligned with nonpad_kv_seqlen:
#: https://github.com/microsoft/onnxruntime/issues/28904
ORT_ATTENTION_CAUSAL = (1, 28)
#: Attention-25's left_window_size/right_window_size (https://github.com/onnx/onnx/pull/8108)
#: are unknown and opset-27 models (LinearAttention, CausalConvWithState) are not loaded:
#: https://github.com/microsoft/onnxruntime/pull/28754
ORT_OPSET_25_27 = (1, 32)


def f32(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(autouse=True, scope="module")
def _quiet_ort():
    ort = pytest.importorskip("onnxruntime")
    ort.set_default_logger_severity(3)


def assert_close(got, want, tol=1e-5, what=""):
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (what, g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol, err_msg=what)


def session_runs(model, runs, want, allocator, tol=1e-5):
    """Run every feed dict on ONE session (validation mode) and compare with ``want(model, feeds)``."""
    sess = dynashape.InferenceSession(model, allocator=allocator, validate_memory=True)
    for k, feeds in enumerate(runs):
        assert_close(sess.run(None, feeds), want(model, feeds), tol, f"run {k}")
    return sess


def node_check(op, ins, attrs, opset, n_outputs=1, want=ort_run, tol=1e-5):
    """run_node against ``want`` on a one-node model (ORT by default)."""
    got = run_node(op, ins, attrs, opset=opset, n_outputs=n_outputs)
    model, feeds = one_node_model(op, ins, attrs, opset, n_outputs=n_outputs)
    assert_close(got, want(model, feeds), tol, f"{op} {attrs}")
    return got


def feeds_of(ins):
    return {f"in{i}": x for i, x in enumerate(ins) if x is not None}


# Attention -----------------------------------------------------------------------------------

def attn_inputs(b, sq, p, skv, rank, hq=4, hkv=2, d=8, dv=6, dtype=np.float32):
    if rank == 4:
        q, k, v = f32(b, hq, sq, d, dtype=dtype), f32(b, hkv, skv, d, dtype=dtype), f32(b, hkv, skv, dv, dtype=dtype)
    else:
        q, k, v = f32(b, sq, hq * d, dtype=dtype), f32(b, skv, hkv * d, dtype=dtype), f32(b, skv, hkv * dv, dtype=dtype)
    return [q, k, v, None, f32(b, hkv, p, d, dtype=dtype), f32(b, hkv, p, dv, dtype=dtype)]


@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("rank,opset", [(4, 23), (3, 23), (4, 24), (3, 25)])
def test_attention_symbolic_kv_cache_matches_ort(rank, opset, allocator):
    """GQA with a growing cache: present length is P + S, symbolic at import; batch, sequence
    and past length change between runs (past length 0 included)."""
    attrs = {"is_causal": 1, "softcap": 2.0, "qk_matmul_output_mode": 1}
    if rank == 3:
        attrs.update(q_num_heads=4, kv_num_heads=2)
        dims = [["B", "S", 32], ["B", "S", 16], ["B", "S", 12], None, ["B", 2, "P", 8], ["B", 2, "P", 6]]
    else:
        dims = [["B", 4, "S", 8], ["B", 2, "S", 8], ["B", 2, "S", 6], None, ["B", 2, "P", 8], ["B", 2, "P", 6]]
    model, _ = one_node_model("Attention", attn_inputs(2, 3, 4, 3, rank), attrs, opset, n_outputs=4, dims=dims)
    runs = [feeds_of(attn_inputs(b, s, p, s, rank)) for b, s, p in ((2, 3, 4), (1, 1, 7), (3, 5, 0), (2, 2, 1))]
    sess = session_runs(model, runs, ort_or_spec(ORT_ATTENTION_QK_OUTPUT), allocator)
    y = ["B", "S", 24] if rank == 3 else ["B", 4, "S", 6]
    assert [o.shape for o in sess.get_inferred_outputs()] == [y, ["B", 2, "P + S", 8], ["B", 2, "P + S", 6],
                                                     ["B", 4, "S", "P + S"]]
    assert (sess.stats.symbolic_plans, sess.stats.resolved_plans) == (len(runs), 0)


@pytest.mark.parametrize("mask_shape", [(3, 5), (4, 3, 5), (2, 1, 3, 5), (2, 4, 3, 5)])
@pytest.mark.parametrize("mask_dtype", [np.float32, np.bool_])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_masks_match_ort(mask_shape, mask_dtype, causal):
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 8)
    mask = f32(*mask_shape) if mask_dtype == np.float32 else rng.random(mask_shape) < 0.7
    fixed_in = ORT_ATTENTION_CAUSAL if causal and mask_dtype == np.bool_ else ORT_ATTENTION_MASK_Q_HEADS
    node_check("Attention", [q, k, v, mask], {"is_causal": causal}, 23, want=ort_or_spec(fixed_in))


@pytest.mark.parametrize("mask_shape", [(5,), (3, 2), (4, 3, 1), (2, 4, 3, 3)])
@pytest.mark.parametrize("mask_dtype", [np.float32, np.bool_])
def test_attention_short_and_rank1_masks_match_reference(mask_shape, mask_dtype):
    """A mask's last dim shorter than T is padded with -inf (False); onnxruntime rejects
    those and rank-1 masks, onnx.reference implements the spec."""
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 8)
    mask = f32(*mask_shape) if mask_dtype == np.float32 else rng.random(mask_shape) < 0.7
    node_check("Attention", [q, k, v, mask], {}, 23, want=spec_run)


def test_attention_mask_broadcast_along_queries_with_causal():
    """A (1, Hq, 1, T) mask broadcast over the queries composes with the causal frontier of
    every query row (onnx.reference reads S_q from the mask there; expand it first)."""
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 8)
    mask = rng.random((1, 4, 1, 5)) < 0.8
    (got,) = run_node("Attention", [q, k, v, mask], {"is_causal": 1}, opset=23)
    full = np.broadcast_to(mask, (1, 4, 3, 5)).copy()
    model, feeds = one_node_model("Attention", [q, k, v, full], {"is_causal": 1}, 23)
    assert_close([got], spec_run(model, feeds))


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("softcap", [0.0, 1.5])
def test_attention_qk_matmul_output_modes(mode, softcap):
    """Mode 0 is the raw QK product even with a softcap (as onnxruntime; onnx.reference
    returns the softcapped one); mode 2 keeps -inf at masked keys (as onnx.reference;
    onnxruntime writes the float minimum there)."""
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 6)
    mask = rng.random((3, 5)) < 0.6
    attrs = {"qk_matmul_output_mode": mode, "softcap": softcap, "scale": 0.3}
    want = spec_run if mode == 2 else ort_or_spec(ORT_ATTENTION_QK_OUTPUT)
    if mode == 0 and softcap and ort_predates(ORT_ATTENTION_QK_OUTPUT):
        def want(model, feeds):  # onnx.reference softcaps mode 0's output: Q K^T * scale by hand
            qk = 0.3 * q @ np.repeat(k, 2, axis=1).swapaxes(-1, -2)
            return spec_run(model, feeds)[:3] + [qk]
    node_check("Attention", [q, k, v, mask], attrs, 23, n_outputs=4, want=want)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_nonpad_kv_seqlen_matches_ort(causal, with_mask):
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 6)
    mask = rng.random((3, 5)) < 0.8 if with_mask else None
    fixed_in = ORT_ATTENTION_CAUSAL if causal else ORT_ATTENTION_NONPAD
    node_check("Attention", [q, k, v, mask, None, None, np.array([5, 2], np.int64)], {"is_causal": causal}, 24,
               want=ort_or_spec(fixed_in))


@pytest.mark.parametrize("left,right,causal", [(2, 0, 0), (1, 1, 0), (-1, 1, 0), (2, -1, 1), (0, 0, 0)])
@pytest.mark.parametrize("cache", ["none", "past", "nonpad"])
def test_attention_sliding_window_matches_ort(left, right, causal, cache):
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 6)
    ins, n = [q, k, v], 1
    if cache == "past":
        ins, n = [q, k, v, None, f32(2, 2, 3, 8), f32(2, 2, 3, 6)], 3
    elif cache == "nonpad":
        ins = [q, k, v, None, None, None, np.array([4, 1], np.int64)]
    attrs = {"is_causal": causal, "left_window_size": left, "right_window_size": right}
    node_check("Attention", ins, attrs, 25, n_outputs=n, want=ort_or_spec(ORT_OPSET_25_27))


def test_attention_fully_masked_rows_are_zero():
    """Every key disallowed (bool mask row all False, float mask row all -inf, nonpad 0):
    Y's row and the mode-3 probabilities are 0, not NaN."""
    q, k, v = f32(2, 2, 3, 4), f32(2, 2, 4, 4), f32(2, 2, 4, 4)
    bool_mask = np.ones((3, 4), bool)
    bool_mask[1] = False
    float_mask = np.zeros((3, 4), np.float32)
    float_mask[2] = -np.inf
    for mask in (bool_mask, float_mask):
        y, probs = run_node("Attention", [q, k, v, mask], {"qk_matmul_output_mode": 3}, opset=23, n_outputs=4)[::3]
        row = 1 if mask.dtype == bool else 2
        assert np.isfinite(y).all() and not y[:, :, row].any() and not probs[:, :, row].any()
        np.testing.assert_allclose(np.delete(probs, row, axis=2).sum(-1), 1, rtol=1e-6)
    (y,) = run_node("Attention", [q, k, v, None, None, None, np.array([0, 4], np.int64)], {"is_causal": 1}, opset=24)
    assert not y[0].any() and np.isfinite(y).all()
    model, feeds = one_node_model("Attention", [q, k, v, None, None, None, np.array([0, 4], np.int64)],
                                  {"is_causal": 1}, 24)
    assert_close([y], spec_run(model, feeds))


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_attention_symbolic_mask_padded_and_too_long(allocator):
    """attn_mask (S, M) with its own symbol M <= T: guarded; a longer mask fails by name."""
    dims = [["B", 2, "S", 4], ["B", 2, "T", 4], ["B", 2, "T", 4], ["S", "M"]]
    ins = [f32(1, 2, 2, 4), f32(1, 2, 3, 4), f32(1, 2, 3, 4), rng.random((2, 3)) < 0.7]
    model, _ = one_node_model("Attention", ins, {}, 23, dims=dims, node_name="attn")
    runs = [feeds_of([f32(b, 2, s, 4), f32(b, 2, t, 4), f32(b, 2, t, 4), rng.random((s, m)) < 0.7])
            for b, s, t, m in ((1, 2, 3, 3), (2, 3, 5, 2), (1, 1, 4, 4))]
    sess = session_runs(model, runs, spec_run, allocator)
    with pytest.raises(ShapeInferenceError, match="attn_mask's last dim 6 exceeds the total sequence length 5") as info:
        sess.run(None, feeds_of([f32(1, 2, 2, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 4), np.ones((2, 6), bool)]))
    assert info.value.node == "attn" and info.value.kind == "InvalidShape"


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_attention_3d_cross_attention_symbolic(allocator):
    """3-D cross attention: q and kv sequences are different symbols, float mask (B, 1, S, T)."""
    attrs = {"q_num_heads": 3, "kv_num_heads": 1, "scale": 0.25}
    dims = [["B", "S", 12], ["B", "T", 4], ["B", "T", 5], ["B", 1, "S", "T"]]
    model, _ = one_node_model("Attention", [f32(1, 2, 12), f32(1, 3, 4), f32(1, 3, 5), f32(1, 1, 2, 3)],
                              attrs, 23, dims=dims)
    runs = [feeds_of([f32(b, s, 12), f32(b, t, 4), f32(b, t, 5), f32(b, 1, s, t)])
            for b, s, t in ((1, 2, 3), (2, 4, 1), (3, 1, 6))]
    sess = session_runs(model, runs, ort_run, allocator)
    assert sess.get_inferred_outputs()[0].shape == ["B", "S", 15]


def test_attention_dtypes():
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 6)
    node_check("Attention", [q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)], {"is_causal": 1}, 23,
               want=spec_run, tol=1e-12)
    half = [x.astype(np.float16) for x in (q, k, v)]
    node_check("Attention", half, {"softmax_precision": 1, "qk_matmul_output_mode": 3}, 23, n_outputs=4, tol=3e-3,
               want=ort_or_spec(ORT_ATTENTION_PRESENT_WITHOUT_PAST))
    node_check("Attention", half + [None, f32(2, 2, 3, 8, dtype=np.float16), f32(2, 2, 3, 6, dtype=np.float16)],
               {"is_causal": 1}, 23, n_outputs=3, tol=3e-3)
    bf = [x.astype(ml_dtypes.bfloat16) for x in (q, k, v)]
    (y,) = run_node("Attention", bf, {"is_causal": 1}, opset=23)
    want = run_node("Attention", [x.astype(np.float32) for x in bf], {"is_causal": 1}, opset=23)[0]
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-2, atol=2e-2)
    node_check("Attention", [q, k, v, rng.integers(-2, 2, (3, 5)).astype(np.int64)], {}, 23,  # integer additive mask
               want=ort_or_spec(ORT_ATTENTION_INT_MASK))
    shapes, dtypes = infer_node("Attention", [q, k, v.astype(np.float64)], {}, opset=23, n_outputs=4)
    assert dtypes == [np.float32, np.float32, np.float64, np.float32]


def attn_error(ins, attrs, opset, match, kind, n_outputs=1):
    with pytest.raises(ShapeInferenceError, match=match) as info:
        infer_node("Attention", ins, attrs, opset=opset, n_outputs=n_outputs)
    assert info.value.kind == kind, info.value.kind


def test_attention_errors():
    q, k, v = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 6)
    attn_error([f32(2, 3, 32), f32(2, 5, 16), f32(2, 5, 16)], {}, 23, "attribute 'q_num_heads' is required",
               "MissingAttribute")
    attn_error([f32(2, 3, 30), f32(2, 5, 16), f32(2, 5, 16)], {"q_num_heads": 4, "kv_num_heads": 2}, 23,
               r"Q's hidden size 30 must be divisible by q_num_heads \(4\)", "InvalidShape")
    attn_error([q, f32(2, 3, 5, 8), f32(2, 3, 5, 8)], {}, 23, "q_num_heads 4 must be a multiple of kv_num_heads 3",
               "InvalidShape")
    attn_error([q, f32(2, 2, 5, 4), v], {}, 23, r"head size of K and Q: 4 != 8", "DimMismatch")
    attn_error([q, k, f32(2, 2, 4, 6)], {}, 23, "sequence length of K and V: 5 != 4", "DimMismatch")
    attn_error([q, k, f32(2, 2, 5, 6, dtype=np.float64), None, None, f32(2, 2, 1, 6)], {}, 23,
               "past_key and past_value must be given together", "InvalidInputs")
    attn_error([q, k, v, None, f32(2, 2, 1, 8), f32(2, 2, 1, 6), np.array([5, 5], np.int64)], {}, 24,
               "nonpad_kv_seqlen cannot be used together with past_key", "InvalidInputs")
    attn_error([q, k, v, None, None, None, np.array([5, 5], np.int64)], {}, 23, "expected 3 to 6 inputs, got 7",
               "InputCount")
    attn_error([q, k, v], {"q_num_heads": 4, "kv_num_heads": 2}, 25,
               "q_num_heads and kv_num_heads must not be given for 4-D", "InvalidAttribute")
    attn_error([q, k, v, np.ones((3, 6), bool)], {}, 23, "attn_mask's last dim 6 exceeds the total sequence length 5",
               "InvalidShape")
    attn_error([q, k, v, np.ones((2, 3, 3, 5), bool)], {}, 23, "attn_mask of shape .* cannot be broadcast",
               "BroadcastMismatch")
    attn_error([q, k, v, np.ones((1, 1, 1, 3, 5), bool)], {}, 23, "attn_mask must have rank 1 to 4", "InvalidRank")
    attn_error([q, k, v], {"qk_matmul_output_mode": 4}, 23, "qk_matmul_output_mode 4 must be 0, 1, 2 or 3",
               "InvalidAttribute")
    attn_error([q, k, v], {"left_window_size": -2}, 25, "left_window_size -2 must be -1", "InvalidAttribute")
    attn_error([q, k, v], {"softmax_precision": 7}, 23, "softmax_precision 7 is not supported", "InvalidAttribute")
    attn_error([q.astype(np.int32), k, v], {}, 23, "Q has dtype int32, expected a floating-point", "InvalidDtype")
    attn_error([q, k, v, np.full((3, 5), "x", dtype=object)], {}, 23, "attn_mask has dtype object, expected bool",
               "InvalidDtype")
    attn_error([q, k, v, None, None, None, np.array([5, 5], np.int32)], {}, 24,
               "nonpad_kv_seqlen has dtype int32, expected int64", "InvalidDtype")
    attn_error([q, k, v], {}, 23, "expected at most 4 outputs, got 5", "OutputCount", n_outputs=5)


# RotaryEmbedding -----------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved,rotary_dim", [(0, 0), (1, 0), (0, 4), (1, 6)])
def test_rotary_embedding_symbolic_matches_ort(rank, interleaved, rotary_dim, allocator):
    h, d = 3, 8
    half = (rotary_dim or d) // 2
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}
    if rank == 3:
        attrs["num_heads"] = h
    x_dims = ["B", "S", h * d] if rank == 3 else ["B", h, "S", d]

    def x(b, s):
        return f32(b, s, h * d) if rank == 3 else f32(b, h, s, d)

    model, _ = one_node_model("RotaryEmbedding", [x(1, 2), f32(16, half), f32(16, half), np.zeros((1, 2), np.int64)],
                              attrs, 23, dims=[x_dims, ["P", half], ["P", half], ["B", "S"]])
    runs = [feeds_of([x(b, s), f32(p, half), f32(p, half), rng.integers(0, p, (b, s)).astype(np.int64)])
            for b, s, p in ((1, 2, 16), (3, 5, 8), (2, 1, 4))]
    want = ort_or_spec(ORT_ROPE_4D_ROTARY_DIM)
    sess = session_runs(model, runs, want, allocator)
    assert sess.get_inferred_outputs()[0].shape == x_dims
    node_check("RotaryEmbedding", [x(2, 4), f32(2, 4, half), f32(2, 4, half)], attrs, 23, want=want)  # no position_ids


def test_rotary_embedding_half_precision():
    x, c, s = f32(2, 3, 4, 8, dtype=np.float16), f32(2, 4, 4, dtype=np.float16), f32(2, 4, 4, dtype=np.float16)
    node_check("RotaryEmbedding", [x, c, s], {"interleaved": 1}, 23, tol=2e-3)


def rope_error(ins, attrs, match, kind):
    with pytest.raises(ShapeInferenceError, match=match) as info:
        infer_node("RotaryEmbedding", ins, attrs, opset=23)
    assert info.value.kind == kind, info.value.kind


def test_rotary_embedding_errors():
    x, pos = f32(2, 3, 4, 8), np.zeros((2, 4), np.int64)
    rope_error([f32(2, 4, 24), f32(8, 4), f32(8, 4), pos], {}, "attribute 'num_heads' is required", "MissingAttribute")
    rope_error([x, f32(8, 4), f32(8, 4), pos], {"rotary_embedding_dim": 5}, "rotary dim 5 must be even", "InvalidShape")
    rope_error([x, f32(8, 5), f32(8, 5), pos], {"rotary_embedding_dim": 10},
               "rotary_embedding_dim 10 exceeds the head size 8", "InvalidShape")
    rope_error([x, f32(8, 3), f32(8, 3), pos], {}, "last dim of cos_cache and rotary_dim / 2: 3 != 4", "DimMismatch")
    rope_error([x, f32(2, 4, 4), f32(2, 4, 4), pos], {}, "cos_cache must have rank 2", "InvalidRank")
    rope_error([x, f32(8, 4), f32(8, 4)], {}, "cos_cache must have rank 3", "InvalidRank")
    rope_error([x, f32(8, 4), f32(8, 4), np.zeros((2, 5), np.int64)], {},
               "sequence length of position_ids and X: 5 != 4", "DimMismatch")
    with pytest.raises(ShapeInferenceError, match="position id 8 is out of range for caches of 8 positions") as info:
        run_node("RotaryEmbedding", [x, f32(8, 4), f32(8, 4), np.full((2, 4), 8, np.int64)], opset=23)
    assert info.value.kind == "PositionOutOfRange"


# TensorScatter -------------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, -1])
def test_tensor_scatter_symbolic_matches_ort(mode, axis, allocator):
    def shape(b, m):
        return {-2: (b, 3, m, 4), 1: (b, m, 3, 4), -1: (b, 3, 4, m)}[axis]

    def run(b, m, s):
        start = rng.integers(0, m - s + 1, b) if mode == "linear" else rng.integers(0, 2 * m, b)
        return feeds_of([f32(*shape(b, m)), f32(*shape(b, s)), start.astype(np.int64)])

    model, _ = one_node_model("TensorScatter", list(run(2, 6, 2).values()), {"mode": mode, "axis": axis}, 24,
                              dims=[list(shape("B", "M")), list(shape("B", "S")), ["B"]])
    runs = [run(2, 6, 2), run(1, 4, 1), run(3, 5, 5), run(2, 3, 0)]
    sess = session_runs(model, runs, ort_or_spec(ORT_TENSOR_SCATTER), allocator)
    assert sess.get_inferred_outputs()[0].shape == list(shape("B", "M"))


def test_tensor_scatter_defaults_and_dtypes():
    past, upd = f32(2, 3, 5, 4), f32(2, 3, 2, 4)
    want = ort_or_spec(ORT_TENSOR_SCATTER)
    node_check("TensorScatter", [past, upd], {}, 24, want=want)  # write_indices absent: 0
    node_check("TensorScatter", [past.astype(np.int64), upd.astype(np.int64), np.array([3, 0], np.int64)], {}, 24,
               want=want)
    strings = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    (out,) = run_node("TensorScatter", [strings, np.array([["x"], ["y"]], dtype=object), np.array([2, 0], np.int64)],
                      {"axis": 1}, opset=24)
    assert out.tolist() == [["a", "b", "x"], ["y", "e", "f"]]


def test_tensor_scatter_errors():
    past, upd = f32(2, 3, 5, 4), f32(2, 3, 2, 4)
    for attrs, ins, match, kind in (
            ({"axis": 0}, [past, upd], "axis must not be 0", "InvalidAttribute"),
            ({"axis": 4}, [past, upd], "axis 4 is out of range", "AxisOutOfRange"),
            ({"mode": "ring"}, [past, upd], "mode 'ring' must be 'linear' or 'circular'", "InvalidAttribute"),
            ({}, [past, f32(2, 3, 6, 4)], "update's sequence length 6 .* exceeds past_cache's 5", "InvalidShape"),
            ({}, [past, f32(2, 2, 2, 4)], "dim 1 of update and past_cache: 2 != 3", "DimMismatch"),
            ({}, [past, upd, np.array([0, 0, 0], np.int64)], "length of write_indices and the batch size: 3 != 2",
             "DimMismatch")):
        with pytest.raises(ShapeInferenceError, match=match) as info:
            infer_node("TensorScatter", ins, attrs, opset=24)
        assert info.value.kind == kind
    with pytest.raises(ShapeInferenceError,
                       match="write index 4 with 2 new positions does not fit max_sequence_length 5") as info:
        run_node("TensorScatter", [past, upd, np.array([0, 4], np.int64)], opset=24)
    assert info.value.kind == "WriteIndexOutOfRange"


# SwiGLU ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_swiglu_symbolic_matches_reference(allocator):
    """onnxruntime has no SwiGLU-28 kernel: compare with onnx.reference."""
    model, _ = one_node_model("SwiGLU", [f32(2, 3), f32(2, 3)], {"alpha": 1.702}, 28, dims=[["N", "C"], ["N", "C"]])
    runs = [feeds_of([f32(n, c) * 4, f32(n, c)]) for n, c in ((2, 3), (5, 1), (0, 4))]
    sess = session_runs(model, runs, spec_run, allocator)
    assert sess.get_inferred_outputs()[0].shape == ["N", "C"]
    node_check("SwiGLU", [f32(3, 4, dtype=np.float16), f32(3, 4, dtype=np.float16)], {}, 28, want=spec_run,
               tol=2e-3)
    (y,) = run_node("SwiGLU", [np.array([-1000.0, 0.0, 1000.0], np.float32), np.ones(3, np.float32)], opset=28)
    np.testing.assert_array_equal(y, [0.0, 0.0, 1000.0])  # no overflow in the sigmoid


def test_swiglu_errors():
    with pytest.raises(ShapeInferenceError, match=r"dim 1 of A and B \(no broadcasting\): 3 != 1") as info:
        infer_node("SwiGLU", [f32(2, 3), f32(2, 1)], opset=28)
    assert info.value.kind == "DimMismatch"
    with pytest.raises(ShapeInferenceError, match="B has dtype float64, expected the dtype of A"):
        infer_node("SwiGLU", [f32(2, 3), f32(2, 3, dtype=np.float64)], opset=28)
    with pytest.raises(ShapeInferenceError, match="A and B must have one shape"):
        infer_node("SwiGLU", [f32(2, 3), f32(3)], opset=28)


# LinearAttention -------------------------------------------------------------------------------

def lin_inputs(b, t, rule, per_head, past, hq=4, hkv=2, dk=3, dv=5, dtype=np.float32):
    decay = -np.abs(f32(b, t, hkv if per_head else hkv * dk)) * 0.3 if "gated" in rule else None
    beta = rng.random((b, t, hkv if per_head else 1)).astype(np.float32) if "delta" in rule else None
    ins = [f32(b, t, hq * dk), f32(b, t, hkv * dk) * 0.5, f32(b, t, hkv * dv), f32(b, hkv, dk, dv) if past else None,
           decay, beta]
    return [None if x is None else x.astype(dtype) for x in ins]


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("chunk", [64, 3])
def test_linear_attention_matches_ort(rule, per_head, chunk):
    """Chunk-parallel ('linear', 'gated') and step ('delta' rules) forms against ORT; a chunk
    smaller than T carries the state across chunks."""
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": rule, "chunk_size": chunk}
    ins = lin_inputs(2, 7, rule, per_head, past=chunk == 3)
    while ins[-1] is None:
        ins.pop()
    node_check("LinearAttention", ins, attrs, 27, n_outputs=2, tol=1e-4, want=ort_or_spec(ORT_OPSET_25_27))


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_linear_attention_symbolic_decode_and_prefill(allocator):
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": "gated_delta", "chunk_size": 4}
    dims = [["B", "T", 12], ["B", "T", 6], ["B", "T", 10], ["B", 2, 3, 5], ["B", "T", 6], ["B", "T", 1]]
    model, _ = one_node_model("LinearAttention", lin_inputs(1, 2, "gated_delta", False, True), attrs, 27,
                              n_outputs=2, dims=dims)
    runs = [feeds_of(lin_inputs(b, t, "gated_delta", False, True)) for b, t in ((1, 2), (2, 1), (3, 9))]
    sess = session_runs(model, runs, ort_or_spec(ORT_OPSET_25_27), allocator, tol=1e-4)
    assert [o.shape for o in sess.get_inferred_outputs()] == [["B", "T", 20], ["B", 2, 3, 5]]
    empty = feeds_of(lin_inputs(2, 0, "gated_delta", False, True))   # T = 0 (onnxruntime fails there)
    out, state = sess.run(None, empty)
    assert out.shape == (2, 0, 20)
    np.testing.assert_array_equal(state, empty["in3"])


def test_linear_attention_state_dtype():
    """present_state has past_state's dtype (float32 state with float16 activations)."""
    ins = lin_inputs(2, 5, "gated", True, False, dtype=np.float16)
    ins[3] = f32(2, 2, 3, 5)
    ins = ins[:5]
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": "gated"}
    out, state = node_check("LinearAttention", ins, attrs, 27, n_outputs=2, want=spec_run, tol=3e-3)
    assert out.dtype == np.float16 and state.dtype == np.float32
    _, dtypes = infer_node("LinearAttention", ins[:3], {**attrs, "update_rule": "linear"}, opset=27, n_outputs=2)
    assert dtypes == [np.float16, np.float16]


def test_linear_attention_errors():
    q, k, v = f32(2, 5, 12), f32(2, 5, 6), f32(2, 5, 10)
    base = {"q_num_heads": 4, "kv_num_heads": 2}
    for ins, attrs, match, kind in (
            ([q, k, v], {**base, "update_rule": "gated"}, "update_rule 'gated' requires the decay input",
             "InvalidInputs"),
            ([q, k, v, None, None, f32(2, 5, 2)], {**base, "update_rule": "linear"},
             "update_rule 'linear' forbids the beta input", "InvalidInputs"),
            ([q, k, v], {**base, "update_rule": "fast"}, "update_rule 'fast' must be one of", "InvalidAttribute"),
            ([q, k, v], {"q_num_heads": 4, "kv_num_heads": 3, "update_rule": "linear"},
             "q_num_heads 4 must be a multiple of kv_num_heads 3", "InvalidAttribute"),
            ([q, k, v], {"kv_num_heads": 2, "update_rule": "linear"}, "attribute 'q_num_heads' is required",
             "MissingAttribute"),
            ([q, f32(2, 5, 8), v], {**base, "update_rule": "linear"},
             "key's hidden size and kv_num_heads \\* d_k: 8 != 6", "DimMismatch"),
            ([q, k, v, None, f32(2, 5, 4)], {**base, "update_rule": "gated"},
             "decay's last dim 4 must be kv_num_heads or kv_num_heads \\* d_k", "InvalidShape"),
            ([q, k, v, f32(2, 2, 3, 4)], {**base, "update_rule": "linear"},
             r"dim 3 of past_state \(B, H_kv, d_k, d_v\): 4 != 5", "DimMismatch"),
            ([q, k, v.reshape(2, 5, 2, 5)], {**base, "update_rule": "linear"}, "value must have rank 3",
             "InvalidRank")):
        with pytest.raises(ShapeInferenceError, match=match) as info:
            infer_node("LinearAttention", ins, attrs, opset=27, n_outputs=2)
        assert info.value.kind == kind, (match, info.value.kind)


# CausalConvWithState ---------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_symbolic_matches_ort(k, activation, allocator):
    """Decode (L = 1), prefill and L < k - 1 on one session; present_state is (B, C, k - 1)."""
    dims = [["B", 3, "L"], None, None, ["B", 3, k - 1]]
    ins = [f32(2, 3, 5), f32(3, 1, k), f32(3), f32(2, 3, k - 1)]
    model, _ = one_node_model("CausalConvWithState", ins, {"activation": activation}, 27, n_outputs=2, dims=dims)
    runs = [{"in0": f32(b, 3, length), "in1": ins[1], "in2": ins[2], "in3": f32(b, 3, k - 1)}
            for b, length in ((2, 5), (1, 1), (3, 2))]
    sess = session_runs(model, runs, ort_or_spec(ORT_OPSET_25_27), allocator)
    assert [o.shape for o in sess.get_inferred_outputs()] == [["B", 3, "L"], ["B", 3, k - 1]]
    empty = {**runs[0], "in0": f32(2, 3, 0)}             # L = 0 (onnxruntime fails there)
    out, state = sess.run(None, empty)
    assert out.shape == (2, 3, 0)
    np.testing.assert_array_equal(state, empty["in3"])


def test_causal_conv_defaults_and_half():
    want = ort_or_spec(ORT_OPSET_25_27)
    node_check("CausalConvWithState", [f32(2, 3, 2), f32(3, 1, 5)], {}, 27, n_outputs=2, want=want)  # L < k - 1
    h = np.float16
    node_check("CausalConvWithState", [f32(2, 3, 7, dtype=h), f32(3, 1, 3, dtype=h), f32(3, dtype=h)],
               {"activation": "swish"}, 27, n_outputs=2, tol=2e-3, want=want)


def test_causal_conv_errors():
    x, w = f32(2, 3, 5), f32(3, 1, 4)
    for ins, attrs, match, kind in (
            ([x, f32(3, 2, 4)], {}, r"weight must have shape \(channels, 1, k\)", "InvalidShape"),
            ([x, f32(4, 1, 4)], {}, "weight's channels and input's channels: 4 != 3", "DimMismatch"),
            ([x, w, None, f32(2, 3, 2)], {}, r"dim 2 of past_state \(B, C, k - 1\): 2 != 3", "DimMismatch"),
            ([x, w, f32(4)], {}, "bias length and channels: 4 != 3", "DimMismatch"),
            ([x, w], {"activation": "gelu"}, "activation 'gelu' must be one of none, silu, swish", "InvalidAttribute"),
            ([f32(2, 3), w], {}, "input must have rank 3", "InvalidRank")):
        with pytest.raises(ShapeInferenceError, match=match) as info:
            infer_node("CausalConvWithState", ins, attrs, opset=27, n_outputs=2)
        assert info.value.kind == kind


# FlexAttention (ai.onnx.preview) ----------------------------------------------------------------

VI = helper.make_tensor_value_info


def flex_model(dims, attrs=None, score=None, prob=None, dtype=TensorProto.FLOAT, extra_inputs=()):
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", name="flex",
                            **(attrs or {}))
    for name, g in (("score_mod", score), ("prob_mod", prob)):
        if g is not None:
            node.attribute.append(helper.make_attribute(name, g))
    graph = helper.make_graph([node], "g", [VI(n, dtype, d) for n, d in zip("QKV", dims)] + list(extra_inputs),
                              [VI("Y", dtype, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                   helper.make_opsetid("ai.onnx.preview", 1)])


def causal_score_mod(dtype=TensorProto.FLOAT):
    nodes = [helper.make_node("Shape", ["s"], ["sh"]),
             helper.make_node("Gather", ["sh", "i2"], ["L"], axis=0),
             helper.make_node("Gather", ["sh", "i3"], ["S"], axis=0),
             helper.make_node("Range", ["zero", "L", "one"], ["qr"]),
             helper.make_node("Range", ["zero", "S", "one"], ["kr"]),
             helper.make_node("Unsqueeze", ["qr", "ax1"], ["qi"]),
             helper.make_node("GreaterOrEqual", ["qi", "kr"], ["m"]),
             helper.make_node("Where", ["m", "s", "ninf"], ["o"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("i2", TensorProto.INT64, [], [2]), helper.make_tensor("i3", TensorProto.INT64, [], [3]),
             helper.make_tensor("ax1", TensorProto.INT64, [1], [1]),
             helper.make_tensor("ninf", dtype, [], [float("-inf")])]
    return helper.make_graph(nodes, "causal", [VI("s", dtype, ["B", "H", "L", "S"])],
                             [VI("o", dtype, ["B", "H", "L", "S"])], inits)


def scale_prob_mod(c):
    return helper.make_graph([helper.make_node("Mul", ["p", "c"], ["o"])], "pm",
                             [VI("p", TensorProto.FLOAT, ["B", "H", "L", "S"])],
                             [VI("o", TensorProto.FLOAT, ["B", "H", "L", "S"])],
                             [helper.make_tensor("c", TensorProto.FLOAT, [], [c])])


@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("mods", ["none", "score", "prob", "both"])
def test_flex_attention_symbolic_matches_reference(mods, allocator):
    """GQA (Hq 4, Hkv 2) with subgraph modifiers, batch/lengths changing on one session."""
    score = causal_score_mod() if mods in ("score", "both") else None
    prob = scale_prob_mod(0.5) if mods in ("prob", "both") else None
    model = flex_model([["B", 4, "L", 8], ["B", 2, "S", 8], ["B", 2, "S", 6]], {"scale": 0.3}, score, prob)
    runs = [{"Q": f32(b, 4, lq, 8), "K": f32(b, 2, s, 8), "V": f32(b, 2, s, 6)} for b, lq, s in ((2, 3, 5), (1, 4, 4),
                                                                                              (3, 1, 7))]
    sess = session_runs(model, runs, spec_run, allocator)
    assert sess.get_inferred_outputs()[0].shape == ["B", 4, "L", 6]


def test_flex_attention_outer_scope_and_precision():
    """A score_mod reading an outer graph input; double softmax precision on float32 inputs."""
    sub = helper.make_graph([helper.make_node("Add", ["s", "bias"], ["o"])], "sm",
                            [VI("s", TensorProto.FLOAT, ["B", "H", "L", "S"])],
                            [VI("o", TensorProto.FLOAT, ["B", "H", "L", "S"])])
    model = flex_model([["B", 2, "L", 4], ["B", 2, "S", 4], ["B", 2, "S", 4]], score=sub,
                       extra_inputs=[VI("bias", TensorProto.FLOAT, ["L", "S"])])
    sess = dynashape.InferenceSession(model, validate_memory=True)
    for b, lq, s in ((1, 2, 3), (2, 3, 3)):
        feeds = {"Q": f32(b, 2, lq, 4), "K": f32(b, 2, s, 4), "V": f32(b, 2, s, 4), "bias": f32(lq, s)}
        scores = feeds["Q"] @ feeds["K"].swapaxes(-1, -2) / 2 + feeds["bias"]
        p = np.exp(scores - scores.max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ feeds["V"]
        np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-5, atol=1e-6)
    model = flex_model([[2, 4, 3, 8], [2, 4, 5, 8], [2, 4, 5, 8]], {"softmax_precision": 11},
                       score=causal_score_mod(TensorProto.DOUBLE))
    feeds = {"Q": f32(2, 4, 3, 8), "K": f32(2, 4, 5, 8), "V": f32(2, 4, 5, 8)}
    assert_close(dynashape.InferenceSession(model).run(None, feeds), spec_run(model, feeds))
    model = flex_model([[2, 4, 3, 8]] * 3, dtype=TensorProto.FLOAT16)
    feeds = {n: f32(2, 4, 3, 8, dtype=np.float16) for n in "QKV"}
    assert_close(dynashape.InferenceSession(model).run(None, feeds), spec_run(model, feeds), tol=2e-3)


def test_flex_attention_errors():
    def flex_infer(q, k, v):
        return infer_node("FlexAttention", [f32(*q), f32(*k), f32(*v)], opset=1, domain="ai.onnx.preview")

    with pytest.raises(ShapeInferenceError, match="Q must have rank 4, got rank 3") as info:
        flex_infer((2, 3, 8), (2, 2, 5, 8), (2, 2, 5, 8))
    assert info.value.kind == "InvalidRank"
    with pytest.raises(ShapeInferenceError, match="Q's heads 3 must be a multiple of K's heads 2"):
        flex_infer((2, 3, 4, 8), (2, 2, 5, 8), (2, 2, 5, 8))
    with pytest.raises(ShapeInferenceError, match="head size of K and Q: 4 != 8"):
        flex_infer((2, 2, 4, 8), (2, 2, 5, 4), (2, 2, 5, 8))
    feeds = {"Q": f32(1, 2, 4, 8), "K": f32(1, 2, 5, 8), "V": f32(1, 2, 5, 8)}
    two_in = helper.make_graph([helper.make_node("Add", ["a", "b"], ["o"])], "bad",
                               [VI("a", TensorProto.FLOAT, None), VI("b", TensorProto.FLOAT, None)],
                               [VI("o", TensorProto.FLOAT, None)])
    with pytest.raises(ShapeInferenceError, match="score_mod must have exactly 1 input and 1 output, got 2 and 1"):
        dynashape.InferenceSession(flex_model([[1, 2, 4, 8], [1, 2, 5, 8], [1, 2, 5, 8]], score=two_in))   # at load
    shrink = helper.make_graph([helper.make_node("ReduceMax", ["s"], ["o"], keepdims=1)], "shrink",
                               [VI("s", TensorProto.FLOAT, None)], [VI("o", TensorProto.FLOAT, None)])
    sess = dynashape.InferenceSession(flex_model([[1, 2, 4, 8], [1, 2, 5, 8], [1, 2, 5, 8]], score=shrink))
    with pytest.raises(ExecutionError, match=r"FlexAttention node 'flex': score_mod returned shape \[1, 1, 1, 1\], "
                                             r"expected its input's shape \[1, 2, 4, 5\]"):
        sess.run(None, feeds)
