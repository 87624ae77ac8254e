"""com.microsoft ``Attention``: BERT/GPT-2/T5 multi-head self-attention with a merged Q/K/V projection,
and ``RelativePositionBias``, the T5 attention bias onnxruntime's transformer optimizer feeds it.

Source: ONNX Runtime contrib op docs (docs/ContribOperators.md in microsoft/onnxruntime),
section ``com.microsoft.Attention``; what the docs leave open follows ONNX Runtime's CPU
kernel (onnxruntime/contrib_ops/cpu/bert/attention.cc, attention_base.cc, attention_cpu_base.h,
attention_helper.h) and was checked against onnxruntime 1.32:

* scores = scale * Q K^T (+ attention_bias) + mask, computed in float32; masked positions
  get ``mask_filter_value`` (default -10000) added, positions a causal (``unidirectional``)
  mask hides are set to the lowest float32, then softmax over the key axis.
* mask_index forms: 1-D (batch) key lengths (right padding), 1-D (2*batch) exclusive ends
  then inclusive starts (left padding), 2-D (batch, total_seq) raw 0/1 mask (values > 0
  attend), 2-D (batch or 1, 1) (a dummy: no mask), 3-D (batch, seq, total_seq) and 4-D
  (batch, 1, max_seq, max_seq) (Megatron: rows past_seq .. past_seq+seq and columns
  0 .. total_seq are used; ONNX Runtime's CUDA kernel reads it, its CPU kernel rejects it).

RelativePositionBias (section ``com.microsoft.RelativePositionBias``; ONNX Runtime has only a
CUDA kernel, onnxruntime/contrib_ops/cuda/bert/relative_attn_bias.cc and
relative_attn_bias_impl.cu, whose semantics are followed): T5's bucketed relative position bias
``output[0, h, i, j] = table[bucket(j - i), h]``, the bucket of Hugging Face's
``T5Attention._relative_position_bucket``. The optimizer's FusionRelativePositionBiasBlock
(onnxruntime/transformers/onnx_model_t5.py) stores the (num_buckets, num_heads) table
column-major: its memory is the (num_heads, num_buckets) transpose of the embedding weight, and
head ``h``'s bucket ``b`` is flat element ``h * num_buckets + b``, as the CUDA kernel reads it.
"""
from __future__ import annotations

import numpy as np

from dynashape import UnsupportedOperatorError
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_dims_equal, numel, require, value_list

DOMAIN = "com.microsoft"
DEFAULT_MASK_FILTER_VALUE = -10000.0
_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)
_I64 = np.dtype(np.int64)
_LOWEST = np.finfo(np.float32).min

lib = OpLibrary()


def _is(a, b) -> bool:
    """Structural equality of two dims (ints compare by value, symbols by expression)."""
    return a == b


def _attrs(ctx):
    """(num_heads, qkv_hidden_sizes or None, scale (0: 1/sqrt(head_size)), mask_filter_value,
    unidirectional); fails for attributes this implementation does not support."""
    heads = ctx.attr("num_heads")
    if heads is None:
        ctx.fail("attribute 'num_heads' is required", kind="MissingAttribute")
    heads = int(heads)
    if heads < 1:
        ctx.fail(f"num_heads {heads} must be >= 1", kind="InvalidAttribute")
    sizes = ctx.attr("qkv_hidden_sizes")
    if sizes is not None and len(sizes) == 0:
        sizes = None
    if sizes is not None:
        sizes = tuple(int(s) for s in sizes)
        if len(sizes) != 3:
            ctx.fail(f"qkv_hidden_sizes {list(sizes)} must have 3 elements", kind="InvalidAttribute")
        if any(s <= 0 or s % heads for s in sizes):
            ctx.fail(f"qkv_hidden_sizes {list(sizes)} must be positive multiples of num_heads {heads}",
                     kind="InvalidAttribute")
        if sizes[0] != sizes[1]:
            ctx.fail(f"qkv_hidden_sizes {list(sizes)}: the Q and K hidden sizes must be equal",
                     kind="InvalidAttribute")
    name = ctx.node.name or "<unnamed>"
    if int(ctx.attr("do_rotary", 0)):
        raise UnsupportedOperatorError(f"Attention node '{name}': do_rotary=1 (rotary position embedding) "
                                       "is not supported by dynashape_example")
    if int(ctx.attr("past_present_share_buffer", 0)):
        raise UnsupportedOperatorError(f"Attention node '{name}': past_present_share_buffer=1 is not "
                                       "supported by dynashape_example")
    scale = float(ctx.attr("scale", 0.0))
    mask_filter = float(ctx.attr("mask_filter_value", DEFAULT_MASK_FILTER_VALUE))
    return heads, sizes, scale, mask_filter, bool(int(ctx.attr("unidirectional", 0)))


