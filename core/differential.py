"""One operator on one set of inputs, three ways, compared: the differential check.

:func:`compare_op` builds a one-node model whose inputs have a ``dim_param`` on every axis
(inputs listed in ``constant`` are initializers instead, their values known at compile time)
and runs it

* as a **session** (:class:`~dynashape.InferenceSession`, memory validation on): the op's
  symbolic rule is evaluated once for the symbols and then bound to the feeds' sizes, the
  program checked against per-node inference;
* **per node** (:func:`dynashape.single_node.infer_node` and :func:`~dynashape.single_node.run_node`):
  the rule on the concrete sizes, then the kernel;
* in a **reference** runtime, ONNX Runtime by default, where it implements the op at that
  opset (otherwise nothing is compared with it).

They must agree (:attr:`OpComparison.problems` lists each way they do not):

* the per-node rule declares the shapes the kernel returns;
* the session and the per-node run accept the same inputs and return the same shapes and
  values (``rtol`` / ``atol``: the session may run fused or compiled kernels);
* the reference accepts what dynashape accepts, with equal shapes, dtypes and values;
* whatever dynashape refuses, it refuses with the op's named error (a
  :class:`~dynashape.DynashapeError` from a rule or a check, never a kernel's own failure:
  ``ExecutionError``, or a plan that disagreed with per-node inference).

Where the reference departs from the ONNX specification, dynashape follows the specification
(``docs/CONFORMANCE.md``, "Where dynashape and onnxruntime differ"): such a comparison reports
the problem, and the caller decides whether it is a documented decision.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np

from .errors import (DynashapeError, ExecutionError, MemoryPlanError, ModelLoadError, PlanCheckError,
                     PluginContractError)

__all__ = ["compare_op", "OpComparison", "Outcome", "model_of_node", "named_error", "onnxruntime_reference"]

#: the IR version of the models built (onnxruntime 1.23, the oldest supported, reads up to 11)
IR_VERSION = 10
#: dynashape errors that are no op's named error: a kernel that failed, a plan or a kernel
#: that broke the node contract
UNNAMED = (ExecutionError, PlanCheckError, MemoryPlanError, PluginContractError)


@dataclass(frozen=True)
class Outcome:
    """What one engine did: its outputs (and their shapes), or the exception it raised;
    ``unavailable`` for a reference that does not implement the op (nothing to compare)."""

    engine: str
    outputs: Optional[list] = None
    error: Optional[BaseException] = None
    unavailable: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.unavailable

    @property
    def shapes(self) -> Optional[list]:
        return None if self.outputs is None else [np.shape(o) for o in self.outputs]

    def __str__(self) -> str:
        if self.unavailable:
            return f"{self.engine}: not implemented ({_first_line(self.error)})"
        if self.error is not None:
            return f"{self.engine}: {type(self.error).__name__}: {_first_line(self.error)}"
        return f"{self.engine}: shapes {self.shapes}"


@dataclass(frozen=True)
class OpComparison:
    """The three outcomes of :func:`compare_op` and the problems found between them."""

    where: str
    session: Outcome
    per_node: Outcome
    reference: Optional[Outcome]
    problems: tuple = field(default=())

    @property
    def agree(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        lines = [self.where, f"  {self.session}", f"  {self.per_node}"]
        if self.reference is not None:
            lines.append(f"  {self.reference}")
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def named_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an op's named refusal: a DynashapeError, not a kernel's failure."""
    return isinstance(exc, DynashapeError) and not isinstance(exc, UNNAMED)


