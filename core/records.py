"""The records a plugin registers, and the context its functions receive.

An :class:`OpDef` is the schema level (shape and dtype inference, ONNX's partial data
propagation); a :class:`KernelDef` is the execution level (a CPU kernel for a range of
opsets). Both are frozen, so a plugin is plain data that can be tested without a host.
:class:`OpLibrary` builds them with decorators, one family module at a time::

    lib = OpLibrary()

    @lib.op("Relu", since_version=(6, 13, 14), infer_dtype=same_dtype(0))
    def _relu_shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Relu")
    def _relu(inputs, outputs, ctx):
        np.maximum(inputs[0], 0, out=outputs[0])

Shapes seen by ``infer_shape`` are tuples whose dims are ``int`` or
:class:`dynashape.symbolic.Expr` (at import, shapes are symbolic; at run time, ints),
so write them with ``+ - * //`` and the helpers of :mod:`dynashape.shapes`, never
``int(dim)``.
"""
from __future__ import annotations

from types import SimpleNamespace
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NoReturn, Optional, Sequence, Union

import numpy as np

from .dtypes import ValueType
from .errors import ExecutionError, ShapeInferenceError
from .model import Graph
from .symbolic import Expr, is_nonneg_polynomial, sym

__all__ = [
    "Shape",
    "OpDef",
    "KernelDef",
    "InferContext",
    "NodeSubgraph",
    "OpLibrary",
    "LazyLibrary",
    "same_dtype",
    "fixed_dtype",
    "dtype_from_attr",
]

Shape = tuple  # tuple[Dim, ...]
InferShapeFn = Callable[["InferContext"], Sequence[Optional[Shape]]]
InferDtypeFn = Callable[["InferContext"], Sequence[np.dtype]]
PropagateFn = Callable[["InferContext"], Sequence[Optional[np.ndarray]]]
ComputeFn = Callable[[list, list, Any], Optional[Sequence[np.ndarray]]]
PrepareFn = Callable[["InferContext"], Any]


@dataclass(frozen=True)
class OpDef:
    """Schema of one operator version: how its outputs' shapes and dtypes follow from its inputs.

    Attributes:
        op_type: ONNX operator name as the spec spells it (``"Reshape"``).
        since_version: the opset version this definition starts at; the registry picks the
            largest ``since_version`` <= the model's opset for ``domain``.
        infer_shape: ``ctx -> [shape or None per output]``; raise through ``ctx.fail`` when
            the inputs break the op's rule. ``None`` means "unknown rank" (data-dependent).
        infer_dtype: ``ctx -> [numpy dtype per output]``.
        domain: operator domain, ``""`` for the default ONNX domain.
        value_inputs: indices of inputs whose *values* ``infer_shape`` reads (Reshape's
            ``shape``); they are computed on the host before the node is planned.
        shape_only_inputs: indices of inputs of which only the shape is read, even for the
            output value (``Shape``, ``Size``): they end value dependencies.
        propagate_value: optional ``ctx -> [value or None per output]``; ONNX's partial data
            propagation. Given known input values (possibly symbolic object arrays) it
            returns output values. Without it, outputs are known only when every input is
            known and the op is ``deterministic`` (then the kernel folds them).
        aliases: ``(output, input)`` pairs where the output may be a view of the input.
        data_dependent: output shapes depend on input data (NonZero, TopK with runtime k).
        deterministic: False for random ops: never constant-folded. Also False for ops that
            make a sequence or optional from tensors alone (SequenceEmpty, SplitToSequence...):
            a container is never a host constant, so constant folding must not run them.
        check_node: optional ``(node, opset) -> message or None``, run once when the model
            is loaded: a rule of the op's attributes and input/output counts the schema's
            types cannot say (Split-18 needs ``split`` or ``num_outputs``). A message fails
            the load with ``InvalidAttributeError`` naming the node.
        plugin: set by the registry to the name of the plugin that registered the record.
    """

    op_type: str
    since_version: int
    infer_shape: InferShapeFn
    infer_dtype: InferDtypeFn
    domain: str = ""
    value_inputs: tuple = ()
    shape_only_inputs: tuple = ()
    propagate_value: Optional[PropagateFn] = None
    aliases: tuple = ()
    data_dependent: bool = False
    deterministic: bool = True
    check_node: Optional[Callable[[Any, int], Optional[str]]] = None
    plugin: str = ""