def _rank(ctx, i: int, ranks: tuple, what: str):
    s = ctx.shape(i) if ctx.has_input(i) else None
    if s is not None and len(s) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        ctx.fail(f"{what} must have rank {want}, got rank {len(s)}", kind="InvalidRank")
    return s


def _one_or(ctx, d, target, what: str) -> None:
    """``d`` is 1 or equal to ``target`` (a broadcast dim of attention_bias / mask)."""
    if not _is(d, 1):
        check_dims_equal(ctx, d, target, what)


def _check_mask(ctx, mask, batch, seq, total, unidirectional: bool) -> None:
    """The mask_index shape rules (ONNX Runtime AttentionBase::CheckMask)."""
    rank = len(mask)
    if rank == 1:
        n = mask[0]
        if _is(n, batch) or _is(n, 2 * batch):
            return
        if _is(n, 3 * batch + 2):
            raise UnsupportedOperatorError(
                f"Attention node '{ctx.node.name or '<unnamed>'}': mask_index of shape (3 * batch + 2) "
                "(cumulated sequence lengths, ONNX Runtime CUDA only) is not supported")
        if isinstance(n, int) and isinstance(batch, int):
            ctx.fail(f"1-D mask_index has length {n}; expected batch_size {batch} or 2 * batch_size "
                     f"{2 * batch}", kind="MaskShapeMismatch")
        check_dims_equal(ctx, n, batch, "1-D mask_index length vs batch_size")
    elif rank == 2:
        if _is(mask[1], 1) and not _is(total, 1) and (_is(mask[0], 1) or _is(mask[0], batch)):
            return      # (batch or 1, 1): a broadcast dummy, same as no mask
        check_dims_equal(ctx, mask[0], batch, "2-D mask_index dim 0 vs batch_size")
        check_dims_equal(ctx, mask[1], total, "2-D mask_index dim 1 vs total_sequence_length")
    elif rank == 3:
        check_dims_equal(ctx, mask[0], batch, "3-D mask_index dim 0 vs batch_size")
        check_dims_equal(ctx, mask[1], seq, "3-D mask_index dim 1 vs sequence_length")
        check_dims_equal(ctx, mask[2], total, "3-D mask_index dim 2 vs total_sequence_length")
    elif rank == 4:
        if unidirectional:
            ctx.fail("a 4-D mask_index needs unidirectional=0", kind="InvalidAttribute")
        check_dims_equal(ctx, mask[0], batch, "4-D mask_index dim 0 vs batch_size")
        check_dims_equal(ctx, mask[1], 1, "4-D mask_index dim 1")
        check_dims_equal(ctx, mask[2], mask[3], "4-D mask_index dims 2 and 3 (max_sequence_length)")
        if not ctx.assume(mask[2], ">=", total):
            ctx.fail(f"4-D mask_index max_sequence_length {mask[2]} < total_sequence_length {total}",
                     kind="MaskShapeMismatch")
    else:
        ctx.fail(f"mask_index must have rank 1, 2, 3 or 4, got rank {rank}", kind="InvalidRank")


