"""com.microsoft ``MultiHeadAttention``, ``GroupQueryAttention`` and ``RotaryEmbedding``.

Source: ONNX Runtime contrib op docs (docs/ContribOperators.md in microsoft/onnxruntime),
sections ``com.microsoft.MultiHeadAttention``, ``com.microsoft.GroupQueryAttention`` and
``com.microsoft.RotaryEmbedding``; what the docs leave open follows ONNX Runtime's CPU kernels
(onnxruntime/contrib_ops/cpu/bert/multihead_attention.cc, multihead_attention_helper.h,
attention_cpu_base.h, group_query_attention.cc, group_query_attention_helper.h,
gqa_attention_base.h, rotary_embedding.cc, rotary_embedding_helper.h) and was checked against
onnxruntime 1.32. Everything is computed in float32 (float16 inputs are widened and the
results rounded once), as the CPU kernels do.

MultiHeadAttention (CPU kernel semantics):

* scores = scale * Q K^T + attention_bias + mask, then softmax over the keys;
  ``key_padding_mask`` positions that are masked get ``mask_filter_value`` added. Its forms:
  (batch) key lengths (keys ``j < len`` attend), (3 * batch + 2) (the CPU kernel reads only
  the first ``batch`` entries, as key lengths), (batch, total_sequence_length) and
  (batch, sequence_length, total_sequence_length) 0/1 masks (values > 0 attend).
* ``unidirectional=1`` hides key ``j`` from query row ``s`` where ``j > past + s``, for every
  row but the last (the CPU kernel's loop stops at ``sequence_length - 1``: with
  kv_sequence_length == sequence_length that is the usual causal mask), by setting the score
  to the lowest float32.
* key / value (batch, kv_seq, hidden) with the K and V parts of ``bias`` added, or
  (batch, num_heads, kv_seq, head_size) (BNSH, used as is: only the Q part of ``bias`` is
  added, as on CPU); past_key / past_value (batch, num_heads, past, head_size) are
  prepended; present_key / present_value are the concatenations. Output 3 (``qk``) is the
  scaled, biased and masked Q K^T before the softmax. The past is prepended whichever
  outputs are requested: ONNX Runtime's CPU kernel drops it when neither present output is
  requested (its output then matches neither reading); that is not reproduced.
* Packed QKV (batch, seq, num_heads, 3, head_size) and packed KV (batch, kv_seq, num_heads,
  2, head_size) are ONNX Runtime CUDA layouts (its CPU kernel raises NOT_IMPLEMENTED); they
  are accepted here and mean the same as the unpacked inputs.

GroupQueryAttention (CPU kernel semantics): per batch entry ``b`` the cache holds
``T_b = seqlens_k[b] + 1`` tokens after the step. The first prompt is
``sequence_length == total_sequence_length`` (past length 0); otherwise the ``S`` new tokens sit
at positions ``T_b - S .. T_b - 1`` (``S > 1`` then needs batch 1). present_key/value are
(batch, kv_num_heads, max(total_sequence_length, past buffer length), head_size): zeros, the
first ``T_b - S`` rows of the past, then the new K/V. Query row ``s`` (absolute position
``p = past_b + s``) attends to keys ``j < T_b`` with ``j <= p`` (``causal=1``) and
``j > p - local_window_size`` (when > 0); scores are ``scale * q k`` (softcap:
``softcap * tanh(x / softcap)``) + attention_bias; softmax, or with ``smooth_softmax`` / a
``head_sink`` an extra logit (0 / the head's sink) in the denominator. ``do_rotary`` rotates
the new Q and K at positions ``past_b + s`` (with ``position_ids``: those, or in the first
prompt ``position_ids[0, 0] + s``, as the CPU kernel reads only the first element then).
The present length follows the value of total_sequence_length: a data-dependent dim when
that value is unknown at import, ``past + seq`` (symbolic) when it is computed from shapes.
``qk_output=1`` writes the (soft-capped) scaled scores, ``2`` the probabilities, zeros where
masked, of shape (batch, num_heads, sequence_length, total_sequence_length). In a right-padded
first prompt the rows past an entry's tokens (``s >= T_b``, "unspecified" in the docs) are
masked as its last token (``p = T_b - 1``), as ONNX Runtime's kernel does with softcap or
qk_output (its other path differs there with local_window_size).

RotaryEmbedding (CPU kernel semantics): input (batch, seq, hidden) or (batch, num_heads,
seq, head_size); positions ``position_ids[0] + s`` (one element) or ``position_ids[b, s]``;
the first ``rotary_embedding_dim`` (default head_size) values of each head are rotated
(halves, or interleaved pairs), the rest copied. The CPU kernel reads cos/sin row ``p`` at flat
offset ``p * rotary_embedding_dim / 2`` of the cache, which is row ``p`` when the cache is
(max_seq, rotary_embedding_dim / 2); a (max_seq, head_size / 2) cache with a smaller
rotary_embedding_dim is read the same (flat) way, as ONNX Runtime does. ``scale`` only
matters for updating the caches (sequence_length > max_sequence_length), which ONNX
Runtime does not implement either (UnsupportedOperatorError); ``is_packed_batching`` does not
change the CPU kernel's result and is accepted.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dynashape import UnsupportedOperatorError
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_dims_equal, dim_max, require, value_list

DOMAIN = "com.microsoft"
DEFAULT_MASK_FILTER_VALUE = -10000.0
_F32 = np.dtype(np.float32)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
_LOWEST = np.finfo(np.float32).min

lib = OpLibrary()


# ----------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------

def _name(ctx) -> str:
    return ctx.node.name or "<unnamed>"


def _unsupported(ctx, what: str):
    raise UnsupportedOperatorError(f"{ctx.node.op_type} node '{_name(ctx)}': {what} is not supported by "
                                   "dynashape_example")


def _opt(seq, i: int):
    return seq[i] if i < len(seq) else None


def _wanted(ctx, n: int) -> tuple:
    """Which of the node's first ``n`` outputs are requested (named)."""
    outs = tuple(bool(o) for o in ctx.node.outputs)
    return (outs + (False,) * n)[:n]


def _rank(ctx, i: int, ranks: tuple, what: str):
    """Input ``i``'s shape (None when absent or unknown); fails unless its rank is in ``ranks``."""
    s = ctx.shape(i) if ctx.has_input(i) else None
    if s is not None and len(s) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        ctx.fail(f"{what} must have rank {want}, got rank {len(s)}", kind="InvalidRank")
    return s