def _first_line(exc: Optional[BaseException]) -> str:
    text = str(exc) if exc is not None else ""
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def model_of_node(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[dict] = None, *,
                  opset: int = 21, domain: str = "", n_outputs: int = 1, constant: Sequence[int] = ()) -> bytes:
    """A serialized one-node model: input ``k`` is the graph input ``in{k}`` with the dims
    ``in{k}_{axis}`` (``dim_param``), or an initializer where ``k`` is in ``constant``; an
    absent (None) optional input is ``""``; outputs ``out0..``, their types left to inference.

    Raises:
        TypeError: an input's dtype has no ONNX element type.
    """
    from onnx import helper, numpy_helper

    names, graph_inputs, initializers = [], [], []
    last = max((k for k, x in enumerate(inputs) if x is not None), default=-1)
    for k, x in enumerate(inputs[:last + 1]):
        if x is None:
            names.append("")
            continue
        name, a = f"in{k}", np.asarray(x)
        names.append(name)
        if k in constant:
            initializers.append(numpy_helper.from_array(a, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, [f"{name}_{i}" for i in range(a.ndim)]))
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, name=f"{op_type}_0", domain=domain or None, **(attrs or {}))
    graph = helper.make_graph([node], "differential", graph_inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], initializer=initializers)
    imports = [helper.make_opsetid(domain, opset)] + ([helper.make_opsetid("", 21)] if domain else [])
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION).SerializeToString()


def _session_outcome(model: bytes, feeds: dict) -> Outcome:
    from .session import InferenceSession

    try:
        sess = InferenceSession(model, validate_memory=True)
        return Outcome("dynashape session (symbolic dims)", [np.asarray(o) for o in sess.run(None, feeds)])
    except Exception as exc:  # noqa: BLE001 - every failure is an outcome to compare
        return Outcome("dynashape session (symbolic dims)", error=exc)


def _per_node_outcome(op_type, inputs, attrs, opset, domain, n_outputs) -> tuple[Outcome, Optional[list]]:
    """(the kernel's outputs, the shapes the concrete rule declared)."""
    from .single_node import infer_node, run_node

    engine = "dynashape per node (concrete dims)"
    try:
        shapes, _ = infer_node(op_type, inputs, attrs, opset=opset, domain=domain, n_outputs=n_outputs)
        outputs = run_node(op_type, inputs, attrs, opset=opset, domain=domain, n_outputs=n_outputs)
        return Outcome(engine, [np.asarray(o) for o in outputs]), [tuple(s) for s in shapes]
    except Exception as exc:  # noqa: BLE001
        return Outcome(engine, error=exc), None


#: onnxruntime's load errors that say it has no kernel for the op or cannot read the opset
_NOT_IMPLEMENTED = ("NOT_IMPLEMENTED", "No Op registered", "is not a registered function/op", "is under development",
                    "Unsupported model IR version", "ValidateOpsetForDomain")


def onnxruntime_reference(model: bytes, feeds: dict) -> Outcome:
    """ONNX Runtime (CPU, one thread) on ``model``; ``unavailable`` where it has no kernel for
    the op at the model's opset or cannot read the opset."""
    import onnxruntime as ort

    engine = f"onnxruntime {ort.__version__}"
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001
        text = str(exc)
        if any(s in text for s in _NOT_IMPLEMENTED) and "ShapeInferenceError" not in text:
            return Outcome(engine, error=exc, unavailable=True)
        return Outcome(engine, error=exc)
    try:
        return Outcome(engine, [np.asarray(o) for o in sess.run(None, feeds)])
    except Exception as exc:  # noqa: BLE001
        return Outcome(engine, error=exc)


def _described(x: Optional[np.ndarray]):
    """An input as the report shows it: shape and dtype, and the values of a small integer one."""
    if x is None:
        return None
    if x.dtype.kind in "iub" and x.size <= 8:
        return (x.shape, str(x.dtype), x.tolist())
    return (x.shape, str(x.dtype))


def _fits(declared: list, actual: list) -> bool:
    """Whether the declared shapes are the actual ones (a data-dependent dim, declared as a
    symbol, fits any size)."""
    return len(declared) == len(actual) and all(
        len(d) == len(a) and all(not isinstance(x, int) or x == y for x, y in zip(d, a))
        for d, a in zip(declared, actual))


