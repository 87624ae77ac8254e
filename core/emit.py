"""The generated functions of a compiled program (:class:`dynashape.program.Program`).

Per segment (:class:`dynashape.segments.Segment`): ``sig(*symbols)`` evaluates every shape,
folded shape-tensor value, symbolic kernel parameter and arena block size a signature needs
(and the guards the symbolic rules rely on; None when one fails); ``run(v, B, P, S)`` calls the
steps' kernels straight through, each line naming its node; ``run_plan`` runs the nodes whose
values follow from shapes alone, reusing a node's outputs while its symbols keep their values;
``bind(buf, S, O)`` makes one execution context's output buffers. For the program: the
``binder`` from feed shapes to the first segment's symbols. Each function's source is kept
(``Program.sources``, ``dynashape inspect --program``) and registered for tracebacks
(:mod:`dynashape.codegen`).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .codegen import CodeWriter, ExprCoder
from .node import CONCRETE, STATIC, SYMBOLIC
from .segments import ARENA, FBLOCK, FRESH, Calls, Segment, Step
from .symbolic import free_symbols, is_nonneg

__all__ = ["Emitter"]


class Emitter:
    """Writes the functions of one program's segments, in segment order (a segment's plan
    nodes may reuse what the plan nodes of an earlier one computed)."""

    def __init__(self, program: Any):
        self.name = program.name
        self.pg = program.pg
        self.sg = program.sg
        self.segments = program.segments
        self.allocator = program.allocator
        self.input_dims = program.input_dims
        self._plan_made: dict = {}   # plan output slot -> the symbols its value is a function of

    def segment(self, seg: Segment) -> None:
        """Write and compile ``seg``'s functions (``sig``, ``run``, ``run_plan``, ``bind``) and the
        positions of its steps' per-signature preparations."""
        self._sig(seg)
        _positions(seg.run, seg.steps)
        _positions(seg.run_plan, seg.plan_nodes)
        seg.run.fn = self._calls(seg, seg.steps, "run", seg.run.lines, bound=True)
        seg.run_plan.fn = self._calls(seg, seg.plan_nodes, "run_plan", seg.run_plan.lines, bound=False,
                                      memo=self._plan_dependencies(seg))
        self._bind(seg)
        seg.plan_outputs = [o for st in seg.plan_nodes for o in st.outputs if o >= 0]

    def _sig(self, seg: Segment) -> None:
        sg = self.sg
        w = CodeWriter(f"{self.name}-sig{seg.index}")
        names = {name: f"s{k}" for k, name in enumerate(seg.symbols)}
        w.emit(f"def sig({', '.join(names.values())}):", 0)
        coder = ExprCoder(w, names)
        checks = []
        shapes = []
        for shape in seg.shapes:
            dims = [coder.ref(d) for d in shape]
            checks.extend(f"{r} < 0" for d, r in zip(shape, dims) if not is_nonneg(d))
            shapes.append("(" + "".join(r + ", " for r in dims) + ")")
        made: dict = {}
        values = []
        for s in seg.value_slots:     # equal symbolic values are made once and shared (never written)
            code = coder.array(sg.values[s], sg.dtypes[s] or np.int64)
            if code not in made:
                made[code] = f"x{len(made)}"
                w.emit(f"{made[code]} = {code}")
            values.append(made[code])
        prepared = [coder.struct(st.trace.value) for st in seg.symbolic_steps]
        sizes = [coder.ref(b.size) for b in seg.blocks]
        # the guards of the earlier segments too: this segment's symbolic shapes build on
        # theirs (a Reshape that took a computed 0 for a dim, not a copy, feeds a Split here),
        # so where one fails, per-node inference must plan this segment as well
        for earlier in self.segments[:seg.index + 1]:
            for idx in earlier.nodes:
                for a, relation, b in sg.guards.get(idx, ()):
                    checks.append(f"not ({coder.ref(a)} {relation} {coder.ref(b)})")
        if checks:
            w.emit(f"if {' or '.join(dict.fromkeys(checks))}: return None")
        tup = lambda items: "(" + "".join(i + ", " for i in items) + ")"  # noqa: E731
        w.emit(f"return {tup(shapes)}, {tup(values)}, {tup(prepared)}, {tup(sizes)}")
        ns = w.compile()
        seg.sig = ns["sig"]
        seg.source["sig"] = ns["__source__"]

    def _plan_dependencies(self, seg: Segment) -> list:
        """Per plan node, the positions (in ``seg.symbols``) of the symbols its outputs are a
        function of: those in its inputs' and outputs' shapes, its inputs' symbolic values
        and, through plan values, those of the plan nodes before it, in this segment or an
        earlier one (segments are generated in order; a later segment knows every symbol an
        earlier one does)."""
        sg = self.sg
        position = {name: k for k, name in enumerate(seg.symbols)}
        made: dict = self._plan_made

        def of(slot: int) -> set:
            if slot < 0:
                return set()
            found = set(made.get(slot, ()))
            for d in sg.shapes[slot] or ():
                found |= free_symbols(d)
            value = sg.values[slot]
            if value is not None and value.dtype == object:
                for x in value.reshape(-1).tolist():
                    found |= free_symbols(x)
            return found

        deps = []
        for st in seg.plan_nodes:
            found = set().union(*(of(i) for i in st.inputs), *(of(o) for o in st.outputs))
            for o in st.outputs:
                made[o] = found
            deps.append(tuple(sorted(position[name] for name in found)))
        return deps

    def _calls(self, seg: Segment, steps: list, name: str, lines: dict, bound: bool,
                        memo: Optional[list] = None) -> Callable:
        """``name(v, B, P, S, E)``: call each step's kernel in order with its inputs from the
        value list ``v``, its output buffers (``B[pos]`` made by ``bind`` when ``bound``, or
        fresh arrays of shapes ``S``) and its prepared argument ``P[pos]``; store its outputs
        in ``v``. With ``memo`` (plan nodes: per node, the positions in the symbol values
        ``E`` its outputs depend on), a node whose symbols have the values they had for the
        previous signature reuses its outputs then (plan values are never written): a new
        batch size keeps the positions of the same sequence length. One entry per node, one
        tuple swapped in at once, so concurrent plans never see a key with another's outputs.
        """
        w = CodeWriter(f"{self.name}-{name}{seg.index}")
        w.namespace["_empty"] = np.empty
        w.emit(f"def {name}(v, B, P, S, E=()):", 0)
        if not steps:
            w.emit("return")
        for pos, st in enumerate(steps):
            written = [(k, o) for k, o in enumerate(st.outputs) if o >= 0]
            if memo is not None:
                last = w.const([((None,), ())], "m")
                key = "(" + "".join(f"E[{k}], " for k in memo[pos]) + ")"
                outs = "(" + "".join(f"v[{o}], " for _, o in written) + ")"
                w.emit(f"k = {key}")
                w.emit(f"c = {last}[0]")
                w.emit("if c[0] == k:")
                w.emit(f"{outs} = c[1]", 2)
                w.emit("else:")
                self._call(w, seg, st, pos, lines, bound, indent=2)
                w.emit(f"{last}[0] = (k, {outs})", 2)
            else:
                self._call(w, seg, st, pos, lines, bound, indent=1)
        ns = w.compile()
        seg.source[name] = ns["__source__"]
        return ns[name]

    def _call(self, w: CodeWriter, seg: Segment, st: Step, pos: int, lines: dict, bound: bool,
                   indent: int) -> None:
        """The lines calling one step's kernel and storing its outputs in ``v``."""
        kern = w.const(st.kernel.compute, "k")
        ins = ", ".join(f"v[{i}]" if i >= 0 else "None" for i in st.inputs)
        items = []
        inline = not bound
        for k, spec in enumerate(st.outs):
            if spec.kind == FRESH:
                w.emit(f"f{pos}_{k} = _empty(S[{spec.sid}], {w.const(spec.dtype, 'd')})", indent)
                items.append(f"f{pos}_{k}")
                inline = True
            elif spec.kind == FBLOCK:
                if spec.owner:
                    w.emit(f"g{spec.ref} = _empty(S[{spec.sid}], {w.const(spec.dtype, 'd')})", indent)
                items.append(f"g{spec.ref}.reshape(S[{spec.sid}])" if spec.reshape else f"g{spec.ref}")
                inline = True
            elif spec.kind == ARENA:
                items.append(f"B[{pos}][{k}]")
            else:
                items.append("None")
        w.emit(f"b = [{', '.join(items)}]" if inline else f"b = B[{pos}]", indent)
        lines[len(w.lines) + 1] = pos
        w.emit(f"r = {kern}([{ins}], b, P[{pos}])  # {_node_label(self.pg.nodes[st.index].node)}", indent)
        written = [(k, o) for k, o in enumerate(st.outputs) if o >= 0]
        if len(written) == 1:
            k, o = written[0]
            w.emit(f"v[{o}] = b[{k}] if r is None else r[{k}]", indent)
        elif written:
            w.emit("if r is None:", indent)
            for k, o in written:
                w.emit(f"v[{o}] = b[{k}]", indent + 1)
            w.emit("else:", indent)
            for k, o in written:
                w.emit(f"v[{o}] = r[{k}]", indent + 1)

    def _bind(self, seg: Segment) -> None:
        """``bind(buf, S, O)``: the output buffers of every step of the segment: views of the
        arena ``buf`` at offsets ``O`` (pool), or one new array per block (naive)."""
        w = CodeWriter(f"{self.name}-bind{seg.index}")
        w.namespace["_nd"], w.namespace["_empty"] = np.ndarray, np.empty
        w.emit("def bind(buf, S, O):", 0)
        for j, (sid, dtype, local) in enumerate(seg.arena_arrays):
            dt = w.const(dtype, "d")
            w.emit(f"a{j} = _nd(S[{sid}], {dt}, buf, O[{local}])" if self.allocator == "pool"
                   else f"a{j} = _empty(S[{sid}], {dt})")
        lists = []
        for st in seg.steps:
            lists.append("[" + ", ".join(f"a{spec.ref}" if spec.kind == ARENA else "None" for spec in st.outs) + "]")
        w.emit("return (" + "".join(x + ", " for x in lists) + ")")
        ns = w.compile()
        seg.bind = ns["bind"]
        seg.source["bind"] = ns["__source__"]

    def binder(self) -> tuple[Callable, str]:
        """``binder(shapes)``: feed shapes (input order) -> values of segment 0's symbols, or
        None when two axes declared with one symbol got different values; and its source."""
        pg = self.pg
        first: dict = {}
        w = CodeWriter(f"{self.name}-binder")
        w.emit("def binder(shapes):", 0)
        checks = []
        for pos, slot in enumerate(pg.input_slots):
            for axis, d in enumerate(self.input_dims.get(slot) or ()):
                if isinstance(d, int):
                    continue
                name = next(iter(free_symbols(d)))
                if name in first:
                    checks.append(f"shapes[{pos}][{axis}] != {first[name]}")
                else:
                    first[name] = f"shapes[{pos}][{axis}]"
        if checks:
            w.emit(f"if {' or '.join(checks)}: return None")
        values = "".join(first[name] + ", " for name in self.segments[0].symbols)
        w.emit(f"return ({values})")
        ns = w.compile()
        return ns["binder"], ns["__source__"]


def _positions(calls: Calls, steps: list) -> None:
    """Which steps' prepared arguments are shared, from ``sig``, or made per signature."""
    calls.static = [st.trace.value if st.trace.kind == STATIC else None for st in steps]
    calls.symbolic = [(pos, st.qid) for pos, st in enumerate(steps) if st.trace.kind == SYMBOLIC]
    calls.concrete = [pos for pos, st in enumerate(steps) if st.trace.kind == CONCRETE]


def _node_label(node) -> str:
    """``OpType 'name'`` of a node, as a comment of the generated line that calls its kernel
    (what a traceback through generated code shows; what is not printable in the name escaped)."""
    domain = f"{node.domain}::" if node.domain else ""
    name = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in node.name)
    return f"{domain}{node.op_type} '{name}'"