def _check_float(ctx, i: int, what: str):
    """Input ``i`` is float32 or float16; its dtype (None when absent or unknown)."""
    dt = ctx.dtype(i) if ctx.has_input(i) else None
    if dt is not None and np.dtype(dt) not in _FLOATS:
        ctx.fail(f"{what} has dtype {dt}, expected float32 or float16", kind="InvalidDtype")
    return dt


def _check_same_dtype(ctx, i: int, ref, what: str) -> None:
    dt = ctx.dtype(i) if ctx.has_input(i) else None
    if dt is not None and ref is not None and np.dtype(dt) != np.dtype(ref):
        ctx.fail(f"{what} has dtype {dt}, expected {np.dtype(ref)} (the query's / input's)", kind="InvalidDtype")


def _check_int(ctx, i: int, want: np.dtype, what: str) -> None:
    dt = ctx.dtype(i) if ctx.has_input(i) else None
    if dt is not None and np.dtype(dt) != want:
        ctx.fail(f"{what} has dtype {dt}, expected {want}", kind="InvalidDtype")


def _one_or(ctx, d, target, what: str) -> None:
    """``d`` is 1 or equal to ``target`` (a broadcast dim of attention_bias)."""
    if not d == 1:
        check_dims_equal(ctx, d, target, what)


def _divides(ctx, total, part, what: str) -> None:
    message = f"{what} ({total}) must be a multiple of {part}"
    require(ctx, part, ">", 0, message, "HiddenSizeMismatch")
    require(ctx, total % part, "==", 0, message, "HiddenSizeMismatch")


def _int_attr(ctx, name: str, default: int) -> int:
    return int(ctx.attr(name, default))


def _view(a: np.ndarray, shape) -> np.ndarray:
    """A view of output buffer ``a`` with ``shape`` (never a silent copy)."""
    v = a.view()
    v.shape = tuple(shape)
    return v


def _f32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32, copy=False)


def _check_positions(pos: np.ndarray, rows: int, what: str) -> None:
    if pos.size and (pos.min() < 0 or pos.max() >= rows):
        flat = pos.reshape(-1)
        k = int(np.flatnonzero((flat < 0) | (flat >= rows))[0])
        raise IndexError(f"{what} value {int(flat[k])} at index {k} is out of range [0, {rows})")


def _cache_rows(cache: np.ndarray, pos: np.ndarray, half: int) -> np.ndarray:
    """cos/sin values for ``pos`` (any int array) -> ``pos.shape + (half,)`` float32: the
    ``half`` values at flat offset ``pos * half`` of the cache (the CPU kernels' indexing;
    row ``pos`` when the cache has ``half`` columns)."""
    idx = pos[..., None].astype(np.int64) * half + np.arange(half)
    return _f32(np.take(cache.reshape(-1), idx))


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rdim: int, interleaved: bool, out: np.ndarray):
    """Rotary embedding of the last axis of float32 ``x`` into ``out`` (same shape; may be
    ``x``): the first ``rdim`` values rotated (``interleaved``: pairs (2i, 2i+1), else halves
    (i, i + rdim/2)) by ``cos``/``sin`` (broadcastable to ``x[..., :rdim // 2]``), the rest copied."""
    half = rdim // 2
    if interleaved:
        x1, x2 = x[..., 0:rdim:2], x[..., 1:rdim:2]
    else:
        x1, x2 = x[..., :half], x[..., half:rdim]
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin
    if out is not x and x.shape[-1] > rdim:
        out[..., rdim:] = x[..., rdim:]
    if interleaved:
        out[..., 0:rdim:2] = r1
        out[..., 1:rdim:2] = r2
    else:
        out[..., :half] = r1
        out[..., half:rdim] = r2


def _softmax_(scores: np.ndarray, sink=None) -> np.ndarray:
    """In-place softmax over the last axis. ``sink``: an extra logit (broadcastable to
    ``scores[..., :1]``) counted in the denominator only. Rows with every score -inf (and no
    sink) become zeros."""
    m = scores.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    m[~np.isfinite(m)] = 0
    scores -= m
    np.exp(scores, out=scores)
    den = scores.sum(axis=-1, keepdims=True)
    if sink is not None:
        den += np.exp(sink - m)
    den[den == 0] = 1
    scores /= den
    return scores


# ----------------------------------------------------------------------------------------
# MultiHeadAttention
# ----------------------------------------------------------------------------------------

class _MhaAttrs(NamedTuple):
    heads: int
    scale: float
    mask_filter: float
    unidirectional: bool


def _mha_attrs(ctx) -> _MhaAttrs:
    heads = ctx.attr("num_heads")
    if heads is None:
        ctx.fail("attribute 'num_heads' is required", kind="MissingAttribute")
    heads = int(heads)
    if heads < 1:
        ctx.fail(f"num_heads {heads} must be >= 1", kind="InvalidAttribute")
    uni = _int_attr(ctx, "unidirectional", 0)
    if uni not in (0, 1):
        ctx.fail(f"unidirectional must be 0 or 1, got {uni}", kind="InvalidAttribute")
    return _MhaAttrs(heads, float(ctx.attr("scale", 0.0)),
                     float(ctx.attr("mask_filter_value", DEFAULT_MASK_FILTER_VALUE)), bool(uni))


def _mha_check_mask(ctx, mask, batch, seq, total) -> None:
    """key_padding_mask shape rules of ONNX Runtime (multihead_attention_helper CheckInputs)
    for the forms the CPU kernel takes."""
    rank = len(mask)
    if rank == 1:
        n = mask[0]
        if n == batch or n == 3 * batch + 2:
            return
        if isinstance(n, int) and isinstance(batch, int):
            ctx.fail(f"1-D key_padding_mask has length {n}; expected batch_size {batch} or 3 * batch_size + 2 "
                     f"{3 * batch + 2}", kind="MaskShapeMismatch")
        check_dims_equal(ctx, n, batch, "1-D key_padding_mask length vs batch_size")
    elif rank == 2:
        check_dims_equal(ctx, mask[0], batch, "2-D key_padding_mask dim 0 vs batch_size")
        check_dims_equal(ctx, mask[1], total, "2-D key_padding_mask dim 1 vs total_sequence_length "
                                              "(past + kv_sequence_length)")
    else:
        check_dims_equal(ctx, mask[0], batch, "3-D key_padding_mask dim 0 vs batch_size")
        check_dims_equal(ctx, mask[1], seq, "3-D key_padding_mask dim 1 vs sequence_length")
        check_dims_equal(ctx, mask[2], total, "3-D key_padding_mask dim 2 vs total_sequence_length")


def _mha_dtypes(ctx):
    t = ctx.dtype(0)
    return [t] * max(1, ctx.num_outputs)