@dataclass(frozen=True)
class KernelDef:
    """One CPU implementation of an operator for a range of opsets.

    ``compute(inputs, outputs, prepared)`` receives the input arrays (``None`` for an
    absent optional input), the planned output buffers (arrays of the output's shape and
    dtype to write into; ``None`` where a shape is only known after the kernel ran), and
    whatever ``prepare(ctx)`` returned for this node and these shapes (the
    :class:`InferContext` itself when ``prepare`` is None). It either fills ``outputs``
    and returns ``None``, or returns one array per output (a view of an input for ops
    whose OpDef declares ``aliases``, or freshly made arrays).

    Attributes:
        since_version / end_version: opset range (inclusive; ``end_version=None`` is open).
        dtypes: numpy dtype names of input ``dtype_input`` this kernel accepts (None: any).
        priority: the highest priority among matching kernels wins; equal priority and
            overlapping ranges and dtypes is an error at registry build time.
        may_inplace: ``(output, input)`` pairs the kernel can compute in place.
        reads: indices of the inputs ``compute`` reads (None: all). An input it never reads
            (a Reshape's ``shape``: its value is already in the prepared argument) is not
            made for it when it is computed from shapes alone.
        scratch: optional ``ctx -> [(shape, dtype), ...]``, the temporary buffers ``compute``
            needs; they come after the node's outputs in ``outputs`` (``outputs[n + k]`` for a
            node with ``n`` outputs) and are planned in the arena like tensors that live only
            during the step. Written like ``infer_shape`` (shapes symbolic at import, traced
            once); a buffer the engine could not plan arrives as None: allocate it then.
        accepts: optional ``ctx -> bool``: whether this kernel takes a node, asked when the
            node's kernel is chosen (its input dtypes, ranks and shapes, attributes, and the
            values of constant inputs; before output inference). A kernel that declines is
            passed over for the next one by priority, so a kernel for a special case (a
            constant weight, one layout) need not carry the general case. Decide from what
            is the same for every signature: symbolic dims may still be ``Expr``.
        prepack: optional ``ctx -> object or None``, with ``prepack_inputs``: the kernel's own
            form of those inputs (GEMM panels, reordered convolution weights: onnxruntime's
            ``OpKernel::PrePack``), made once per node when the program is compiled and every
            input in ``prepack_inputs`` is a constant (``ctx.value(i)``). ``prepare`` then sees
            it as ``ctx.prepacked``, ``compute`` receives None in place of those inputs, and
            a constant no other node reads is released: the packed form replaces it. None
            keeps the inputs as they are. Kernels run outside a program (constant folding,
            :func:`dynashape.testing.check_op`) get the inputs and ``ctx.prepacked`` None.
    """

    op_type: str
    compute: ComputeFn
    domain: str = ""
    since_version: int = 1
    end_version: Optional[int] = None
    device: str = "cpu"
    dtypes: Optional[frozenset] = None
    dtype_input: int = 0
    prepare: Optional[PrepareFn] = None
    may_inplace: tuple = ()
    priority: int = 0
    reads: Optional[tuple] = None
    scratch: Optional[Callable[["InferContext"], Sequence[tuple]]] = None
    accepts: Optional[Callable[["InferContext"], bool]] = None
    prepack: Optional[Callable[["InferContext"], Any]] = None
    prepack_inputs: tuple = ()
    plugin: str = ""

    def covers(self, opset: int) -> bool:
        return self.since_version <= opset and (self.end_version is None or opset <= self.end_version)



@dataclass(frozen=True)
class LazyLibrary:
    """An :class:`OpLibrary` in a module that is imported only when a model first needs one
    of its ops: what a plugin returns from ``dynashape_register_libraries`` so that building
    the registry imports none of its op families.

    Attributes:
        module: the dotted name of the module (``"dynashape.ops_builtin.nn"``).
        keys: ``(domain, op_type)`` of every OpDef and KernelDef the library holds. Asking the
            registry for one of them (a node's schema or kernel) imports the module; a record
            whose key is not declared is a :class:`~dynashape.errors.PluginContractError`
            then, so a stale index fails loudly instead of hiding an op.
            :func:`dynashape.libindex.describe` computes them.
        rewrites: the library holds rewrites: it is imported whenever the rewrites run.
        attr: the module attribute that holds the OpLibrary.
        plugin: set by the registry to the name of the plugin that registered the record.
    """

    module: str
    keys: frozenset
    rewrites: bool = False
    attr: str = "lib"
    plugin: str = ""

    def load(self) -> "OpLibrary":
        """Import the module; its OpLibrary."""
        import importlib
        return getattr(importlib.import_module(self.module), self.attr)

