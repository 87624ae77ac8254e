"""Optimizer operators of the ``ai.onnx.preview.training`` domain: Adagrad, Momentum, Adam.

Each takes the learning rate R and the update count T (scalars), then its tensors in
groups (all X, then all G, then each state tensor) and returns the new X, then the new
state tensors, in the same order. Every update is elementwise on tensors of one shape;
the arithmetic runs in float64 and is stored in the tensors' type.

Source: ONNX operator spec (Operators.md, ai.onnx.preview.training): Adagrad-1,
Momentum-1, Adam-1.
"""
from __future__ import annotations

import numpy as np
from dynashape.records import OpLibrary
from dynashape.shapes import check_dims_equal, numel, require

DOMAIN = "ai.onnx.preview.training"
lib = OpLibrary()

_FLOATS = ("float32", "float64")

#: op -> (input tensors per optimised X (X, G, states...), outputs per X (X_new, states...), names)
_LAYOUT = {
    "Adagrad": (3, 2, ("X", "G", "H")),
    "Momentum": (3, 2, ("X", "G", "V")),
    "Adam": (4, 3, ("X", "G", "V", "H")),
}


def _groups(ctx) -> int:
    """The number of optimised tensors; fails unless inputs and outputs come in whole groups."""
    per_in, per_out, names = _LAYOUT[ctx.node.op_type]
    tensors = ctx.num_inputs - 2
    if tensors < per_in or tensors % per_in:
        ctx.fail(f"expected R, T and then {per_in} * n tensors ({', '.join(names)} for each of the n optimised "
                 f"tensors), got {ctx.num_inputs} inputs", kind="OptimizerInputCount")
    n = tensors // per_in
    if ctx.num_outputs != per_out * n:
        ctx.fail(f"{n} optimised tensors need {per_out * n} outputs, got {ctx.num_outputs}",
                 kind="OptimizerOutputCount")
    return n


def _check_scalar(ctx, i: int, what: str, allowed) -> None:
    dt = ctx.dtype(i)
    if dt is not None and np.dtype(dt).name not in allowed:
        ctx.fail(f"{what} has dtype {np.dtype(dt).name}, expected {' or '.join(allowed)}", kind="InvalidDtype")
    shape = ctx.shape(i)
    if shape is not None:
        require(ctx, numel(shape), "==", 1, f"{what} must be a scalar, got shape {tuple(shape)}", "NonScalarInput")


def _attr(ctx, name: str, default=None) -> float:
    v = ctx.attr(name, default)
    if v is None:
        ctx.fail(f"attribute '{name}' is required", kind="MissingAttribute")
    return float(v)