@lib.op("MultiHeadAttention", since_version=1, domain=DOMAIN, infer_dtype=_mha_dtypes)
def _mha_shape(ctx):
    """MultiHeadAttention: multi-head self/cross attention; Q/K/V projections done, their bias
    included.

    Inputs: query (batch, seq, hidden) or packed QKV (batch, seq, num_heads, 3, head_size);
    optional key (batch, kv_seq, hidden), packed KV (batch, kv_seq, num_heads, 2, head_size)
    or BNSH (batch, num_heads, kv_seq, head_size); optional value (batch, kv_seq, v_hidden) or
    BNSH (batch, num_heads, kv_seq, v_head_size) (with a 3-D or 4-D key); optional bias
    (hidden + hidden + v_hidden); optional key_padding_mask (int32: (batch), (3 * batch + 2),
    (batch, total_seq), (batch, seq, total_seq)); optional attention_bias (batch or 1,
    num_heads or 1, seq, total_seq); optional past_key (batch, num_heads, past, head_size) and
    past_value (batch, num_heads, past, v_head_size), total_seq = past + kv_seq.
    Outputs: output (batch, seq, v_hidden); optional present_key (batch, num_heads, total_seq,
    head_size), present_value (batch, num_heads, total_seq, v_head_size), qk (batch,
    num_heads, seq, total_seq).
    Attributes: num_heads (required), scale (default 1/sqrt(head_size)), mask_filter_value
    (default -10000), unidirectional (default 0). float32 and float16.
    Raises UnsupportedOperatorError for past_sequence_length (input 8, buffer sharing),
    cache_indirection (input 9), a 3-D query without key (packed BS3NH QKV, which ONNX
    Runtime rejects too) and bias with packed KV; ShapeInferenceError for wrong ranks or dims.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.MultiHeadAttention.
    """
    a = _mha_attrs(ctx)
    heads = a.heads
    if ctx.has_input(8):
        _unsupported(ctx, "input 8 past_sequence_length (past/present buffer sharing)")
    if ctx.has_input(9):
        _unsupported(ctx, "input 9 cache_indirection (beam-search cache indirection)")
    qt = _check_float(ctx, 0, "query")
    for i, what in ((1, "key"), (2, "value"), (3, "bias"), (5, "attention_bias"), (6, "past_key"),
                    (7, "past_value")):
        _check_same_dtype(ctx, i, qt, what)
    _check_int(ctx, 4, _I32, "key_padding_mask")
    n_out = max(1, ctx.num_outputs)
    if ctx.has_input(2) and not ctx.has_input(1):
        ctx.fail("value is given without key", kind="MissingInput")
    if ctx.has_input(6) != ctx.has_input(7):
        ctx.fail("past_key and past_value must be given together", kind="MissingInput")
    q = _rank(ctx, 0, (3, 5), "query")
    k = _rank(ctx, 1, (3, 4, 5), "key")
    v = _rank(ctx, 2, (3, 4), "value")
    bias = _rank(ctx, 3, (1,), "bias")
    mask = _rank(ctx, 4, (1, 2, 3), "key_padding_mask")
    attn_bias = _rank(ctx, 5, (4,), "attention_bias")
    pk = _rank(ctx, 6, (4,), "past_key")
    pv = _rank(ctx, 7, (4,), "past_value")
    if q is None:
        return [None] * n_out
    batch, seq = q[0], q[1]
    if len(q) == 5:                      # packed QKV (B, S, N, 3, H)
        if ctx.has_input(1):
            ctx.fail("a packed QKV query (batch, seq, num_heads, 3, head_size) takes no key or value",
                     kind="InvalidInput")
        check_dims_equal(ctx, q[2], heads, "packed QKV query dim 2 vs num_heads")
        check_dims_equal(ctx, q[3], 3, "packed QKV query dim 3")
        head = v_head = q[4]
        hidden = v_hidden = heads * head
        kv_seq = seq
    else:
        hidden = q[2]
        _divides(ctx, hidden, heads, "query hidden size")
        head = hidden // heads
        if not ctx.has_input(1):
            _unsupported(ctx, "a 3-D query without key (packed QKV of shape (batch, seq, 3 * hidden))")
        if k is None:
            return [None] * n_out
        check_dims_equal(ctx, k[0], batch, "key dim 0 vs batch_size")
        if len(k) == 3:
            if not ctx.has_input(2):
                ctx.fail("a 3-D key needs a 3-D value", kind="MissingInput")
            check_dims_equal(ctx, k[2], hidden, "key dim 2 vs query hidden size")
            kv_seq = k[1]
            if v is None:
                return [None] * n_out
            if len(v) != 3:
                ctx.fail(f"value must have rank 3 with a 3-D key, got rank {len(v)}", kind="InvalidRank")
            check_dims_equal(ctx, v[0], batch, "value dim 0 vs batch_size")
            check_dims_equal(ctx, v[1], kv_seq, "value dim 1 vs key's kv_sequence_length")
            v_hidden = v[2]
            _divides(ctx, v_hidden, heads, "value hidden size")
            v_head = v_hidden // heads
        elif len(k) == 5:                # packed KV (B, L, N, 2, H)
            if ctx.has_input(2):
                ctx.fail("a packed KV key (batch, kv_seq, num_heads, 2, head_size) takes no value",
                         kind="InvalidInput")
            if ctx.has_input(3):
                _unsupported(ctx, "bias with a packed KV key")
            check_dims_equal(ctx, k[2], heads, "packed KV key dim 2 vs num_heads")
            check_dims_equal(ctx, k[3], 2, "packed KV key dim 3")
            check_dims_equal(ctx, k[4], head, "packed KV key dim 4 vs head_size")
            kv_seq, v_head, v_hidden = k[1], head, hidden
        else:                            # BNSH (B, N, L, H)
            if not ctx.has_input(2):
                ctx.fail("a 4-D key needs a 4-D value", kind="MissingInput")
            check_dims_equal(ctx, k[1], heads, "4-D key dim 1 vs num_heads")
            check_dims_equal(ctx, k[3], head, "4-D key dim 3 vs head_size")
            kv_seq = k[2]
            if v is None:
                return [None] * n_out
            if len(v) != 4:
                ctx.fail(f"value must have rank 4 with a 4-D key, got rank {len(v)}", kind="InvalidRank")
            check_dims_equal(ctx, v[0], batch, "value dim 0 vs batch_size")
            check_dims_equal(ctx, v[1], heads, "4-D value dim 1 vs num_heads")
            check_dims_equal(ctx, v[2], kv_seq, "4-D value dim 2 vs key's kv_sequence_length")
            v_head = v[3]
            v_hidden = heads * v_head
    if bias is not None:
        check_dims_equal(ctx, bias[0], hidden + hidden + v_hidden, "bias length vs hidden + hidden + v_hidden")
    past = 0
    if pk is not None and pv is not None:
        check_dims_equal(ctx, pk[0], batch, "past_key dim 0 vs batch_size")
        check_dims_equal(ctx, pk[1], heads, "past_key dim 1 vs num_heads")
        check_dims_equal(ctx, pk[3], head, "past_key dim 3 vs head_size")
        check_dims_equal(ctx, pv[0], batch, "past_value dim 0 vs batch_size")
        check_dims_equal(ctx, pv[1], heads, "past_value dim 1 vs num_heads")
        check_dims_equal(ctx, pv[2], pk[2], "past_value dim 2 vs past_key dim 2 (past_sequence_length)")
        check_dims_equal(ctx, pv[3], v_head, "past_value dim 3 vs v_head_size")
        past = pk[2]
    total = past + kv_seq
    if mask is not None:
        _mha_check_mask(ctx, mask, batch, seq, total)
    if attn_bias is not None:
        _one_or(ctx, attn_bias[0], batch, "attention_bias dim 0 (batch_size or 1)")
        _one_or(ctx, attn_bias[1], heads, "attention_bias dim 1 (num_heads or 1)")
        check_dims_equal(ctx, attn_bias[2], seq, "attention_bias dim 2 vs sequence_length")
        check_dims_equal(ctx, attn_bias[3], total, "attention_bias dim 3 vs total_sequence_length")
    out = [(batch, seq, v_hidden), (batch, heads, total, head), (batch, heads, total, v_head),
           (batch, heads, seq, total)]
    return out[:n_out]