#: Fresh symbols of concrete contexts (new_dim with no symbolic inference running): the k-th
#: fresh dim of any context is the same object.
_CONCRETE_FRESH: list = []

#: Comparisons ``InferContext.assume`` accepts, with their meaning on ints.
_RELATIONS = {"==": int.__eq__, "!=": int.__ne__, ">=": int.__ge__, ">": int.__gt__}


class InferContext:
    """What an op's inference, propagation and kernel preparation see of one node.

    ``input_shapes[i]`` / ``input_dtypes[i]`` / ``input_values[i]`` are ``None`` for an
    absent optional input (and values for inputs not known on the host). After
    inference, ``output_shapes`` and ``output_dtypes`` are filled in. ``services`` is the
    engine's :class:`~dynashape.node.NodeServices` (the model's opsets, compiled subgraphs).
    ``prepacked`` is what the kernel's ``prepack`` made of its constant inputs for this node
    (None when it has none, or outside a compiled program). ``scope``: for a node with
    subgraphs in the import-time walk, the graph around it
    (:class:`~dynashape.symbolic_inference.OuterScope`: its subgraphs can be walked
    symbolically there), else None.
    """

    __slots__ = ("node", "opset", "input_shapes", "input_dtypes", "input_values",
                 "output_shapes", "output_dtypes", "symbolic", "fresh", "services", "guards", "_fresh_count",
                 "prepacked", "scope")

    def __init__(self, node, opset: int, input_shapes, input_dtypes, input_values,
                 symbolic: bool = False, fresh: Optional[Callable[[], Expr]] = None, services=None):
        self.node = node
        self.opset = opset
        self.input_shapes = input_shapes
        self.input_dtypes = input_dtypes
        self.input_values = input_values
        self.output_shapes: list = []
        self.output_dtypes: list = []
        self.symbolic = symbolic
        self.fresh = fresh
        self.services = services
        self.guards: list = []
        self._fresh_count = -1
        self.prepacked: Any = None
        self.scope: Any = None

    # node ---------------------------------------------------------------
    @property
    def attrs(self) -> dict:
        return self.node.attrs

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name`` (ints, floats, strings, lists, arrays, subgraphs) or default."""
        return self.node.attrs.get(name, default)

    @property
    def num_inputs(self) -> int:
        return len(self.input_shapes)

    @property
    def num_outputs(self) -> int:
        return len(self.node.outputs)

    def has_input(self, i: int) -> bool:
        """True when optional input ``i`` is given (present and not the empty name)."""
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    def shape(self, i: int) -> Optional[Shape]:
        return self.input_shapes[i] if i < len(self.input_shapes) else None

    def dtype(self, i: int) -> Optional[np.dtype]:
        return self.input_dtypes[i] if i < len(self.input_dtypes) else None

    def value(self, i: int) -> Optional[np.ndarray]:
        """The host-known value of input ``i`` or None. At import it may be an object array
        of symbolic dims (partial data propagation)."""
        return self.input_values[i] if i < len(self.input_values) else None

    # subgraphs -----------------------------------------------------------
    def subgraph(self, attribute: str) -> "NodeSubgraph":
        """The subgraph in attribute ``attribute`` (an If branch, a Loop or Scan body) as the
        node's kernel runs it: its compiled runner, bound to where the engine puts the
        outer-scope values among the kernel's inputs (:class:`NodeSubgraph`). For a
        kernel's ``prepare``.

        Raises:
            ShapeInferenceError: the attribute holds no graph (kind ``MissingAttribute``), or
                this context has no engine services to compile it (``MissingServices``).
        """
        graph = self.attr(attribute)
        if not isinstance(graph, Graph):
            self.fail(f"attribute '{attribute}' must be a graph", kind="MissingAttribute")
        if self.services is None:
            self.fail("running a subgraph needs the engine's services", kind="MissingServices")
        runner = self.services.subgraph(graph)
        outer = set(runner.outer_inputs)
        for other in _graphs_of(self.node):
            outer.update(self.services.subgraph(other).outer_inputs)
        return NodeSubgraph(runner, self.node, tuple(sorted(outer)))

    # errors, fresh symbols and assumptions -----------------------------------
    def fail(self, message: str, kind: str = "") -> NoReturn:
        """Raise :class:`ShapeInferenceError` naming this node, its op and input shapes (a
        sequence or optional input, which has no shape, by its type)."""
        shapes = ", ".join(_shape_text(s, self.dtype(i)) for i, s in enumerate(self.input_shapes))
        name = self.node.name or "<unnamed>"
        raise ShapeInferenceError(
            f"{self.node.op_type} node '{name}': {message} (input shapes: {shapes})",
            node=self.node.name, op_type=self.node.op_type, kind=kind)

    def new_dim(self) -> Expr:
        """A fresh symbol (``unk__N``) for a dim that depends on data: unique in the program
        at import; with concrete shapes, unique within this context (made once, reused)."""
        if self.fresh is not None:
            return self.fresh()
        k = self._fresh_count = self._fresh_count + 1
        while k >= len(_CONCRETE_FRESH):
            _CONCRETE_FRESH.append(sym(f"unk__c{len(_CONCRETE_FRESH)}"))
        return _CONCRETE_FRESH[k]

    def assume(self, a, relation: str, b) -> bool:
        """State a condition on dims that the symbolic rule just taken relies on.

        ``relation`` is one of ``==``, ``!=``, ``>=``, ``>``. With two ints it returns the
        comparison. A ``>=`` that holds for every binding returns True and records nothing:
        ``a - b`` a polynomial in the symbols with non-negative coefficients (``n + 1 >= 1``;
        every symbol is a dim, >= 0), never one holding an atom such as a broadcast, whose
        evaluation checks something of its own. Otherwise the rule holds only where the
        condition does (a Reshape target entry ``n`` means "copy" when ``n`` is 0): it is
        recorded as a guard that every new signature evaluates, a signature that breaks it is
        planned by per-node inference instead, and True is returned.
        """
        test = _RELATIONS[relation]
        diff = a - b
        if isinstance(diff, (int, np.integer)):  # decided structurally: a op b <=> a - b op 0
            return test(int(diff), 0)
        if relation == ">=" and is_nonneg_polynomial(diff):   # true for every binding: no guard
            return True
        self.guards.append((a, relation, b))
        return True


def _shape_text(shape, dtype) -> str:
    if shape is not None:
        return "(" + ", ".join(map(str, shape)) + ")"
    return str(dtype) if isinstance(dtype, ValueType) else "absent"


# dtype inference helpers ------------------------------------------------------

def same_dtype(i: int = 0, n_outputs: int = 1) -> InferDtypeFn:
    """infer_dtype: every output has input ``i``'s dtype."""
    def infer(ctx: InferContext):
        return [ctx.dtype(i)] * max(n_outputs, ctx.num_outputs)
    return infer


