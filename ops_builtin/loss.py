"""Loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both read class scores ``(N, C, d1, ..., dk)`` (k >= 0) and integer targets ``(N, d1, ...,
dk)``; the per-sample loss is ``-input[n, target, d...]`` (times ``weight[target]`` when a
weight is given, 0 where ``target == ignore_index``), then reduced: ``none`` keeps the
target's shape, ``sum`` and ``mean`` give a scalar (``mean`` divides by the sum of the
applied weights, or by the number of samples not ignored).

The kernels gather with one ``take_along_axis`` over a ``(N, C, D)`` view (D the product of
the d's); float16/bfloat16 are computed in float32 and cast back, float64 stays float64.
A target outside ``[0, C)`` that is not ``ignore_index`` fails with ``TargetOutOfRange``.

Source: ONNX operator spec (onnx/docs/Operators.md), NegativeLogLikelihoodLoss-12/13/22 and
SoftmaxCrossEntropyLoss-12/13.
"""
from __future__ import annotations

import numpy as np
from dynashape.dtypes import compute_dtype, is_float
from dynashape.errors import ShapeInferenceError
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_dims_equal

lib = OpLibrary()

__all__ = ["lib"]

_REDUCTIONS = ("none", "sum", "mean")
_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _reduction(ctx) -> str:
    red = ctx.attr("reduction", "mean")
    if isinstance(red, bytes):
        red = red.decode()
    if red not in _REDUCTIONS:
        ctx.fail(f"reduction '{red}' is not one of {list(_REDUCTIONS)}", kind="InvalidAttribute")
    return red


def _ignore_index(ctx):
    ii = ctx.attr("ignore_index")
    return None if ii is None else int(ii)


def _loss_shapes(ctx, what: str, target_what: str, weight_what: str):
    """Validate (scores, targets, weights); the loss shape (targets' shape or a scalar)."""
    x, t = ctx.shape(0), ctx.shape(1)
    dt = ctx.dtype(0)
    if dt is not None and not is_float(dt):
        ctx.fail(f"{what} has element type {dt}, expected a floating-point type", kind="UnsupportedDtype")
    tdt = ctx.dtype(1)
    if tdt is not None and np.dtype(tdt) not in _INDEX_DTYPES:
        ctx.fail(f"{target_what} has element type {tdt}, expected int32 or int64", kind="UnsupportedDtype")
    if ctx.has_input(2) and ctx.dtype(2) is not None and dt is not None and ctx.dtype(2) != dt:
        ctx.fail(f"{weight_what} has element type {ctx.dtype(2)}, expected {what}'s {dt}", kind="DtypeMismatch")
    reduction = _reduction(ctx)
    if x is None or t is None:
        return None, reduction
    if len(x) < 2:
        ctx.fail(f"{what} must have rank >= 2 (N, C, d1, ..., dk), got rank {len(x)}", kind="InvalidRank")
    if len(t) != len(x) - 1:
        ctx.fail(f"{target_what} must have rank {len(x) - 1} (N, d1, ..., dk), got rank {len(t)}",
                 kind="InvalidRank")
    dims = [check_dims_equal(ctx, t[0], x[0], f"{target_what} dim 0 (N) and {what} dim 0")]
    for j in range(1, len(t)):
        dims.append(check_dims_equal(ctx, t[j], x[j + 1], f"{target_what} dim {j} and {what} dim {j + 1}"))
    if ctx.has_input(2) and ctx.shape(2) is not None:
        w = ctx.shape(2)
        if len(w) != 1:
            ctx.fail(f"{weight_what} must be 1-D of C = {x[1]} values, got rank {len(w)}", kind="InvalidRank")
        check_dims_equal(ctx, w[0], x[1], f"{weight_what} length and the class count C ({what} dim 1)")
    return tuple(dims), reduction


def _check_targets(safe: np.ndarray, c: int, node: str, op: str) -> None:
    if safe.size == 0:
        return
    lo, hi = int(safe.min()), int(safe.max())
    if lo < 0 or hi >= c:
        bad = lo if lo < 0 else hi
        raise ShapeInferenceError(
            f"{op} node '{node}': target {bad} is out of range for C = {c} classes (valid: [0, {c - 1}] "
            "or ignore_index)", node=node, op_type=op, kind="TargetOutOfRange")


def _nll(logp: np.ndarray, target: np.ndarray, weight, ignore, reduction: str, cdtype, node: str, op: str):
    """The (reduced) loss of log-probabilities ``logp`` (N, C, ...) in ``cdtype``."""
    n, c = logp.shape[:2]
    d = int(np.prod(target.shape[1:], dtype=np.int64))
    lp = logp.reshape(n, c, d)
    t = target.reshape(n, d).astype(np.int64, copy=False)
    valid = None if ignore is None else t != ignore
    safe = t if valid is None else np.where(valid, t, 0)
    _check_targets(safe, c, node, op)
    loss = np.take_along_axis(lp, safe[:, None, :], axis=1)[:, 0, :]
    np.negative(loss, out=loss)
    if valid is not None:
        loss = np.where(valid, loss, 0).astype(cdtype, copy=False)   # an ignored -inf gives 0, not NaN
    w = None
    if weight is not None:
        w = weight.astype(cdtype, copy=False)[safe]
        if valid is not None:
            w *= valid
        loss *= w
    if reduction == "none":
        return loss.reshape(target.shape)
    total = loss.sum(dtype=cdtype)
    if reduction == "sum":
        return total
    if w is not None:
        return total / w.sum(dtype=cdtype)
    if valid is not None:
        return total / cdtype.type(np.count_nonzero(valid))
    return total / cdtype.type(loss.size)


