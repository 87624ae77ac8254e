"""What ``dynashape inspect`` reports: every tensor's dtype, symbolic shape, producer and plugin."""
from __future__ import annotations

from typing import Any

from .errors import InvalidArgumentError
from .session import InferenceSession
from .symbolic import dim_str

__all__ = ["inspect_session", "inspect_rewrites", "inspect_model"]


def _dims(shape) -> Any:
    return None if shape is None else [d if isinstance(d, int) else dim_str(d) for d in shape]


def inspect_session(sess: InferenceSession) -> dict:
    """``{"tensors": [...], "summary": {...}}`` for the graph inputs and every node output,
    then the tensors of If/Loop/Scan bodies (named ``<node>/<attribute>/<tensor>``; the
    bodies are compiled for it).

    Each tensor: ``name``, ``dtype`` (numpy name), ``shape`` (int or str per dim, None when
    the rank is unknown), ``producer`` (op type, or "input" / "constant-folded"),
    ``plugin`` and ``data_dependent``.
    """
    pg, sg = sess.graph, sess.symbolic
    producers = {}
    for pn in pg.nodes:
        for o in pn.outputs:
            if o >= 0:
                producers[o] = (pn.node.op_type, pn.opdef.plugin)
    folded_at_load = {}
    for node in sess.model.graph.nodes:
        for name in node.outputs:
            slot = pg.slot.get(name)
            if slot is not None and slot not in producers:
                op = sess.registry.resolve_op(node.domain, node.op_type,
                                              sess.model.opsets.get(node.domain, 1))
                folded_at_load[slot] = (node.op_type, op.plugin)
    tensors = []
    slots = list(pg.input_slots) + [s for n in sess.model.graph.nodes for s in
                                    (pg.slot.get(o) for o in n.outputs if o) if s is not None]
    seen = set()
    for s in slots:
        if s in seen:
            continue
        seen.add(s)
        if s in folded_at_load:
            op_type, plugin = folded_at_load[s]
            const_shape, const_dtype = pg.constant_type(s)
            shape = None if const_shape is None else list(const_shape)
            dtype, dd = None if const_dtype is None else const_dtype.name, False
        else:
            op_type, plugin = producers.get(s, ("input", ""))
            shape, dd = _dims(sg.shapes[s]), sg.is_data_dependent(s)
            dtype = sg.dtypes[s].name if sg.dtypes[s] is not None else None
        tensors.append({"name": pg.names[s], "dtype": dtype, "shape": shape, "producer": op_type,
                        "plugin": plugin, "data_dependent": dd})
    for pn in pg.nodes:
        tensors.extend(_body_tensors(pn.node, sess.program.services, pn.node.name))
    n_dd = sum(t["data_dependent"] for t in tensors)
    return {"tensors": tensors,
            "summary": {"tensors": len(tensors), "fully_symbolic": len(tensors) - n_dd, "data_dependent": n_dd}}


def _body_tensors(node, services, scope: str) -> list:
    """The tensors of ``node``'s subgraphs (If branches, Loop/Scan bodies, nested ones too),
    named ``<node>/<attribute>/<tensor>``, shapes in the symbols of the body's inputs (a dim
    it takes from outside keeps the outer symbol)."""
    out = []
    for attr, graph in _subgraphs(node):
        program = services.subgraph(graph).program
        pg, sg = program.pg, program.sg
        producers = {o: pn.node.op_type for pn in pg.nodes for o in pn.outputs if o >= 0}
        plugins = {o: pn.opdef.plugin for pn in pg.nodes for o in pn.outputs if o >= 0}
        where = f"{scope}/{attr}"
        for s in list(pg.input_slots) + sorted(producers):
            out.append({"name": f"{where}/{pg.names[s]}",
                        "dtype": sg.dtypes[s].name if sg.dtypes[s] is not None else None,
                        "shape": _dims(sg.shapes[s]), "producer": producers.get(s, "input"),
                        "plugin": plugins.get(s, ""), "data_dependent": sg.is_data_dependent(s)})
        for pn in pg.nodes:
            out.extend(_body_tensors(pn.node, program.services, f"{where}/{pn.node.name}"))
    return out