def fixed_dtype(dtype, n_outputs: int = 1) -> InferDtypeFn:
    """infer_dtype: every output has the given dtype (``np.int64``, ``np.bool_``)."""
    dt = np.dtype(dtype)

    def infer(ctx: InferContext):
        return [dt] * max(n_outputs, ctx.num_outputs)
    return infer


def dtype_from_attr(name: str = "to") -> InferDtypeFn:
    """infer_dtype: the output dtype is the ONNX elem type in attribute ``name``."""
    from .dtypes import np_dtype

    def infer(ctx: InferContext):
        return [np_dtype(ctx.attr(name))]
    return infer


class NodeSubgraph:
    """One subgraph of a node (an If branch, a Loop or Scan body) bound to the node's kernel.

    The engine hands a kernel the outer-scope values its node's subgraphs read appended to
    ``inputs``, after the node's own inputs, in the sorted order of their names (the
    values that are constants of the enclosing graph are compiled into the runners and
    not appended). :meth:`outer_values` picks them out by name, so no kernel decodes
    input positions. Made by :meth:`InferContext.subgraph`.

    Attributes:
        runner: the compiled runner (:class:`dynashape.subgraph.SubgraphRunner`):
            ``run_list(formal_inputs, outer_values)``, ``infer_outputs``, ``arena_bytes``,
            ``derived`` (what an op builds from the body once).
        names: the outer-scope names the node's subgraphs read, in the order appended.
    """

    __slots__ = ("runner", "names", "_node")
    opaque_to_tracing = True        # (a runner and a node: no symbolic dim a program rebuilds)

    def __init__(self, runner, node, names: tuple):
        self.runner, self._node, self.names = runner, node, names

    def outer_values(self, inputs: Sequence) -> dict:
        """``{name: value}`` of the outer-scope values among the kernel's ``inputs``.

        Raises:
            ExecutionError: fewer values follow the node's own inputs than its subgraphs read.
        """
        start = len(self._node.inputs)
        if len(inputs) - start < len(self.names):
            raise ExecutionError(f"{self._node.op_type} node '{self._node.name}': {len(self.names)} outer-scope "
                                 f"values expected after its inputs, got {max(0, len(inputs) - start)} values")
        return dict(zip(self.names, inputs[start:start + len(self.names)]))

    def run(self, formal_inputs: Sequence, inputs: Sequence) -> list:
        """The subgraph's outputs for its formal inputs, its outer-scope values taken from the
        kernel's ``inputs``."""
        return self.runner.run_list(formal_inputs, self.outer_values(inputs))


