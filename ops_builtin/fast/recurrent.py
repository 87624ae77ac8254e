"""The recurrent ops' whole time loops compiled: LSTM, GRU and RNN, one ``njit`` call per
node that runs every step of every direction, calling BLAS for the recurrent product
(the loops: :mod:`.loops.recurrent`).

Per node the kernel computes the input projection ``X @ W^T`` of all steps and directions
with one numpy matmul (into a planned scratch buffer), then calls the family's loop, which,
per direction and batch chunk (:class:`.loops.threaded.ThreadedLoop`: ``prange`` over
directions x batch chunks, cut into parts where ``SessionOptions.intra_op_num_threads``
> 1; each task runs its own whole time loop, so the threads never wait for each other), per
step:

* one BLAS product ``g = h @ R^T`` (two for GRU with ``linear_before_reset=0``: the z/r
  columns, then ``(r * h) @ Rh^T``), ``cblas_sgemm`` / ``cblas_dgemm`` called from the
  compiled code (:mod:`.blas` finds them in the BLAS numpy uses);
* one vectorised pass over the hidden units for the gates and the state update, writing
  ``Y`` in place (the output buffer itself when it is planned) at the step's time.

Float32 sigmoid and tanh are onnxruntime's MLAS rational approximations
(``loops.logistic``, ``loops.tanh``; no transcendental call, so LLVM vectorises the pass:
~0.6 ns per element against ~12 ns for a scalar libm call); float64 keeps libm's ``exp`` /
``tanh``. GRU computes its reset gate and candidate as onnxruntime's GRU does
(``loops.gru_reset_sigmoid``, ``loops.gru_tanh``). Constant W, R and B (initializers) are
transposed / summed once, at prepare.

``sequence_lens``: entry ``b`` runs its first ``len_b`` steps (a reverse direction its
times ``len_b - 1`` down to 0), its state carried past them and ``Y`` zero there, as in the
numpy kernel (``ops_builtin.rnn``). The numpy kernel runs instead (same ``prepare``) for
what the loops do not handle: ``clip``, activations other than the defaults, LSTM's
peepholes / ``input_forget``, ``layout=1``, float16 / bfloat16 (not in ``dtypes``), float64
above :data:`F64_COMPILED_MAX` cell elements per step, inputs whose shapes do not fit, and
a process where no BLAS with cblas ``?gemm`` symbols was found.

Source: ONNX operator spec, LSTM-22 / GRU-22 / RNN-22; onnxruntime's CPU kernels
(``onnxruntime/core/providers/cpu/rnn/deep_cpu_lstm.cc``, ``deep_cpu_gru.cc``, ``rnn.cc``,
``rnn_helpers.cc``) for the order of the additions and the activations.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dynashape.records import OpLibrary
from dynashape.threads import intra_op_threads
from dynashape.ops_builtin import nn, rnn

from . import blas
from .common import F64, FLOATS, PRIORITY, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.recurrent`), imported by the first call of one
loops = lazy_import(".loops.recurrent", __package__)


def blas_available() -> bool:
    """Whether the loops can run: cblas ``?gemm`` / ``?gemv`` found in a loaded BLAS (the
    one numpy uses), looked up once, at the first call (:func:`blas_source` says which; the
    loops module binds them for the compiled code). Without it the loops must not be called
    (their external symbols would not resolve) and the kernels run the numpy one."""
    return blas.routines() is not None


def blas_source() -> str:
    """Which symbols of which library the loops call, or why none."""
    return blas.source()


# ----------------------------------------------------------------------------------------
# the kernels
# ----------------------------------------------------------------------------------------

class _Constants(NamedTuple):
    """What the loops take of the weights, made once at prepare from constant inputs
    (initializers: read-only arrays, the same objects at every run), with the arrays they
    were made from (the kernel uses them only for those very arrays)."""
    W: object            # X's weights W, or None
    wt: object           # W^T (input, dirs * G*H) C-contiguous (BLAS's NN path: 2-3x the NT
                         # one's speed for a short sequence), or None
    R: object            # R and B (None: B absent), or None when not both constant
    B: object
    weights: tuple       # _weights(R, B) or ()


class _RecurrentPlan(NamedTuple):
    numpy: object        # rnn._Plan (the numpy kernel's)
    compiled: bool       # the loop handles this node (else the numpy kernel runs)
    rev: np.ndarray      # (dirs,) bool: the direction runs backwards
    consts: _Constants


_NO_CONSTANTS = _Constants(None, None, None, None, ())


def _names(ctx) -> list:
    return [rnn._name(a).lower() for a in (ctx.attr("activations") or [])]


def _loop_handles(ctx, plan) -> bool:
    """The loops' assumptions: default activations, no clip, LSTM without peepholes or
    input_forget, layout 0, a bound BLAS."""
    fam = plan.fam
    acts = _names(ctx)
    default = not acts or acts == [a.lower() for a in fam.default_acts] * plan.num_directions
    peepholes = fam.is_lstm and ctx.num_inputs > 7 and ctx.has_input(7)
    return (default and plan.clip is None and not plan.input_forget and not peepholes and plan.layout == 0
            and plan.cdt == np.dtype(ctx.dtype(0)) and blas_available())


def _weights(R, B, plan) -> tuple:
    """What the loops take of R and B: R^T per direction (dirs, H, G*H) C-contiguous (the
    BLAS product runs NN: OpenBLAS's NT path was several times slower for 6+ rows), the
    summed biases (dirs, G*H) and Rbh (dirs, H) (zeros unless linear_before_reset)."""
    hidden, nd = plan.hidden, plan.num_directions
    gh = plan.fam.gates * hidden
    rt = np.ascontiguousarray(R.transpose(0, 2, 1))
    rbh = np.zeros((nd, hidden), plan.cdt)
    if B is None:
        return rt, np.zeros((nd, gh), plan.cdt), rbh
    bias = B[:, :gh] + B[:, gh:]
    if plan.linear_before_reset:   # Rbh goes inside r * (h Rh^T + Rbh)
        bias[:, 2 * hidden:] = B[:, 2 * hidden:gh]
        rbh[:] = B[:, gh + 2 * hidden:]
    return rt, bias, rbh


def _read_only(a) -> bool:
    return a is not None and not a.flags.writeable


def _prepare(ctx) -> _RecurrentPlan:
    """The numpy kernel's plan, whether the loop runs, and (where W, R and B are constants,
    as initializers are) W^T, R^T and the biases made once instead of per run."""
    plan = rnn._prepare(ctx)
    compiled = _loop_handles(ctx, plan)
    consts = _NO_CONSTANTS
    if compiled:
        cdt, nd, gh = plan.cdt, plan.num_directions, plan.fam.gates * plan.hidden
        W, R, B = ctx.value(1), ctx.value(2), ctx.value(3) if ctx.has_input(3) else None
        wt = None
        if _read_only(W) and W.ndim == 3 and W.shape[:2] == (nd, gh):
            wt = np.ascontiguousarray(W.astype(cdt, copy=False).reshape(nd * gh, -1).T)
        if (_read_only(R) and R.shape == (nd, gh, plan.hidden)
                and (not ctx.has_input(3) or (_read_only(B) and B.shape == (nd, 2 * gh)))):
            weights = _weights(R.astype(cdt, copy=False), None if B is None else B.astype(cdt, copy=False), plan)
            consts = _Constants(W if wt is not None else None, wt, R, B, weights)
        elif wt is not None:
            consts = _Constants(W, wt, None, None, ())
    return _RecurrentPlan(plan, compiled, np.array(plan.reverse, np.bool_), consts)


def _scratch_spec(ctx) -> list:
    """The input projection X @ W^T of every step and direction, (seq * batch * dirs * G*H,)
    in the compute dtype, where the loop runs; none otherwise."""
    plan = rnn._prepare(ctx)
    if not _loop_handles(ctx, plan):
        return []
    x = ctx.shape(0)
    return [((x[0] * x[1] * (plan.num_directions * plan.fam.gates * plan.hidden),), plan.cdt)]


#: float64 cell elements per step (directions x batch x hidden) up to which the compiled
#: loop runs: its exp / tanh are scalar libm calls (~12 ns each, 5 per LSTM cell) where
#: numpy's float64 tanh is SIMD, so past ~1000 elements the numpy loop's ~20 calls per
#: step cost less (measured, LSTM / GRU: hidden 64 x batch 1 1.8x / 2.3x faster compiled,
#: 64 x 8 x 2 directions 1.0x / 0.5x; float32 has no such limit)
F64_COMPILED_MAX = 512

_NO_LENS = np.empty(0, np.int64)
_NO_Y = {np.dtype(np.float32): np.empty((0, 0, 0, 0), np.float32), np.dtype(np.float64): np.empty((0, 0, 0, 0))}


def _buffer(outputs, k: int, shape: tuple, dtype) -> np.ndarray:
    """Planned output ``k`` where it can be written directly, else a new array."""
    out = outputs[k] if k < len(outputs) else None
    if out is not None and out.shape == shape and out.dtype == dtype and out.flags.c_contiguous:
        return out
    return np.empty(shape, dtype)


def _state(buf: np.ndarray, init) -> np.ndarray:
    if init is None:
        buf.fill(0)
    else:
        np.copyto(buf, init, casting="unsafe")
    return buf


def _shapes_fit(X, W, R, B, seq_lens, h0, c0, plan) -> bool:
    """The arrays have the shapes the loop indexes by (shape inference checks them where
    it knows the dims; the loop itself checks no bound)."""
    if X.ndim != 3:
        return False
    nd, hidden = plan.num_directions, plan.hidden
    gh, batch = plan.fam.gates * hidden, X.shape[1]
    return (W.shape == (nd, gh, X.shape[2]) and R.shape == (nd, gh, hidden)
            and (B is None or B.shape == (nd, 2 * gh)) and (seq_lens is None or seq_lens.size == batch)
            and all(s is None or s.shape == (nd, batch, hidden) for s in (h0, c0)))


def _numpy_kernel(inputs, outputs, plan):
    """The numpy kernel on the node's outputs (without this kernel's scratch buffer)."""
    return rnn._rnn_compute(inputs, outputs[:len(plan.wanted)], plan)


def _compute(inputs, outputs, p: _RecurrentPlan):
    """LSTM / GRU / RNN: the compiled time loop, or the numpy kernel (see the module
    docstring). Inputs as the op lists them, None for absent ones; fills Y, Y_h (, Y_c)."""
    plan = p.numpy
    if not p.compiled:
        return _numpy_kernel(inputs, outputs, plan)
    fam, cdt, nd, hidden = plan.fam, plan.cdt, plan.num_directions, plan.hidden
    gh = fam.gates * hidden
    n_out = len(plan.wanted)
    wanted = plan.wanted + (False,) * (fam.n_outputs - n_out)

    def opt(i):
        return inputs[i] if i < len(inputs) else None

    X, W, R, B = inputs[0], inputs[1], inputs[2], opt(3)
    if not _shapes_fit(X, W, R, B, opt(4), opt(5), opt(6) if fam.is_lstm else None, plan) or not compiled_ready():
        return _numpy_kernel(inputs, outputs, plan)
    seq, batch, inp = X.shape
    if cdt == F64 and nd * batch * hidden > F64_COMPILED_MAX:
        return _numpy_kernel(inputs, outputs, plan)
    xw = nn._scratch(outputs, n_out, seq * batch * nd * gh, cdt).reshape(seq * batch, nd * gh)
    consts = p.consts
    np.matmul(X.reshape(seq * batch, inp), consts.wt if consts.W is W else W.reshape(nd * gh, inp).T, out=xw)
    xw = xw.reshape(seq, batch, nd, gh)
    rt, bias, rbh = consts.weights if consts.weights and consts.R is R and consts.B is B else _weights(R, B, plan)
    seq_lens = opt(4)
    lens = _NO_LENS if seq_lens is None else np.clip(seq_lens.reshape(-1).astype(np.int64), 0, seq)
    rev = p.rev
    threads = intra_op_threads()
    chunks = 1 if threads <= 1 else max(1, min(batch, -(-threads // nd)))

    state = (nd, batch, hidden)
    y = _buffer(outputs, 0, (seq, nd, batch, hidden), cdt) if wanted[0] else _NO_Y[cdt]
    h = _state(_buffer(outputs, 1, state, cdt) if wanted[1] else np.empty(state, cdt), opt(5))
    c = None
    if fam.is_lstm:
        c = _state(_buffer(outputs, 2, state, cdt) if wanted[2] else np.empty(state, cdt), opt(6))
        loops.lstm_loop.run(nd * chunks, xw, rt, bias, h, c, lens, rev, y, chunks)
    elif fam.op_type == "GRU":
        loops.gru_loop.run(nd * chunks, xw, rt, bias, rbh, h, lens, rev, y, chunks, plan.linear_before_reset,
                           cdt.type(1))
    else:
        loops.rnn_loop.run(nd * chunks, xw, rt, bias, h, lens, rev, y, chunks)

    results = (y, h, c)
    missing = False
    for k in range(n_out):
        out = outputs[k] if k < len(outputs) else None
        if not wanted[k]:
            continue
        if out is None:
            missing = True
        elif out is not results[k]:
            np.copyto(out, results[k], casting="unsafe")
    if not missing:
        return None
    return [(outputs[k] if outputs[k] is not None else results[k]) if wanted[k] else None for k in range(n_out)]


for _op in ("LSTM", "GRU", "RNN"):
    lib.kernel(_op, dtypes=FLOATS, priority=PRIORITY, prepare=_prepare, scratch=_scratch_spec)(_compute)