def _mha_prepare(ctx):
    return _mha_attrs(ctx), _wanted(ctx, 4)


def _mha_keep(mask: np.ndarray, batch: int, seq: int, total: int) -> np.ndarray:
    """key_padding_mask as a boolean "may attend" array broadcastable to (B, N, S, T)."""
    if mask.ndim == 1:
        ends = mask[:batch]
        return (np.arange(total)[None, :] < ends[:, None])[:, None, None, :]
    if mask.ndim == 2:
        return (mask > 0)[:, None, None, :]
    return (mask > 0)[:, None, :, :]


def _bnsh(x: np.ndarray, batch: int, seq: int, heads: int) -> np.ndarray:
    """(B, S, N*H) -> (B, N, S, H) view."""
    return x.reshape(batch, seq, heads, -1).transpose(0, 2, 1, 3)


@lib.kernel("MultiHeadAttention", domain=DOMAIN, dtypes=[np.float32, np.float16], prepare=_mha_prepare)
def _mha(inputs, outputs, prepared):
    a, wanted = prepared
    heads = a.heads
    query = inputs[0]
    key, value, bias = _opt(inputs, 1), _opt(inputs, 2), _opt(inputs, 3)
    mask, attn_bias = _opt(inputs, 4), _opt(inputs, 5)
    past_k, past_v = _opt(inputs, 6), _opt(inputs, 7)
    bias = _f32(bias) if bias is not None else None
    batch, seq = query.shape[0], query.shape[1]
    if query.ndim == 5:                                     # (B, S, N, 3, H)
        qkv = _f32(query)
        if bias is not None:
            qkv = qkv + bias.reshape(3, heads, -1).transpose(1, 0, 2)   # (N, 3, H)
        q, k, v = (qkv[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
    else:
        hidden = query.shape[2]
        q = _f32(query) if bias is None else _f32(query) + bias[:hidden]
        q = _bnsh(q, batch, seq, heads)
        if key.ndim == 3:
            kv_seq = key.shape[1]
            k, v = _f32(key), _f32(value)
            if bias is not None:
                k = k + bias[hidden:2 * hidden]
                v = v + bias[2 * hidden:]
            k, v = _bnsh(k, batch, kv_seq, heads), _bnsh(v, batch, kv_seq, heads)
        elif key.ndim == 5:                                 # (B, L, N, 2, H)
            kv = _f32(key)
            k, v = kv[:, :, :, 0].transpose(0, 2, 1, 3), kv[:, :, :, 1].transpose(0, 2, 1, 3)
        else:                                               # BNSH, used as is (no K/V bias)
            k, v = _f32(key), _f32(value)
    past = past_k.shape[2] if past_k is not None else 0
    total = past + k.shape[2]
    head, v_head = q.shape[3], v.shape[3]
    for slot, new, old in ((1, k, past_k), (2, v, past_v)):
        buf = outputs[slot] if wanted[slot] and slot < len(outputs) else None
        if buf is not None:
            if old is not None:
                buf[:, :, :past] = old
            buf[:, :, past:] = new
    if past_k is not None:
        k = np.concatenate((_f32(past_k), k), axis=2)
        v = np.concatenate((_f32(past_v), v), axis=2)

    base = None                                             # attention_bias + padding mask
    if attn_bias is not None:
        base = _f32(attn_bias)
    if mask is not None:
        filt = np.where(_mha_keep(mask, batch, seq, total), np.float32(0), np.float32(a.mask_filter))
        base = filt if base is None else base + filt
    alpha = np.float32(a.scale) if a.scale else np.float32(1.0) / np.sqrt(np.float32(head))
    scores = np.matmul(q, k.swapaxes(-1, -2))               # (B, N, S, T)
    scores *= alpha
    if base is not None:
        scores += base
    if a.unidirectional and seq > 1:
        hidden_keys = np.arange(total)[None, :] > past + np.arange(seq)[:, None]
        hidden_keys[-1] = False                             # the CPU kernel leaves the last row
        scores[..., hidden_keys] = _LOWEST
    if wanted[3] and len(outputs) > 3 and outputs[3] is not None:
        np.copyto(outputs[3], scores, casting="same_kind")
    y = _view(outputs[0], (batch, seq, heads, v_head)).transpose(0, 2, 1, 3)
    if total == 0:
        y[...] = 0
        return None
    _softmax_(scores)
    np.copyto(y, np.matmul(scores, v), casting="same_kind")
    return None


# ----------------------------------------------------------------------------------------
# GroupQueryAttention
# ----------------------------------------------------------------------------------------

class _GqaAttrs(NamedTuple):
    heads: int
    kv_heads: int
    scale: float
    softcap: float
    window: int
    causal: bool
    do_rotary: bool
    interleaved: bool
    smooth_softmax: bool
    qk_output: int


#: optional inputs of GroupQueryAttention this implementation does not support
_GQA_UNSUPPORTED_INPUTS = (
    (12, "input 12 k_scale (quantized KV cache)"),
    (13, "input 13 v_scale (quantized KV cache)"),
    (14, "input 14 q_norm_weight (per-head Q/K RMS normalisation)"),
    (15, "input 15 k_norm_weight (per-head Q/K RMS normalisation)"),
    (16, "input 16 query_seqlens (right-padded query chunks)"),
)


def _gqa_attrs(ctx) -> _GqaAttrs:
    vals = {}
    for name in ("num_heads", "kv_num_heads"):
        n = ctx.attr(name)
        if n is None:
            ctx.fail(f"attribute '{name}' is required", kind="MissingAttribute")
        n = int(n)
        if n < 1:
            ctx.fail(f"{name} {n} must be >= 1", kind="InvalidAttribute")
        vals[name] = n
    heads, kv_heads = vals["num_heads"], vals["kv_num_heads"]
    if heads % kv_heads:
        ctx.fail(f"num_heads {heads} must be a multiple of kv_num_heads {kv_heads}", kind="InvalidAttribute")
    causal = _int_attr(ctx, "causal", 1)
    if causal not in (0, 1):
        ctx.fail(f"causal must be 0 or 1, got {causal}", kind="InvalidAttribute")
    window = _int_attr(ctx, "local_window_size", -1)
    if not causal and window != -1:
        ctx.fail(f"local_window_size must be -1 when causal is 0, got {window}", kind="InvalidAttribute")
    qk_output = _int_attr(ctx, "qk_output", 0)
    if qk_output not in (0, 1, 2):
        ctx.fail(f"qk_output must be 0, 1 or 2, got {qk_output}", kind="InvalidAttribute")
    if _int_attr(ctx, "sliding_window_cache", 0):
        _unsupported(ctx, "sliding_window_cache=1 (window-sized KV cache with internal eviction)")
    for name in ("k_quant_type", "v_quant_type"):
        quant = ctx.attr(name, "NONE")
        if quant not in ("", "NONE"):
            _unsupported(ctx, f"{name}='{quant}' (quantized KV cache)")
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap < 0:
        ctx.fail(f"softcap must be >= 0, got {softcap}", kind="InvalidAttribute")
    return _GqaAttrs(heads, kv_heads, float(ctx.attr("scale", 0.0)), softcap, window, bool(causal),
                     bool(_int_attr(ctx, "do_rotary", 0)), bool(_int_attr(ctx, "rotary_interleaved", 0)),
                     bool(_int_attr(ctx, "smooth_softmax", 0)), qk_output)


def _gqa_dtypes(ctx):
    t = ctx.dtype(0)
    cache = ctx.dtype(3) if ctx.has_input(3) and ctx.dtype(3) is not None else t
    return [t, cache, cache, t][:max(1, ctx.num_outputs)]


def _scalar_value(ctx, i: int):
    """The host-known value of scalar input ``i`` (an int or a symbolic dim), or None."""
    vals = value_list(ctx.value(i))
    if not vals:
        return None
    v = vals[0]
    return int(v) if isinstance(v, (int, np.integer)) else v


@lib.op("GroupQueryAttention", since_version=1, domain=DOMAIN, infer_dtype=_gqa_dtypes, value_inputs=(6,))
def _gqa_shape(ctx):
    """GroupQueryAttention: causal (or bidirectional) attention with kv_num_heads <= num_heads
    grouped K/V heads and a BNSH KV cache (past / present).

    Inputs: query (batch, seq, num_heads * head_size), or packed QKV (batch, seq,
    (num_heads + 2 * kv_num_heads) * head_size) with key and value absent; key, value (batch,
    seq, kv_num_heads * head_size); optional past_key, past_value (batch, kv_num_heads,
    past_buffer, head_size); seqlens_k (batch) int32 (tokens in the cache after the step, - 1);
    total_sequence_length (scalar int32; its value sets the present length); optional
    cos_cache, sin_cache (max_seq, rotary_dim / 2) for do_rotary; optional position_ids
    (batch, seq) int64; optional attention_bias (batch or 1, num_heads or 1, seq,
    total_sequence_length); optional head_sink (num_heads).
    Outputs: output (batch, seq, num_heads * head_size); optional present_key, present_value
    (batch, kv_num_heads, max(total_sequence_length, past_buffer), head_size); optional
    output_qk (batch, num_heads, seq, total_sequence_length) with qk_output.
    Attributes: num_heads, kv_num_heads (required), scale (default 1/sqrt(head_size)),
    softcap, local_window_size, causal (default 1), do_rotary, rotary_interleaved,
    smooth_softmax, qk_output (0, 1 before / 2 after the softmax). float32 and float16.
    The present length is data-dependent when total_sequence_length's value is not known
    (then a fresh dim); total_sequence_length must be past_buffer + seq (growing cache) or
    <= past_buffer (static cache), as in ONNX Runtime.
    Raises UnsupportedOperatorError for sliding_window_cache=1, quantized KV caches
    (k_quant_type / v_quant_type, k_scale / v_scale, non-float past), q_norm_weight /
    k_norm_weight and query_seqlens; ShapeInferenceError for wrong ranks, dims or attributes.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.GroupQueryAttention.
    """
    a = _gqa_attrs(ctx)
    heads, kv_heads = a.heads, a.kv_heads
    for i, what in _GQA_UNSUPPORTED_INPUTS:
        if ctx.has_input(i):
            _unsupported(ctx, what)
    qt = _check_float(ctx, 0, "query")
    cache_dt = ctx.dtype(3) if ctx.has_input(3) else None
    if cache_dt is not None and qt is not None and np.dtype(cache_dt) != np.dtype(qt):
        if np.dtype(cache_dt).kind in "iu" or "float8" in str(cache_dt):
            _unsupported(ctx, f"a past_key of dtype {cache_dt} (quantized KV cache)")
    for i, what in ((1, "key"), (2, "value"), (3, "past_key"), (4, "past_value"), (7, "cos_cache"),
                    (8, "sin_cache"), (10, "attention_bias"), (11, "head_sink")):
        _check_same_dtype(ctx, i, qt, what)
    for i, what in ((5, "seqlens_k"), (6, "total_sequence_length")):
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({what}) is required", kind="MissingInput")
        _check_int(ctx, i, _I32, what)
    _check_int(ctx, 9, _I64, "position_ids")
    if ctx.has_input(1) != ctx.has_input(2):
        ctx.fail("key and value must both be given, or both be absent (packed QKV)", kind="MissingInput")
    if ctx.has_input(3) != ctx.has_input(4):
        ctx.fail("past_key and past_value must be given together", kind="MissingInput")
    if ctx.has_input(7) != ctx.has_input(8):
        ctx.fail("cos_cache and sin_cache must be given together", kind="MissingInput")
    if a.do_rotary and not ctx.has_input(7):
        ctx.fail("do_rotary=1 needs cos_cache and sin_cache", kind="MissingInput")
    wanted = _wanted(ctx, 4)
    if wanted[3] and not a.qk_output:
        ctx.fail("output 3 (output_qk) needs qk_output=1 or 2", kind="InvalidAttribute")
    n_out = max(1, ctx.num_outputs)
    q = _rank(ctx, 0, (3,), "query")
    k = _rank(ctx, 1, (3,), "key")
    v = _rank(ctx, 2, (3,), "value")
    pk = _rank(ctx, 3, (4,), "past_key")
    pv = _rank(ctx, 4, (4,), "past_value")
    sk = _rank(ctx, 5, (1,), "seqlens_k")
    ts = _rank(ctx, 6, (0, 1), "total_sequence_length")
    cos = _rank(ctx, 7, (2,), "cos_cache")
    sin = _rank(ctx, 8, (2,), "sin_cache")
    pid = _rank(ctx, 9, (2,), "position_ids")
    attn_bias = _rank(ctx, 10, (4,), "attention_bias")
    sink = _rank(ctx, 11, (1,), "head_sink")
    if q is None:
        return [None] * n_out
    batch, seq, width = q
    if not ctx.has_input(1):
        _divides(ctx, width, heads + 2 * kv_heads, "packed QKV query hidden size (num_heads + 2 * kv_num_heads)")
        head = width // (heads + 2 * kv_heads)
    else:
        _divides(ctx, width, heads, "query hidden size")
        head = width // heads
        for s, what in ((k, "key"), (v, "value")):
            if s is not None:
                check_dims_equal(ctx, s[0], batch, f"{what} dim 0 vs batch_size")
                check_dims_equal(ctx, s[1], seq, f"{what} dim 1 vs sequence_length")
                check_dims_equal(ctx, s[2], kv_heads * head, f"{what} dim 2 vs kv_num_heads * head_size")
    past = 0
    if pk is not None and pv is not None:
        for s, what in ((pk, "past_key"), (pv, "past_value")):
            check_dims_equal(ctx, s[0], batch, f"{what} dim 0 vs batch_size")
            check_dims_equal(ctx, s[1], kv_heads, f"{what} dim 1 vs kv_num_heads")
            check_dims_equal(ctx, s[3], head, f"{what} dim 3 vs head_size")
        check_dims_equal(ctx, pv[2], pk[2], "past_value dim 2 vs past_key dim 2")
        past = pk[2]
    if sk is not None:
        check_dims_equal(ctx, sk[0], batch, "seqlens_k length vs batch_size")
    if ts is not None and len(ts) == 1:
        check_dims_equal(ctx, ts[0], 1, "total_sequence_length (one element)")
    total = _scalar_value(ctx, 6)
    if total is None:
        present = ctx.new_dim()
    else:
        require(ctx, total, ">", 0, f"total_sequence_length must be positive, got {total}", "InvalidInput")
        growing = total - (past + seq)
        if isinstance(growing, int) and growing == 0:
            present = total
        elif pk is None:
            check_dims_equal(ctx, total, seq, "total_sequence_length vs sequence_length (no past)")
            present = seq
        else:
            # a growing cache (total = past + seq) or a static one (total <= past, present = past): the
            # product is 0 exactly then, for ints and, through the max, for symbolic dims too
            present = dim_max(total, past)
            require(ctx, growing * (present - past), "==", 0,
                    f"total_sequence_length {total} must equal past_sequence_length + kv_sequence_length "
                    f"{past + seq} (growing cache) or be <= past_sequence_length {past} (static cache)",
                    "InvalidInput")
        # several query tokens beside a past: batch 1 only (seq <= 1, seq == total or batch == 1)
        require(ctx, (seq - total) * (batch - 1) * dim_max(seq - 1, 0), "==", 0,
                "batch_size must be 1 when sequence_length > 1 and past context is given", "InvalidInput")
    if cos is not None and sin is not None:
        check_dims_equal(ctx, sin[0], cos[0], "sin_cache dim 0 vs cos_cache dim 0")
        check_dims_equal(ctx, sin[1], cos[1], "sin_cache dim 1 vs cos_cache dim 1")
        if a.do_rotary:
            require(ctx, head, ">=", 2 * cos[1], f"cos_cache dim 1 ({cos[1]}) must be <= head_size / 2 ({head // 2})",
                    "InvalidInput")
            if total is not None:
                require(ctx, cos[0], ">=", total, f"cos_cache dim 0 ({cos[0]}) must be >= total_sequence_length "
                        f"{total}", "InvalidInput")
    if pid is not None and a.do_rotary:
        check_dims_equal(ctx, pid[0], batch, "position_ids dim 0 vs batch_size")
        check_dims_equal(ctx, pid[1], seq, "position_ids dim 1 vs sequence_length")
    if attn_bias is not None:
        _one_or(ctx, attn_bias[0], batch, "attention_bias dim 0 (batch_size or 1)")
        _one_or(ctx, attn_bias[1], heads, "attention_bias dim 1 (num_heads or 1)")
        check_dims_equal(ctx, attn_bias[2], seq, "attention_bias dim 2 vs sequence_length")
        if total is not None:
            check_dims_equal(ctx, attn_bias[3], total, "attention_bias dim 3 vs total_sequence_length")
    if sink is not None:
        check_dims_equal(ctx, sink[0], heads, "head_sink length vs num_heads")
    qk_len = total if total is not None else ctx.new_dim()
    out = [(batch, seq, heads * head), (batch, kv_heads, present, head), (batch, kv_heads, present, head),
           (batch, heads, seq, qk_len)]
    return out[:n_out]


def _gqa_prepare(ctx):
    return _gqa_attrs(ctx), _wanted(ctx, 4)


def _gqa_cache(buf, past, new, past_rows, present_len):
    """present (B, Nkv, Tp, H) float32: zeros, the first ``past_rows[b]`` rows of ``past``,
    then the new rows ``new`` (B, Nkv, S, H) at ``past_rows[b] ..``. ``buf``: the output
    buffer to fill when it is float32, else None (a fresh array)."""
    batch, kv_heads, seq, head = new.shape
    present = buf if buf is not None and buf.dtype == _F32 else np.empty((batch, kv_heads, present_len, head), _F32)
    present[...] = 0
    if past is not None and past.shape[2]:
        keep = np.arange(past.shape[2])[None, :] < past_rows[:, None]           # (B, P)
        np.copyto(present[:, :, :past.shape[2]], past, where=keep[:, None, :, None], casting="same_kind")
    rows = past_rows[:, None] + np.arange(seq)[None, :]                         # (B, S)
    present[np.arange(batch)[:, None], :, rows] = new.transpose(0, 2, 1, 3)     # (B, S, Nkv, H)
    if buf is not None and buf is not present:
        np.copyto(buf, present, casting="same_kind")
    return present


@lib.kernel("GroupQueryAttention", domain=DOMAIN, dtypes=[np.float32, np.float16], prepare=_gqa_prepare)
def _gqa(inputs, outputs, prepared):
    a, wanted = prepared
    heads, kv_heads = a.heads, a.kv_heads
    group = heads // kv_heads
    query = inputs[0]
    key, value = _opt(inputs, 1), _opt(inputs, 2)
    past_k, past_v = _opt(inputs, 3), _opt(inputs, 4)
    seqlens, total_arr = inputs[5], inputs[6]
    cos, sin, pid = _opt(inputs, 7), _opt(inputs, 8), _opt(inputs, 9)
    attn_bias, sink = _opt(inputs, 10), _opt(inputs, 11)
    batch, seq = query.shape[0], query.shape[1]
    if key is None:
        head = query.shape[2] // (heads + 2 * kv_heads)
        qf = query[..., :heads * head]
        kf = query[..., heads * head:(heads + kv_heads) * head]
        vf = query[..., (heads + kv_heads) * head:]
    else:
        head = query.shape[2] // heads
        qf, kf, vf = query, key, value
    q = _bnsh(qf, batch, seq, heads).astype(np.float32)         # own copies: rotated in place
    k = _bnsh(kf, batch, seq, kv_heads).astype(np.float32)
    v = _bnsh(vf, batch, seq, kv_heads)

    if total_arr.size != 1:
        raise ValueError(f"total_sequence_length must have one element, got shape {list(total_arr.shape)}")
    total = int(total_arr.reshape(-1)[0])
    past = past_k.shape[2] if past_k is not None else 0
    present_len = max(total, past)
    if total <= 0:
        raise ValueError(f"total_sequence_length must be positive, got {total}")
    if total != past + seq and (past_k is None or total > past):
        raise ValueError(f"total_sequence_length {total} must equal past_sequence_length + kv_sequence_length "
                         f"{past + seq} (growing cache) or be <= past_sequence_length {past} (static cache)")
    lens = seqlens.reshape(-1).astype(np.int64)
    if lens.shape[0] != batch:
        raise ValueError(f"seqlens_k has {lens.shape[0]} entries, expected batch_size {batch}")
    bad = (lens < 0) | (lens >= present_len)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"seqlens_k[{i}] = {int(lens[i])} is out of range [0, {present_len})")
    first_prompt = seq == total
    if seq > 1 and not first_prompt and batch != 1:
        raise ValueError("batch_size must be 1 when sequence_length > 1 and past context is given")
    tokens = lens + 1                                           # T_b: tokens after this step
    past_rows = np.zeros(batch, np.int64) if first_prompt else tokens - seq
    if (past_rows < 0).any():
        i = int(np.flatnonzero(past_rows < 0)[0])
        raise ValueError(f"seqlens_k[{i}] + 1 = {int(tokens[i])} is less than sequence_length {seq}")
    positions = past_rows[:, None] + np.arange(seq)[None, :]    # (B, S) absolute query positions

    if a.do_rotary:
        if pid is None:
            rot_pos = positions
        elif first_prompt:
            if pid.size == 0:
                raise ValueError("position_ids is empty")
            rot_pos = np.broadcast_to(int(pid.reshape(-1)[0]) + np.arange(seq)[None, :], (batch, seq))
        else:
            rot_pos = pid.reshape(batch, seq)
        _check_positions(rot_pos, cos.shape[0], "position_ids")
        half = cos.shape[1]
        c = _cache_rows(cos, rot_pos, half)[:, None]            # (B, 1, S, R/2)
        s = _cache_rows(sin, rot_pos, half)[:, None]
        _rotate(q, c, s, 2 * half, a.interleaved, q)
        _rotate(k, c, s, 2 * half, a.interleaved, k)

    buf_k = outputs[1] if wanted[1] and len(outputs) > 1 else None
    buf_v = outputs[2] if wanted[2] and len(outputs) > 2 else None
    pres_k = _gqa_cache(buf_k, past_k, k, past_rows, present_len)
    pres_v = _gqa_cache(buf_v, past_v, v, past_rows, present_len)

    scores = np.matmul(q.reshape(batch, kv_heads, group, seq, head),
                       pres_k[:, :, None].swapaxes(-1, -2))     # (B, Nkv, g, S, Tp)
    scores = scores.reshape(batch, heads, seq, present_len)
    scores *= np.float32(a.scale) if a.scale else np.float32(1.0) / np.sqrt(np.float32(head))
    if a.softcap > 0:
        cap = np.float32(a.softcap)
        scores /= cap
        np.tanh(scores, out=scores)
        scores *= cap
    j = np.arange(present_len)
    # rows past the tokens of a right-padded first prompt are masked as the entry's last token
    last = np.minimum(positions, tokens[:, None] - 1)[:, :, None]                # (B, S, 1)
    keep = np.broadcast_to(j[None, None, :] < tokens[:, None, None], (batch, seq, present_len))
    if a.causal:
        keep = keep & (j[None, None, :] <= last)
    if a.window > 0:
        keep = keep & (j[None, None, :] > last - a.window)
    keep = keep[:, None]                                        # (B, 1, S, Tp)
    qk_out = outputs[3] if wanted[3] and len(outputs) > 3 else None
    if qk_out is not None and a.qk_output == 1:
        np.copyto(qk_out, np.where(keep, scores, np.float32(0))[..., :total], casting="same_kind")
    if attn_bias is not None:
        cols = min(attn_bias.shape[3], present_len)
        scores[..., :cols] += _f32(attn_bias)[..., :cols]
    np.copyto(scores, -np.inf, where=~keep)
    if sink is not None:
        _softmax_(scores, _f32(sink).reshape(1, heads, 1, 1))
    elif a.smooth_softmax:
        _softmax_(scores, np.float32(0))
    else:
        _softmax_(scores)
    if qk_out is not None and a.qk_output == 2:
        np.copyto(qk_out, scores[..., :total], casting="same_kind")
    y = np.matmul(scores.reshape(batch, kv_heads, group, seq, present_len), _f32(pres_v)[:, :, None])
    np.copyto(_view(outputs[0], (batch, seq, heads, head)),
              y.reshape(batch, heads, seq, head).transpose(0, 2, 1, 3), casting="same_kind")
    return None


# ----------------------------------------------------------------------------------------
# RotaryEmbedding
# ----------------------------------------------------------------------------------------

class _RotaryAttrs(NamedTuple):
    interleaved: bool
    heads: int
    rotary_dim: int


def _rotary_attrs(ctx) -> _RotaryAttrs:
    heads = _int_attr(ctx, "num_heads", 0)
    rdim = _int_attr(ctx, "rotary_embedding_dim", 0)
    if heads < 0 or rdim < 0:
        ctx.fail(f"num_heads ({heads}) and rotary_embedding_dim ({rdim}) must be >= 0", kind="InvalidAttribute")
    if rdim > 0 and heads == 0:
        ctx.fail("num_heads must be provided if rotary_embedding_dim is specified", kind="InvalidAttribute")
    if rdim % 2:
        ctx.fail(f"rotary_embedding_dim {rdim} must be even", kind="InvalidAttribute")
    return _RotaryAttrs(bool(_int_attr(ctx, "interleaved", 0)), heads, rdim)


@lib.op("RotaryEmbedding", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _rotary_shape(ctx):
    """RotaryEmbedding: rotary positional embedding (RoPE) of the heads of ``input``.

    Inputs: input (batch, seq, hidden) or (batch, num_heads, seq, head_size); position_ids
    int64, one element (positions position_ids[0] + s) or (batch, seq); cos_cache, sin_cache
    (max_seq, head_size / 2) or (max_seq, rotary_embedding_dim / 2). Output: the input's shape.
    Attributes: interleaved, num_heads (needed with rotary_embedding_dim; else hidden /
    head_size, head_size = 2 * cos_cache dim 1), rotary_embedding_dim (default head_size),
    scale and is_packed_batching (accepted; neither changes the CPU kernel's result).
    float32 and float16.
    Raises UnsupportedOperatorError when sequence_length > max_sequence_length (updating the
    caches, which ONNX Runtime does not implement); ShapeInferenceError for wrong ranks or dims.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.RotaryEmbedding.
    """
    a = _rotary_attrs(ctx)
    for i, what in enumerate(("input", "position_ids", "cos_cache", "sin_cache")):
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({what}) is required", kind="MissingInput")
    xt = _check_float(ctx, 0, "input")
    _check_same_dtype(ctx, 2, xt, "cos_cache")
    _check_same_dtype(ctx, 3, xt, "sin_cache")
    _check_int(ctx, 1, _I64, "position_ids")
    x = _rank(ctx, 0, (3, 4), "input")
    pos = _rank(ctx, 1, (0, 1, 2), "position_ids")
    cos = _rank(ctx, 2, (2,), "cos_cache")
    sin = _rank(ctx, 3, (2,), "sin_cache")
    if x is None:
        return [None]
    batch = x[0]
    seq, hidden = (x[1], x[2]) if len(x) == 3 else (x[2], x[1] * x[3])
    if cos is not None and sin is not None:
        check_dims_equal(ctx, sin[0], cos[0], "sin_cache dim 0 vs cos_cache dim 0")
        check_dims_equal(ctx, sin[1], cos[1], "sin_cache dim 1 vs cos_cache dim 1")
    if cos is not None:
        max_seq, half = cos
        if a.rotary_dim == 0:
            head = 2 * half
            if a.heads:
                check_dims_equal(ctx, hidden, a.heads * head, "hidden size vs num_heads * head_size "
                                                              "(head_size = 2 * cos_cache dim 1)")
        else:
            _divides(ctx, hidden, a.heads, "hidden size vs num_heads")
            head = hidden // a.heads
            require(ctx, head, ">=", a.rotary_dim, f"rotary_embedding_dim {a.rotary_dim} must be <= head_size {head}",
                    "InvalidAttribute")
            # one of two: the product of the differences is 0 (exact for symbolic dims too)
            require(ctx, (half - a.rotary_dim // 2) * (half - head // 2), "==", 0,
                    f"cos_cache dim 1 ({half}) must be head_size / 2 ({head // 2}) or rotary_embedding_dim / 2 "
                    f"({a.rotary_dim // 2})", "InvalidInput")
        if len(x) == 3:
            _divides(ctx, hidden, head, "hidden size vs head_size")
        else:
            check_dims_equal(ctx, x[3], head, "input dim 3 vs head_size")
        if not ctx.assume(max_seq, ">=", seq):
            _unsupported(ctx, f"sequence_length {seq} > max_sequence_length {max_seq} (updating cos_cache "
                              "and sin_cache)")
    if pos is not None:
        if len(pos) == 1:
            check_dims_equal(ctx, pos[0], 1, "1-D position_ids length (one element)")
        elif len(pos) == 2:
            check_dims_equal(ctx, pos[0], batch, "position_ids dim 0 vs batch_size")
            check_dims_equal(ctx, pos[1], seq, "position_ids dim 1 vs sequence_length")
    return [tuple(x)]


def _rotary_prepare(ctx):
    return _rotary_attrs(ctx)


@lib.kernel("RotaryEmbedding", domain=DOMAIN, dtypes=[np.float32, np.float16], prepare=_rotary_prepare)
def _rotary(inputs, outputs, prepared):
    a = prepared
    x, pos, cos, sin = inputs[0], inputs[1], inputs[2], inputs[3]
    if x.ndim == 3:
        batch, seq, hidden = x.shape
        head = 2 * cos.shape[1] if a.rotary_dim == 0 else hidden // a.heads
        shape = (batch, seq, hidden // head, head)
    else:
        batch, _, seq, head = x.shape
        shape = x.shape
    rdim = a.rotary_dim or head
    half = rdim // 2
    if pos.ndim <= 1:
        positions = int(pos.reshape(-1)[0]) + np.arange(seq)[None, :]      # (1, S)
    else:
        positions = pos
    _check_positions(positions, cos.shape[0], "position_ids")
    c, s = _cache_rows(cos, positions, half), _cache_rows(sin, positions, half)   # (B|1, S, R/2)
    if x.ndim == 3:
        c, s = c[:, :, None], s[:, :, None]
    else:
        c, s = c[:, None], s[:, None]
    _rotate(_f32(x).reshape(shape), c, s, rdim, a.interleaved, _view(outputs[0], shape))
    return None
