"""Recurrent layers: LSTM, GRU and RNN (all ONNX versions).

One shape function and one kernel engine serve the three ops; a per-op :class:`_Family`
holds what differs (gate count, activations, cell step). The kernel projects the whole
input sequence of every direction with one matmul, then loops over time steps only, each
step a handful of whole-batch matrix ops. ``sequence_lens`` is applied as a (seq, batch)
mask: past a sequence's end the state is carried and ``Y`` is zero, as in onnxruntime.

Computation is float32 (float64 for double inputs); float16/bfloat16 inputs are computed
in float32 and cast back into the outputs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dynashape.records import InferContext, OpLibrary, same_dtype
from dynashape.shapes import check_dims_equal

lib = OpLibrary()

_DIRECTIONS = {"forward": 1, "foward": 1, "reverse": 1, "bidirectional": 2}  # GRU-1 default: "foward"
_FLOAT_TYPES = {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)}


# activations (ONNX RNN spec "Activation functions"); each works in place and returns x --

def _sigmoid(x, a, b):
    # 0.5 * tanh(x / 2) + 0.5: no overflow in exp for large |x|
    np.multiply(x, 0.5, out=x)
    np.tanh(x, out=x)
    np.multiply(x, 0.5, out=x)
    np.add(x, 0.5, out=x)
    return x


def _tanh(x, a, b):
    return np.tanh(x, out=x)


def _relu(x, a, b):
    return np.maximum(x, 0, out=x)


def _affine(x, a, b):
    np.multiply(x, a, out=x)
    return np.add(x, b, out=x)


def _leaky_relu(x, a, b):
    np.copyto(x, x * x.dtype.type(a), where=x < 0)
    return x


def _thresholded_relu(x, a, b):
    x[x <= a] = 0  # x > alpha passes, as onnxruntime and ThresholdedRelu-10
    return x


def _scaled_tanh(x, a, b):
    np.multiply(x, b, out=x)
    np.tanh(x, out=x)
    return np.multiply(x, a, out=x)


def _hard_sigmoid(x, a, b):
    np.multiply(x, a, out=x)
    np.add(x, b, out=x)
    return np.clip(x, 0, 1, out=x)


def _elu(x, a, b):
    np.copyto(x, x.dtype.type(a) * np.expm1(np.minimum(x, 0)), where=x < 0)
    return x


def _softsign(x, a, b):
    return np.divide(x, 1 + np.abs(x), out=x)


def _softplus(x, a, b):
    return np.logaddexp(x, 0, out=x)


@dataclass(frozen=True)
class _ActSpec:
    fn: Callable
    uses_alpha: bool = False
    uses_beta: bool = False
    alpha: float = 0.0  # defaults as onnxruntime applies them
    beta: float = 0.0


_ACTIVATIONS = {
    "sigmoid": _ActSpec(_sigmoid),
    "tanh": _ActSpec(_tanh),
    "relu": _ActSpec(_relu),
    "affine": _ActSpec(_affine, True, True),
    "leakyrelu": _ActSpec(_leaky_relu, True, False, 0.01),
    "thresholdedrelu": _ActSpec(_thresholded_relu, True),
    "scaledtanh": _ActSpec(_scaled_tanh, True, True),
    "hardsigmoid": _ActSpec(_hard_sigmoid, True, True, 0.2, 0.5),
    "elu": _ActSpec(_elu, True, False, 1.0),
    "softsign": _ActSpec(_softsign),
    "softplus": _ActSpec(_softplus),
}


def _name(s) -> str:
    return s.decode() if isinstance(s, bytes) else str(s)


def _parse_activations(ctx: InferContext, fam: _Family, num_directions: int) -> list:
    """Activations as ``(fn, alpha, beta)`` triples, ``fam.n_acts`` per direction.

    ``activation_alpha``/``activation_beta`` are consumed in order by the activations
    that take them; missing values fall back to the defaults."""
    names = ctx.attr("activations")
    if not names:
        names = list(fam.default_acts) * num_directions
    names = [_name(n) for n in names]
    expected = fam.n_acts * num_directions
    if len(names) != expected:
        ctx.fail(f"activations has {len(names)} entries, expected {expected} "
                 f"({fam.n_acts} per direction, {num_directions} direction(s))",
                 kind="InvalidAttribute")
    alphas = list(ctx.attr("activation_alpha", None) or [])
    betas = list(ctx.attr("activation_beta", None) or [])
    out = []
    for n in names:
        spec = _ACTIVATIONS.get(n.lower())
        if spec is None:
            ctx.fail(f"unsupported activation '{n}', expected one of "
                     "Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                     "HardSigmoid, Elu, Softsign, Softplus", kind="InvalidAttribute")
        a = float(alphas.pop(0)) if spec.uses_alpha and alphas else spec.alpha
        b = float(betas.pop(0)) if spec.uses_beta and betas else spec.beta
        out.append((spec.fn, a, b))
    return [tuple(out[d * fam.n_acts:(d + 1) * fam.n_acts]) for d in range(num_directions)]


def _act_slots(per_direction: list) -> tuple:
    """Per activation slot, one ``(fn, alpha, beta)`` for all directions when they agree,
    else one per direction (applied to that direction's slice)."""
    slots = []
    for k in range(len(per_direction[0])):
        triples = tuple(acts[k] for acts in per_direction)
        slots.append(triples[:1] if len(set(triples)) == 1 else triples)
    return tuple(slots)


def _act(slot, x):
    """Apply an activation slot in place to ``x`` [dirs, batch, n]; returns x."""
    if len(slot) == 1:
        fn, a, b = slot[0]
        return fn(x, a, b)
    for d, (fn, a, b) in enumerate(slot):
        fn(x[d], a, b)
    return x


# cell steps: all directions at once; arrays are [dirs, batch, ...] -----------------------

@dataclass
class _Step:
    """What a time step needs: weights, activations and options (all directions)."""
    Rt: np.ndarray                  # R^T per direction, [dirs, hidden, gates*hidden]
    acts: tuple                     # activation slots (see _act_slots)
    clip: float | None
    P: np.ndarray | None = None     # LSTM peepholes [3, dirs, 1, hidden] (i, o, f)
    input_forget: bool = False
    Rbh: np.ndarray | None = None   # GRU linear_before_reset recurrence bias [dirs, 1, hidden]
    linear_before_reset: bool = False


def _clip(x, clip):
    if clip is not None:
        np.clip(x, -clip, clip, out=x)
    return x


def _lstm_step(xw, h, c, s: _Step):
    H = h.shape[-1]
    g = np.matmul(h, s.Rt)
    g += xw  # gates i, o, f, c
    i, o, f, cc = g[..., :H], g[..., H:2 * H], g[..., 2 * H:3 * H], g[..., 3 * H:]
    f_act, g_act, h_act = s.acts
    if s.P is not None:
        i += s.P[0] * c
        f += s.P[2] * c
        _clip(i, s.clip)
        _clip(g[..., 2 * H:], s.clip)
    else:
        _clip(g, s.clip)
    if s.P is None and not s.input_forget:
        _act(f_act, g[..., :3 * H])  # i, o, f in one go
    else:
        _act(f_act, i)
        if s.input_forget:
            np.subtract(1, i, out=f)
        else:
            _act(f_act, f)
        if s.P is None:
            _act(f_act, o)
    _act(g_act, cc)
    c_new = f * c
    c_new += i * cc
    if s.P is not None:
        o += s.P[1] * c_new
        _act(f_act, _clip(o, s.clip))
    h_new = _act(h_act, c_new.copy())
    h_new *= o
    return h_new, c_new


def _gru_step(xw, h, c, s: _Step):
    H = h.shape[-1]
    f_act, g_act = s.acts
    if s.linear_before_reset:
        hr = np.matmul(h, s.Rt)
        zr = _act(f_act, _clip(xw[..., :2 * H] + hr[..., :2 * H], s.clip))
        hr_h = hr[..., 2 * H:]
        hr_h += s.Rbh
        hr_h *= zr[..., H:]
        hh = hr_h
        hh += xw[..., 2 * H:]
    else:
        zr = _act(f_act, _clip(xw[..., :2 * H] + np.matmul(h, s.Rt[..., :2 * H]), s.clip))
        hh = np.matmul(zr[..., H:] * h, s.Rt[..., 2 * H:])
        hh += xw[..., 2 * H:]
    _act(g_act, _clip(hh, s.clip))
    # H = (1 - z) * hh + z * h = hh + z * (h - hh)
    h_new = h - hh
    h_new *= zr[..., :H]
    h_new += hh
    return h_new, None


def _rnn_step(xw, h, c, s: _Step):
    g = np.matmul(h, s.Rt)
    g += xw
    return _act(s.acts[0], _clip(g, s.clip)), None


@dataclass(frozen=True)
class _Family:
    op_type: str
    gates: int
    n_acts: int
    default_acts: tuple
    n_outputs: int
    step: Callable
    is_lstm: bool = False


_FAMILIES = {
    "LSTM": _Family("LSTM", 4, 3, ("Sigmoid", "Tanh", "Tanh"), 3, _lstm_step, True),
    "GRU": _Family("GRU", 3, 2, ("Sigmoid", "Tanh"), 2, _gru_step),
    "RNN": _Family("RNN", 1, 1, ("Tanh",), 2, _rnn_step),
}


# shape inference ---------------------------------------------------------------------

def _direction(ctx: InferContext) -> tuple[str, int]:
    direction = _name(ctx.attr("direction", "forward"))
    if direction not in _DIRECTIONS:
        ctx.fail(f"direction '{direction}' is invalid, expected forward, reverse or bidirectional",
                 kind="InvalidAttribute")
    return direction, _DIRECTIONS[direction]


def _layout(ctx: InferContext) -> int:
    layout = int(ctx.attr("layout", 0)) if ctx.opset >= 14 else 0
    if layout not in (0, 1):
        ctx.fail(f"layout {layout} is invalid, expected 0 or 1", kind="InvalidAttribute")
    return layout


def _check_shape(ctx: InferContext, i: int, name: str, expected: tuple) -> None:
    shape = ctx.shape(i)
    if shape is None:
        return
    if len(shape) != len(expected):
        ctx.fail(f"{name} must have rank {len(expected)} (shape {expected}), got rank {len(shape)}",
                 kind="RankMismatch")
    for k, (a, b) in enumerate(zip(shape, expected)):
        check_dims_equal(ctx, a, b, f"{name} dim {k} (expected shape {expected})")


def _check_dtypes(ctx: InferContext, fam: _Family) -> None:
    dt = ctx.dtype(0)
    allowed = {str(d) for d in _FLOAT_TYPES} | ({"bfloat16"} if ctx.opset >= 22 else set())
    if dt is not None and np.dtype(dt).name not in allowed:
        ctx.fail(f"X has dtype {dt}, expected one of {sorted(allowed)}", kind="DtypeMismatch")
    n_in = 8 if fam.is_lstm else 6
    for i in (1, 2, 3, 5, 6, 7):
        if i < n_in and ctx.has_input(i) and dt is not None and ctx.dtype(i) != dt:
            ctx.fail(f"input {i} has dtype {ctx.dtype(i)}, expected X's dtype {dt}",
                     kind="DtypeMismatch")
    if ctx.has_input(4) and ctx.dtype(4) != np.dtype(np.int32):
        ctx.fail(f"sequence_lens has dtype {ctx.dtype(4)}, expected int32", kind="DtypeMismatch")


def _rnn_shape(ctx: InferContext):
    fam = _FAMILIES[ctx.node.op_type]
    n_in = 8 if fam.is_lstm else 6
    if ctx.num_inputs < 3 or ctx.num_inputs > n_in:
        ctx.fail(f"expected 3 to {n_in} inputs (X, W, R, ...), got {ctx.num_inputs}",
                 kind="InputCount")
    if ctx.num_outputs > fam.n_outputs:
        ctx.fail(f"expected at most {fam.n_outputs} outputs, got {ctx.num_outputs}",
                 kind="OutputCount")
    _check_dtypes(ctx, fam)
    _, nd = _direction(ctx)
    layout = _layout(ctx)
    _parse_activations(ctx, fam, nd)
    if fam.op_type == "LSTM" and int(ctx.attr("input_forget", 0)) not in (0, 1):
        ctx.fail("input_forget must be 0 or 1", kind="InvalidAttribute")
    x, w, r = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if x is None or w is None or r is None:
        return [None] * ctx.num_outputs
    for _i, name, s in ((0, "X", x), (1, "W", w), (2, "R", r)):
        if len(s) != 3:
            ctx.fail(f"{name} must have rank 3, got rank {len(s)}", kind="RankMismatch")
    seq, batch = (x[0], x[1]) if layout == 0 else (x[1], x[0])
    hidden = ctx.attr("hidden_size")
    if hidden is None:
        hidden = r[2]
    else:
        hidden = int(hidden)
        if hidden <= 0:
            ctx.fail(f"hidden_size must be positive, got {hidden}", kind="InvalidAttribute")
    G = fam.gates
    _check_shape(ctx, 1, "W", (nd, G * hidden, x[2]))
    _check_shape(ctx, 2, "R", (nd, G * hidden, hidden))
    if ctx.has_input(3):
        _check_shape(ctx, 3, "B", (nd, 2 * G * hidden))
    if ctx.has_input(4):
        _check_shape(ctx, 4, "sequence_lens", (batch,))
    state = (nd, batch, hidden) if layout == 0 else (batch, nd, hidden)
    if ctx.has_input(5):
        _check_shape(ctx, 5, "initial_h", state)
    if fam.is_lstm and ctx.has_input(6):
        _check_shape(ctx, 6, "initial_c", state)
    if fam.is_lstm and ctx.has_input(7):
        _check_shape(ctx, 7, "P", (nd, 3 * hidden))
    y = (seq, nd, batch, hidden) if layout == 0 else (batch, seq, nd, hidden)
    return [y, state, state][:ctx.num_outputs]


@lib.op("LSTM", since_version=(1, 7, 14, 22), infer_dtype=same_dtype(0))
def _lstm_shape(ctx: InferContext):
    """Output shapes of LSTM: Y, Y_h, Y_c (each optional).

    X [seq, batch, input] (layout 1: [batch, seq, input]), W [dirs, 4*hidden, input],
    R [dirs, 4*hidden, hidden], B [dirs, 8*hidden], sequence_lens [batch] int32,
    initial_h/initial_c [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]),
    P [dirs, 3*hidden] -> Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]),
    Y_h/Y_c like initial_h. dtypes float16/float/double (+bfloat16 from 22).
    Raises ShapeInferenceError on mismatched shapes/dtypes and invalid attributes.
    Source: ONNX operator spec, LSTM-1/7/14/22.
    """
    return _rnn_shape(ctx)


@lib.op("GRU", since_version=(1, 3, 7, 14, 22), infer_dtype=same_dtype(0))
def _gru_shape(ctx: InferContext):
    """Output shapes of GRU: Y, Y_h (each optional).

    As LSTM with 3 gates (W [dirs, 3*hidden, input], B [dirs, 6*hidden]), no initial_c/P.
    Raises ShapeInferenceError on mismatched shapes/dtypes and invalid attributes.
    Source: ONNX operator spec, GRU-1/3/7/14/22.
    """
    return _rnn_shape(ctx)


@lib.op("RNN", since_version=(1, 7, 14, 22), infer_dtype=same_dtype(0))
def _rnn_op_shape(ctx: InferContext):
    """Output shapes of RNN: Y, Y_h (each optional).

    As LSTM with 1 gate (W [dirs, hidden, input], B [dirs, 2*hidden]), no initial_c/P.
    Raises ShapeInferenceError on mismatched shapes/dtypes and invalid attributes.
    Source: ONNX operator spec, RNN-1/7/14/22.
    """
    return _rnn_shape(ctx)


# kernel ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Plan:
    fam: _Family
    num_directions: int
    reverse: tuple          # per direction
    hidden: int
    layout: int
    acts: tuple             # activation slots (_act_slots)
    clip: float | None
    input_forget: bool
    linear_before_reset: bool
    wanted: tuple           # which outputs are present
    cdt: np.dtype           # compute dtype
    out_dtype: np.dtype


def _prepare(ctx: InferContext) -> _Plan:
    fam = _FAMILIES[ctx.node.op_type]
    direction, nd = _direction(ctx)
    reverse = (direction == "reverse",) if nd == 1 else (False, True)
    hidden = ctx.attr("hidden_size")
    hidden = int(hidden) if hidden is not None else int(ctx.shape(2)[2])
    clip = ctx.attr("clip")
    lbr = bool(ctx.attr("linear_before_reset", 0)) if ctx.opset >= 3 else False
    cdt = np.dtype(np.float64) if ctx.dtype(0) == np.float64 else np.dtype(np.float32)
    wanted = tuple(bool(name) for name in ctx.node.outputs)
    return _Plan(fam, nd, reverse, hidden, _layout(ctx), _act_slots(_parse_activations(ctx, fam, nd)),
                 None if clip is None else float(clip), bool(ctx.attr("input_forget", 0)),
                 lbr, wanted, cdt, np.dtype(ctx.dtype(0)))


def _state(inputs, i, plan: _Plan, batch: int) -> np.ndarray:
    """Initial state input ``i`` as [dirs, batch, hidden] in the compute dtype (zeros if absent)."""
    x = inputs[i] if i < len(inputs) else None
    if x is None:
        return np.zeros((plan.num_directions, batch, plan.hidden), plan.cdt)
    x = x.astype(plan.cdt, copy=False)
    return x.transpose(1, 0, 2) if plan.layout == 1 else x


def _mask(seq_lens, seq: int, nd: int, plan: _Plan) -> np.ndarray | None:
    """[seq, dirs, batch, 1] bool in step order: the step is inside the batch entry's
    sequence; None when every sequence is full length."""
    if seq_lens is None:
        return None
    lens = seq_lens.astype(np.int64).reshape(-1)
    if lens.size == 0 or lens.min() >= seq:
        return None
    inside = np.arange(seq)[:, None] < lens[None, :]
    return _step_order(np.repeat(inside[:, None, :, None], nd, axis=1), plan, 1)


def _step_order(a: np.ndarray, plan: _Plan, axis: int) -> np.ndarray:
    """``a`` (time axis 0, direction axis ``axis``) with each reverse direction's time
    flipped, so that step t of every direction is ``a[t]``; its own inverse."""
    if not any(plan.reverse):
        return a
    out = a.copy()
    for d, rev in enumerate(plan.reverse):
        if rev:
            index = (slice(None),) * axis + (d,)
            out[index] = a[index][::-1]
    return out


def _projection(X, W, B, plan: _Plan) -> np.ndarray:
    """X @ W^T plus biases for every step and direction: [seq, dirs, batch, gates*hidden]."""
    seq, batch, inp = X.shape
    nd, GH = plan.num_directions, plan.fam.gates * plan.hidden
    xw = (X.reshape(seq * batch, inp) @ W.reshape(nd * GH, inp).T).reshape(seq, batch, nd, GH)
    xw = xw.transpose(0, 2, 1, 3)
    if B is not None:
        bias = B[:, :GH] + B[:, GH:]
        if plan.linear_before_reset:  # Rbh is applied inside r * (H Rh + Rbh)
            bias[:, 2 * plan.hidden:] = B[:, 2 * plan.hidden:GH]
        xw += bias[:, None, :]
    return _step_order(xw, plan, 1)


def _make_step(R, B, P, plan: _Plan) -> _Step:
    H, GH, nd = plan.hidden, plan.fam.gates * plan.hidden, plan.num_directions
    step = _Step(Rt=R.transpose(0, 2, 1), acts=plan.acts, clip=plan.clip,
                 P=None if P is None else P.reshape(nd, 3, 1, H).transpose(1, 0, 2, 3),
                 input_forget=plan.input_forget, linear_before_reset=plan.linear_before_reset)
    if plan.linear_before_reset:
        step.Rbh = (np.zeros((nd, 1, H), plan.cdt) if B is None
                    else B[:, None, GH + 2 * H:])
    return step


def _run(xw, step: _Step, h, c, mask, Y, plan: _Plan):
    """Run every direction over all steps (step order); fills Y (if given), returns (h, c)."""
    for t in range(xw.shape[0]):
        h_new, c_new = plan.fam.step(xw[t], h, c, step)
        if mask is not None:
            m = mask[t]
            if Y is not None:
                np.copyto(Y[t], h_new, where=m)  # Y is zero past a sequence's end
            h = np.where(m, h_new, h)
            if c_new is not None:
                c = np.where(m, c_new, c)
        else:
            if Y is not None:
                Y[t] = h_new
            h, c = h_new, c_new
    return h, c


def _rnn_compute(inputs, outputs, plan: _Plan, run: Callable = None):
    """LSTM/GRU/RNN kernel: inputs as the op's spec lists them (None for absent ones);
    fills the present outputs Y, Y_h (, Y_c) in the input dtype (computed in float32, or
    float64 for double). ``run``: the time loop (default :func:`_run`; the compiled kernels
    pass theirs). Source: ONNX operator spec, LSTM-22 / GRU-22 / RNN-22."""
    cdt, nd, H = plan.cdt, plan.num_directions, plan.hidden

    def opt(i):
        x = inputs[i] if i < len(inputs) else None
        return None if x is None else x.astype(cdt, copy=False)

    X = opt(0)
    if plan.layout == 1:
        X = X.transpose(1, 0, 2)
    seq, batch = X.shape[0], X.shape[1]
    B, P = opt(3), opt(7) if plan.fam.is_lstm else None
    h0 = _state(inputs, 5, plan, batch)
    c0 = _state(inputs, 6, plan, batch) if plan.fam.is_lstm else None
    mask = _mask(inputs[4] if len(inputs) > 4 else None, seq, nd, plan)

    wanted = plan.wanted + (False,) * (plan.fam.n_outputs - len(plan.wanted))
    Y = np.zeros((seq, nd, batch, H), cdt) if wanted[0] else None
    xw = _projection(X, opt(1), B, plan)
    Y_h, Y_c = (run or _run)(xw, _make_step(opt(2), B, P, plan), h0, c0, mask, Y, plan)
    if Y is not None:
        Y = _step_order(Y, plan, 1)

    results = [Y, Y_h, Y_c]
    if plan.layout == 1:
        results = [None if Y is None else Y.transpose(2, 0, 1, 3), Y_h.transpose(1, 0, 2),
                   None if Y_c is None else Y_c.transpose(1, 0, 2)]
    return _write_outputs(results, outputs, wanted, plan.out_dtype)


def _write_outputs(results, outputs, wanted, dtype):
    """Copy results into the planned buffers; return arrays when some buffer is missing."""
    missing = False
    for k, out in enumerate(outputs):
        if not wanted[k]:
            continue
        if out is None:
            missing = True
        else:
            np.copyto(out, results[k], casting="unsafe")
    if not missing:
        return None
    return [out if out is not None or results[k] is None else results[k].astype(dtype)
            for k, out in enumerate(outputs)]


for _op in ("LSTM", "GRU", "RNN"):
    lib.kernel(_op, prepare=_prepare)(_rnn_compute)