def program_sources(sess: InferenceSession) -> list[tuple[str, str]]:
    """(title, Python source) of every function generated for the session's program, then for
    the programs of its If/Loop/Scan bodies (compiled for it; titled ``<node>/<attribute>:``)."""
    found = list(sess.program.sources())
    for pn in sess.graph.nodes:
        found.extend(_body_sources(pn.node, sess.program.services, pn.node.name))
    return found


def _body_sources(node, services, scope: str) -> list:
    out = []
    for attr, graph in _subgraphs(node):
        program = services.subgraph(graph).program
        where = f"{scope}/{attr}"
        out.extend((f"{where}: {title}", source) for title, source in program.sources())
        for pn in program.pg.nodes:
            out.extend(_body_sources(pn.node, program.services, f"{where}/{pn.node.name}"))
    return out


def _subgraphs(node) -> list:
    """(attribute name, Graph) of every subgraph a node holds."""
    from .model import Graph
    return [(attr, g) for attr, value in node.attrs.items()
            for g in ([value] if isinstance(value, Graph) else value if isinstance(value, list) else [])
            if isinstance(g, Graph)]


def inspect_model(model: Any, registry: Any = None) -> dict:
    """The report of :func:`inspect_session` for a model no session can be made of (an op
    without a definition here): every tensor with its declared dtype and shape (None where
    the model declares none), its producer and plugin (``"MISSING"``: nobody registered that
    op at the model's opset), and ``summary["missing"]``: ``["domain::op_type", ...]``.

    Raises:
        ModelLoadError: the model cannot be read.
    """
    from .dtypes import np_dtype
    from .errors import UnsupportedOperatorError
    from .model import load_model
    from .registry import get_registry

    m = model if hasattr(model, "graph") and hasattr(model, "opsets") else load_model(model)
    registry = registry if registry is not None else get_registry()
    declared = {**m.graph.value_info, **{vi.name: vi for vi in m.graph.outputs}}
    tensors, missing = [], []

    def entry(name: str, producer: str, plugin: str) -> dict:
        vi = declared.get(name)
        dtype = None if vi is None or not vi.elem_type else np_dtype(vi.elem_type).name
        shape = None if vi is None or vi.dims is None else [d.value if d.value is not None else "?" for d in vi.dims]
        return {"name": name, "dtype": dtype, "shape": shape, "producer": producer, "plugin": plugin,
                "data_dependent": False}

    for vi in m.graph.inputs:
        declared.setdefault(vi.name, vi)
        tensors.append(entry(vi.name, "input", ""))
    for node in m.graph.nodes:
        try:
            plugin = registry.resolve_op(node.domain, node.op_type, m.opsets.get(node.domain, 1), node.name).plugin
        except UnsupportedOperatorError:
            plugin = "MISSING"
            key = f"{node.domain or 'ai.onnx'}::{node.op_type}"
            if key not in missing:
                missing.append(key)
        tensors.extend(entry(o, node.op_type, plugin) for o in node.outputs if o)
    return {"tensors": tensors, "summary": {"tensors": len(tensors), "fully_symbolic": None, "data_dependent": None,
                                            "missing": missing}}


def inspect_rewrites(sess: InferenceSession, model: Any = None) -> dict:
    """What the graph rewrites did to the session's model: every replacement (``rewrite``,
    ``plugin``, ``root`` node, nodes ``removed`` / ``added``), ``counts`` per rewrite, node
    counts before / after (after constant folding) and run-time steps before / after (the
    steps of the same model compiled with ``optimize=False``).

    The steps before are compiled from ``model`` (a path, bytes or ``ModelProto``: what the
    session was made from), by default from the file the session read: a session keeps no
    copy of the weights the rewrites replaced.

    Raises:
        InvalidArgumentError: a rewrite fired, ``model`` is None and the session was not
            made from a path.
    """
    from dataclasses import asdict

    report = sess.rewrites
    steps_before = len(sess.program.steps)
    if report.fired:
        source = model if model is not None else sess.model.path
        if source is None:
            raise InvalidArgumentError("inspect_rewrites(session) compiles the model again without rewrites: pass "
                                       "model= (the bytes or ModelProto the session was made from)")
        steps_before = len(InferenceSession(source, optimize=False,
                                            external_data_dir=sess.external_data_dir).program.steps)
    return {"fired": [asdict(f) for f in report.fired], "counts": report.counts(),
            "nodes_before": report.nodes_before, "nodes_after": report.nodes_after,
            "steps_before": steps_before, "steps_after": len(sess.program.steps)}
