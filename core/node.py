"""The node contract: everything the engine does with one node, in one place.

Building a node's :class:`~dynashape.records.InferContext`, inferring its outputs
(symbolically at import, concretely for a signature or a data-dependent step), choosing
its kernel, tracing its kernel preparation, running it once, and folding or propagating
its values. Import-time inference, plan building, data-dependent steps, control-flow
bodies and :mod:`dynashape.testing` all call these functions; ops reach the engine only
through :class:`NodeServices`.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from .dtypes import ValueType, value_type_of
from .errors import DynashapeError, ExecutionError, PluginContractError
from .fpstate import quiet_floating_point
from .graph import PreparedNode
from .limits import allocation_error, check_tensor, is_resource_failure
from .records import InferContext, KernelDef
from .registry import Registry
from .symbolic import Expr, strict_comparisons
from .weight_arena import aligned_empty

__all__ = [
    "FOLD_LIMIT",
    "NodeServices",
    "PrepareTrace",
    "make_context",
    "infer",
    "choose_kernel",
    "run_kernel",
    "run_once",
    "run_dynamic",
    "fold",
    "trace_prepare",
    "trace_scratch",
    "has_subgraph",
    "contains_expr",
]

#: Largest number of elements a node's outputs may have to be folded on the host.
FOLD_LIMIT = 1 << 16


class NodeServices:
    """What an op may ask of the engine, as ``ctx.services``.

    Attributes:
        opsets: the model's opset imports (``{"": 17, "com.microsoft": 1}``).
        registry: the registry the session was built with (subgraphs resolve through it).

    ``subgraph(graph)`` returns the compiled runner of a subgraph attribute of this model
    (an If branch, a Loop or Scan body): compiled once, with the session's registry, and
    run with ``runner.run_list(formal_inputs, outer_values_by_name)``. A kernel asks
    ``ctx.subgraph(attribute)`` instead (:class:`~dynashape.records.NodeSubgraph`: the
    runner with the node's outer-scope values picked out of its inputs).

    ``neighbours(node)`` returns the op types of the nodes that produce its inputs and of
    those that read its outputs (empty outside a compiled program): a kernel's ``accepts``
    may decline where a neighbour needs its exact rounding (a float MatMul between the
    QuantizeLinear / DequantizeLinear pairs of a QDQ model).

    ``constant_bytes(op_types)`` returns the bytes of the constants (initializers, folded
    constants) that the graph's nodes of those op types read: a kernel's ``prepack`` may ask
    what kind of model its node is in (0 outside a compiled program).

    ``weight_buffer(nbytes)`` returns uninitialised memory (``uint8``, 64-byte aligned) for a
    kernel's ``prepack`` to pack a constant weight into: carved from the prepared graph's
    weight arena (:mod:`dynashape.weight_arena`: huge-page-backed, the weights in the order the
    program makes them), or a plain allocation outside a compiled program.
    """

    __slots__ = ("opsets", "registry", "_compile_subgraph", "_subgraphs", "_graph", "_neighbours", "_constant_bytes")

    def __init__(self, opsets: Mapping[str, int], registry: Registry,
                 compile_subgraph: Optional[Callable[[Any], Any]] = None, graph: Any = None):
        self.opsets = dict(opsets)
        self.registry = registry
        self._compile_subgraph = compile_subgraph
        self._subgraphs: dict = {}
        self._graph = graph
        self._neighbours: Optional[dict] = None
        self._constant_bytes: Optional[dict] = None

    def neighbours(self, node) -> tuple:
        """``(op types producing node's inputs, op types reading its outputs)``, frozensets."""
        if self._graph is None:
            return frozenset(), frozenset()
        if self._neighbours is None:
            pg = self._graph
            readers: dict = {}
            for pn in pg.nodes:
                for i in pn.all_inputs:
                    if i >= 0:
                        readers.setdefault(i, set()).add(pn.node.op_type)
            self._neighbours = {}
            for pn in pg.nodes:
                before = frozenset(pg.nodes[pg.producer[i]].node.op_type for i in pn.inputs
                                   if i >= 0 and i in pg.producer)
                after = frozenset(t for o in pn.outputs if o >= 0 for t in readers.get(o, ()))
                self._neighbours[id(pn.node)] = (before, after)
        return self._neighbours.get(id(node), (frozenset(), frozenset()))

    def constant_bytes(self, op_types) -> int:
        """Bytes of the constants read by the graph's nodes of these op types (each constant
        counted once per op type; a prepacked constant's stand-in keeps its shape)."""
        if self._graph is None:
            return 0
        if self._constant_bytes is None:
            pg = self._graph
            slots: dict = {}
            for pn in pg.nodes:
                slots.setdefault(pn.node.op_type, set()).update(i for i in pn.inputs if i in pg.constants)
            self._constant_bytes = {op: sum(int(np.prod(pg.constants[i].shape)) * pg.constants[i].dtype.itemsize
                                            for i in found) for op, found in slots.items()}
        return sum(self._constant_bytes.get(op, 0) for op in op_types)

    def weight_buffer(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of uninitialised, 64-byte aligned memory for a packed weight."""
        if self._graph is None:
            return aligned_empty(nbytes)
        return self._graph.weight_arena.allocate(nbytes)

    def subgraph(self, graph) -> Any:
        """The compiled runner of ``graph`` (made on first request, then shared).

        Raises:
            DynashapeError: these services compile no subgraphs (an import-time walk of a
                body, which compiles nothing).
        """
        runner = self._subgraphs.get(id(graph))
        if runner is None:
            if self._compile_subgraph is None:
                raise DynashapeError(f"subgraph '{getattr(graph, 'name', '')}' cannot be compiled here: these node "
                                     "services were made without a subgraph compiler")
            runner = self._subgraphs.setdefault(id(graph), self._compile_subgraph(graph))
        return runner

    def runners(self) -> list:
        """The runners :meth:`subgraph` has made so far."""
        return list(self._subgraphs.values())


def make_context(pn: PreparedNode, shapes: Sequence, dtypes: Sequence, values: Sequence,
                 services: Optional[NodeServices] = None, *, symbolic: bool = False,
                 fresh: Optional[Callable[[], Expr]] = None) -> InferContext:
    """The context of ``pn`` from per-slot shapes, dtypes and host-known values (its own
    inputs: the outer-scope values of its subgraphs reach only its kernel)."""
    ins = pn.inputs
    return InferContext(pn.node, pn.opset,
                        [shapes[i] if i >= 0 else None for i in ins],
                        [dtypes[i] if i >= 0 else None for i in ins],
                        [values[i] if i >= 0 else None for i in ins],
                        symbolic=symbolic, fresh=fresh, services=services)


def context_of_arrays(pn: PreparedNode, arrays: Sequence, services: Optional[NodeServices]) -> InferContext:
    """The concrete context of ``pn`` for its input arrays (None for an absent input or an
    empty optional). A sequence (a list) has no shape and its :class:`SequenceType`."""
    arrays = arrays[:len(pn.inputs)]
    return InferContext(pn.node, pn.opset,
                        [a.shape if type(a) is np.ndarray else _shape_of(a) for a in arrays],
                        [a.dtype if type(a) is np.ndarray else value_type_of(a) for a in arrays],
                        list(arrays), services=services)


def _shape_of(a) -> Optional[tuple]:
    """The shape of a value that is not an ndarray: None for None, sequences (lists) and
    maps (dicts)."""
    if a is None or type(a) is list or type(a) is dict:
        return None
    return tuple(np.shape(a))


def infer(pn: PreparedNode, ctx: InferContext) -> None:
    """Run the op's shape and dtype inference; fills ``ctx.output_shapes/output_dtypes``.

    Raises:
        ShapeInferenceError: the op's rule is broken (also for an unexpected exception in
            the op's inference, which is reported as ``InferenceFailed`` naming the node).
    """
    op = pn.opdef
    n_out = len(pn.outputs)
    try:
        shapes = op.infer_shape(ctx)
        _check_shape_list(pn, shapes)
        shapes = list(shapes)
        dtypes = list(op.infer_dtype(ctx))
    except DynashapeError:
        raise
    except Exception as exc:  # a bug or an unguarded rule in an op's inference
        ctx.fail(f"shape inference failed: {type(exc).__name__}: {exc}", kind="InferenceFailed")
    ctx.output_shapes = [tuple(s) if s is not None else None for s in shapes[:n_out]] + [None] * (n_out - len(shapes))
    ctx.output_dtypes = [d if d is None or isinstance(d, ValueType) else np.dtype(d)
                         for d in dtypes[:n_out]] + [None] * (n_out - len(dtypes))


def _check_shape_list(pn: PreparedNode, shapes) -> None:
    """infer_shape returns one shape (or None) per output: a bare shape ``(2, 3)`` or an
    ``Expr`` in place of the list is a plugin's mistake, reported as such."""
    items = shapes if isinstance(shapes, (list, tuple)) else None
    if items is not None and all(s is None or hasattr(s, "__iter__") for s in items):
        return
    op = pn.opdef
    raise PluginContractError(
        f"infer_shape of {op.domain or 'ai.onnx'}::{op.op_type} (plugin '{op.plugin}') for node "
        f"'{pn.node.name}' returned {shapes!r}: it must return a list with one shape (a tuple of dims, "
        f"or None) per output, e.g. [ctx.shape(0)]")


def choose_kernel(registry: Registry, pn: PreparedNode, ctx: InferContext) -> KernelDef:
    """The kernel for ``pn`` at its opset and input dtype (highest priority wins).

    Raises:
        UnsupportedOperatorError: no kernel fits.
    """
    first = ctx.input_dtypes[0] if ctx.input_dtypes else None
    if first is None:
        first = next((d for d in ctx.input_dtypes if d is not None), None)
    if isinstance(first, ValueType):   # a sequence/optional input: kernels take any
        first = None
    return registry.resolve_kernel(pn.node.domain, pn.node.op_type, pn.opset, first, pn.node.name,
                                   input_dtypes=ctx.input_dtypes, ctx=ctx)


def _all_ints(shape) -> bool:
    return shape is not None and all(type(d) is int for d in shape)


def run_kernel(pn: PreparedNode, compute, prepared: Any, arrays: Sequence, outs: list) -> list:
    """Call a kernel; its outputs (the buffers it filled, or the arrays it returned).

    Raises:
        ExecutionError: the kernel failed (naming the node).
    """
    try:
        res = compute(arrays if type(arrays) is list else list(arrays), outs, prepared)
    except DynashapeError:
        raise
    except Exception as exc:
        if is_resource_failure(exc):
            raise allocation_error(exc, f"{pn.node.op_type} node '{pn.node.name}'", pn.node.name) from exc
        raise ExecutionError(f"{pn.node.op_type} node '{pn.node.name}' failed: {type(exc).__name__}: {exc}") from exc
    return list(res) if res is not None else outs


def run_once(pn: PreparedNode, kernel: KernelDef, ctx: InferContext, arrays: Sequence,
             prepared: Any = None, memory_limit: Optional[int] = None) -> list:
    """Prepare the kernel for ``ctx`` (unless ``prepared`` is given), allocate the outputs as
    inferred (None where a shape is not concrete) and run it once, floating-point errors
    quiet as in a run (Log(0) folds to -inf without a warning). With ``memory_limit`` an
    inferred output over it raises ResourceLimitError before anything is allocated."""
    if memory_limit is not None:
        for k, (s, d) in enumerate(zip(ctx.output_shapes, ctx.output_dtypes)):
            if _all_ints(s) and isinstance(d, np.dtype):
                check_tensor(s, d.itemsize, memory_limit,
                             f"output {k} of {pn.node.op_type} node '{pn.node.name}'", pn.node.name)
    outs = [np.empty(s, dtype=d) if _all_ints(s) and d is not None else None
            for s, d in zip(ctx.output_shapes, ctx.output_dtypes)]
    n = len(outs)
    if kernel.scratch is not None:
        outs.extend(np.empty(shape, dtype) for shape, dtype in kernel.scratch(ctx))
    if prepared is None:
        prepared = kernel.prepare(ctx) if kernel.prepare is not None else ctx
    with quiet_floating_point():
        return run_kernel(pn, kernel.compute, prepared, arrays, outs)[:n]


def run_dynamic(pn: PreparedNode, registry: Registry, arrays: Sequence, services: Optional[NodeServices],
                kernel: Optional[KernelDef] = None, prepared: Any = None, memory_limit: Optional[int] = None) -> list:
    """Infer, choose the kernel (unless given) and run a node whose shapes are only known now.

    ``arrays`` are its inputs and then the outer-scope values of its subgraphs; ``prepared``
    the kernel's prepared argument when it does not depend on shapes (traced once)."""
    ctx = context_of_arrays(pn, arrays, services)
    infer(pn, ctx)
    if kernel is None:
        kernel = choose_kernel(registry, pn, ctx)
    return run_once(pn, kernel, ctx, arrays, prepared, memory_limit)


# folding ------------------------------------------------------------------------------

def has_subgraph(pn: PreparedNode) -> bool:
    return bool(pn.implicit) or any(hasattr(a, "nodes") for a in pn.node.attrs.values())


def fold(pn: PreparedNode, kernel: Optional[KernelDef], ctx: InferContext, values: Sequence,
         limit: int = FOLD_LIMIT) -> Optional[list]:
    """The node's output values when they can be known on the host now, else None.

    With every input value concrete and the outputs at most ``limit`` elements, the kernel
    runs once; otherwise the op's ``propagate_value`` (ONNX partial data propagation) may
    give values, possibly symbolic (object arrays of dims). Values are cast to the
    inferred output dtype (object arrays stay symbolic unless all their entries are ints).

    Raises:
        ShapeInferenceError / ExecutionError: the kernel failed on concrete values.
    """
    op = pn.opdef
    if not op.deterministic or has_subgraph(pn):
        return None
    n_out = len(pn.outputs)
    out_shapes = ctx.output_shapes[:n_out]
    ins = pn.all_inputs
    known = all(i < 0 or values[i] is not None for i in ins)
    concrete = known and all(i < 0 or values[i].dtype != object for i in ins)
    if concrete and kernel is not None and all(_all_ints(s) for s in out_shapes):
        if sum(int(np.prod(s)) for s in out_shapes) > limit:
            return None
        outs = run_once(pn, kernel, ctx, [values[i] if i >= 0 else None for i in ins])
        return [_as_value(o, d) for o, d in zip(outs, ctx.output_dtypes)]
    if op.propagate_value is None:
        return None
    with quiet_floating_point():
        vals = op.propagate_value(ctx)
    if vals is None or len(vals) < n_out or any(v is None for v in vals[:n_out]):
        return None
    return [_as_value(v, d) for v, d in zip(vals[:n_out], ctx.output_dtypes)]


def _as_value(v, dtype) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype == object:
        if all(type(x) is int for x in v.reshape(-1).tolist()):
            return v.astype(dtype if dtype is not None else np.int64)
        return v
    if dtype is not None and v.dtype != dtype:
        return v.astype(dtype)
    return v


# kernel preparation traced once per program ------------------------------------------

STATIC, SYMBOLIC, CONCRETE = "static", "symbolic", "concrete"


class PrepareTrace(NamedTuple):
    """How a kernel's prepared argument is made for each signature.

    ``kind`` is ``static`` (``value`` is the same for every shape: computed once),
    ``symbolic`` (``value`` is a structure of tuples/lists/dicts/slices/object arrays with
    symbolic dims inside: generated code rebuilds it with their values) or ``concrete``
    (``prepare`` needs concrete shapes: it is called for each new signature).
    """

    kind: str
    value: Any = None


def trace_prepare(kernel: KernelDef, ctx: InferContext) -> PrepareTrace:
    """Call ``kernel.prepare`` once with symbolic shapes (comparisons of symbolic dims
    raise, see :func:`dynashape.symbolic.strict_comparisons`) and classify the result."""
    if kernel.prepare is None:
        return PrepareTrace(STATIC, ctx)
    try:
        with strict_comparisons():
            value = kernel.prepare(ctx)
    except Exception:  # noqa: BLE001 - anything that needs concrete shapes
        return PrepareTrace(CONCRETE)
    found = contains_expr(value)
    if found is None:
        return PrepareTrace(CONCRETE)
    return PrepareTrace(SYMBOLIC if found else STATIC, value)


def trace_scratch(kernel: KernelDef, ctx: InferContext) -> Optional[list]:
    """The kernel's scratch buffers as ``[(symbolic shape, dtype), ...]``, traced once (None
    when it declares none or its shapes cannot be written symbolically)."""
    if kernel is None or kernel.scratch is None:
        return None
    try:
        with strict_comparisons():
            found = [(tuple(shape), np.dtype(dtype)) for shape, dtype in kernel.scratch(ctx)]
    except Exception:  # noqa: BLE001 - then the kernel allocates its scratch itself
        return None
    return found


_OPAQUE = (str, bytes, int, float, bool, complex, np.dtype, np.generic, type(None), InferContext)


def contains_expr(value: Any, depth: int = 0) -> Optional[bool]:
    """True when ``value`` holds a symbolic dim where generated code can rebuild it (tuples,
    named tuples, lists, dicts, slices, object arrays), False when it holds none, None when
    one hides in an object code cannot rebuild. Objects whose class sets
    ``opaque_to_tracing = True`` (compiled subgraph runners) are not looked into."""
    if isinstance(value, Expr):
        return True
    if isinstance(value, _OPAQUE) or callable(value) or depth > 8 or getattr(value, "opaque_to_tracing", False):
        return False
    if isinstance(value, np.ndarray):
        return value.dtype == object and any(isinstance(x, Expr) for x in value.reshape(-1).tolist())
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
    elif isinstance(value, (tuple, list)):
        parts = value
    elif isinstance(value, dict):
        parts = list(value.values())
    else:
        inner = getattr(value, "__dict__", None)
        if inner is None or not inner:
            return False
        return None if any(contains_expr(v, depth + 1) is not False for v in inner.values()) else False
    found = False
    for p in parts:
        r = contains_expr(p, depth + 1)
        if r is None:
            return None
        found = found or r
    return found