def _optimizer_shape(ctx):
    """Adagrad / Momentum / Adam: the new values of the optimised tensors, then their new
    states, each of its X's shape and type.

    Inputs: R (float/double scalar), T (int64 scalar), X_1..X_n, G_1..G_n, then the state
    tensors (Adagrad: H; Momentum: V; Adam: V, then H), all of X_i's shape and type.
    Raises: ShapeInferenceError kinds OptimizerInputCount, OptimizerOutputCount,
    DimMismatch, InvalidRank, InvalidDtype, NonScalarInput, MissingAttribute,
    InvalidAttribute. Source: ONNX operator spec, ai.onnx.preview.training Adagrad-1,
    Momentum-1, Adam-1.
    """
    n = _groups(ctx)
    per_in, _, names = _LAYOUT[ctx.node.op_type]
    _params(ctx)
    _check_scalar(ctx, 0, "R", _FLOATS)
    _check_scalar(ctx, 1, "T", ("int64",))
    shapes = []
    for i in range(n):
        x = ctx.shape(2 + i)
        dt = ctx.dtype(2 + i)
        if dt is not None and np.dtype(dt).name not in _FLOATS:
            ctx.fail(f"X_{i + 1} has dtype {np.dtype(dt).name}, expected float or double", kind="InvalidDtype")
        for k in range(1, per_in):
            j = 2 + k * n + i
            other, what = ctx.shape(j), f"{names[k]}_{i + 1}"
            if ctx.dtype(j) is not None and dt is not None and ctx.dtype(j) != dt:
                ctx.fail(f"{what} has dtype {np.dtype(ctx.dtype(j)).name}, X_{i + 1} has {np.dtype(dt).name}; "
                         "they must match", kind="InvalidDtype")
            if len(other) != len(x):
                ctx.fail(f"{what} has rank {len(other)}, X_{i + 1} has rank {len(x)}; they must have the same "
                         "shape", kind="InvalidRank")
            x = tuple(check_dims_equal(ctx, a, b, f"{what} and X_{i + 1} must have the same shape (axis {ax})")
                      for ax, (a, b) in enumerate(zip(x, other)))
        shapes.append(x)
    return shapes * (ctx.num_outputs // n)


def _optimizer_dtype(ctx):
    n = max((ctx.num_inputs - 2) // _LAYOUT[ctx.node.op_type][0], 1)
    return [ctx.dtype(2 + (k % n)) for k in range(ctx.num_outputs)]


def _params(ctx):
    """(n, attributes) of the node, validated."""
    op = ctx.node.op_type
    n = _groups(ctx)
    if op == "Adagrad":
        return n, (_attr(ctx, "norm_coefficient", 0.0), _attr(ctx, "decay_factor", 0.0), _attr(ctx, "epsilon", 1e-6))
    if op == "Momentum":
        mode = ctx.attr("mode")
        if mode not in ("standard", "nesterov"):
            ctx.fail(f"mode is {mode!r}, expected 'standard' or 'nesterov'", kind="InvalidAttribute")
        return n, (_attr(ctx, "norm_coefficient"), _attr(ctx, "alpha"), _attr(ctx, "beta"), mode == "nesterov")
    return n, (_attr(ctx, "norm_coefficient", 0.0), _attr(ctx, "norm_coefficient_post", 0.0),
               _attr(ctx, "alpha", 0.9), _attr(ctx, "beta", 0.999), _attr(ctx, "epsilon", 1e-6))


for _op in _LAYOUT:
    lib.op(_op, since_version=1, domain=DOMAIN, infer_dtype=_optimizer_dtype)(_optimizer_shape)


def _scalars(inputs):
    return float(np.asarray(inputs[0]).reshape(-1)[0]), int(np.asarray(inputs[1]).reshape(-1)[0])


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@lib.kernel("Adagrad", domain=DOMAIN, prepare=_params, dtypes=_FLOATS)
def _adagrad(inputs, outputs, prepared):
    """r = R / (1 + T decay); G' = norm X + G; H' = H + G'^2; X' = X - r G' / (sqrt(H') + eps)."""
    n, (norm, decay, eps) = prepared
    r, t = _scalars(inputs)
    r = r / (1.0 + t * decay)
    for i in range(n):
        x, g, h = (_f64(inputs[2 + k * n + i]) for k in range(3))
        g = norm * x + g
        h = h + g * g
        np.copyto(outputs[i], x - r * g / (np.sqrt(h) + eps), casting="unsafe")
        np.copyto(outputs[n + i], h, casting="unsafe")


@lib.kernel("Momentum", domain=DOMAIN, prepare=_params, dtypes=_FLOATS)
def _momentum(inputs, outputs, prepared):
    """G' = norm X + G; V' = alpha V + beta' G' (beta' = 1 at T = 0); X' = X - R V'
    (Nesterov: X' = X - R (G' + alpha V'))."""
    n, (norm, alpha, beta, nesterov) = prepared
    r, t = _scalars(inputs)
    beta = beta if t > 0 else 1.0
    for i in range(n):
        x, g, v = (_f64(inputs[2 + k * n + i]) for k in range(3))
        g = norm * x + g
        v = alpha * v + beta * g
        step = g + alpha * v if nesterov else v
        np.copyto(outputs[i], x - r * step, casting="unsafe")
        np.copyto(outputs[n + i], v, casting="unsafe")


@lib.kernel("Adam", domain=DOMAIN, prepare=_params, dtypes=_FLOATS)
def _adam(inputs, outputs, prepared):
    """G' = norm X + G; V' = a V + (1-a) G'; H' = b H + (1-b) G'^2; R' = R sqrt(1-b^T)/(1-a^T)
    for T > 0; X' = (1 - norm_post) (X - R' V' / (sqrt(H') + eps))."""
    n, (norm, norm_post, alpha, beta, eps) = prepared
    r, t = _scalars(inputs)
    if t > 0:
        r = r * np.sqrt(1.0 - beta ** t) / (1.0 - alpha ** t)
    for i in range(n):
        x, g, v, h = (_f64(inputs[2 + k * n + i]) for k in range(4))
        g = norm * x + g
        v = alpha * v + (1.0 - alpha) * g
        h = beta * h + (1.0 - beta) * g * g
        np.copyto(outputs[i], (1.0 - norm_post) * (x - r * v / (np.sqrt(h) + eps)), casting="unsafe")
        np.copyto(outputs[n + i], v, casting="unsafe")
        np.copyto(outputs[2 * n + i], h, casting="unsafe")
