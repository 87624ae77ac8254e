"""Run one operator in isolation: for op tests and plugin authors (no session needed).

    from dynashape.testing import run_node, infer_symbolic, check_op
    (y,) = run_node("Add", [a, b], opset=14)
    shapes, ctx = infer_symbolic("Add", [(sym("n"), 3), (3,)], [np.float32] * 2, opset=14)
    check_op("Gelu", lambda rng, n, d: [rng.standard_normal((n, d)).astype(np.float32)],
             {"n": (1, 8), "d": (1, 64)}, domain="com.microsoft", opset=1,
             symbolic_shapes=[("n", "d")])

They go through the engine's own node contract (:mod:`dynashape.node`): the schema
resolved like a model's node, the context built, inferred and run as a data-dependent
step of a session is. :func:`check_op` is a plugin author's property test: over random
sizes, what ``infer_shape`` / ``infer_dtype`` declare (concretely, and symbolically) and
what ``propagate_value`` computes must match what the kernel returns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from .node import context_of_arrays, infer
from .registry import get_registry
from .single_node import _arrays, _prepared_node, infer_node, infer_symbolic, run_node, services

__all__ = ["run_node", "infer_node", "infer_symbolic", "check_op", "OpCheck"]


@dataclass(frozen=True)
class OpCheck:
    """What :func:`check_op` checked: the draws of the dims, and how many draws compared
    the symbolic shapes, ``propagate_value`` and (with ``reference``) the differential
    comparison with the kernel's outputs."""

    draws: tuple            # one {dim name: size} per trial
    symbolic_checked: int
    propagate_checked: int
    compared: int = 0


def check_op(op_type: str, make_inputs: Callable, dims: Mapping[str, tuple], attrs: Optional[dict] = None, *,
             opset: int = 21, domain: str = "", n_outputs: int = 1, trials: int = 10, seed: int = 0,
             symbolic_shapes: Optional[Sequence] = None, rtol: float = 1e-6, atol: float = 0.0,
             reference=None) -> OpCheck:
    """Property-test one op's records against its kernel over random sizes.

    Each of ``trials`` draws a size for every dim in ``dims`` (``{name: (low, high)}``,
    inclusive, from ``seed``), builds the inputs with ``make_inputs(rng, **sizes)`` (a list
    of arrays, None for an absent optional input), runs the node through the engine
    (:func:`run_node`) and checks:

    * the concrete ``infer_shape`` / ``infer_dtype`` (:func:`infer_node`) give each output's
      actual shape and dtype;
    * with ``symbolic_shapes`` (one shape per input, dims as ints or names of ``dims``; None
      for an absent input), the symbolic ``infer_shape`` (:func:`infer_symbolic`), evaluated
      at the draw, gives the actual shapes;
    * where the op has ``propagate_value`` and it returns a value for an output, that value
      equals the kernel's (``rtol`` / ``atol``);
    * with ``reference`` (``"onnxruntime"`` or a callable, :func:`dynashape.differential.compare_op`):
      a session over a ``dim_param`` on every axis, the per-node run and the reference accept
      the trial's inputs alike with equal outputs, and a refusal is the op's named error.

    Returns:
        OpCheck: the draws and how many trials each optional check ran on.

    Raises:
        AssertionError: a mismatch, naming the trial, the sizes, the output and both sides.
    """
    from .symbolic import evaluate, sym

    rng = np.random.default_rng(seed)
    opdef = get_registry().resolve_op(domain, op_type, opset, f"{op_type}_test")
    sym_shapes = None
    if symbolic_shapes is not None:
        in_shapes = [None if s is None else tuple(sym(d) if isinstance(d, str) else d for d in s)
                     for s in symbolic_shapes]
        probe = make_inputs(np.random.default_rng(seed), **{k: lo for k, (lo, _) in dims.items()})
        dtypes = [None if a is None else np.asarray(a).dtype for a in probe]
        sym_shapes, _ = infer_symbolic(op_type, in_shapes, dtypes, attrs, opset, domain=domain, n_outputs=n_outputs)
    draws, symbolic_checked, propagate_checked, compared = [], 0, 0, 0
    for trial in range(trials):
        sizes = {k: int(rng.integers(lo, hi + 1)) for k, (lo, hi) in dims.items()}
        draws.append(sizes)
        where = f"{domain or 'ai.onnx'}::{op_type} trial {trial} at {sizes}"
        inputs = make_inputs(rng, **sizes)
        outs = run_node(op_type, inputs, attrs, opset=opset, domain=domain, n_outputs=n_outputs)
        shapes, out_dtypes = infer_node(op_type, inputs, attrs, opset=opset, domain=domain, n_outputs=n_outputs)
        for k, out in enumerate(outs):
            actual = np.asarray(out)
            _expect(tuple(shapes[k]) == actual.shape, where, k, "infer_shape", shapes[k], actual.shape)
            _expect(out_dtypes[k] == actual.dtype, where, k, "infer_dtype", out_dtypes[k], actual.dtype)
            if sym_shapes is not None and sym_shapes[k] is not None:
                at = tuple(evaluate(d, sizes) for d in sym_shapes[k])
                _expect(at == actual.shape, where, k, f"symbolic infer_shape {sym_shapes[k]}", at, actual.shape)
        symbolic_checked += sym_shapes is not None
        if opdef.propagate_value is not None:
            propagate_checked += _check_propagate(opdef, op_type, inputs, attrs, opset, domain, n_outputs,
                                                  outs, where, rtol, atol)
        if reference is not None:
            from .differential import compare_op

            result = compare_op(op_type, inputs, attrs, opset=opset, domain=domain, n_outputs=n_outputs,
                                reference=reference, rtol=max(rtol, 1e-5), atol=max(atol, 1e-6))
            if not result.agree:
                raise AssertionError(f"{where}: the engines disagree\n{result.describe()}")
            compared += 1
    return OpCheck(tuple(draws), symbolic_checked, propagate_checked, compared)


def _expect(ok: bool, where: str, k: int, what: str, declared, actual) -> None:
    if not ok:
        raise AssertionError(f"{where}: output {k}: {what} declared {declared}, the kernel returned {actual}")


def _check_propagate(opdef, op_type, inputs, attrs, opset, domain, n_outputs, outs, where, rtol, atol) -> bool:
    """propagate_value on the trial's concrete inputs against the kernel's outputs; True when
    it returned a value for at least one output."""
    pn = _prepared_node(op_type, inputs, attrs, opset, domain, n_outputs)
    registry = get_registry()
    ctx = context_of_arrays(pn, _arrays(inputs), services({domain: opset}, registry))
    infer(pn, ctx)
    values = opdef.propagate_value(ctx) or []
    compared = False
    for k, v in enumerate(values[:n_outputs]):
        if v is None:
            continue
        got, want = np.asarray(v), np.asarray(outs[k])
        same = got.shape == want.shape and (np.array_equal(got, want) if got.dtype == object or want.dtype == object
                                            else np.allclose(got.astype(np.float64), want.astype(np.float64),
                                                             rtol=rtol, atol=atol, equal_nan=True))
        _expect(same, where, k, "propagate_value", got, want)
        compared = True
    return compared
