"""The compiled program of a (sub)graph: made once per session, read-only, shared by runs.

:class:`Program` runs symbolic inference once and turns its result into

* the run-time **steps** in order (:class:`dynashape.segments.Step`), each with its kernel,
  its traced preparation (:func:`dynashape.node.trace_prepare`) and where each output lives
  (arena block, view, fresh array of the run);
* **segments** (:class:`dynashape.segments.Segment`): a BINDING node (its output shapes
  depend on data) ends a segment; the next one is planned once the symbols it binds are known;
* the **memory structure**: lifetimes, views and in-place decisions (in place only where
  the shapes are provably equal), blocks per segment arena;
* per segment, the **generated functions** (:mod:`dynashape.emit`): ``sig(*symbols)``,
  ``bind(buf, S, O)``, ``run(v, B, P, S)`` and ``run_plan``; and the **binder** from feed
  shapes to symbol values (None when declared dim_params disagree).

A new signature costs one call of ``sig``, ``run_plan`` and a ``layout`` (see
:mod:`dynashape.plan`); a repeated one, a dict lookup.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import numpy as np

from .dtypes import ValueType
from .emit import Emitter
from .errors import DynashapeError
from .graph import PreparedGraph
from .limits import resolve_memory_limit
from .node import CONCRETE, STATIC, SYMBOLIC, NodeServices, trace_prepare, trace_scratch
from .planner import StepSpec, lifetimes
from .registry import Registry
from .segments import ARENA, FBLOCK, FRESH, NONE, BindingNode, OutSpec, Segment, Step
from .symbolic import as_atom, sym
from .symbolic_inference import BINDING, FOLDED, PLAN, STEP, PriorInference, SymbolicGraph, infer_symbolic
from .weights import aligned_copy, release_view

__all__ = ["Program", "Segment", "Step", "OutSpec", "NONE", "ARENA", "FRESH", "FBLOCK", "DEEP", "copy_value"]

class Program:
    """Everything a graph needs for any signature, compiled once.

    Args:
        pg: the prepared graph (constants already folded).
        registry: the session's registry (bodies of If/Loop/Scan resolve through it too).
        input_dims: input slot -> tuple of dims (ints and plain symbols) or None.
        input_dtypes: input slot -> numpy dtype or None.
        allocator: ``"pool"`` (arena per segment, in place) or ``"naive"`` (a buffer per tensor).
        input_values: input slot -> value known when compiling (subgraph scopes), optional.
        memory_limit: bytes one tensor or one plan may take (``dynashape.limits``; default
            the machine's memory).
        optimize / fold: what the bodies of its subgraphs get (``body_runner``): the graph
            rewrites / constant folding, as the session's graph.
        eager_bodies: the runners its nodes' preparations made compile their bodies with this
            program (an error in a body is raised here), not at their first run.
        bodies: the subgraph runners the programs of one engine share (see
            :meth:`_compile_body`); None: this program's own.
        prior: another program's walk of ``pg`` (:meth:`prior_walk`), whose results a node
            with the same inputs takes instead of being inferred again; default the walk the
            rewrites made (``pg.prior``, taken by the first program).
    """

    def __init__(self, pg: PreparedGraph, registry: Registry, input_dims: dict, input_dtypes: dict,
                 allocator: str = "pool", input_values: Optional[dict] = None, name: str = "graph",
                 validate: bool = False, optimize: bool = False, memory_limit: Optional[int] = None,
                 body_runner: Optional[Callable] = None, fold: bool = True, eager_bodies: bool = False,
                 bodies: Optional[dict] = None, prior: Optional[PriorInference] = None):
        self.pg = pg
        self.eager_bodies = eager_bodies
        self.bodies = {} if bodies is None else bodies
        #: makes a subgraph's runner (``SubgraphRunner``'s signature; :meth:`_compile_body`)
        self.body_runner = body_runner
        self.optimize = optimize
        self.fold = fold
        #: the bytes one tensor or one plan may take (``dynashape.limits``)
        self.memory_limit = memory_limit if memory_limit is not None else resolve_memory_limit(None)
        self.registry = registry
        self.allocator = allocator
        self.validate = validate
        self.name = name
        self.input_dims = dict(input_dims)
        self.input_dtypes = dict(input_dtypes)
        self.cache_lock = threading.Lock()   # guards what plans add to it: layouts, continuations
        self.services = NodeServices(pg.opsets, registry, self._compile_body, graph=pg)
        if prior is None:
            prior, pg.prior = pg.prior, None   # (its contexts become this program's: taken once)
        self.sg: SymbolicGraph = infer_symbolic(pg, registry, input_dims, input_dtypes, self.services, input_values,
                                                prior)
        del prior   # (its values hold the constants: a weight packed below must not stay alive through it)
        sg = self.sg
        self.slot_names = list(pg.names)     # the graph's tensors, then the kernels' scratch buffers
        self.template: list = [None] * len(pg.names)
        for s, arr in pg.constants.items():
            self.template[s] = arr
        for idx, pn in enumerate(pg.nodes):
            if sg.status[idx] == FOLDED:
                for o in pn.outputs:
                    if o >= 0 and sg.values[o] is not None and sg.values[o].dtype != object:
                        self.template[o] = sg.values[o]
        #: slots whose value a signature fixes: constants, folded and plan-time values
        self.known_by_signature = sg.known_by_signature
        self.segments: list[Segment] = []
        self.steps: list[Step] = []          # every run-time step of every segment, in order
        self._make_segments()
        self._make_steps()
        self._make_memory()
        self._mark_needed()
        emitter = Emitter(self)
        for seg in self.segments:
            emitter.segment(seg)
        self.binder, self.binder_source = emitter.binder()
        self.output_copy = self._output_copies()
        self.copies_outputs = any(self.output_copy)
        if eager_bodies:   # (after the steps: a traced preparation made the runners, compiling nothing)
            for runner in self.services.runners():
                runner.compile()

    # --- structure ---------------------------------------------------------------------
    def _make_segments(self) -> None:
        status = self.sg.status
        seg = Segment(0)
        self.segments.append(seg)
        known = tuple(sorted(self.sg.input_symbols))
        seg.symbols = known
        for idx in range(len(self.pg.nodes)):
            if seg.binding and status[idx] != BINDING:
                known = known + tuple(name for _, _, name in seg.binds)
                seg = Segment(len(self.segments), symbols=known)
                self.segments.append(seg)
            seg.nodes.append(idx)
            if status[idx] == BINDING:
                seg.binding.append(BindingNode(idx))
                seg.binds.extend(self.sg.binds.get(idx, ()))
                for o in self.pg.nodes[idx].outputs:
                    shape = self.sg.shapes[o] if o >= 0 else None
                    if shape is not None:
                        ints = tuple((axis, d) for axis, d in enumerate(shape) if isinstance(d, int))
                        seg.checks.append((o, len(shape), ints))

    def segment_of_node(self) -> dict:
        return {idx: seg for seg in self.segments for idx in seg.nodes}

    def _make_steps(self) -> None:
        sg, pg = self.sg, self.pg
        self._readers = self._unpacked_readers()
        self._readers_of: Optional[dict] = None
        runs = [idx for seg in self.segments for idx in seg.nodes if sg.status[idx] in (STEP, PLAN)]
        for idx in runs:      # every prepack first, then the aligned copies of the rest, then prepare
            sg.contexts[idx].prepacked = self._prepack(idx, sg.kernels[idx], sg.contexts[idx])
        for slot in list(pg.constants):
            self._align_constant(slot)
        t = 0
        for seg in self.segments:
            binding = iter(seg.binding)
            for idx in seg.nodes:
                status = sg.status[idx]
                if status in (STEP, PLAN):
                    pn = pg.nodes[idx]
                    kernel = sg.kernels[idx]
                    ctx = sg.contexts[idx]
                    packed = ctx.prepacked
                    inputs = tuple(pn.all_inputs)
                    if packed is not None:
                        inputs = tuple(-1 if j in kernel.prepack_inputs else i for j, i in enumerate(inputs))
                    step = Step(idx, pn, kernel, inputs, tuple(pn.outputs), trace_prepare(kernel, ctx),
                                scratch=self._scratch_slots(idx, kernel), prepacked=packed)
                    if status == STEP:
                        step.t = t
                        t += 1
                        seg.steps.append(step)
                        self.steps.append(step)
                    else:
                        seg.plan_nodes.append(step)
                elif status == BINDING:
                    t += 1          # binding nodes read their inputs at this step
                    node = next(binding)
                    node.kernel, node.prepared = self._binding_hint(idx)
                    pn = pg.nodes[idx]
                    # outer-scope values that are constants here are compiled into the subgraphs
                    node.inputs = pn.inputs + tuple(i for i in pn.implicit if self.template[i] is None)
        self.n_steps = t

    def _prepack(self, idx: int, kernel, ctx) -> Any:
        """What ``kernel.prepack`` makes of the node's constant inputs (None when the kernel
        prepacks nothing here); made once per node of the prepared graph, shared by every
        program compiled from it."""
        if kernel is None or kernel.prepack is None or not kernel.prepack_inputs:
            return None
        cached = self.pg.prepacked.get(idx)
        if cached is not None:
            if cached[0] is not kernel:
                raise RuntimeError(f"node '{self.pg.nodes[idx].node.name}': its constant inputs were prepacked for "
                                   f"kernel {cached[0].plugin}:{cached[0].op_type} and released, but this program "
                                   f"chose {kernel.plugin}:{kernel.op_type}")
            return cached[1]
        slots = self.pg.nodes[idx].inputs
        for j in kernel.prepack_inputs:
            if j >= len(slots) or slots[j] < 0:
                continue   # an absent optional input
            value = ctx.value(j)
            if value is None or value.dtype == object:
                return None
        for j in kernel.prepack_inputs:
            if j < len(slots) and slots[j] >= 0:
                self._align_constant(slots[j])
        packed = kernel.prepack(ctx)
        if packed is not None:
            self.pg.prepacked[idx] = (kernel, packed)
            for j in kernel.prepack_inputs:
                if j < len(slots) and slots[j] >= 0:
                    self._release_packed_input(slots[j])
        return packed

    def _unpacked_readers(self) -> dict:
        """Per constant slot, how many node inputs read it (a graph output counts as one): a
        prepacked node's read is taken off when it packs, and the constant goes at 0. Empty
        where constants stay (overridable initializers: an overriding session compiles from
        the model's constants)."""
        pg = self.pg
        if pg.graph.overridable:
            return {}
        counts = dict.fromkeys(pg.output_slots, 1)
        for pn in pg.nodes:
            for i in pn.all_inputs:
                if i in pg.constants:
                    counts[i] = counts.get(i, 0) + 1
        return counts

    def _release_packed_input(self, slot: int) -> None:
        """One prepacked read of constant ``slot`` done; at the last read nothing else makes,
        it leaves the value template, the model graph and the symbolic values (its mapped
        pages with it), and the prepared graph keeps a stand-in of its shape without data for
        per-node inference: the packed form replaces it, and the peak stays one copy."""
        pg = self.pg
        left = self._readers.get(slot)
        if left is None:
            return
        self._readers[slot] = left = left - 1
        value = pg.constants.get(slot)
        if left > 0 or slot in pg.packed_away or value is None:
            return
        release_view(value)
        pg.packed_away.add(slot)
        pg.graph.release({pg.names[slot]})
        self._replace_constant(slot, np.broadcast_to(np.zeros((), value.dtype), value.shape), None)

    def _align_constant(self, slot: int) -> None:
        """Constant ``slot`` as an aligned copy where it is a view of the model's bytes that is
        not aligned for its dtype (:func:`.weights.array_from_region` leaves a large one so:
        protobuf places raw data at any offset). Done where a kernel first needs it, as late
        as possible: before a prepack reads it, else once every prepack is done (before any
        ``prepare``, which may keep the array), so that a weight waits as untouched file pages
        until then and the copies of the weights a packed form replaces never stand together
        (a Llama's tied embedding and LM head: one at a time)."""
        value = self.pg.constants.get(slot)
        if value is None or value.flags.aligned:
            return
        copy = aligned_copy(value)
        self._replace_constant(slot, copy, copy if self.template[slot] is value else self.template[slot])

    def _replace_constant(self, slot: int, value: np.ndarray, template) -> None:
        """``value`` in place of constant ``slot`` in the prepared graph, the symbolic values and
        the symbolic contexts kept for the steps; ``template``: the value template's entry."""
        pg = self.pg
        pg.constants[slot] = value
        self.template[slot] = template
        self.sg.values[slot] = value
        for idx in self._constant_readers().get(slot, ()):
            pn, ctx = pg.nodes[idx], self.sg.contexts[idx]
            ctx.input_values = [value if i == slot else v for i, v in zip(pn.inputs, ctx.input_values)]

    def _constant_readers(self) -> dict:
        """Per constant slot, the nodes that have it among their inputs (made on first use)."""
        if self._readers_of is None:
            self._readers_of = {}
            for idx, pn in enumerate(self.pg.nodes):
                for i in pn.inputs:
                    if i in self.pg.constants:
                        self._readers_of.setdefault(i, []).append(idx)
        return self._readers_of

    def _scratch_slots(self, idx: int, kernel) -> tuple:
        """Slots for the kernel's scratch buffers (shapes traced symbolically), or ()."""
        found = trace_scratch(kernel, self.sg.contexts[idx])
        if not found:
            return ()
        slots = []
        for k, (shape, dtype) in enumerate(found):
            slots.append(len(self.sg.shapes))
            self.sg.shapes.append(shape)
            self.sg.dtypes.append(dtype)
            self.sg.values.append(None)
            self.slot_names.append(f"{self.pg.nodes[idx].node.name}:scratch{k}")
        return tuple(slots)

    def _binding_hint(self, idx: int) -> tuple:
        """(kernel, prepared) a binding node can reuse each run: the kernel chosen for its
        declared dtypes, and its prepared argument when tracing shows it shape-independent."""
        kernel = self.sg.kernels[idx]
        if kernel is None or kernel.prepare is None:
            return kernel, None
        trace = trace_prepare(kernel, self.sg.contexts[idx])
        return kernel, trace.value if trace.kind == STATIC else None

    def _step_specs(self) -> list[StepSpec]:
        """The planner's view of every run-time step (BINDING nodes included: they read)."""
        sg, pg = self.sg, self.pg
        outputs = set(pg.output_slots)
        producer_segment = {}
        specs = []
        pool = self.allocator == "pool"
        for seg in self.segments:
            for idx in seg.nodes:
                status = sg.status[idx]
                if status not in (STEP, BINDING):
                    continue
                pn = pg.nodes[idx]
                n_in = len(pn.all_inputs)
                aliases = {k: i for k, i in pn.opdef.aliases if k < len(pn.outputs) and i < n_in}
                if status == BINDING:
                    specs.append(StepSpec(tuple(pn.all_inputs), tuple(pn.outputs), (None,) * len(pn.outputs), aliases))
                    continue
                scratch = self._step_of[idx].scratch
                sizes = tuple(_size_expr(sg.shapes[o], sg.dtypes[o]) if o >= 0 and o not in outputs else None
                              for o in pn.outputs + scratch)
                kernel = sg.kernels[idx]
                inplace = ()
                if pool and kernel is not None and kernel.may_inplace:
                    inplace = tuple(
                        (k, i) for k, i in kernel.may_inplace
                        if k < len(pn.outputs) and i < len(pn.inputs) and pn.outputs[k] >= 0
                        and sizes[k] is not None and pn.inputs[i] >= 0
                        and producer_segment.get(pn.inputs[i]) is seg
                        and sg.shapes[pn.inputs[i]] == sg.shapes[pn.outputs[k]]
                        and sg.dtypes[pn.inputs[i]] == sg.dtypes[pn.outputs[k]])
                specs.append(StepSpec(tuple(pn.all_inputs), tuple(pn.outputs) + scratch, sizes, aliases, inplace))
                for o in pn.outputs:
                    if o >= 0:
                        producer_segment[o] = seg
        return specs

    def _make_memory(self) -> None:
        """Blocks (lifetimes over the global step order), fresh blocks, per-segment arenas."""
        self._step_of = {st.index: st for st in self.steps}
        specs = self._step_specs()
        self.blocks = lifetimes(specs, keep=self.pg.output_slots, inplace=self.allocator == "pool")
        outputs = set(self.pg.output_slots)
        self.fresh_blocks = {b.id for b in self.blocks if any(s in outputs for s in b.slots)}
        step_segment = {}
        for seg in self.segments:
            for st in seg.steps:
                step_segment[st.t] = seg
        block_of = {}
        for b in self.blocks:
            for s in b.slots:
                block_of[s] = b
            if b.id not in self.fresh_blocks:
                seg = step_segment[b.first]
                seg.blocks.append(b)
        self.block_of = block_of

    # --- shapes, values and outputs each segment needs ------------------------------------
    def _mark_needed(self) -> None:
        sg, pg = self.sg, self.pg
        status = sg.status
        producer = pg.producer
        seg_of = self.segment_of_node()
        readers: set = set(pg.output_slots)
        traced = {st.index: st for seg in self.segments for st in seg.steps + seg.plan_nodes}
        for idx, pn in enumerate(pg.nodes):
            if status[idx] == FOLDED:
                continue
            st = traced.get(idx)
            reads = st.kernel.reads if st is not None and st.trace.kind != CONCRETE else None
            readers.update(i for j, i in enumerate(pn.all_inputs) if i >= 0 and (reads is None or j in reads))
        for seg in self.segments:
            self._assign_outputs(seg)
            for st in seg.steps + seg.plan_nodes:
                if st.trace.kind == CONCRETE:
                    st.in_sids = tuple(self._sid(seg, i) for i in st.inputs)
                    st.out_sids = tuple(self._sid(seg, o) for o in st.outputs)
        for slot in sorted(readers):
            p = producer.get(slot)
            if p is None or status[p] != FOLDED:
                continue
            value = sg.values[slot]
            if value is not None and value.dtype == object:
                seg_of[p].value_slots.append(slot)
        for seg in self.segments:
            for st in seg.steps + seg.plan_nodes:
                if st.trace.kind == SYMBOLIC:
                    st.qid = len(seg.symbolic_steps)
                    seg.symbolic_steps.append(st)

    def _sid(self, seg: Segment, slot: int) -> int:
        """The shape id of ``slot`` in ``seg`` (equal symbolic shapes share one); -1 if none."""
        if slot < 0 or self.sg.shapes[slot] is None:
            return -1
        shape = self.sg.shapes[slot]
        sid = seg.shape_ids.get(shape)
        if sid is None:
            sid = seg.shape_ids[shape] = len(seg.shapes)
            seg.shapes.append(shape)
            seg.shape_slots.append([])
        if slot not in seg.shaped:
            seg.shaped.add(slot)
            seg.shape_slots[sid].append(slot)
        return sid

    def _assign_outputs(self, seg: Segment) -> None:
        """Where each output of the segment's steps and plan nodes lives."""
        sg = self.sg
        arena_index: dict = {}
        arrays = seg.arena_arrays
        local = {b.id: k for k, b in enumerate(seg.blocks)}
        for st in seg.steps:
            aliases = {k for k, _ in st.node.opdef.aliases}
            specs = []
            for k, o in enumerate(st.outputs + st.scratch):
                dtype = sg.dtypes[o] if o >= 0 else None
                if o < 0 or k in aliases or dtype is None or isinstance(dtype, ValueType):   # containers: the kernel's
                    specs.append(OutSpec())
                    continue
                b = self.block_of.get(o)
                sid = self._sid(seg, o)
                if b is not None and b.id in self.fresh_blocks:
                    owner = b.slots[0] == o
                    specs.append(OutSpec(FBLOCK, sid, dtype, b.id, owner=owner,
                                         reshape=not owner and sg.shapes[b.slots[0]] != sg.shapes[o]))
                elif b is not None:
                    key = (b.id, sid, dtype)
                    ref = arena_index.get(key)
                    if ref is None:
                        ref = arena_index[key] = len(arrays)
                        arrays.append((sid, dtype, local[b.id]))
                    specs.append(OutSpec(ARENA, sid, dtype, ref))
                else:
                    specs.append(OutSpec(FRESH, sid, dtype))
            st.outs = tuple(specs)
        for st in seg.plan_nodes:
            aliases = {k for k, _ in st.node.opdef.aliases}
            st.outs = tuple(OutSpec() if o < 0 or k in aliases or sg.dtypes[o] is None
                            or isinstance(sg.dtypes[o], ValueType)
                            else OutSpec(FRESH, self._sid(seg, o), sg.dtypes[o])
                            for k, o in enumerate(st.outputs + st.scratch))

    def _output_copies(self) -> list:
        """Per graph output: must ``run`` copy it? Only arrays made by this run are handed
        out as they are; views of feeds, constants, plan values and repeats are copied
        (True); a sequence or optional that is not made by this run is copied element by
        element (:data:`DEEP`, see :func:`copy_value`)."""
        pg, sg = self.pg, self.sg
        seen: set = set()
        out: list = []
        for slot in pg.output_slots:
            root = self._view_root(slot)
            p = pg.producer.get(root)
            fresh = p is not None and sg.status[p] in (STEP, BINDING) and root not in seen
            seen.add(root)
            if fresh:
                out.append(False)
            else:
                out.append(DEEP if isinstance(sg.dtypes[slot], ValueType) or sg.dtypes[slot] is None else True)
        return out

    def _view_root(self, slot: int) -> int:
        pg = self.pg
        while True:
            p = pg.producer.get(slot)
            if p is None:
                return slot
            pn = pg.nodes[p]
            k = pn.outputs.index(slot)
            src = dict(pn.opdef.aliases).get(k)
            if src is None or self.sg.status[p] not in (STEP, BINDING) or pn.all_inputs[src] < 0:
                return slot
            slot = pn.all_inputs[src]

    def sources(self) -> list[tuple[str, str]]:
        """(title, Python source) of every function generated for this program: the feed
        shapes' binder, then per segment its signature, plan-node, bind and run functions."""
        found = [("binder", self.binder_source)]
        for seg in self.segments:
            found.extend((f"segment {seg.index}: {name}", seg.source[name])
                         for name in ("sig", "run_plan", "bind", "run") if name in seg.source)
        return found

    # --- subgraphs ---------------------------------------------------------------------
    def _compile_body(self, graph) -> Any:
        """The runner of a subgraph of this graph: outer constants become its constants,
        other outer values its inputs with the dims they have here.

        The programs of one engine share runners: one made for another program (the session's,
        whose bodies compile with it) is taken where the body reads the same constants and its
        other outer values have the same dtypes, ranks and int dims (:func:`_body_key`). Their
        symbols may differ (a program split where a dim_param took two values): the runner's
        engine binds its inputs' symbols as hints, as the session's binds dim_params, and
        splits where one takes two values, reusing the body's compiled graph (a decoder's
        past-and-cache branch is not compiled again at its first step)."""
        if self.body_runner is None:
            raise DynashapeError(f"subgraph '{graph.name}' of '{self.name}' cannot be compiled: the program was made "
                                 "without a body_runner")
        constants, dims, dtypes = {}, {}, {}
        for name in sorted(graph.outer_names()):
            slot = self.pg.slot.get(name)
            if slot is None:
                continue
            if self.template[slot] is not None:
                constants[name] = self.template[slot]
                continue
            dims[name] = _outer_dims(name, self.sg.shapes[slot])
            dtypes[name] = self.sg.dtypes[slot]
        key = _body_key(graph, constants, dims, dtypes)
        runner = self.bodies.get(key) if key is not None else None
        if runner is None:
            runner = self.body_runner(graph, self.pg.opsets, self.registry, allocator=self.allocator,
                                      outer_dims=dims, outer_dtypes=dtypes, outer_constants=constants,
                                      validate=self.validate, optimize=self.optimize, fold=self.fold,
                                      memory_limit=self.memory_limit, eager_bodies=self.eager_bodies)
            if key is not None:
                runner = self.bodies.setdefault(key, runner)
        return runner

    def prior_walk(self) -> PriorInference:
        """This program's walk, for a program of the same graph with other input dims (a
        split): its nodes whose inputs come out the same take their results from here."""
        return PriorInference(self.pg, self.sg, self.registry, self.input_dims, self.input_dtypes, any_inputs=True)

    # --- reports -------------------------------------------------------------------------
    def describe(self) -> dict:
        """Counts for inspection: steps, plan nodes, folded, binding, segments, traces."""
        from collections import Counter
        traces = Counter(st.trace.kind for st in self.steps)
        return {"steps": len(self.steps), "plan_nodes": sum(len(s.plan_nodes) for s in self.segments),
                "folded": self.sg.status.count(FOLDED), "binding": self.sg.status.count(BINDING),
                "segments": len(self.segments), "prepare": dict(traces)}


#: ``output_copy`` entry of a graph output copied by :func:`copy_value` (a sequence, an
#: optional, or a value of unknown type).
DEEP = "deep"


def copy_value(value: Any) -> Any:
    """A copy of a run-time value: an array copied, a sequence (list) copied element by
    element, a map (dict of Python scalars) copied, None (an empty optional) as it is."""
    if value is None:
        return None
    if type(value) is list:
        return [copy_value(x) for x in value]
    if type(value) is dict:
        return dict(value)
    return np.array(value, copy=True)


def _size_expr(shape, dtype) -> Optional[Any]:
    """Bytes of a tensor as a dim expression; None when it cannot live in an arena."""
    if shape is None or dtype is None or dtype.kind == "O":
        return None
    n: Any = dtype.itemsize
    for d in shape:
        n = n * d
    return n


def _body_key(graph, constants: dict, dims: dict, dtypes: dict) -> Optional[tuple]:
    """What a runner of ``graph`` made for one program is shared by: the graph, its outer
    constants (by identity), and per other outer value its dtype and dims with every symbol
    as None. None where a dtype cannot be hashed (that program's runner is its own)."""
    key = (id(graph), tuple((name, id(value)) for name, value in sorted(constants.items())),
           tuple((name, dtypes.get(name), None if d is None else tuple(x if isinstance(x, int) else None for x in d))
                 for name, d in sorted(dims.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _outer_dims(name: str, shape) -> Optional[tuple]:
    """An outer value's dims as a subgraph input: ints and plain symbols kept, any other
    expression a symbol of its own (the subgraph binds it from the value it gets)."""
    if shape is None:
        return None
    out = []
    for axis, d in enumerate(shape):
        if isinstance(d, int) or _plain_symbol(d):
            out.append(d)
        else:
            out.append(sym(f"{name}:{axis}"))
    return tuple(out)


def _plain_symbol(d) -> bool:
    atom = as_atom(d)
    return atom is not None and atom[0] == "s"
