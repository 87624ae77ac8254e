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
from dynashape.shapes import check_dims_equal, check_unidirectional, normalize_axis

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


# ----------------------------------------------------------------------------------------
# RMS norm and LayerNormalization with ONNX Runtime's CPU numerics:
# SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization, LayerNormalization
# ----------------------------------------------------------------------------------------
#
# Each row of ``n`` normalised elements (float16 inputs converted to float32 first, float64
# kept) as onnxruntime 1.32's CPU kernels compute it:
#
# * SkipSimplifiedLayerNormalization (onnxruntime/contrib_ops/cpu/skip_layer_norm.cc):
#   s = input + skip [+ bias] in float32, ``denom = sqrt(sum(s * s) / n + epsilon)``,
#   ``y = s / denom * gamma``, inv_std_var = 1 / denom.
# * LayerNormalization and SimplifiedLayerNormalization (onnxruntime/core/providers/cpu/nn/
#   layer_norm_impl.cc, which hands float32 rows of >= 8 elements to MLAS's AVX2 kernel,
#   onnxruntime PR #31973): the mean from a float64 sum, the variance centred,
#   ``var = sum((x - mean)^2) / n`` in float32, ``inv = 1 / sqrt(var + epsilon)``,
#   ``y = (x - mean) * inv * scale [+ B]``; the RMS norm ``inv = 1 / sqrt(sum(x * x) / n +
#   epsilon)``, ``y = x * inv * scale``. (Its scalar path, taken for shorter rows, without
#   AVX2 and for float16, computes ``sum(x * x) / n - mean^2`` in float and divides by the
#   root: the same within float32 rounding except where the mean is large against the
#   spread, where that cancellation costs it digits that this kernel keeps.)
#
# The saved statistics are float32. numpy's sums add in another order than onnxruntime's
# loops: the results agree within a few float32 ulp.

#: ONNX Runtime's default epsilon of LayerNormalization / SimplifiedLayerNormalization
DEFAULT_LN_EPSILON = 1e-5
_F16 = np.dtype(np.float16)
_F64 = np.dtype(np.float64)
#: onnx.TensorProto.FLOAT: the only stash_type (type of the saved statistics) supported
_STASH_FLOAT = 1


def _compute_dtype(dt: np.dtype) -> np.dtype:
    """float64 stays float64; float32 and float16 compute in float32 (ONNX Runtime's T / float)."""
    return _F64 if np.dtype(dt) == _F64 else _F32


def _rows(a: np.ndarray, lead: int, n: int):
    """``a`` as a (lead, n) view of its own memory (C-contiguous), else None."""
    return a.reshape(lead, n) if a.flags.c_contiguous else None


def _split_rows(shape: tuple, axis: int) -> tuple:
    """(rows, row length): the products of ``shape[:axis]`` and ``shape[axis:]``."""
    lead = 1
    for d in shape[:axis]:
        lead *= d
    n = 1
    for d in shape[axis:]:
        n *= d
    return lead, n


def _check_norm_float(ctx, what: str = "X") -> None:
    dt = ctx.dtype(0)
    if dt is not None and np.dtype(dt) not in (_F32, _F16, _F64):
        ctx.fail(f"{what} has dtype {dt}, expected float32, float16 or float64", kind="InvalidDtype")


def _stash_type(ctx) -> None:
    stash = int(ctx.attr("stash_type", _STASH_FLOAT))
    if stash != _STASH_FLOAT:
        raise UnsupportedOperatorError(
            f"{ctx.node.op_type} node '{ctx.node.name or '<unnamed>'}': stash_type {stash} is not supported "
            f"by dynashape_example (only {_STASH_FLOAT}, float32 statistics, as ONNX Runtime's CPU kernel)")


