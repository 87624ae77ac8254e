"""The recurrent ops' time loops: one BLAS product and one compiled pass per step."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from dynashape.records import OpLibrary
from dynashape.ops_builtin import rnn

from .common import FLOATS, JIT, PRIORITY

lib = OpLibrary()


@njit(inline="always", **JIT)
def _sigmoid(v):
    return 1 / (1 + math.exp(-v))


@njit(**JIT)
def lstm_cell(g, xw, c, h, y, mask, has_mask):
    """One LSTM step of every direction and batch entry after ``g = h @ R^T`` (dirs, batch,
    4H; gates i, o, f, c): adds ``xw`` (the input projection and biases of this step),
    applies sigmoid / tanh / tanh (LSTM's defaults), updates ``c`` and ``h`` (dirs, batch, H)
    in place and writes ``y`` (this step of Y, or an empty array). Where ``mask`` (dirs,
    batch) is False the state is kept and y stays 0 (past the sequence's end)."""
    dirs, batch, gh = g.shape
    hidden = gh // 4
    write_y = y.size > 0
    for d in range(dirs):
        for b in range(batch):
            if has_mask and not mask[d, b]:
                continue
            for k in range(hidden):
                i = _sigmoid(g[d, b, k] + xw[d, b, k])
                o = _sigmoid(g[d, b, hidden + k] + xw[d, b, hidden + k])
                f = _sigmoid(g[d, b, 2 * hidden + k] + xw[d, b, 2 * hidden + k])
                cc = math.tanh(g[d, b, 3 * hidden + k] + xw[d, b, 3 * hidden + k])
                c_new = f * c[d, b, k] + i * cc
                h_new = o * math.tanh(c_new)
                c[d, b, k] = c_new
                h[d, b, k] = h_new
                if write_y:
                    y[d, b, k] = h_new


class _LSTMPlan(NamedTuple):
    numpy: object        # rnn._Plan
    compiled: bool       # LSTM's default activations, no clip, peepholes or input_forget


def _lstm_prepare(ctx) -> _LSTMPlan:
    plan = rnn._prepare(ctx)
    acts = ctx.attr("activations")
    default = not acts or [a.decode() if isinstance(a, bytes) else a for a in acts] == \
        ["Sigmoid", "Tanh", "Tanh"] * plan.num_directions
    peepholes = ctx.num_inputs > 7 and ctx.has_input(7)
    return _LSTMPlan(plan, default and plan.clip is None and not plan.input_forget and not peepholes)


#: cell elements per step (directions x batch x hidden) up to which the compiled time loop
#: wins: it saves ~20 numpy calls per step (~50 us) but computes sigmoid and tanh with
#: scalar libm calls (~100 ns per element for its 5 of them) where numpy's are SIMD
#: (benchmarks: lstm_small at batch 1 (128 elements) 1.27 -> 0.82 ms, at batch 8 (1024)
#: 19 -> 26 ms)
LSTM_COMPILED_MAX = 512


def _lstm_run(xw, step, h, c, mask, Y, plan):
    """The time loop: per step one BLAS ``h @ R^T`` and one compiled pass for the gates,
    the state update and this step of Y (the numpy loop makes ~20 calls per step); the
    numpy loop above LSTM_COMPILED_MAX cell elements per step."""
    if h.shape[0] * h.shape[1] * h.shape[2] > LSTM_COMPILED_MAX:
        return rnn._run(xw, step, h, c, mask, Y, plan)
    h = np.ascontiguousarray(h, dtype=plan.cdt).copy()
    c = np.ascontiguousarray(c, dtype=plan.cdt).copy()
    g = np.empty(h.shape[:2] + (step.Rt.shape[-1],), plan.cdt)
    no_y = np.empty((0, 0, 0), plan.cdt)
    no_mask = np.empty((0, 0), np.bool_)
    for t in range(xw.shape[0]):
        np.matmul(h, step.Rt, out=g)
        m = no_mask if mask is None else np.ascontiguousarray(mask[t][..., 0])
        lstm_cell(g, np.ascontiguousarray(xw[t]), c, h, no_y if Y is None else Y[t], m, mask is not None)
    return h, c


@lib.kernel("LSTM", dtypes=FLOATS, priority=PRIORITY, prepare=_lstm_prepare)
def _lstm(inputs, outputs, p: _LSTMPlan):
    return rnn._rnn_compute(inputs, outputs, p.numpy, run=_lstm_run if p.compiled else None)
