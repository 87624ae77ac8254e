"""com.microsoft fused BERT layer normalisations: ``EmbedLayerNormalization`` and
``SkipLayerNormalization``.

Source: ONNX Runtime contrib op docs (docs/ContribOperators.md in microsoft/onnxruntime),
sections ``com.microsoft.EmbedLayerNormalization`` and ``com.microsoft.SkipLayerNormalization``;
behaviour the docs leave open (default epsilon 1e-12, what ``mask_index`` holds, which skip
shapes broadcast) follows ONNX Runtime's CPU kernels (onnxruntime/contrib_ops/cpu/bert/
embed_layer_norm.cc, onnxruntime/contrib_ops/cpu/skip_layer_norm.cc) and was checked against
onnxruntime 1.32.

Both normalise over the last axis in float32: ``(x - mean) / sqrt(var + epsilon) * gamma + beta``
with the biased variance.
"""
from __future__ import annotations

import numpy as np

from dynashape import UnsupportedOperatorError
from dynashape.records import OpLibrary
from dynashape.shapes import check_dims_equal

DOMAIN = "com.microsoft"
#: ONNX Runtime's default epsilon of both ops (kDefaultEmbedLayerNormEpsilon, kDefaultSkipLayerNormEpsilon)
DEFAULT_EPSILON = 1e-12
_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)

lib = OpLibrary()


# ----------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------

def _epsilon(ctx) -> float:
    eps = float(ctx.attr("epsilon", DEFAULT_EPSILON))
    if eps < 0:
        ctx.fail(f"epsilon {eps} must be >= 0", kind="InvalidAttribute")
    return eps


def _check_rank(ctx, i: int, ranks: tuple, what: str):
    """Input ``i``'s shape (None when unknown); fails unless its rank is one of ``ranks``."""
    s = ctx.shape(i)
    if s is not None and len(s) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        ctx.fail(f"{what} must have rank {want}, got rank {len(s)}", kind="InvalidRank")
    return s


def _check_vector(ctx, i: int, hidden, what: str) -> None:
    """Optional input ``i`` (gamma/beta/bias) must be 1-D of length ``hidden``."""
    if not ctx.has_input(i):
        return
    s = _check_rank(ctx, i, (1,), what)
    if s is not None and hidden is not None:
        check_dims_equal(ctx, s[0], hidden, f"{what} length vs hidden size")


