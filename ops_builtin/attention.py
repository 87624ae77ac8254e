"""LLM operators: Attention, RotaryEmbedding, TensorScatter, SwiGLU, LinearAttention,
CausalConvWithState and FlexAttention (domain ``ai.onnx.preview``).

Attention (23/24/25) and FlexAttention run as a few batched matmuls over (batch, heads):
grouped-query attention folds each KV head's group of query heads into the query-sequence
axis, so Q is viewed as ``(B, H_kv, G * S_q, D)`` against ``(B, H_kv, D, T)`` without
repeating K or V. The attention bias (boolean or additive mask, bottom-right causal
frontier, ``nonpad_kv_seqlen`` padding, sliding window) is built once per call, small
(``(S_q, T)``, or per batch), and added to the scores; the softmax subtracts the row maximum
and rows whose bias allows no key are zero (not NaN), as the spec's fully-masked-row guard
says. The scores live in a scratch buffer planned in the arena.

LinearAttention runs the ``linear`` and ``gated`` recurrences chunk-parallel (``chunk_size``
tokens per chunk: intra-chunk causal attention with exact decay differences, inter-chunk
state carried); the ``delta`` rules loop over tokens, each step whole-(batch, head) matrix
ops. CausalConvWithState loops over its kernel taps only.

float16/bfloat16 are computed in float32 and cast back; float64 stays float64.
Source: ONNX operator spec (Operators.md, onnx 1.23 schemas), sections named in each docstring.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from dynashape.dtypes import as_dtype, compute_dtype, is_float, np_dtype
from dynashape.errors import ExecutionError, ShapeInferenceError
from dynashape.model import Graph
from dynashape.records import InferContext, OpLibrary, same_dtype
from dynashape.shapes import check_dims_equal, check_unidirectional, normalize_axis, require

lib = OpLibrary()

PREVIEW = "ai.onnx.preview"
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


# ----------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------


def _store(out: np.ndarray, value: np.ndarray) -> None:
    if value is not out:
        np.copyto(out, value, casting="unsafe")


def _scratch(outputs: list, k: int, size: int, dtype: np.dtype) -> np.ndarray:
    """The first ``size`` elements of scratch buffer ``k`` (after the outputs), or a new
    array when the engine planned none."""
    buf = outputs[k] if k < len(outputs) else None
    if buf is None or buf.size < size or buf.dtype != dtype:
        return np.empty(size, dtype)
    return buf[:size]


def _out(outputs: list, n: int, i: int):
    """Output ``i`` of a node with ``n`` outputs, or None when the node omits it."""
    return outputs[i] if i < n else None


def _check_float(ctx: InferContext, i: int, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and not is_float(dt):
        ctx.fail(f"{what} has dtype {dt}, expected a floating-point tensor", kind="InvalidDtype")


def _check_same_dtype(ctx: InferContext, i: int, j: int, what_i: str, what_j: str) -> None:
    a, b = ctx.dtype(i), ctx.dtype(j)
    if a is not None and b is not None and a != b:
        ctx.fail(f"{what_i} has dtype {a}, expected the dtype of {what_j} ({b})",
                 kind="DtypeMismatch")


def _check_inputs(ctx: InferContext, least: int, most: int) -> None:
    if ctx.num_inputs < least or ctx.num_inputs > most:
        ctx.fail(f"expected {least} to {most} inputs, got {ctx.num_inputs}", kind="InputCount")


def _check_outputs(ctx: InferContext, most: int) -> None:
    if ctx.num_outputs > most:
        ctx.fail(f"expected at most {most} outputs, got {ctx.num_outputs}", kind="OutputCount")


def _check_rank(ctx: InferContext, i: int, ranks: tuple, what: str):
    shape = ctx.shape(i)
    if shape is not None and len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        ctx.fail(f"{what} must have rank {want}, got rank {len(shape)} {tuple(shape)}", kind="InvalidRank")
    return shape


def _divisible(ctx: InferContext, dim, n: int, what: str, by: str) -> None:
    """``dim`` must be a multiple of ``n`` (assumed for a symbolic dim, checked per signature)."""
    require(ctx, dim % n, "==", 0, f"{what} {dim} must be divisible by {by} ({n})", "InvalidShape")


def _positive_attr(ctx: InferContext, name: str, required: bool = True):
    value = ctx.attr(name)
    if value is None:
        if required:
            ctx.fail(f"attribute '{name}' is required", kind="MissingAttribute")
        return None
    value = int(value)
    if value <= 0:
        ctx.fail(f"attribute '{name}' = {value} must be positive", kind="InvalidAttribute")
    return value


def _softmax_rows(s: np.ndarray) -> None:
    """In-place numerically stable softmax over the last axis; a row that is all -inf
    gives zeros (not NaN)."""
    m = s.max(axis=-1, keepdims=True)
    np.copyto(m, 0, where=np.isneginf(m))
    np.subtract(s, m, out=s)
    np.exp(s, out=s)
    total = s.sum(axis=-1, keepdims=True)
    np.copyto(total, 1, where=total == 0)
    np.divide(s, total, out=s)


_SOFTMAX_PRECISIONS = {1: np.dtype(np.float32), 10: np.dtype(np.float16), 11: _F64,
                       16: np_dtype(16)}


def _softmax_precision(ctx: InferContext):
    """The dtype named by the ``softmax_precision`` attribute, or None when absent."""
    sp = ctx.attr("softmax_precision")
    if sp is None:
        return None
    if int(sp) not in _SOFTMAX_PRECISIONS:
        ctx.fail(f"softmax_precision {sp} is not supported, expected 1 (FLOAT), 10 (FLOAT16), "
                 "11 (DOUBLE) or 16 (BFLOAT16)", kind="InvalidAttribute")
    return _SOFTMAX_PRECISIONS[int(sp)]


def _fold_heads(x: np.ndarray, kv_heads: int) -> np.ndarray:
    """(B, Hq, S, D) -> (B, H_kv, G * S, D): query head ``h`` uses KV head ``h // G``."""
    b, hq, s, d = x.shape
    return x.reshape(b, kv_heads, (hq // kv_heads) * s, d)


# ----------------------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------------------

class _AttnDims(NamedTuple):
    rank: int
    batch: object
    q_heads: object
    kv_heads: object
    q_seq: object
    kv_seq: object
    past: object          # past sequence length (0 without past_key)
    head: object          # Q/K head size
    v_head: object        # V head size

    @property
    def total(self):
        return self.past + self.kv_seq


def _attention_dims(ctx: InferContext) -> _AttnDims | None:
    """Validate Attention's inputs and attributes; its dims (None while a rank is unknown)."""
    max_inputs = 7 if ctx.opset >= 24 else 6
    _check_inputs(ctx, 3, max_inputs)
    _check_outputs(ctx, 4)
    for i, what in ((0, "Q"), (1, "K"), (2, "V")):
        _check_float(ctx, i, what)
    _check_same_dtype(ctx, 1, 0, "K", "Q")
    if ctx.has_input(4) != ctx.has_input(5):
        ctx.fail("past_key and past_value must be given together", kind="InvalidInputs")
    if ctx.has_input(4):
        _check_same_dtype(ctx, 4, 1, "past_key", "K")
        _check_same_dtype(ctx, 5, 2, "past_value", "V")
    if ctx.has_input(6):
        if ctx.has_input(4):
            ctx.fail("nonpad_kv_seqlen cannot be used together with past_key/past_value",
                     kind="InvalidInputs")
        if ctx.dtype(6) is not None and ctx.dtype(6) != np.dtype(np.int64):
            ctx.fail(f"nonpad_kv_seqlen has dtype {ctx.dtype(6)}, expected int64", kind="InvalidDtype")
    mask_dt = ctx.dtype(3) if ctx.has_input(3) else None
    if mask_dt is not None and not (mask_dt == np.bool_ or mask_dt.kind in "iu" or is_float(mask_dt)):
        ctx.fail(f"attn_mask has dtype {mask_dt}, expected bool, an integer or a floating-point type",
                 kind="InvalidDtype")
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        ctx.fail(f"qk_matmul_output_mode {mode} must be 0, 1, 2 or 3", kind="InvalidAttribute")
    if int(ctx.attr("is_causal", 0)) not in (0, 1):
        ctx.fail("is_causal must be 0 or 1", kind="InvalidAttribute")
    _softmax_precision(ctx)
    if ctx.opset >= 25:
        for name in ("left_window_size", "right_window_size"):
            if int(ctx.attr(name, -1)) < -1:
                ctx.fail(f"{name} {ctx.attr(name)} must be -1 (unbounded) or >= 0", kind="InvalidAttribute")

    q, k, v = (_check_rank(ctx, i, (3, 4), what) for i, what in ((0, "Q"), (1, "K"), (2, "V")))
    if q is None or k is None or v is None:
        return None
    rank = len(q)
    if len(k) != rank or len(v) != rank:
        ctx.fail(f"Q, K and V must have one rank (3 or 4), got ranks {len(q)}, {len(k)}, {len(v)}",
                 kind="InvalidRank")
    batch = check_dims_equal(ctx, q[0], k[0], "batch size of Q and K")
    batch = check_dims_equal(ctx, batch, v[0], "batch size of Q and V")
    qh_attr, kvh_attr = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if rank == 3:
        qh = _positive_attr(ctx, "q_num_heads")
        kvh = _positive_attr(ctx, "kv_num_heads")
        q_seq = q[1]
        kv_seq = check_dims_equal(ctx, k[1], v[1], "sequence length of K and V")
        _divisible(ctx, q[2], qh, "Q's hidden size", "q_num_heads")
        _divisible(ctx, k[2], kvh, "K's hidden size", "kv_num_heads")
        _divisible(ctx, v[2], kvh, "V's hidden size", "kv_num_heads")
        head = check_dims_equal(ctx, k[2] // kvh, q[2] // qh, "head size of K (hidden / kv_num_heads) and Q "
                                "(hidden / q_num_heads)")
        v_head = v[2] // kvh
    else:
        if ctx.opset >= 25 and (qh_attr is not None or kvh_attr is not None):
            ctx.fail("q_num_heads and kv_num_heads must not be given for 4-D Q, K and V",
                     kind="InvalidAttribute")
        qh, kvh, q_seq = q[1], k[1], q[2]
        if qh_attr is not None:
            require(ctx, qh, "==", int(qh_attr), f"q_num_heads {qh_attr} does not match Q's heads {qh}",
                    "InvalidAttribute")
        if kvh_attr is not None:
            require(ctx, kvh, "==", int(kvh_attr), f"kv_num_heads {kvh_attr} does not match K's heads {kvh}",
                    "InvalidAttribute")
        kvh = check_dims_equal(ctx, kvh, v[1], "heads of K and V")
        kv_seq = check_dims_equal(ctx, k[2], v[2], "sequence length of K and V")
        head = check_dims_equal(ctx, k[3], q[3], "head size of K and Q")
        v_head = v[3]
    require(ctx, qh % kvh, "==", 0, f"q_num_heads {qh} must be a multiple of kv_num_heads {kvh}", "InvalidShape")
    past = 0
    if ctx.has_input(4):
        pk, pv = (_check_rank(ctx, i, (4,), what) for i, what in ((4, "past_key"), (5, "past_value")))
        if pk is not None and pv is not None:
            check_dims_equal(ctx, pk[0], batch, "batch size of past_key and Q")
            check_dims_equal(ctx, pk[1], kvh, "heads of past_key and K")
            check_dims_equal(ctx, pk[3], head, "head size of past_key and K")
            check_dims_equal(ctx, pv[0], batch, "batch size of past_value and Q")
            check_dims_equal(ctx, pv[1], kvh, "heads of past_value and V")
            check_dims_equal(ctx, pv[3], v_head, "head size of past_value and V")
            past = check_dims_equal(ctx, pk[2], pv[2], "sequence length of past_key and past_value")
    dims = _AttnDims(rank, batch, qh, kvh, q_seq, kv_seq, past, head, v_head)
    if ctx.has_input(3) and ctx.shape(3) is not None:
        _check_mask(ctx, ctx.shape(3), dims)
    if ctx.has_input(6) and ctx.shape(6) is not None:
        s = ctx.shape(6)
        if len(s) != 1:
            ctx.fail(f"nonpad_kv_seqlen must have shape (batch_size,), got {tuple(s)}", kind="InvalidShape")
        check_dims_equal(ctx, s[0], batch, "length of nonpad_kv_seqlen and the batch size")
    return dims


def _check_mask(ctx: InferContext, m: tuple, d: _AttnDims) -> None:
    """attn_mask: broadcastable to (B, Hq, S_q, T); its last dim may be shorter than T (the
    rest is padded with -inf / False)."""
    if len(m) < 1 or len(m) > 4:
        ctx.fail(f"attn_mask must have rank 1 to 4, got rank {len(m)}", kind="InvalidRank")
    total = d.total
    last = m[-1]
    require(ctx, total, ">=", last, f"attn_mask's last dim {last} exceeds the total sequence length {total} "
            "(past + kv sequence length)", "InvalidShape")
    check_unidirectional(ctx, tuple(m[:-1]), (d.batch, d.q_heads, d.q_seq), "attn_mask")


def _attention_shape(ctx: InferContext):
    """Attention: Y, present_key, present_value, qk_matmul_output (each after Y optional).

    Q (B, Hq, S_q, D) / K (B, H_kv, S_kv, D) / V (B, H_kv, S_kv, D_v), or 3-D (B, S, H*D)
    with q_num_heads/kv_num_heads; past_key/past_value (B, H_kv, P, D / D_v); attn_mask
    broadcastable to (B, Hq, S_q, P + S_kv) (last dim may be shorter); nonpad_kv_seqlen (B,)
    (opset 24+, not with a past cache). Y (B, Hq, S_q, D_v) or (B, S_q, Hq*D_v); present_*
    (B, H_kv, P + S_kv, D / D_v); qk_matmul_output (B, Hq, S_q, P + S_kv).
    Raises ShapeInferenceError for mismatched ranks/dims/heads (Hq must be a multiple of
    H_kv), missing head attributes for 3-D inputs, invalid attributes.
    Source: ONNX operator spec, Attention-23/24/25.
    """
    d = _attention_dims(ctx)
    if d is None:
        return [None] * max(1, ctx.num_outputs)
    total = d.total
    if d.rank == 3:
        y = (d.batch, d.q_seq, d.q_heads * d.v_head)
    else:
        y = (d.batch, d.q_heads, d.q_seq, d.v_head)
    shapes = [y, (d.batch, d.kv_heads, total, d.head), (d.batch, d.kv_heads, total, d.v_head),
              (d.batch, d.q_heads, d.q_seq, total)]
    return shapes[:max(1, ctx.num_outputs)]


def _attention_dtype(ctx: InferContext):
    return [ctx.dtype(0), ctx.dtype(1), ctx.dtype(2), ctx.dtype(0)][:max(1, ctx.num_outputs)]


lib.op("Attention", since_version=(23, 24, 25), infer_dtype=_attention_dtype)(_attention_shape)


@dataclass(frozen=True)
class _AttnPlan:
    n_out: int
    rank3: bool
    q_heads: int | None     # attribute (3-D inputs)
    kv_heads: int | None
    scale: float | None
    causal: bool
    softcap: float
    mode: int
    left: int
    right: int
    cdtype: np.dtype


def _attention_cdtype(ctx: InferContext) -> np.dtype:
    sp = ctx.attr("softmax_precision")
    return compute_dtype(ctx.dtype(0), ctx.dtype(2), _SOFTMAX_PRECISIONS.get(int(sp)) if sp is not None else None)


def _attention_prepare(ctx: InferContext) -> _AttnPlan:
    rank3 = ctx.shape(0) is not None and len(ctx.shape(0)) == 3
    scale = ctx.attr("scale")
    window = ctx.opset >= 25
    return _AttnPlan(
        n_out=ctx.num_outputs, rank3=rank3,
        q_heads=int(ctx.attr("q_num_heads")) if rank3 else None,
        kv_heads=int(ctx.attr("kv_num_heads")) if rank3 else None,
        scale=None if scale is None else float(scale), causal=bool(ctx.attr("is_causal", 0)),
        softcap=float(ctx.attr("softcap", 0.0)), mode=int(ctx.attr("qk_matmul_output_mode", 0)),
        left=int(ctx.attr("left_window_size", -1)) if window else -1,
        right=int(ctx.attr("right_window_size", -1)) if window else -1,
        cdtype=_attention_cdtype(ctx))


def _attention_scratch(ctx: InferContext) -> list:
    """The scores (B, Hq, S_q, T) in the compute dtype (T = past + kv sequence length)."""
    q, k = ctx.shape(0), ctx.shape(1)
    past = ctx.shape(4)[2] if ctx.has_input(4) else 0
    if len(q) == 3:
        batch, heads, q_seq, kv_seq = q[0], int(ctx.attr("q_num_heads")), q[1], k[1]
    else:
        batch, heads, q_seq, kv_seq = q[0], q[1], q[2], k[2]
    return [((batch * heads * q_seq * (past + kv_seq),), _attention_cdtype(ctx))]


def _attention_bias(p: _AttnPlan, mask, nonpad, q_seq: int, total: int, past: int, cdtype):
    """The additive bias, broadcastable to (B, Hq, S_q, T), or None when nothing masks.

    The structural part (causal frontier, sliding window, nonpad padding; bottom-right
    aligned at ``offset = past`` or ``nonpad - S_q`` per batch) is a boolean "allowed"
    array; the mask (bool: False -> -inf; else added) is padded to T with -inf."""
    allowed = None
    if p.causal or p.left >= 0 or p.right >= 0 or nonpad is not None:
        j = np.arange(total)
        if nonpad is not None:
            nonpad = nonpad.reshape(-1, 1, 1, 1).astype(np.int64)
            pos = np.arange(q_seq).reshape(q_seq, 1) + (nonpad - q_seq)      # (B, 1, S_q, 1)
        else:
            pos = np.arange(q_seq).reshape(q_seq, 1) + past                  # (S_q, 1)
        parts = []
        if p.causal:
            parts.append(j <= pos)
        if p.left >= 0:
            parts.append(j >= pos - p.left)
        if p.right >= 0:
            parts.append(j <= pos + p.right)
        if nonpad is not None:
            parts.append(j < nonpad)
        allowed = parts[0]
        for part in parts[1:]:
            allowed = allowed & part
    bias = None
    if mask is not None:
        width = mask.shape[-1]
        if mask.dtype == np.bool_:
            bias = np.where(mask, cdtype.type(0), cdtype.type(-np.inf))
        else:
            bias = mask.astype(cdtype)
        if width < total:
            full = np.full(mask.shape[:-1] + (total,), -np.inf, dtype=cdtype)
            full[..., :width] = bias
            bias = full
    if allowed is not None:
        bias = np.where(allowed, cdtype.type(0) if bias is None else bias, cdtype.type(-np.inf))
    return bias


def _to_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D) (a view)."""
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _kv_cache(new: np.ndarray, past, out) -> np.ndarray:
    """present = concat(past, new) along the sequence axis, into ``out`` when planned."""
    if past is None:
        if out is not None:
            np.copyto(out, new, casting="unsafe")
        return new
    if out is None:
        return np.concatenate((past, new), axis=2)
    p = past.shape[2]
    out[:, :, :p] = past
    out[:, :, p:] = new
    return out


@lib.kernel("Attention", prepare=_attention_prepare, scratch=_attention_scratch)
def _attention(inputs, outputs, p: _AttnPlan):
    """Scaled dot-product attention (MHA/GQA/MQA) with KV cache, masks, softcap and the
    qk_matmul_output modes; see the module docstring."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    past_k = inputs[4] if len(inputs) > 4 else None
    past_v = inputs[5] if len(inputs) > 5 else None
    nonpad = inputs[6] if len(inputs) > 6 else None
    cd = p.cdtype
    if p.rank3:
        q4, k4, v4 = _to_heads(q, p.q_heads), _to_heads(k, p.kv_heads), _to_heads(v, p.kv_heads)
    else:
        q4, k4, v4 = q, k, v
    b, hq, sq, dh = q4.shape
    hkv = k4.shape[1]
    k_all = _kv_cache(k4, past_k, _out(outputs, p.n_out, 1))
    v_all = _kv_cache(v4, past_v, _out(outputs, p.n_out, 2))
    past = 0 if past_k is None else past_k.shape[2]
    total = k_all.shape[2]
    qk_out = _out(outputs, p.n_out, 3)
    y = outputs[0]
    scores = _scratch(outputs, p.n_out, b * hq * sq * total, cd).reshape(b, hkv, (hq // hkv) * sq, total)
    scale = p.scale if p.scale is not None else 1.0 / np.sqrt(dh)
    # the spec scales Q and K by sqrt(scale) in Q's dtype: the same rounding of the factor
    root = float(np.asarray(np.sqrt(scale), dtype=q.dtype).astype(np.float64))
    np.matmul(_fold_heads(as_dtype(q4, cd), hkv), as_dtype(k_all, cd).swapaxes(-1, -2), out=scores)
    np.multiply(scores, root * root, out=scores)
    s4 = scores.reshape(b, hq, sq, total)
    if qk_out is not None and p.mode == 0:
        _store(qk_out, s4)
    if p.softcap > 0:
        np.multiply(s4, 1.0 / p.softcap, out=s4)
        np.tanh(s4, out=s4)
        np.multiply(s4, p.softcap, out=s4)
    if qk_out is not None and p.mode == 1:
        _store(qk_out, s4)
    bias = _attention_bias(p, mask, nonpad, sq, total, past, cd)
    if bias is not None:
        np.add(s4, bias, out=s4)
    if qk_out is not None and p.mode == 2:
        _store(qk_out, s4)
    if total == 0:
        s4.fill(0)
    else:
        _softmax_rows(s4)
    if bias is not None and total > 0:
        empty = np.isneginf(bias.max(axis=-1, keepdims=True))
        if empty.any():
            np.copyto(s4, 0, where=empty)
    if qk_out is not None and p.mode == 3:
        _store(qk_out, s4)
    vc = as_dtype(v_all, cd)
    dv = vc.shape[-1]
    if not p.rank3 and y.dtype == cd:                       # Y (B, Hq, S_q, D_v) is the product's layout
        np.matmul(scores, vc, out=y.reshape(b, hkv, (hq // hkv) * sq, dv))
        return
    res = np.matmul(scores, vc)                             # (B, H_kv, G*S_q, D_v)
    if p.rank3:
        _store(y.reshape(b, sq, hq, dv), res.reshape(b, hq, sq, dv).transpose(0, 2, 1, 3))
    else:
        _store(y, res.reshape(y.shape))


# ----------------------------------------------------------------------------------------
# RotaryEmbedding
# ----------------------------------------------------------------------------------------

@lib.op("RotaryEmbedding", since_version=23, infer_dtype=same_dtype(0))
def _rotary_shape(ctx: InferContext):
    """RotaryEmbedding: Y has X's shape.

    X (B, H, S, D) or (B, S, H*D) with num_heads; cos_cache/sin_cache (max_pos, R/2) with
    position_ids (B, S), else (B, S, R/2); R = rotary_embedding_dim (0: D), even, <= D.
    Raises ShapeInferenceError for bad ranks, odd or too large rotary dims, cache shapes
    that do not match. Source: ONNX operator spec, RotaryEmbedding-23.
    """
    _check_inputs(ctx, 3, 4)
    _check_outputs(ctx, 1)
    _check_float(ctx, 0, "X")
    _check_same_dtype(ctx, 1, 0, "cos_cache", "X")
    _check_same_dtype(ctx, 2, 0, "sin_cache", "X")
    if ctx.has_input(3) and ctx.dtype(3) is not None and ctx.dtype(3) != np.dtype(np.int64):
        ctx.fail(f"position_ids has dtype {ctx.dtype(3)}, expected int64", kind="InvalidDtype")
    if int(ctx.attr("interleaved", 0)) not in (0, 1):
        ctx.fail("interleaved must be 0 or 1", kind="InvalidAttribute")
    rd = int(ctx.attr("rotary_embedding_dim", 0))
    if rd < 0:
        ctx.fail(f"rotary_embedding_dim {rd} must be >= 0", kind="InvalidAttribute")
    x = _check_rank(ctx, 0, (3, 4), "X")
    if x is None:
        return [None]
    heads = ctx.attr("num_heads")
    if len(x) == 3:
        heads = _positive_attr(ctx, "num_heads")
        _divisible(ctx, x[2], heads, "X's hidden size", "num_heads")
        batch, seq, head = x[0], x[1], x[2] // heads
    else:
        if heads is not None:
            require(ctx, x[1], "==", int(heads), f"num_heads {heads} does not match X's heads {x[1]}",
                    "InvalidAttribute")
        batch, seq, head = x[0], x[2], x[3]
    if rd == 0:
        rd = head
    require(ctx, rd % 2, "==", 0, f"the rotary dim {rd} must be even", "InvalidShape")
    require(ctx, head, ">=", rd, f"rotary_embedding_dim {rd} exceeds the head size {head}", "InvalidShape")
    cos, sin = ctx.shape(1), ctx.shape(2)
    want_rank = 2 if ctx.has_input(3) else 3
    for _i, what, s in ((1, "cos_cache", cos), (2, "sin_cache", sin)):
        if s is None:
            continue
        if len(s) != want_rank:
            form = "(max_position_id_plus_1, rotary_dim / 2) with position_ids" if want_rank == 2 else \
                "(batch_size, sequence_length, rotary_dim / 2) without position_ids"
            ctx.fail(f"{what} must have rank {want_rank} {form}, got {tuple(s)}", kind="InvalidRank")
        check_dims_equal(ctx, s[-1], rd // 2, f"last dim of {what} and rotary_dim / 2")
        if want_rank == 3:
            check_dims_equal(ctx, s[0], batch, f"batch size of {what} and X")
            check_dims_equal(ctx, s[1], seq, f"sequence length of {what} and X")
    if cos is not None and sin is not None:
        for a, b in zip(cos, sin):
            check_dims_equal(ctx, a, b, "shape of cos_cache and sin_cache")
    if ctx.has_input(3) and ctx.shape(3) is not None:
        pos = ctx.shape(3)
        if len(pos) != 2:
            ctx.fail(f"position_ids must have shape (batch_size, sequence_length), got {tuple(pos)}",
                     kind="InvalidRank")
        check_dims_equal(ctx, pos[0], batch, "batch size of position_ids and X")
        check_dims_equal(ctx, pos[1], seq, "sequence length of position_ids and X")
    return [tuple(x)]


class _RopePlan(NamedTuple):
    node: str
    heads: int | None        # 3-D input: num_heads
    rotary: int              # 0: the head size
    interleaved: bool


def _rotary_prepare(ctx: InferContext) -> _RopePlan:
    x = ctx.shape(0)
    three = x is not None and len(x) == 3
    return _RopePlan(ctx.node.name, int(ctx.attr("num_heads")) if three else None,
                     int(ctx.attr("rotary_embedding_dim", 0)), bool(ctx.attr("interleaved", 0)))


@lib.kernel("RotaryEmbedding", prepare=_rotary_prepare)
def _rotary(inputs, outputs, p: _RopePlan):
    """Rotate the first R features of each head by the (cos, sin) of its position."""
    x, cos, sin = inputs[0], inputs[1], inputs[2]
    pos = inputs[3] if len(inputs) > 3 else None
    if pos is not None:
        n = cos.shape[0]
        if pos.size and (pos.min() < 0 or pos.max() >= n):
            bad = pos.min() if pos.min() < 0 else pos.max()
            raise ShapeInferenceError(
                f"RotaryEmbedding node '{p.node}': position id {int(bad)} is out of range for caches of "
                f"{n} positions (valid: [0, {n - 1}])", node=p.node, op_type="RotaryEmbedding",
                kind="PositionOutOfRange")
        cos, sin = cos[pos], sin[pos]                    # (B, S, R/2)
    cd = compute_dtype(x.dtype)
    if p.heads is not None:
        b, s, hd = x.shape
        xv = x.reshape(b, s, p.heads, hd // p.heads)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    else:
        xv = x
        cos, sin = cos[:, None, :, :], sin[:, None, :, :]
    y = outputs[0].reshape(xv.shape)
    d = xv.shape[-1]
    rd = p.rotary or d
    half = rd // 2
    if p.interleaved:
        a, b_ = (slice(0, rd, 2), slice(1, rd, 2))
    else:
        a, b_ = (slice(0, half), slice(half, rd))
    x1, x2 = as_dtype(xv[..., a], cd), as_dtype(xv[..., b_], cd)
    c, s_ = as_dtype(cos, cd), as_dtype(sin, cd)
    if y.dtype == cd:                        # y never aliases x (no in-place declared)
        y1, y2 = y[..., a], y[..., b_]
        np.multiply(x1, c, out=y1)
        y1 -= x2 * s_
        np.multiply(x1, s_, out=y2)
        y2 += x2 * c
    else:
        _store(y[..., a], c * x1 - s_ * x2)
        _store(y[..., b_], s_ * x1 + c * x2)
    if rd < d:
        y[..., rd:] = xv[..., rd:]


# ----------------------------------------------------------------------------------------
# TensorScatter
# ----------------------------------------------------------------------------------------

@lib.op("TensorScatter", since_version=24, infer_dtype=same_dtype(0))
def _tensor_scatter_shape(ctx: InferContext):
    """TensorScatter: present_cache has past_cache's shape.

    update equals past_cache except along ``axis`` (not 0), where it is at most
    max_sequence_length; write_indices (B,) int64. Raises ShapeInferenceError otherwise.
    Source: ONNX operator spec, TensorScatter-24.
    """
    _check_inputs(ctx, 2, 3)
    _check_outputs(ctx, 1)
    _check_same_dtype(ctx, 1, 0, "update", "past_cache")
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        ctx.fail(f"mode '{mode}' must be 'linear' or 'circular'", kind="InvalidAttribute")
    if ctx.has_input(2) and ctx.dtype(2) is not None and ctx.dtype(2) != np.dtype(np.int64):
        ctx.fail(f"write_indices has dtype {ctx.dtype(2)}, expected int64", kind="InvalidDtype")
    past, upd = ctx.shape(0), ctx.shape(1)
    if past is None:
        return [None]
    if len(past) < 2:
        ctx.fail(f"past_cache must have rank >= 2 (batch and sequence axes), got rank {len(past)}",
                 kind="InvalidRank")
    axis = normalize_axis(ctx, ctx.attr("axis", -2), len(past))
    if axis == 0:
        ctx.fail("axis must not be 0 (the batch axis)", kind="InvalidAttribute")
    if upd is not None:
        if len(upd) != len(past):
            ctx.fail(f"update must have past_cache's rank {len(past)}, got rank {len(upd)}", kind="InvalidRank")
        for i, (a, b) in enumerate(zip(past, upd)):
            if i != axis:
                check_dims_equal(ctx, b, a, f"dim {i} of update and past_cache")
            else:
                require(ctx, a, ">=", b, f"update's sequence length {b} (axis {axis}) exceeds past_cache's {a}",
                        "InvalidShape")
    if ctx.has_input(2) and ctx.shape(2) is not None:
        w = ctx.shape(2)
        if len(w) != 1:
            ctx.fail(f"write_indices must have shape (batch_size,), got {tuple(w)}", kind="InvalidShape")
        check_dims_equal(ctx, w[0], past[0], "length of write_indices and the batch size")
    return [tuple(past)]


class _ScatterPlan(NamedTuple):
    node: str
    axis: int
    circular: bool


def _tensor_scatter_prepare(ctx: InferContext) -> _ScatterPlan:
    rank = len(ctx.shape(0))
    return _ScatterPlan(ctx.node.name, normalize_axis(ctx, ctx.attr("axis", -2), rank),
                        ctx.attr("mode", "linear") == "circular")


@lib.kernel("TensorScatter", prepare=_tensor_scatter_prepare, may_inplace=((0, 0),))
def _tensor_scatter(inputs, outputs, p: _ScatterPlan):
    """Write ``update`` into a copy of the cache at per-batch offsets along ``axis``."""
    past, upd = inputs[0], inputs[1]
    idx = inputs[2] if len(inputs) > 2 else None
    out = outputs[0]
    if out is not past:
        np.copyto(out, past)
    b, length, seq = past.shape[0], past.shape[p.axis], upd.shape[p.axis]
    if upd.size == 0:
        return
    start = np.zeros(b, np.int64) if idx is None else idx.astype(np.int64, copy=False)
    pos = start[:, None] + np.arange(seq)                      # (B, seq)
    if p.circular:
        pos %= length
    elif start.size and (start.min() < 0 or start.max() + seq > length):
        bad = int(start.min() if start.min() < 0 else start.max())
        raise ShapeInferenceError(
            f"TensorScatter node '{p.node}': write index {bad} with {seq} new positions does not fit "
            f"max_sequence_length {length} (linear mode needs 0 <= write_indices and "
            "write_indices + sequence_length <= max_sequence_length)",
            node=p.node, op_type="TensorScatter", kind="WriteIndexOutOfRange")
    shape = [1] * past.ndim
    shape[0], shape[p.axis] = b, seq
    np.put_along_axis(out, pos.reshape(shape), upd, axis=p.axis)


# ----------------------------------------------------------------------------------------
# SwiGLU
# ----------------------------------------------------------------------------------------

@lib.op("SwiGLU", since_version=28, infer_dtype=same_dtype(0))
def _swiglu_shape(ctx: InferContext):
    """SwiGLU: Y = A * Sigmoid(alpha * A) * B, A and B of one shape (no broadcasting).

    Raises ShapeInferenceError for different ranks/dims/dtypes. Source: ONNX operator spec,
    SwiGLU-28.
    """
    _check_inputs(ctx, 2, 2)
    _check_outputs(ctx, 1)
    _check_float(ctx, 0, "A")
    _check_same_dtype(ctx, 1, 0, "B", "A")
    a, b = ctx.shape(0), ctx.shape(1)
    if a is None or b is None:
        return [a if b is None else b]
    if len(a) != len(b):
        ctx.fail(f"A and B must have one shape (no broadcasting), got ranks {len(a)} and {len(b)}",
                 kind="ShapeMismatch")
    return [tuple(check_dims_equal(ctx, x, y, f"dim {i} of A and B (no broadcasting)")
                  for i, (x, y) in enumerate(zip(a, b)))]


def _swiglu_prepare(ctx: InferContext):
    return float(ctx.attr("alpha", 1.0)), compute_dtype(ctx.dtype(0))


@lib.kernel("SwiGLU", prepare=_swiglu_prepare)
def _swiglu(inputs, outputs, prepared):
    alpha, cd = prepared
    a, b = as_dtype(inputs[0], cd), as_dtype(inputs[1], cd)
    y = outputs[0]
    res = y if y.dtype == cd else np.empty(a.shape, cd)
    np.multiply(a, 0.5 * alpha, out=res)        # sigmoid(t) = 0.5 * tanh(t / 2) + 0.5
    np.tanh(res, out=res)
    np.multiply(res, 0.5, out=res)
    np.add(res, 0.5, out=res)
    np.multiply(res, a, out=res)
    np.multiply(res, b, out=res)
    _store(y, res)


# ----------------------------------------------------------------------------------------
# LinearAttention
# ----------------------------------------------------------------------------------------

_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


class _LinDims(NamedTuple):
    batch: object
    seq: object
    q_heads: int
    kv_heads: int
    dk: object
    dv: object


def _linear_attention_dims(ctx: InferContext) -> _LinDims | None:
    _check_inputs(ctx, 3, 6)
    _check_outputs(ctx, 2)
    for i, what in ((0, "query"), (1, "key"), (2, "value"), (3, "past_state"), (4, "decay"), (5, "beta")):
        if ctx.has_input(i):
            _check_float(ctx, i, what)
    for i, what in ((1, "key"), (2, "value"), (4, "decay"), (5, "beta")):
        if ctx.has_input(i):
            _check_same_dtype(ctx, i, 0, what, "query")
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in _UPDATE_RULES:
        ctx.fail(f"update_rule '{rule}' must be one of {', '.join(_UPDATE_RULES)}", kind="InvalidAttribute")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != ctx.has_input(4):
        ctx.fail(f"update_rule '{rule}' {'requires' if gated else 'forbids'} the decay input",
                 kind="InvalidInputs")
    if delta != ctx.has_input(5):
        ctx.fail(f"update_rule '{rule}' {'requires' if delta else 'forbids'} the beta input",
                 kind="InvalidInputs")
    qh, kvh = _positive_attr(ctx, "q_num_heads"), _positive_attr(ctx, "kv_num_heads")
    if qh % kvh:
        ctx.fail(f"q_num_heads {qh} must be a multiple of kv_num_heads {kvh}", kind="InvalidAttribute")
    if int(ctx.attr("chunk_size", 64)) <= 0:
        ctx.fail(f"chunk_size {ctx.attr('chunk_size')} must be positive", kind="InvalidAttribute")
    q, k, v = (_check_rank(ctx, i, (3,), what) for i, what in ((0, "query"), (1, "key"), (2, "value")))
    if q is None or k is None or v is None:
        return None
    batch = check_dims_equal(ctx, check_dims_equal(ctx, q[0], k[0], "batch size of query and key"), v[0],
                             "batch size of query and value")
    seq = check_dims_equal(ctx, check_dims_equal(ctx, q[1], k[1], "sequence length of query and key"), v[1],
                           "sequence length of query and value")
    _divisible(ctx, q[2], qh, "query's hidden size", "q_num_heads")
    _divisible(ctx, v[2], kvh, "value's hidden size", "kv_num_heads")
    dk = q[2] // qh
    check_dims_equal(ctx, k[2], kvh * dk, "key's hidden size and kv_num_heads * d_k")
    dims = _LinDims(batch, seq, qh, kvh, dk, v[2] // kvh)
    if ctx.has_input(3) and ctx.shape(3) is not None:
        s = ctx.shape(3)
        want = (batch, kvh, dk, dims.dv)
        if len(s) != 4:
            ctx.fail(f"past_state must have shape (B, H_kv, d_k, d_v) = {want}, got {tuple(s)}", kind="InvalidRank")
        for i, (a, b) in enumerate(zip(s, want)):
            check_dims_equal(ctx, a, b, f"dim {i} of past_state (B, H_kv, d_k, d_v)")
    for i, what in ((4, "decay"), (5, "beta")):
        s = ctx.shape(i) if ctx.has_input(i) else None
        if s is None:
            continue
        if len(s) != 3:
            ctx.fail(f"{what} must have rank 3 (B, T, ...), got {tuple(s)}", kind="InvalidRank")
        check_dims_equal(ctx, s[0], batch, f"batch size of {what} and query")
        check_dims_equal(ctx, s[1], seq, f"sequence length of {what} and query")
        last = s[2]
        options = (kvh, kvh * dk) if i == 4 else (kvh, 1)
        names = "kv_num_heads or kv_num_heads * d_k" if i == 4 else "kv_num_heads or 1"
        # one of two: the product of the differences is 0 (exact for symbolic dims too)
        require(ctx, (last - options[0]) * (last - options[1]), "==", 0,
                f"{what}'s last dim {last} must be {names} ({' or '.join(map(str, options))})", "InvalidShape")
    return dims


@lib.op("LinearAttention", since_version=27,
        infer_dtype=lambda ctx: [ctx.dtype(0), ctx.dtype(3) if ctx.has_input(3) else ctx.dtype(0)][
            :max(1, ctx.num_outputs)])
def _linear_attention_shape(ctx: InferContext):
    """LinearAttention: output (B, T, H_q*d_v), present_state (B, H_kv, d_k, d_v).

    query (B, T, H_q*d_k), key (B, T, H_kv*d_k), value (B, T, H_kv*d_v), past_state
    (B, H_kv, d_k, d_v), decay (B, T, H_kv*d_k or H_kv; 'gated' rules only), beta
    (B, T, H_kv or 1; 'delta' rules only). present_state has past_state's dtype (query's
    without it). Raises ShapeInferenceError for mismatched shapes, inputs the update rule
    requires or forbids, invalid attributes. Source: ONNX operator spec, LinearAttention-27.
    """
    d = _linear_attention_dims(ctx)
    if d is None:
        return [None] * max(1, ctx.num_outputs)
    return [(d.batch, d.seq, d.q_heads * d.dv), (d.batch, d.kv_heads, d.dk, d.dv)][:max(1, ctx.num_outputs)]


class _LinPlan(NamedTuple):
    node: str
    n_out: int
    q_heads: int
    kv_heads: int
    gated: bool
    delta: bool
    scale: float
    chunk: int


def _linear_attention_prepare(ctx: InferContext) -> _LinPlan:
    rule = ctx.attr("update_rule", "gated_delta")
    return _LinPlan(ctx.node.name, ctx.num_outputs, int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads")),
                    rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta"),
                    float(ctx.attr("scale", 0.0)), int(ctx.attr("chunk_size", 64)))


def _lin_fail(p: _LinPlan, message: str) -> None:
    raise ShapeInferenceError(f"LinearAttention node '{p.node}': {message}", node=p.node,
                              op_type="LinearAttention", kind="InvalidShape")


def _gate_heads(x: np.ndarray, kv_heads: int, dk: int, p: _LinPlan, what: str) -> np.ndarray:
    """decay (B, T, H_kv*d_k | H_kv) or beta (B, T, H_kv | 1) -> (B, H_kv|1, T, d_k|1), float32."""
    b, t, last = x.shape
    if what == "decay":
        options = {kv_heads * dk: (kv_heads, dk), kv_heads: (kv_heads, 1)}
    else:
        options = {1: (1, 1), kv_heads: (kv_heads, 1)}
    if last not in options:
        _lin_fail(p, f"{what}'s last dim {last} must be one of {sorted(options)}")
    heads, per = options[last]
    return as_dtype(x, _F32).reshape(b, t, heads, per).transpose(0, 2, 1, 3)


def _linear_chunked(q5, k4, v4, g4, state, out, chunk: int) -> np.ndarray:
    """'linear' / 'gated' recurrences chunk by chunk; returns the final state.

    Within a chunk with cumulative log-decay L (from the chunk start): o_t = (q_t e^{L_t})^T S
    + sum_{s<=t} (sum_d q_td k_sd e^{L_td - L_sd}) v_s, and S' = e^{L_last} S +
    sum_s (k_s e^{L_last - L_s}) v_s^T. Differences of L are exponentiated directly, never
    e^{-L} alone, so strong decays cannot overflow."""
    b, hkv, g, t, dk = q5.shape
    dv = state.shape[-1]
    if g4 is not None and g4.shape[-1] > 1:     # per-key-dim decay: (n, n, d_k) weights per chunk
        chunk = max(1, min(chunk, max(4, 1024 // dk)))
    for c0 in range(0, t, chunk):
        c1 = min(t, c0 + chunk)
        n = c1 - c0
        qc, kc, vc = q5[:, :, :, c0:c1], k4[:, :, c0:c1], v4[:, :, c0:c1]
        causal = np.tril(np.ones((n, n), dtype=bool))
        if g4 is None:
            o = np.matmul(qc.reshape(b, hkv, g * n, dk), state).reshape(b, hkv, g, n, dv)
            att = np.matmul(qc, kc[:, :, None].swapaxes(-1, -2))   # (B, H, G, n, n)
            att *= causal
            o += np.matmul(att, vc[:, :, None])                     # (B, H, G, n, d_v)
            out[:, :, :, c0:c1] = o
            state += np.matmul(kc.swapaxes(-1, -2), vc)
            continue
        lc = np.cumsum(g4[:, :, c0:c1], axis=2)                     # (B, H, n, d_k | 1)
        qd = qc * np.exp(lc)[:, :, None]
        o = np.matmul(qd.reshape(b, hkv, g * n, dk), state).reshape(b, hkv, g, n, dv)
        if lc.shape[-1] == 1:
            lh = lc[..., 0]
            diff = np.where(causal, lh[:, :, :, None] - lh[:, :, None, :], -np.inf)
            att = np.matmul(qc, kc[:, :, None].swapaxes(-1, -2)) * np.exp(diff)[:, :, None]
        else:
            diff = lc[:, :, :, None, :] - lc[:, :, None, :, :]      # (B, H, n, n, d_k)
            weights = np.exp(np.where(causal[:, :, None], diff, -np.inf)) * kc[:, :, None, :, :]
            att = np.einsum("bhgtd,bhtsd->bhgts", qc, weights, optimize=True)
        o += np.matmul(att, vc[:, :, None])
        out[:, :, :, c0:c1] = o
        last = lc[:, :, -1:]                                        # (B, H, 1, d_k | 1)
        state *= np.exp(last).swapaxes(-1, -2)
        state += np.matmul((kc * np.exp(last - lc)).swapaxes(-1, -2), vc)
    return state


def _linear_delta(q5, k4, v4, g4, beta4, state, out) -> np.ndarray:
    """'delta' / 'gated_delta' recurrences, one token at a time over all (batch, head)."""
    t = q5.shape[3]
    for i in range(t):
        kt = k4[:, :, i]                                            # (B, H, d_k)
        if g4 is not None:
            state *= np.exp(g4[:, :, i])[..., :, None]
        retrieved = np.matmul(kt[:, :, None, :], state)[:, :, 0]    # (B, H, d_v)
        vt = beta4[:, :, i] * (v4[:, :, i] - retrieved)
        state += kt[..., :, None] * vt[..., None, :]
        np.matmul(q5[:, :, :, i], state, out=out[:, :, :, i])
    return state


@lib.kernel("LinearAttention", prepare=_linear_attention_prepare)
def _linear_attention(inputs, outputs, p: _LinPlan):
    """Linear attention recurrences in float32 (see the module docstring)."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    past = inputs[3] if len(inputs) > 3 else None
    decay = inputs[4] if len(inputs) > 4 else None
    beta = inputs[5] if len(inputs) > 5 else None
    b, t, _ = q.shape
    hq, hkv = p.q_heads, p.kv_heads
    g = hq // hkv
    dk = q.shape[2] // hq
    dv = v.shape[2] // hkv
    q5 = as_dtype(q, _F32).reshape(b, t, hkv, g, dk).transpose(0, 2, 3, 1, 4)    # (B, H_kv, G, T, d_k)
    k4 = as_dtype(_to_heads(k, hkv), _F32)
    v4 = as_dtype(_to_heads(v, hkv), _F32)
    g4 = None if decay is None else _gate_heads(decay, hkv, dk, p, "decay")
    b4 = None if beta is None else _gate_heads(beta, hkv, dk, p, "beta")
    state = np.zeros((b, hkv, dk, dv), _F32) if past is None else past.astype(_F32)
    out = np.empty((b, hkv, g, t, dv), _F32)
    if p.delta:
        state = _linear_delta(q5, k4, v4, g4, b4, state, out)
    else:
        state = _linear_chunked(q5, k4, v4, g4, state, out, p.chunk)
    scale = p.scale if p.scale != 0.0 else 1.0 / np.sqrt(dk)
    out *= scale
    _store(outputs[0].reshape(b, t, hkv, g, dv), out.transpose(0, 3, 1, 2, 4))
    present = _out(outputs, p.n_out, 1)
    if present is not None:
        _store(present, state)


# ----------------------------------------------------------------------------------------
# CausalConvWithState
# ----------------------------------------------------------------------------------------

_CONV_ACTIVATIONS = ("none", "silu", "swish")


@lib.op("CausalConvWithState", since_version=27, infer_dtype=same_dtype(0))
def _causal_conv_shape(ctx: InferContext):
    """CausalConvWithState: output (B, C, L), present_state (B, C, k - 1).

    input (B, C, L), weight (C, 1, k), bias (C,), past_state (B, C, k - 1). Raises
    ShapeInferenceError for bad ranks/dims, an unknown activation.
    Source: ONNX operator spec, CausalConvWithState-27.
    """
    _check_inputs(ctx, 2, 4)
    _check_outputs(ctx, 2)
    _check_float(ctx, 0, "input")
    for i, what in ((1, "weight"), (2, "bias"), (3, "past_state")):
        if ctx.has_input(i):
            _check_same_dtype(ctx, i, 0, what, "input")
    act = ctx.attr("activation", "none")
    if act not in _CONV_ACTIVATIONS:
        ctx.fail(f"activation '{act}' must be one of {', '.join(_CONV_ACTIVATIONS)}", kind="InvalidAttribute")
    x = _check_rank(ctx, 0, (3,), "input")
    w = _check_rank(ctx, 1, (3,), "weight")
    if x is None or w is None:
        return [None] * max(1, ctx.num_outputs)
    c = check_dims_equal(ctx, w[0], x[1], "weight's channels and input's channels")
    require(ctx, w[1], "==", 1, f"weight must have shape (channels, 1, k) (depthwise), got {tuple(w)}",
            "InvalidShape")
    require(ctx, w[2], ">=", 1, f"kernel size {w[2]} must be >= 1", "InvalidShape")
    state = (x[0], c, w[2] - 1)
    if ctx.has_input(2) and ctx.shape(2) is not None:
        b = ctx.shape(2)
        if len(b) != 1:
            ctx.fail(f"bias must have shape (channels,), got {tuple(b)}", kind="InvalidShape")
        check_dims_equal(ctx, b[0], c, "bias length and channels")
    if ctx.has_input(3) and ctx.shape(3) is not None:
        s = ctx.shape(3)
        if len(s) != 3:
            ctx.fail(f"past_state must have shape (B, C, k - 1), got {tuple(s)}", kind="InvalidRank")
        for i, (a, b) in enumerate(zip(s, state)):
            check_dims_equal(ctx, a, b, f"dim {i} of past_state (B, C, k - 1)")
    return [tuple(x), state][:max(1, ctx.num_outputs)]


class _ConvPlan(NamedTuple):
    n_out: int
    silu: bool
    cdtype: np.dtype


def _causal_conv_prepare(ctx: InferContext) -> _ConvPlan:
    return _ConvPlan(ctx.num_outputs, ctx.attr("activation", "none") in ("silu", "swish"), compute_dtype(ctx.dtype(0)))


def _causal_conv_scratch(ctx: InferContext) -> list:
    """The padded input (B, C, k - 1 + L) in the compute dtype."""
    x, w = ctx.shape(0), ctx.shape(1)
    return [((x[0] * x[1] * (x[2] + w[2] - 1),), compute_dtype(ctx.dtype(0)))]


@lib.kernel("CausalConvWithState", prepare=_causal_conv_prepare, scratch=_causal_conv_scratch)
def _causal_conv(inputs, outputs, p: _ConvPlan):
    """Depthwise causal conv over [past_state | input]: one multiply-add per kernel tap."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    past = inputs[3] if len(inputs) > 3 else None
    cd = p.cdtype
    b, c, length = x.shape
    k = w.shape[2]
    padded = _scratch(outputs, p.n_out, b * c * (length + k - 1), cd).reshape(b, c, length + k - 1)
    if past is None:
        padded[:, :, :k - 1] = 0
    else:
        padded[:, :, :k - 1] = past
    padded[:, :, k - 1:] = x
    y = outputs[0]
    acc = y if y.dtype == cd else np.empty(x.shape, cd)
    wc = as_dtype(w, cd)
    np.multiply(padded[:, :, 0:length], wc[:, 0, 0, None], out=acc)
    tmp = np.empty_like(acc) if k > 1 or p.silu else None
    for j in range(1, k):
        np.multiply(padded[:, :, j:j + length], wc[:, 0, j, None], out=tmp)
        acc += tmp
    if bias is not None:
        acc += as_dtype(bias, cd)[:, None]
    if p.silu:
        if y.dtype != cd:       # the spec's conv result is in the input dtype before the activation
            acc[...] = acc.astype(y.dtype)
        np.multiply(acc, 0.5, out=tmp)           # silu(a) = a * (0.5 * tanh(a / 2) + 0.5)
        np.tanh(tmp, out=tmp)
        tmp *= 0.5
        tmp += 0.5
        acc *= tmp
    _store(y, acc)
    state = _out(outputs, p.n_out, 1)
    if state is not None:
        _store(state, padded[:, :, length:])


# ----------------------------------------------------------------------------------------
# FlexAttention (ai.onnx.preview)
# ----------------------------------------------------------------------------------------

def _mod_graph(ctx: InferContext, name: str):
    g = ctx.attr(name)
    if g is None:
        return None
    if not isinstance(g, Graph):
        ctx.fail(f"attribute '{name}' must be a graph", kind="InvalidAttribute")
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        ctx.fail(f"{name} must have exactly 1 input and 1 output, got {len(g.inputs)} and {len(g.outputs)}",
                 kind="InvalidAttribute")
    return g


def _flex_dtypes(ctx: InferContext) -> tuple:
    """(mod dtype: the softmax_precision the subgraphs see, work dtype of the scores)."""
    mod = _softmax_precision(ctx)
    if mod is None:
        mod = _F64 if ctx.dtype(0) == _F64 else _F32
    return mod, compute_dtype(mod, ctx.dtype(0))


@lib.op("FlexAttention", since_version=1, domain=PREVIEW, infer_dtype=same_dtype(0))
def _flex_shape(ctx: InferContext):
    """FlexAttention: Y (B, Hq, L, Ev) from Q (B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, S, Ev).

    score_mod / prob_mod: optional one-input one-output graphs applied to the scores and the
    probabilities (B, Hq, L, S) in the softmax precision. Raises ShapeInferenceError for
    ranks other than 4, mismatched dims, Hq not a multiple of Hkv, malformed graphs.
    Source: ONNX operator spec, FlexAttention-1 (ai.onnx.preview).
    """
    _check_inputs(ctx, 3, 3)
    _check_outputs(ctx, 1)
    for i, what in ((0, "Q"), (1, "K"), (2, "V")):
        _check_float(ctx, i, what)
    _check_same_dtype(ctx, 1, 0, "K", "Q")
    _check_same_dtype(ctx, 2, 0, "V", "Q")
    _mod_graph(ctx, "score_mod")
    _mod_graph(ctx, "prob_mod")
    _flex_dtypes(ctx)
    q, k, v = (_check_rank(ctx, i, (4,), what) for i, what in ((0, "Q"), (1, "K"), (2, "V")))
    if q is None or k is None or v is None:
        return [None]
    batch = check_dims_equal(ctx, check_dims_equal(ctx, q[0], k[0], "batch size of Q and K"), v[0],
                             "batch size of Q and V")
    kvh = check_dims_equal(ctx, k[1], v[1], "heads of K and V")
    check_dims_equal(ctx, k[2], v[2], "sequence length of K and V")
    check_dims_equal(ctx, k[3], q[3], "head size of K and Q")
    require(ctx, q[1] % kvh, "==", 0, f"Q's heads {q[1]} must be a multiple of K's heads {kvh}", "InvalidShape")
    return [(batch, q[1], q[2], v[3])]


class _FlexPlan(NamedTuple):
    node: object
    scale: float | None
    mod_dtype: np.dtype
    cdtype: np.dtype
    score: object            # NodeSubgraph or None
    prob: object


def _flex_prepare(ctx: InferContext) -> _FlexPlan:
    score, prob = (None if _mod_graph(ctx, name) is None else ctx.subgraph(name) for name in ("score_mod", "prob_mod"))
    scale = ctx.attr("scale")
    mod, cd = _flex_dtypes(ctx)
    return _FlexPlan(ctx.node, None if scale is None else float(scale), mod, cd, score, prob)


def _run_mod(p: _FlexPlan, mod, x: np.ndarray, outer: dict, what: str) -> np.ndarray:
    res = mod.runner.run_list([as_dtype(x, p.mod_dtype)], outer)[0]
    if res.shape != x.shape:
        raise ExecutionError(f"FlexAttention node '{p.node.name}': {what} returned shape {list(res.shape)}, "
                             f"expected its input's shape {list(x.shape)}")
    return as_dtype(np.asarray(res), p.cdtype)


@lib.kernel("FlexAttention", domain=PREVIEW, prepare=_flex_prepare)
def _flex(inputs, outputs, p: _FlexPlan):
    """Scores = Q K^T * scale -> score_mod -> softmax -> prob_mod -> @ V (GQA folded)."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    mods = p.score if p.score is not None else p.prob
    outer = {} if mods is None else mods.outer_values(inputs)
    b, hq, lq, e = q.shape
    hkv, s = k.shape[1], k.shape[2]
    cd = p.cdtype
    scale = p.scale if p.scale is not None else 1.0 / np.sqrt(e)
    root = float(np.asarray(np.sqrt(np.float32(scale)), dtype=q.dtype).astype(np.float64))
    scores = np.matmul(_fold_heads(as_dtype(q, cd), hkv), as_dtype(k, cd).swapaxes(-1, -2))
    scores *= root * root
    s4 = scores.reshape(b, hq, lq, s)
    if p.score is not None:
        s4 = _run_mod(p, p.score, s4, outer, "score_mod")
    if s:
        _softmax_rows(s4)
    if p.prob is not None:
        s4 = _run_mod(p, p.prob, s4, outer, "prob_mod")
    res = np.matmul(np.ascontiguousarray(s4).reshape(b, hkv, (hq // hkv) * lq, s), as_dtype(v, cd))
    _store(outputs[0], res.reshape(outputs[0].shape))