# NegativeLogLikelihoodLoss ---------------------------------------------------------------

@lib.op("NegativeLogLikelihoodLoss", since_version=(12, 13, 22), infer_dtype=same_dtype(0))
def _nll_shape(ctx):
    """NegativeLogLikelihoodLoss: loss = -input[n, target[n, d...], d...] (* weight[target]).

    input (N, C, d1..dk) float, target (N, d1..dk) int32/int64, optional weight (C,).
    Output: target's shape (reduction 'none') or a scalar ('sum', 'mean': sum over the sum
    of the applied weights). Raises InvalidRank, DimMismatch, InvalidAttribute,
    UnsupportedDtype; at run time TargetOutOfRange. Source: ONNX operator spec,
    NegativeLogLikelihoodLoss-22 (-12, -13: the same without bfloat16).
    """
    dims, reduction = _loss_shapes(ctx, "input", "target", "weight")
    if reduction != "none":
        return [()]
    return [dims]


def _nll_prepare(ctx):
    return compute_dtype(ctx.dtype(0)), _ignore_index(ctx), _reduction(ctx), ctx.node.name


@lib.kernel("NegativeLogLikelihoodLoss", prepare=_nll_prepare)
def _nll_kernel(inputs, outputs, prepared):
    """NLL: gather -input at the targets, weight, mask ignore_index, reduce."""
    cdtype, ignore, reduction, node = prepared
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    loss = _nll(x.astype(cdtype, copy=False), target, weight, ignore, reduction, cdtype, node,
                "NegativeLogLikelihoodLoss")
    np.copyto(outputs[0], loss, casting="unsafe")


# SoftmaxCrossEntropyLoss -----------------------------------------------------------------

@lib.op("SoftmaxCrossEntropyLoss", since_version=(12, 13), infer_dtype=same_dtype(0))
def _sce_shape(ctx):
    """SoftmaxCrossEntropyLoss: NegativeLogLikelihoodLoss of LogSoftmax(scores, axis=1).

    scores (N, C, d1..dk) float, labels (N, d1..dk) int32/int64, optional weights (C,).
    Outputs: the loss (labels' shape for reduction 'none', else a scalar) and the optional
    log_prob (scores' shape). Raises InvalidRank, DimMismatch, InvalidAttribute,
    UnsupportedDtype; at run time TargetOutOfRange. Source: ONNX operator spec,
    SoftmaxCrossEntropyLoss-13 (-12: the same without bfloat16).
    """
    dims, reduction = _loss_shapes(ctx, "scores", "labels", "weights")
    loss = () if reduction != "none" else dims
    x = ctx.shape(0)
    return [loss, None if x is None else tuple(x)][:max(ctx.num_outputs, 1)]


def _wants_log_prob(ctx) -> bool:
    return ctx.num_outputs > 1 and bool(ctx.node.outputs[1])


def _sce_direct(ctx) -> bool:
    """The log_prob output is written directly (it is requested and in the compute dtype)."""
    return _wants_log_prob(ctx) and np.dtype(ctx.dtype(0)) == compute_dtype(ctx.dtype(0))


def _sce_scratch(ctx) -> list:
    """log-probabilities (unless computed in the log_prob output) and exp(x - max)."""
    shape, cdtype = tuple(ctx.shape(0)), compute_dtype(ctx.dtype(0))
    return [(shape, cdtype)] * (1 if _sce_direct(ctx) else 2)


def _sce_prepare(ctx):
    return (compute_dtype(ctx.dtype(0)), _ignore_index(ctx), _reduction(ctx), ctx.node.name, ctx.num_outputs,
            _sce_direct(ctx))


def _buffer(outputs: list, k: int, shape, dtype) -> np.ndarray:
    """Scratch buffer ``k`` viewed as ``shape``, or a new array when the engine planned none."""
    buf = outputs[k] if k < len(outputs) else None
    size = int(np.prod(shape, dtype=np.int64))
    if buf is None or buf.dtype != dtype or buf.size < size:
        return np.empty(shape, dtype)
    return buf.reshape(-1)[:size].reshape(shape)


@lib.kernel("SoftmaxCrossEntropyLoss", prepare=_sce_prepare, scratch=_sce_scratch)
def _sce_kernel(inputs, outputs, prepared):
    """SCE: a numerically stable log-softmax over axis 1 (into log_prob or scratch), then NLL."""
    cdtype, ignore, reduction, node, n, direct = prepared
    x, labels = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    log_out = outputs[1] if n > 1 else None
    if direct and log_out is not None:
        logp, k = log_out, n
    else:
        logp, k = _buffer(outputs, n, x.shape, cdtype), n + 1
    tmp = _buffer(outputs, k, x.shape, cdtype)
    xc = x.astype(cdtype, copy=False)
    if x.size:
        np.subtract(xc, xc.max(axis=1, keepdims=True), out=logp)
        np.exp(logp, out=tmp)
        logp -= np.log(tmp.sum(axis=1, keepdims=True, dtype=cdtype))
    loss = _nll(logp, labels, weight, ignore, reduction, cdtype, node, "SoftmaxCrossEntropyLoss")
    np.copyto(outputs[0], loss, casting="unsafe")
    if log_out is not None and logp is not log_out:
        np.copyto(log_out, logp, casting="unsafe")