def _check_float(ctx, i: int, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and np.dtype(dt).kind != "f":
        ctx.fail(f"{what} has dtype {dt}, expected a float tensor", kind="InvalidDtype")


def _check_int32(ctx, i: int, what: str) -> None:
    dt = ctx.dtype(i)
    if ctx.has_input(i) and dt is not None and np.dtype(dt) != _I32:
        ctx.fail(f"{what} has dtype {dt}, expected int32", kind="InvalidDtype")


def _present(ctx) -> tuple:
    """Which of the node's outputs are wanted (named)."""
    return tuple(bool(o) for o in ctx.node.outputs)


def _normalize_last(src: np.ndarray, gamma: np.ndarray, beta, eps: float, out: np.ndarray):
    """``out = (src - mean) / sqrt(var + eps) * gamma + beta`` over the last axis, in the
    dtype of ``out`` (float32); ``out`` may be ``src``. Returns (mean, inv_std_dev), keepdims."""
    n = src.shape[-1]
    mean = np.mean(src, axis=-1, keepdims=True, dtype=out.dtype)
    np.subtract(src, mean, out=out)
    var = np.einsum("...i,...i->...", out, out)[..., None]
    var /= out.dtype.type(n) if n else out.dtype.type(1)
    var += out.dtype.type(eps)
    inv_std = np.reciprocal(np.sqrt(var, out=var), out=var)
    np.multiply(out, inv_std, out=out)
    np.multiply(out, gamma, out=out)
    if beta is not None:
        np.add(out, beta, out=out)
    return mean, inv_std


def _opt(inputs: list, i: int):
    return inputs[i] if i < len(inputs) else None


def _opt_out(outputs: list, i: int, wanted: tuple):
    return outputs[i] if i < len(wanted) and wanted[i] and i < len(outputs) else None


# ----------------------------------------------------------------------------------------
# SkipLayerNormalization
# ----------------------------------------------------------------------------------------

def _skip_ln_dtypes(ctx):
    t = ctx.dtype(0)
    return [t, _F32, _F32, t][:max(1, ctx.num_outputs)]


@lib.op("SkipLayerNormalization", since_version=1, domain=DOMAIN, infer_dtype=_skip_ln_dtypes)
def _skip_ln_shape(ctx):
    """SkipLayerNormalization: ``LayerNorm(input + skip [+ bias]) * gamma [+ beta]`` over the
    hidden (last) axis.

    Inputs: input (batch, seq, hidden) or (tokens, hidden); skip of the input's shape,
    (1, seq, hidden) or (seq, hidden) (its last two dims equal the input's); gamma (hidden);
    optional beta (hidden) and bias (hidden). Outputs: output (input's shape), optional
    mean and inv_std_var (input's shape with the hidden axis 1, float32) and optional
    input_skip_bias_sum (input's shape). Attribute epsilon (default 1e-12).
    Raises ShapeInferenceError for other ranks, mismatched skip/gamma/beta/bias dims or a
    missing gamma.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.SkipLayerNormalization.
    """
    _epsilon(ctx)
    _check_float(ctx, 0, "input")
    if not ctx.has_input(2):
        ctx.fail("input 2 (gamma) is required", kind="MissingInput")
    x = _check_rank(ctx, 0, (2, 3), "input")
    skip = _check_rank(ctx, 1, (2, 3), "skip")
    n = max(1, ctx.num_outputs)
    if x is None:
        return [None] * n
    hidden = x[-1]
    if skip is not None:
        if len(skip) > len(x):
            ctx.fail(f"skip has rank {len(skip)} > rank {len(x)} of input", kind="InvalidRank")
        check_dims_equal(ctx, skip[-1], hidden, "skip hidden size vs input hidden size")
        check_dims_equal(ctx, skip[-2], x[-2], "skip dim -2 vs input dim -2")
        if len(skip) == 3 and not skip[0] == 1:
            check_dims_equal(ctx, skip[0], x[0], "skip batch size (must be 1 or the input's)")
    for i, what in ((2, "gamma"), (3, "beta"), (4, "bias")):
        _check_vector(ctx, i, hidden, what)
    stats = tuple(x[:-1]) + (1,)
    return [tuple(x), stats, stats, tuple(x)][:n]


def _skip_ln_prepare(ctx):
    return _epsilon(ctx), _present(ctx)


@lib.kernel("SkipLayerNormalization", domain=DOMAIN, dtypes=[np.float32], prepare=_skip_ln_prepare,
            may_inplace=((0, 0),))
def _skip_ln(inputs, outputs, prepared):
    """input + skip (+ bias) into input_skip_bias_sum when it is wanted, else straight into
    the output, normalised there."""
    eps, wanted = prepared
    x, skip, gamma = inputs[0], inputs[1], inputs[2]
    beta, bias = _opt(inputs, 3), _opt(inputs, 4)
    y = outputs[0]
    total = _opt_out(outputs, 3, wanted)
    if total is None:
        total = y
    np.add(x, skip, out=total)
    if bias is not None:
        np.add(total, bias, out=total)
    mean, inv_std = _normalize_last(total, gamma, beta, eps, y)
    for k, value in ((1, mean), (2, inv_std)):
        out = _opt_out(outputs, k, wanted)
        if out is not None:
            np.copyto(out, value, casting="unsafe")


# ----------------------------------------------------------------------------------------
# EmbedLayerNormalization
# ----------------------------------------------------------------------------------------

def _embed_ln_dtypes(ctx):
    t = ctx.dtype(2)
    return [t, _I32, t][:max(1, ctx.num_outputs)]


@lib.op("EmbedLayerNormalization", since_version=1, domain=DOMAIN, infer_dtype=_embed_ln_dtypes)
def _embed_ln_shape(ctx):
    """EmbedLayerNormalization: ``LayerNorm(word_embedding[input_ids] + position_embedding[pos]
    [+ segment_embedding[segment_ids]]) * gamma + beta``, BERT's embedding layer.

    Inputs: input_ids (batch, seq) int32; optional segment_ids (batch, seq) int32;
    word_embedding (vocab, hidden); position_embedding (max_positions, hidden); optional
    segment_embedding (segments, hidden) (given together with segment_ids); gamma (hidden);
    beta (hidden); optional mask (batch, seq) int32; optional position_ids (batch, seq) or
    (1, seq) int32 (without it position s uses row s, so seq <= max_positions).
    Outputs: output (batch, seq, hidden); optional mask_index (batch) int32, the number of 1s
    in each mask row (zeros when there is no mask, as ONNX Runtime's kernel writes);
    optional embedding_sum (batch, seq, hidden), the sum before normalisation.
    Attributes: epsilon (default 1e-12); mask_index_type (shape-inference hint only: the
    mask_index output is written whenever it is requested).
    Raises ShapeInferenceError for wrong ranks, mismatched hidden sizes, segment_ids without
    segment_embedding (or the reverse) and a sequence longer than position_embedding.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.EmbedLayerNormalization.
    """
    _epsilon(ctx)
    for i, what in ((0, "input_ids"), (1, "segment_ids"), (7, "mask"), (8, "position_ids")):
        _check_int32(ctx, i, what)
    for i, what in ((2, "word_embedding"), (3, "position_embedding")):
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({what}) is required", kind="MissingInput")
        _check_float(ctx, i, what)
    dt = ctx.dtype(2)
    if dt is not None and np.dtype(dt) != _F32:
        raise UnsupportedOperatorError(f"EmbedLayerNormalization node '{ctx.node.name or '<unnamed>'}': "
                                       f"embeddings of dtype {dt} are not supported (float32 only)")
    for i, what in ((5, "gamma"), (6, "beta")):
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({what}) is required", kind="MissingInput")
    if ctx.has_input(1) != ctx.has_input(4):
        ctx.fail("segment_ids (input 1) and segment_embedding (input 4) must be given together",
                 kind="MissingInput")
    ids = _check_rank(ctx, 0, (2,), "input_ids")
    word = _check_rank(ctx, 2, (2,), "word_embedding")
    pos = _check_rank(ctx, 3, (2,), "position_embedding")
    seg_emb = _check_rank(ctx, 4, (2,), "segment_embedding") if ctx.has_input(4) else None
    hidden = word[1] if word is not None else None
    if hidden is not None:
        for s, what in ((pos, "position_embedding"), (seg_emb, "segment_embedding")):
            if s is not None:
                check_dims_equal(ctx, s[1], hidden, f"{what} hidden size vs word_embedding's")
    for i, what in ((5, "gamma"), (6, "beta")):
        _check_vector(ctx, i, hidden, what)
    n = max(1, ctx.num_outputs)
    if ids is None:
        return [None] * n
    for i, what in ((1, "segment_ids"), (7, "mask")):
        s = _check_rank(ctx, i, (2,), what) if ctx.has_input(i) else None
        if s is not None:
            check_dims_equal(ctx, s[0], ids[0], f"{what} batch size vs input_ids'")
            check_dims_equal(ctx, s[1], ids[1], f"{what} sequence length vs input_ids'")
    pid = _check_rank(ctx, 8, (2,), "position_ids") if ctx.has_input(8) else None
    if pid is not None:
        if not pid[0] == 1:
            check_dims_equal(ctx, pid[0], ids[0], "position_ids batch size (must be 1 or input_ids')")
        check_dims_equal(ctx, pid[1], ids[1], "position_ids sequence length vs input_ids'")
    elif pos is not None and not ctx.assume(pos[0], ">=", ids[1]):
        ctx.fail(f"sequence length {ids[1]} exceeds the {pos[0]} rows of position_embedding",
                 kind="PositionOutOfRange")
    out = (ids[0], ids[1], hidden)
    return [out, (ids[0],), out][:n]


def _embed_ln_prepare(ctx):
    return _epsilon(ctx), _present(ctx)


def _gather_rows(table: np.ndarray, index: np.ndarray, what: str, out=None) -> np.ndarray:
    """``table[index]`` (rows), failing on an index outside [0, rows) as ONNX Runtime does."""
    if index.size and (index.min() < 0 or index.max() >= table.shape[0]):
        bad = index[(index < 0) | (index >= table.shape[0])].reshape(-1)[0]
        raise IndexError(f"{what} {int(bad)} is out of range [0, {table.shape[0]})")
    return np.take(table, index, axis=0, out=out)


# The engine picks kernels by the dtype of input 0 (here the int32 input_ids), so this kernel
# takes any and the float32-only rule (T of ONNX Runtime's CPU kernel) is checked in inference.
@lib.kernel("EmbedLayerNormalization", domain=DOMAIN, prepare=_embed_ln_prepare)
def _embed_ln(inputs, outputs, prepared):
    eps, wanted = prepared
    ids, segment_ids, word, pos = inputs[0], inputs[1], inputs[2], inputs[3]
    seg_emb, gamma, beta = inputs[4], inputs[5], inputs[6]
    mask, position_ids = _opt(inputs, 7), _opt(inputs, 8)
    y = outputs[0]
    total = _opt_out(outputs, 2, wanted)
    if total is None:
        total = y           # normalised in place
    _gather_rows(word, ids, "input id", out=total)
    if position_ids is not None:
        total += _gather_rows(pos, position_ids, "position id")
    else:
        seq = ids.shape[1]
        if seq > pos.shape[0]:
            raise IndexError(f"sequence length {seq} exceeds the {pos.shape[0]} rows of position_embedding")
        total += pos[:seq]
    if segment_ids is not None:
        total += _gather_rows(seg_emb, segment_ids, "segment id")
    _normalize_last(total, gamma, beta, eps, y)
    mask_index = _opt_out(outputs, 1, wanted)
    if mask_index is not None:
        if mask is None:
            mask_index[...] = 0
        else:
            np.copyto(mask_index, np.count_nonzero(mask == 1, axis=-1), casting="unsafe")