def _ort_normalize(src: np.ndarray, scale: np.ndarray, bias, eps: float, mode: str, y: np.ndarray,
                   mean_out=None, inv_out=None) -> None:
    """Normalise the rows of ``src`` (rows, n; float32 or float64, the compute dtype) as
    onnxruntime's CPU kernels (see above): ``mode`` "centred" (LayerNormalization), "rms"
    (SimplifiedLayerNormalization) or "rms_div" (SkipSimplifiedLayerNormalization's division
    by the root). Writes ``y`` (any float dtype, ``rows * n`` elements; it may share ``src``'s
    memory) and the optional ``mean_out`` / ``inv_out`` (``rows`` elements, any shape).
    ``scale`` / ``bias`` are (n,) vectors in the compute dtype."""
    cdt = src.dtype
    t = cdt.type
    rows, n = src.shape
    size = t(n)
    work = _rows(y, rows, n) if y.dtype == cdt else None
    direct = work is not None
    if not direct:
        work = np.empty(src.shape, cdt)
    mean = None
    if mode == "centred":
        mean = np.add.reduce(src, axis=1, dtype=_F64)
        mean /= n
        mean = mean.astype(cdt, copy=False)
        np.subtract(src, mean[:, None], out=work)
        var = np.einsum("ij,ij->i", work, work)
    else:
        var = np.einsum("ij,ij->i", src, src)
    var /= size
    var += t(eps)
    root = np.sqrt(var, out=var)
    inv = np.divide(t(1), root)
    if mode == "centred":
        np.multiply(work, inv[:, None], out=work)
    elif mode == "rms":
        np.multiply(src, inv[:, None], out=work)
    else:
        np.divide(src, root[:, None], out=work)
    np.multiply(work, scale, out=work)
    if bias is not None:
        np.add(work, bias, out=work)
    if not direct:
        np.copyto(y, work.reshape(y.shape), casting="unsafe")
    if mean_out is not None:
        np.copyto(mean_out, mean.reshape(mean_out.shape), casting="unsafe")
    if inv_out is not None:
        np.copyto(inv_out, inv.reshape(inv_out.shape), casting="unsafe")


def _param_vector(p: np.ndarray, normalized: tuple, cdt: np.dtype) -> np.ndarray:
    """scale / bias broadcast to the normalised shape, flattened, in the compute dtype."""
    if p.shape != normalized:
        p = np.broadcast_to(p, normalized)
    return np.ascontiguousarray(p, dtype=cdt).reshape(-1)


# SkipSimplifiedLayerNormalization ---------------------------------------------------------

def _skip_simplified_dtypes(ctx):
    t = ctx.dtype(0)
    return [t, _F32, _F32, t][:max(1, ctx.num_outputs)]


@lib.op("SkipSimplifiedLayerNormalization", since_version=1, domain=DOMAIN, infer_dtype=_skip_simplified_dtypes)
def _skip_simplified_shape(ctx):
    """SkipSimplifiedLayerNormalization: RMS norm of ``input + skip [+ bias]`` over the hidden
    (last) axis, ``s / sqrt(mean(s^2) + epsilon) * gamma`` (no mean is subtracted, no beta).

    Inputs: input (batch, seq, hidden) or (tokens, hidden), float32 or float16; skip of the
    input's shape, (1, seq, hidden) or (seq, hidden) (its last two dims equal the input's);
    gamma (hidden); optional bias (hidden) (input 3). Outputs: output (input's shape);
    optional mean (input's shape with the hidden axis 1, float32: unused by the op, written
    as zeros as ONNX Runtime 1.32 returns it); optional inv_std_var (that shape, float32:
    1 / sqrt(mean(s^2) + epsilon)); optional input_skip_bias_sum (input's shape, the input's
    dtype: s). Attribute epsilon (default 1e-12, ONNX Runtime's kDefaultSkipLayerNormEpsilon).
    float16 inputs are summed and normalised in float32 and rounded once (the sum output too).
    Raises ShapeInferenceError for other ranks or dtypes, mismatched skip/gamma/bias dims or
    a missing gamma.
    Source: ONNX Runtime docs/ContribOperators.md, section
    com.microsoft.SkipSimplifiedLayerNormalization; CPU kernel contrib_ops/cpu/skip_layer_norm.cc.
    """
    _epsilon(ctx)
    dt = ctx.dtype(0)
    if dt is not None and np.dtype(dt) not in (_F32, _F16):
        ctx.fail(f"input has dtype {dt}, expected float32 or float16", kind="InvalidDtype")
    if not ctx.has_input(2):
        ctx.fail("input 2 (gamma) is required", kind="MissingInput")
    x = _check_rank(ctx, 0, (2, 3), "input")
    skip = _check_rank(ctx, 1, (2, 3), "skip")
    n = max(1, ctx.num_outputs)
    if n > 4:
        ctx.fail(f"{n} outputs given, at most 4 (output, mean, inv_std_var, input_skip_bias_sum)",
                 kind="TooManyOutputs")
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
    for i, what in ((2, "gamma"), (3, "bias")):
        _check_vector(ctx, i, hidden, what)
    stats = tuple(x[:-1]) + (1,)
    return [tuple(x), stats, stats, tuple(x)][:n]


def _skip_simplified_prepare(ctx):
    return _epsilon(ctx), _present(ctx)