def _same_values(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> bool:
    """Equal values of two arrays of one shape and dtype: floats within the tolerance (NaN
    equal to NaN; low-precision types widened first), anything else exactly."""
    if a.dtype.kind in "fc":
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        return bool(np.allclose(a.astype(wide), b.astype(wide), rtol=rtol, atol=atol, equal_nan=True))
    return bool(np.array_equal(a, b))


def _compare_outputs(x: Outcome, y: Outcome, values: bool, rtol: float, atol: float) -> list:
    problems = []
    for k, (a, b) in enumerate(zip(x.outputs, y.outputs)):
        if a.shape != b.shape:
            problems.append(f"output {k}: {x.engine} shape {a.shape}, {y.engine} shape {b.shape}")
        elif a.dtype != b.dtype:
            problems.append(f"output {k}: {x.engine} dtype {a.dtype}, {y.engine} dtype {b.dtype}")
        elif values and not _same_values(a, b, rtol, atol):
            problems.append(f"output {k}: values differ between {x.engine} and {y.engine}")
    return problems


def _accept_problems(x: Outcome, y: Outcome) -> list:
    if x.ok == y.ok:
        return []
    taker, refuser = (x, y) if x.ok else (y, x)
    return [f"{taker.engine} accepts what {refuser.engine} refuses "
            f"({type(refuser.error).__name__}: {_first_line(refuser.error)})"]


def compare_op(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[dict] = None, *,
               opset: int = 21, domain: str = "", n_outputs: int = 1, constant: Sequence[int] = (),
               reference: Union[str, Callable[[bytes, dict], Outcome], None] = "onnxruntime",
               values: bool = True, rtol: float = 1e-4, atol: float = 1e-5) -> OpComparison:
    """Run one node three ways and compare (see the module's docstring).

    Args:
        inputs: the node's inputs (numpy arrays; None for an absent optional input).
        constant: positions of inputs given as initializers (their values known when the
            session compiles) instead of fed.
        reference: ``"onnxruntime"``, a callable ``(model bytes, feeds) -> Outcome``, or None.
        values: compare output values too (False for random ops).
        rtol, atol: the tolerance of float values between engines.

    Returns:
        OpComparison: the outcomes, and ``problems`` (empty when all agree).

    Raises:
        TypeError: an input's dtype has no ONNX element type (nothing to run).
    """
    inputs = [None if x is None else np.asarray(x) for x in inputs]
    model = model_of_node(op_type, inputs, attrs, opset=opset, domain=domain, n_outputs=n_outputs,
                          constant=constant)
    feeds = {f"in{k}": x for k, x in enumerate(inputs) if x is not None and k not in constant}
    where = (f"{domain or 'ai.onnx'}::{op_type}-{opset} attrs {attrs or {}} inputs "
             f"{[_described(x) for x in inputs]} constant {list(constant)}")
    session = _session_outcome(model, feeds)
    per_node, declared = _per_node_outcome(op_type, inputs, attrs, opset, domain, n_outputs)
    ref = None
    if reference is not None:
        ref = (onnxruntime_reference if reference == "onnxruntime" else reference)(model, feeds)
    problems = []
    if per_node.ok and not _fits(declared, per_node.shapes):
        problems.append(f"the per-node rule declared {declared}, the kernel returned {per_node.shapes}")
    if not isinstance(session.error, ModelLoadError):   # (a model refused as a whole is not per-node work)
        problems += _accept_problems(session, per_node)
    if session.ok and per_node.ok:
        problems += _compare_outputs(session, per_node, values, rtol, atol)
    for mine in (session, per_node):
        if mine.error is not None and not named_error(mine.error):
            problems.append(f"{mine.engine} refuses with {type(mine.error).__name__}, not the op's named error: "
                            f"{_first_line(mine.error)}")
    if ref is not None and not ref.unavailable:
        problems += _accept_problems(session, ref)
        if session.ok and ref.ok:
            problems += _compare_outputs(session, ref, values, rtol, atol)
    return OpComparison(where, session, per_node, ref, tuple(dict.fromkeys(problems)))