def _graphs_of(node) -> list:
    """The subgraphs in a node's attributes (a graph, or a list of graphs), in attribute order."""
    found = []
    for value in node.attrs.values():
        if isinstance(value, Graph):
            found.append(value)
        elif isinstance(value, list):
            found.extend(g for g in value if isinstance(g, Graph))
    return found


# the decorator library ----------------------------------------------------------

VersionSpec = Union[int, Iterable[int]]


@dataclass
class OpLibrary:
    """Collects OpDef and KernelDef records of one op family through decorators."""

    ops: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    rewrites: list = field(default_factory=list)

    def op(self, op_type: str, since_version: VersionSpec, *, infer_dtype: InferDtypeFn,
           domain: str = "", **fields: Any) -> Callable[[InferShapeFn], InferShapeFn]:
        """Decorate an ``infer_shape`` function; registers one OpDef per version given."""
        versions = (since_version,) if isinstance(since_version, int) else tuple(since_version)

        def deco(fn: InferShapeFn) -> InferShapeFn:
            for v in versions:
                self.ops.append(OpDef(op_type=op_type, since_version=v, infer_shape=fn,
                                      infer_dtype=infer_dtype, domain=domain, **fields))
            return fn
        return deco

    def plugin(self) -> Any:
        """A plugin object whose hooks return this library's records, ready for
        :func:`dynashape.register_plugin` or an entry point (``"pkg:plugin"``)."""
        from .hookspecs import hookimpl

        @hookimpl
        def dynashape_register_ops():
            return self.ops

        @hookimpl
        def dynashape_register_kernels():
            return self.kernels

        hooks = dict(dynashape_register_ops=dynashape_register_ops,
                     dynashape_register_kernels=dynashape_register_kernels)
        if self.rewrites:
            @hookimpl
            def dynashape_register_rewrites():
                return self.rewrites
            hooks["dynashape_register_rewrites"] = dynashape_register_rewrites
        return SimpleNamespace(**hooks)

    def rewrite(self, name: str, pattern: Any, *, priority: int = 0, description: str = ""
                ) -> Callable[[Callable], Callable]:
        """Decorate a rewrite's ``build(m)`` function; registers one
        :class:`~dynashape.rewrite.RewriteDef` with ``pattern``."""
        from .rewrite import RewriteDef

        def deco(fn: Callable) -> Callable:
            self.rewrites.append(RewriteDef(name=name, pattern=pattern, build=fn, priority=priority,
                                            description=description or (fn.__doc__ or "").strip().split("\n")[0]))
            return fn
        return deco

    def kernel(self, op_type: str, *, since_version: int = 1, end_version: Optional[int] = None,
               domain: str = "", dtypes: Optional[Iterable[Any]] = None, **fields: Any
               ) -> Callable[[ComputeFn], ComputeFn]:
        """Decorate a ``compute`` function; registers one KernelDef."""
        dts = None if dtypes is None else frozenset(_dtype_name(d) for d in dtypes)

        def deco(fn: ComputeFn) -> ComputeFn:
            self.kernels.append(KernelDef(op_type=op_type, compute=fn, domain=domain,
                                          since_version=since_version, end_version=end_version,
                                          dtypes=dts, **fields))
            return fn
        return deco


def _dtype_name(d: Any) -> str:
    """numpy's name of a dtype; a name numpy does not know as it is ("bfloat16" before
    ml_dtypes is imported: the name its dtype has once it is)."""
    try:
        return np.dtype(d).name
    except TypeError:
        if isinstance(d, str):
            return d
        raise