@lib.kernel("SkipSimplifiedLayerNormalization", domain=DOMAIN, dtypes=[np.float32, np.float16],
            prepare=_skip_simplified_prepare)
def _skip_simplified(inputs, outputs, prepared):
    """s = input + skip (+ bias) in float32, into input_skip_bias_sum (float32 input, when
    wanted) or the output buffer, then the RMS norm of s into the output."""
    eps, wanted = prepared
    x, skip, gamma = inputs[0], inputs[1], inputs[2]
    bias = _opt(inputs, 3)
    y = outputs[0]
    total_out = _opt_out(outputs, 3, wanted)
    if x.dtype == _F32:
        total = total_out if total_out is not None else y
        np.add(x, skip, out=total)
        if bias is not None:
            np.add(total, bias, out=total)
    else:   # float16: the halves' sum in float32 (exact), rounded once into the sum output
        total = np.add(x, skip, dtype=_F32)
        if bias is not None:
            np.add(total, bias, out=total, dtype=_F32)
        if total_out is not None:
            np.copyto(total_out, total, casting="unsafe")
    lead, hidden = _split_rows(x.shape, x.ndim - 1)
    rows = _rows(total, lead, hidden)
    if rows is None:
        rows = np.ascontiguousarray(total).reshape(lead, hidden)
    mean_out = _opt_out(outputs, 1, wanted)
    if mean_out is not None:
        mean_out[...] = 0
    _ort_normalize(rows, np.asarray(gamma, dtype=_F32), None, eps, "rms_div", y, None, _opt_out(outputs, 2, wanted))


# SimplifiedLayerNormalization and LayerNormalization (com.microsoft) -----------------------

def _ln_dtypes(ctx):
    return [ctx.dtype(0)] + [_F32] * (max(1, ctx.num_outputs) - 1)


def _ln_common_shape(ctx, simplified: bool):
    """Shapes of (Simplified)LayerNormalization: Y as X, the statistics X.shape[:axis] with
    the normalised axes 1 (as ONNX Runtime's kernel allocates them)."""
    op = "SimplifiedLayerNormalization" if simplified else "LayerNormalization"
    _check_norm_float(ctx)
    _stash_type(ctx)
    eps = float(ctx.attr("epsilon", DEFAULT_LN_EPSILON))
    if eps < 0:
        ctx.fail(f"epsilon {eps} must be >= 0", kind="InvalidAttribute")
    max_in, max_out = (2, 2) if simplified else (3, 3)
    if any(ctx.has_input(i) for i in range(max_in, ctx.num_inputs)):
        ctx.fail(f"{op} takes at most {max_in} inputs, got {ctx.num_inputs}", kind="TooManyInputs")
    n = max(1, ctx.num_outputs)
    if n > max_out:
        ctx.fail(f"{op} has at most {max_out} outputs, got {n}", kind="TooManyOutputs")
    if not ctx.has_input(1):
        ctx.fail("input 1 (scale) is required", kind="MissingInput")
    x = ctx.shape(0)
    if x is None:
        return [None] * n
    if len(x) == 0:
        ctx.fail("input X must have rank >= 1", kind="InvalidRank")
    axis = normalize_axis(ctx, ctx.attr("axis", -1), len(x))
    normalized = tuple(x[axis:])
    for i, what in ((1, "scale"), (2, "B")):
        s = ctx.shape(i) if ctx.has_input(i) else None
        if s is not None:
            check_unidirectional(ctx, s, normalized, what)
    stats = tuple(x[:axis]) + (1,) * len(normalized)
    return [tuple(x)] + [stats] * (n - 1)


def _ln_prepare(ctx):
    rank = len(ctx.shape(0))
    axis = normalize_axis(ctx, ctx.attr("axis", -1), rank)
    return axis, float(ctx.attr("epsilon", DEFAULT_LN_EPSILON)), _present(ctx)


def _run_ln(inputs, outputs, prepared, simplified: bool) -> None:
    axis, eps, wanted = prepared
    x = inputs[0]
    cdt = _compute_dtype(x.dtype)
    normalized = x.shape[axis:]
    lead, n = _split_rows(x.shape, axis)
    rows = np.asarray(x, dtype=cdt).reshape(lead, n)     # a view where it can be, else a copy
    scale = _param_vector(inputs[1], normalized, cdt)
    bias = _opt(inputs, 2)
    if bias is not None:
        bias = _param_vector(bias, normalized, cdt)
    if simplified:
        _ort_normalize(rows, scale, None, eps, "rms", outputs[0], None, _opt_out(outputs, 1, wanted))
    else:
        _ort_normalize(rows, scale, bias, eps, "centred", outputs[0], _opt_out(outputs, 1, wanted),
                       _opt_out(outputs, 2, wanted))