@lib.op("Attention", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0, 2))
def _attention_shape(ctx):
    """Attention: multi-head self-attention, bidirectional (BERT) or unidirectional (GPT-2).

    Inputs: input (batch, seq, input_hidden); weights (input_hidden, hidden + hidden +
    v_hidden) (hidden = v_hidden = weights.shape[1] / 3 unless qkv_hidden_sizes); optional
    bias (hidden + hidden + v_hidden); optional mask_index (int32; the forms in the module
    docstring); optional past (2, batch, num_heads, past_seq, head_size); optional
    attention_bias (batch or 1, num_heads or 1, seq, total_seq); optional
    past_sequence_length (ignored: only read with past_present_share_buffer).
    Outputs: output (batch, seq, v_hidden); optional present (2, batch, num_heads,
    past_seq + seq, head_size), past and this step's K and V.
    Attributes: num_heads (required), unidirectional, qkv_hidden_sizes, mask_filter_value
    (default -10000), scale (default 1/sqrt(head_size)). do_rotary=1, past_present_share_buffer=1
    and the (3 * batch + 2) mask_index raise UnsupportedOperatorError.
    Raises ShapeInferenceError for wrong ranks, a weights/bias/past/attention_bias/mask_index
    dim that does not fit, or hidden sizes not divisible by num_heads.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.Attention.
    """
    heads, sizes, _, _, unidirectional = _attrs(ctx)
    n_out = max(1, ctx.num_outputs)
    for i, what in ((0, "input"), (1, "weights"), (2, "bias"), (4, "past"), (5, "attention_bias")):
        dt = ctx.dtype(i) if ctx.has_input(i) else None
        if dt is not None and np.dtype(dt).kind != "f":
            ctx.fail(f"{what} has dtype {dt}, expected a float tensor", kind="InvalidDtype")
    x = _rank(ctx, 0, (3,), "input")
    w = _rank(ctx, 1, (2,), "weights")
    bias = _rank(ctx, 2, (1,), "bias")
    mask = _rank(ctx, 3, (1, 2, 3, 4), "mask_index")
    past = _rank(ctx, 4, (5,), "past")
    attn_bias = _rank(ctx, 5, (4,), "attention_bias")
    if x is None or w is None:
        return [None] * n_out
    batch, seq = x[0], x[1]
    check_dims_equal(ctx, w[0], x[2], "weights dim 0 vs input hidden size (input dim 2)")
    width = w[1]
    if bias is not None:
        check_dims_equal(ctx, bias[0], width, "bias length vs weights dim 1")
    if sizes is not None:
        q_hidden, k_hidden, v_hidden = sizes
        check_dims_equal(ctx, width, q_hidden + k_hidden + v_hidden, "weights dim 1 vs sum of qkv_hidden_sizes")
    else:
        message = f"weights dim 1 ({width}) must be 3 * hidden_size with hidden_size divisible by num_heads {heads}"
        require(ctx, width % 3, "==", 0, message, "HiddenSizeMismatch")
        require(ctx, (width // 3) % heads, "==", 0, message, "HiddenSizeMismatch")
        q_hidden = k_hidden = v_hidden = width // 3
    head_size = k_hidden // heads
    past_seq = 0
    if past is not None:
        if sizes is not None and k_hidden != v_hidden:
            ctx.fail("past needs equal K and V hidden sizes", kind="HiddenSizeMismatch")
        check_dims_equal(ctx, past[0], 2, "past dim 0")
        check_dims_equal(ctx, past[1], batch, "past dim 1 vs batch_size")
        check_dims_equal(ctx, past[2], heads, "past dim 2 vs num_heads")
        check_dims_equal(ctx, past[4], head_size, "past dim 4 vs head_size")
        past_seq = past[3]
    total = past_seq + seq
    if mask is not None:
        _check_mask(ctx, mask, batch, seq, total, unidirectional)
    if attn_bias is not None:
        _one_or(ctx, attn_bias[0], batch, "attention_bias dim 0 (batch_size or 1)")
        _one_or(ctx, attn_bias[1], heads, "attention_bias dim 1 (num_heads or 1)")
        check_dims_equal(ctx, attn_bias[2], seq, "attention_bias dim 2 vs sequence_length")
        check_dims_equal(ctx, attn_bias[3], total, "attention_bias dim 3 vs total_sequence_length")
    out = [(batch, seq, v_hidden)]
    if n_out > 1:
        if ctx.node.outputs[1] and sizes is not None and k_hidden != v_hidden:
            ctx.fail("present needs equal K and V hidden sizes", kind="HiddenSizeMismatch")
        out.append((2, batch, heads, total, head_size))
    return out[:n_out]


def _attention_prepare(ctx):
    heads, sizes, scale, mask_filter, unidirectional = _attrs(ctx)
    want_present = ctx.num_outputs > 1 and bool(ctx.node.outputs[1])
    return heads, sizes, scale, np.float32(mask_filter), unidirectional, want_present


def _mask_keep(mask: np.ndarray, batch: int, seq: int, past: int, total: int):
    """The mask_index as a boolean "may attend" array broadcastable to (batch, heads, seq,
    total), or None (no mask)."""
    mask = np.asarray(mask)
    if mask.ndim == 1:
        n = mask.shape[0]
        if n not in (batch, 2 * batch):
            raise ValueError(f"1-D mask_index of length {n} is neither batch_size {batch} nor 2 * batch_size")
        end = mask[:batch]
        if end.size and end.min() < 0:
            raise ValueError(f"mask_index end positions must be >= 0, got {end.tolist()}")
        positions = np.arange(total)
        keep = positions < end[:, None]
        if n == 2 * batch:
            keep &= positions >= np.minimum(mask[batch:], total)[:, None]
        return keep[:, None, None, :]
    if mask.ndim == 2:
        if mask.shape == (batch, total):
            return (mask > 0)[:, None, None, :]
        return None     # (batch or 1, 1): broadcast dummy
    if mask.ndim == 3:
        return (mask > 0)[:, None, :, :]
    return mask[:, :, past:past + seq, :total] > 0


@lib.kernel("Attention", domain=DOMAIN, dtypes=[np.float32], prepare=_attention_prepare)
def _attention(inputs, outputs, prepared):
    heads, sizes, scale, mask_filter, unidirectional, want_present = prepared
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    mask = inputs[3] if len(inputs) > 3 else None
    past = inputs[4] if len(inputs) > 4 else None
    attn_bias = inputs[5] if len(inputs) > 5 else None
    batch, seq, _ = x.shape
    q_hidden, k_hidden, v_hidden = sizes if sizes is not None else (w.shape[1] // 3,) * 3
    head_size, v_head_size = q_hidden // heads, v_hidden // heads

    qkv = np.matmul(x, w)                                   # (B, S, Dq + Dk + Dv)
    if bias is not None:
        qkv += bias
    # (B, S, N, H) -> (B, N, S, H): views of the projection
    q = qkv[..., :q_hidden].reshape(batch, seq, heads, head_size).transpose(0, 2, 1, 3)
    k = qkv[..., q_hidden:q_hidden + k_hidden].reshape(batch, seq, heads, head_size).transpose(0, 2, 1, 3)
    v = qkv[..., q_hidden + k_hidden:].reshape(batch, seq, heads, v_head_size).transpose(0, 2, 1, 3)
    past_seq = past.shape[3] if past is not None else 0
    total = past_seq + seq
    present = outputs[1] if want_present and len(outputs) > 1 else None
    if present is not None:                                 # (2, B, N, P + S, H): past then K/V
        if past is not None:
            present[:, :, :, :past_seq] = past
        present[0, :, :, past_seq:] = k
        present[1, :, :, past_seq:] = v
        k, v = present[0], present[1]
    elif past is not None:
        k = np.concatenate((past[0], k), axis=2)
        v = np.concatenate((past[1], v), axis=2)

    y = outputs[0].reshape(batch, seq, heads, v_head_size).transpose(0, 2, 1, 3)
    if y.size == 0:
        return None
    if total == 0:
        y[...] = 0
        return None
    alpha = np.float32(scale) if scale else np.float32(1.0) / np.sqrt(np.float32(head_size))
    scores = np.matmul(q, k.swapaxes(-1, -2))               # (B, N, S, T)
    scores *= alpha
    if attn_bias is not None:
        scores += attn_bias
    if mask is not None:
        keep = _mask_keep(mask, batch, seq, past_seq, total)
        if keep is not None:
            scores += np.where(keep, np.float32(0), mask_filter)
    if unidirectional and seq > 1:
        scores[..., np.arange(total)[None, :] > past_seq + np.arange(seq)[:, None]] = _LOWEST
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    np.matmul(scores, v, out=y)                             # written as (B, S, N, Hv)
    return None


# ----------------------------------------------------------------------------------------
# RelativePositionBias
# ----------------------------------------------------------------------------------------

def _rpb_attrs(ctx) -> tuple:
    """(max_distance, is_bidirectional): max_distance is required and > 0; is_bidirectional
    is true only for 1 (ONNX Runtime's ``GetAttrOrDefault("is_bidirectional", 0) == 1``)."""
    max_distance = ctx.attr("max_distance")
    if max_distance is None:
        ctx.fail("attribute 'max_distance' is required", kind="MissingAttribute")
    max_distance = int(max_distance)
    if max_distance <= 0:
        ctx.fail(f"max_distance {max_distance} must be > 0", kind="InvalidAttribute")
    return max_distance, int(ctx.attr("is_bidirectional", 0)) == 1


def _rpb_length(ctx, i: int, what: str):
    """The value of the one-element int64 length input ``i`` (an int or a symbolic dim), or
    None when it is not known on the host."""
    if not ctx.has_input(i):
        ctx.fail(f"input {i} ({what}) is required", kind="MissingInput")
    dt = ctx.dtype(i)
    if dt is not None and np.dtype(dt) != _I64:
        ctx.fail(f"{what} has dtype {dt}, expected int64", kind="InvalidDtype")
    s = ctx.shape(i)
    if s is not None:
        require(ctx, numel(s), "==", 1, f"{what} must have one element, got shape {tuple(s)}", "InvalidShape")
    vals = value_list(ctx.value(i))
    if not vals:
        return None
    v = vals[0]
    return int(v) if isinstance(v, (int, np.integer)) else v


@lib.op("RelativePositionBias", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0), value_inputs=(1, 2))
def _rpb_shape(ctx):
    """RelativePositionBias: T5's binned relative position bias, ``output[0, h, i, j] =
    bias_table[bucket(j - i), h]`` read column-major (see the module docstring).

    Inputs: bias_table (num_buckets, num_heads), float32 or float16, whose memory is the
    (num_heads, num_buckets) transpose of the table; query_length and key_length, one int64
    each, equal (self attention only, as ONNX Runtime). Output: (1, num_heads, query_length,
    key_length), bias_table's dtype: a symbolic shape where the lengths come from shapes (the
    optimizer's graph: Shape -> Gather), data-dependent dims where they are unknown.
    Attributes: max_distance (required, > 0), is_bidirectional (default 0; 1: the encoder's
    buckets, half of them for keys after the query; else the decoder's, keys after the query
    sharing bucket 0). bucket(d), as the CUDA kernel (and transformers) compute it, with ``n``
    the number of buckets (halved when bidirectional, ``n`` added for d > 0), ``m = n // 2``,
    ``p = |d|`` (bidirectional) or ``max(-d, 0)``: ``p`` where ``p < m``, else
    ``min(m + int(log(p / m) / log(max_distance / m) * (n - m)), n - 1)`` in float32.
    Raises ShapeInferenceError for a missing max_distance, wrong ranks or dtypes, lengths that
    are not one element or differ, fewer than 4 (bidirectional) or 2 buckets, and a
    max_distance not above ``m`` (where the formula divides by log(1) = 0; onnxruntime's kernel
    has no check there).
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.RelativePositionBias.
    """
    max_distance, bidirectional = _rpb_attrs(ctx)
    dt = ctx.dtype(0)
    if dt is not None and np.dtype(dt) not in (_F32, _F16):
        ctx.fail(f"bias_table has dtype {dt}, expected float32 or float16", kind="InvalidDtype")
    table = _rank(ctx, 0, (2,), "bias_table")
    q = _rpb_length(ctx, 1, "query_length")
    k = _rpb_length(ctx, 2, "key_length")
    if q is None and k is None:
        q = k = ctx.new_dim()
    elif q is None:
        q = k
    elif k is None:
        k = q
    require(ctx, q, "==", k, f"query_length {q} != key_length {k}: relative position bias supports self "
            "attention only (query length equal to key length)", "LengthMismatch")
    require(ctx, q, ">=", 0, f"query_length {q} must be >= 0", "InvalidInput")
    if table is None:
        return [(1, ctx.new_dim(), q, k)]
    buckets, heads = table
    n = buckets // 2 if bidirectional else buckets
    require(ctx, n // 2, ">", 0, f"bias_table has {buckets} buckets, fewer than "
            f"{4 if bidirectional else 2} (is_bidirectional={int(bidirectional)})", "InvalidInput")
    require(ctx, max_distance, ">", n // 2, f"max_distance {max_distance} must exceed the {n // 2} exact buckets "
            f"of a {buckets}-bucket table", "InvalidInput")
    return [(1, heads, q, k)]


def _rpb_prepare(ctx):
    return _rpb_attrs(ctx)


def _relative_buckets(length: int, num_buckets: int, bidirectional: bool, max_distance: int) -> np.ndarray:
    """bucket(d) for the offsets d = j - i = -(length - 1) .. length - 1, in that order, as
    ONNX Runtime's CUDA kernel computes it: float32 ``logf(p / m) / logf(max_distance / m) *
    (n - m)`` truncated (the logarithms here rounded once from float64: a correctly rounded
    logf, which the exact cases of T5's defaults, p = 16, 32, 64 of m = 8, need)."""
    offsets = np.arange(1 - length, length, dtype=np.int64)
    n = num_buckets
    if bidirectional:
        n //= 2
        base = np.where(offsets > 0, n, 0)
        dist = np.abs(offsets)
    else:
        base = 0
        dist = -np.minimum(offsets, 0)
    exact = n // 2
    ratio = np.maximum(dist, exact).astype(np.float32) / np.float32(exact)
    numerator = np.log(ratio.astype(np.float64)).astype(np.float32)
    denominator = np.float32(np.log(np.float64(np.float32(max_distance) / np.float32(exact))))
    large = (numerator / denominator * np.float32(n - exact)).astype(np.int64)
    large += exact
    np.minimum(large, n - 1, out=large)
    return base + np.where(dist < exact, dist, large)


def _one_length(a: np.ndarray, what: str) -> int:
    if a.size != 1:
        raise ValueError(f"{what} must have one element, got shape {list(a.shape)}")
    return int(a.reshape(-1)[0])


@lib.kernel("RelativePositionBias", domain=DOMAIN, dtypes=[np.float32, np.float16], prepare=_rpb_prepare)
def _relative_position_bias(inputs, outputs, prepared):
    """The bias of each offset j - i gathered once per head ((num_heads, 2 * length - 1)), then
    its Toeplitz rows (a sliding-window view, row i starting at offset -i) copied out."""
    max_distance, bidirectional = prepared
    table = inputs[0]
    q = _one_length(inputs[1], "query_length")
    k = _one_length(inputs[2], "key_length")
    if q != k:
        raise ValueError(f"query_length {q} != key_length {k}: relative position bias supports self attention "
                         "only (query length equal to key length)")
    if q < 0:
        raise ValueError(f"query_length {q} must be >= 0")
    buckets, heads = table.shape
    out = outputs[0] if outputs and outputs[0] is not None else None
    result = None
    if out is None:                      # (lengths unknown at import: a data-dependent shape)
        out = np.empty((1, heads, q, k), table.dtype)
        result = [out]
    if q == 0 or heads == 0:
        return result
    columns = np.ascontiguousarray(table).reshape(heads, buckets)   # row h: head h's buckets
    by_offset = columns[:, _relative_buckets(q, buckets, bidirectional, max_distance)]
    windows = np.lib.stride_tricks.sliding_window_view(by_offset, q, axis=1)   # [h, s, j] = offset s + j
    np.copyto(out[0], windows[:, ::-1])                               # row i: s = q - 1 - i
    return result