@lib.op("SimplifiedLayerNormalization", since_version=1, domain="", infer_dtype=_ln_dtypes)
@lib.op("SimplifiedLayerNormalization", since_version=1, domain=DOMAIN, infer_dtype=_ln_dtypes)
def _simplified_ln_shape(ctx):
    """SimplifiedLayerNormalization (RMS norm): ``Y = X * inv_std_var * scale`` over the axes
    [axis, rank), ``inv_std_var = 1 / sqrt(mean(X^2) + epsilon)``.

    Inputs: X (float32, float16 or float64), scale (unidirectionally broadcastable to
    X.shape[axis:]). Outputs: Y (X's shape and dtype), optional inv_std_var
    (X.shape[:axis] + [1] * (rank - axis), float32). Attributes: axis (default -1), epsilon
    (default 1e-5), stash_type (only 1, float32 statistics: others raise
    UnsupportedOperatorError). float16 computes in float32, float64 in float64.
    ONNX Runtime registers this op in the default domain (``ai.onnx``, version 1, its contrib
    schema; no ONNX spec op of that name exists), where its transformer optimizer writes it
    (an optimized T5 encoder); this plugin registers it there and in ``com.microsoft``
    (version 1) with the same semantics, which the tests check against onnxruntime's
    ``ai.onnx`` kernel.
    Raises ShapeInferenceError for an axis out of range, a scale that does not broadcast, a
    missing scale or a non-float X.
    Source: ONNX Runtime's contrib schema SimplifiedLayerNormalization
    (onnxruntime/core/graph/contrib_ops/contrib_defs.cc; docs/ContribOperators.md lists only
    the com.microsoft ops) and CPU kernel core/providers/cpu/nn/layer_norm_impl.cc.
    """
    return _ln_common_shape(ctx, simplified=True)


@lib.op("LayerNormalization", since_version=1, domain=DOMAIN, infer_dtype=_ln_dtypes)
def _contrib_ln_shape(ctx):
    """LayerNormalization: ``Y = (X - mean) * inv_std_var * scale [+ B]`` over the axes
    [axis, rank), ``inv_std_var = 1 / sqrt(mean((X - mean)^2) + epsilon)`` (the mean summed in
    float64, the centred variance in float32, as onnxruntime 1.32's CPU kernel: see above).

    Inputs: X (float32, float16 or float64), scale, optional B (both unidirectionally
    broadcastable to X.shape[axis:]). Outputs: Y (X's shape and dtype), optional mean and
    inv_std_var (X.shape[:axis] + [1] * (rank - axis), float32). Attributes: axis (default
    -1), epsilon (default 1e-5), stash_type (only 1, float32 statistics: others raise
    UnsupportedOperatorError). float16 computes in float32, float64 in float64.
    ONNX Runtime registers this contrib schema in the default domain (``ai.onnx`` version 1,
    for models of opset < 17; ONNX's own LayerNormalization-17 replaces it, which dynashape's
    builtin ops implement); this plugin registers it in ``com.microsoft`` (version 1) with the
    same semantics, checked against onnxruntime's ``ai.onnx`` version-1 kernel.
    Raises ShapeInferenceError for an axis out of range, a scale/B that does not broadcast,
    a missing scale or a non-float X.
    Source: ONNX Runtime's contrib schema LayerNormalization
    (onnxruntime/core/graph/contrib_ops/contrib_defs.cc) and CPU kernel
    core/providers/cpu/nn/layer_norm_impl.cc.
    """
    return _ln_common_shape(ctx, simplified=False)


@lib.kernel("SimplifiedLayerNormalization", domain="", dtypes=[np.float32, np.float16, np.float64],
            prepare=_ln_prepare)
@lib.kernel("SimplifiedLayerNormalization", domain=DOMAIN, dtypes=[np.float32, np.float16, np.float64],
            prepare=_ln_prepare)
def _simplified_ln(inputs, outputs, prepared):
    _run_ln(inputs, outputs, prepared, simplified=True)


@lib.kernel("LayerNormalization", domain=DOMAIN, dtypes=[np.float32, np.float16, np.float64],
            prepare=_ln_prepare)
def _contrib_ln(inputs, outputs, prepared):
    _run_ln(inputs, outputs, prepared, simplified=False)
