"""Control flow: If, Loop and Scan (all ONNX versions).

Each subgraph attribute (``then_branch``/``else_branch``/``body``) runs through the runner
the engine compiled for it (a program of its own, made once with the session's registry,
plans cached per signature), reached as ``ctx.subgraph(attribute)``: the
:class:`~dynashape.records.NodeSubgraph` that picks the outer-scope values out of the
kernel's ``inputs`` and hands them to the runner by name.

If and Loop are data-dependent (the branch taken and the trip count depend on input
values), and so is Scan (its body may be): the core infers and runs them when they are
reached, and the kernels return their outputs as fresh arrays. Inference reports the
subgraphs' declared output types, with a fresh symbol for every dim a subgraph does not
fix.

Values are tensors, sequences (lists of arrays) or optionals (None or the element): If
branches may return sequences/optionals and Loop may carry them (ONNX If-13+/Loop-13+
allow sequence types, If-16+/Loop-16+ optional types); they pass through the runners as
they are.

At import the element dims of a sequence a Loop carries, or an If returns, come from a
symbolic walk of the subgraph (``ctx.scope``, symbolic_inference.OuterScope): a Loop walks
its body from the initial values until the carried values' types hold for every iteration
(SequenceEmpty, then a SequenceInsert of ``[k, 4]`` per iteration: elements ``[?, 4]``);
an If joins what its branches return.
"""
from __future__ import annotations

import numpy as np
from dynashape.dtypes import OptionalType, SequenceType, is_container, join_dims, join_sequences, known_dims, \
    merge_types
from dynashape.errors import ExecutionError
from dynashape.model import FIXED, Graph, ValueInfo
from dynashape.program import copy_value
from dynashape.records import InferContext, OpLibrary
from dynashape.ops_builtin.scan_vectorize import vectorize_body
from dynashape.shapes import normalize_axis, numel, require

lib = OpLibrary()

IF_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)
LOOP_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)
SCAN8_VERSIONS = (8,)
SCAN_VERSIONS = (9, 11, 16, 19, 21, 23, 24, 25)


# subgraphs ---------------------------------------------------------------------------

def _graph_attr(ctx: InferContext, name: str) -> Graph:
    g = ctx.attr(name)
    if not isinstance(g, Graph):
        ctx.fail(f"attribute '{name}' must be a graph", kind="MissingAttribute")
    return g


def _owned(a):
    """A copy of an input value: node outputs must not alias planned buffers (a sequence is
    copied element by element, an empty optional stays None)."""
    return copy_value(a)


# declared subgraph types -------------------------------------------------------------

def _declared_shape(ctx: InferContext, vi: ValueInfo, prefix: tuple = ()) -> tuple | None:
    """A subgraph value's declared shape: fixed dims kept, others fresh symbols; None: no shape."""
    if vi.dims is None:
        return None
    return tuple(prefix) + tuple(d.value if d.kind == FIXED else ctx.new_dim() for d in vi.dims)


def _declared_dtype(vi: ValueInfo):
    """A subgraph value's declared type: a numpy dtype, a sequence/optional type, or None."""
    return vi.dtype


def _declared_outputs(g: Graph) -> tuple:
    """(dims, None for each dim that is not fixed; dtype) of each output of a subgraph, read
    once from its declarations (they never change; an If infers its outputs every run)."""
    found = g.__dict__.get("_dynashape_declared_outputs")
    if found is None:
        found = tuple((None if vi.dims is None else tuple(d.value if d.kind == FIXED else None for d in vi.dims),
                       _declared_dtype(vi)) for vi in g.outputs)
        g.__dict__["_dynashape_declared_outputs"] = found
    return found


def _with_fresh_dims(ctx: InferContext, dims) -> tuple | None:
    return None if dims is None else tuple(ctx.new_dim() if d is None else d for d in dims)


def _merge_shapes(ctx: InferContext, a: tuple | None, b: tuple | None) -> tuple | None:
    """One shape covering both branches: equal dims kept, others fresh; None when ranks differ."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if (isinstance(x, int) and isinstance(y, int) and x == y) else ctx.new_dim()
                 for x, y in zip(a, b))


def _scalar_flag(ctx: InferContext, i: int, what: str) -> None:
    """Check that input ``i`` holds exactly one element (when its shape is concrete)."""
    shape = ctx.shape(i)
    if shape is not None:
        require(ctx, numel(shape), "==", 1, f"{what} must hold exactly one element, got shape {tuple(shape)}",
                "InvalidInputs")


def _first(a: np.ndarray):
    return np.asarray(a).reshape(-1)[0]


def _empty_stack(vi: ValueInfo, resolved: tuple, prefix: tuple) -> np.ndarray:
    """An empty stacked output: ``prefix`` + the per-iteration shape (resolved or declared)."""
    shape, dtype = resolved
    if shape is None or not all(isinstance(d, int) for d in shape):
        dims = vi.dims or ()
        shape = tuple(d.value if d.kind == FIXED else 0 for d in dims)
    if dtype is None:
        dtype = _declared_dtype(vi) or np.dtype(np.float32)
    return np.zeros(tuple(prefix) + tuple(shape), dtype=dtype)


def _stack(parts: list, axis: int, node, what: str) -> np.ndarray:
    try:
        return np.stack(parts, axis=axis)
    except ValueError as exc:
        shapes = sorted({tuple(p.shape) for p in parts})
        raise ExecutionError(f"{node.op_type} node '{node.name}': {what} changes shape across "
                             f"iterations {shapes}; scan outputs must keep one shape") from exc


# If ----------------------------------------------------------------------------------

def _if_branches(ctx: InferContext) -> tuple[Graph, Graph]:
    then_g, else_g = _graph_attr(ctx, "then_branch"), _graph_attr(ctx, "else_branch")
    n = ctx.num_outputs
    for name, g in (("then_branch", then_g), ("else_branch", else_g)):
        if len(g.outputs) != n:
            ctx.fail(f"{name} has {len(g.outputs)} outputs, expected {n} (the node's outputs)",
                     kind="BranchOutputCount")
    return then_g, else_g


def _if_chosen(ctx: InferContext) -> bool | None:
    v = ctx.value(0)
    if v is None or np.asarray(v).size != 1 or np.asarray(v).dtype == object:
        return None
    return bool(_first(v))


def _if_shape(ctx: InferContext):
    """If: each output is the taken branch's; when unknown, what both branches declare alike.

    Source: ONNX operator spec, If-1/11/13/16/19/21/23/24/25.
    """
    then_g, else_g = _if_branches(ctx)
    _scalar_flag(ctx, 0, "cond")
    chosen = _if_chosen(ctx)
    if chosen is not None:
        return [_with_fresh_dims(ctx, dims) for dims, _ in _declared_outputs(then_g if chosen else else_g)]
    return [_merge_shapes(ctx, _with_fresh_dims(ctx, a), _with_fresh_dims(ctx, b))
            for (a, _), (b, _) in zip(_declared_outputs(then_g), _declared_outputs(else_g))]


def _if_dtype(ctx: InferContext):
    then_g, else_g = _if_branches(ctx)
    chosen = _if_chosen(ctx)
    out = []
    for a, b, (_, da), (_, db) in zip(then_g.outputs, else_g.outputs, _declared_outputs(then_g),
                                     _declared_outputs(else_g)):
        if da is not None and db is not None and da != db:
            ctx.fail(f"branch outputs '{a.name}' ({da}) and '{b.name}' ({db}) must have one dtype",
                     kind="BranchDtypeMismatch")
        if chosen is not None:
            out.append(da if chosen else db)
        else:
            out.append(da if da is not None else db)
    if _walks(ctx, out):
        branches = [then_g, else_g] if chosen is None else [then_g if chosen else else_g]
        out = _branch_sequences(ctx, out, branches)
    return out


def _walks(ctx: InferContext, types: list) -> bool:
    """The import-time walk of a subgraph is worth it: a sequence is among ``types``."""
    return ctx.symbolic and ctx.scope is not None and any(isinstance(t, SequenceType) for t in types)


def _branch_sequences(ctx: InferContext, types: list, branches: list) -> list:
    """``types`` with each sequence's hints those the walks of ``branches`` prove for it
    (joined over both branches); unchanged where a walk cannot be made."""
    walked = [ctx.scope.infer(g, []) for g in branches]
    if any(w is None for w in walked):
        return types
    out = list(types)
    for j, t in enumerate(types):
        found = [w[j][1] for w in walked]
        if isinstance(t, SequenceType) and all(isinstance(f, SequenceType) for f in found):
            joined = found[0] if len(found) == 1 else join_sequences(found[0], found[1])
            out[j] = _with_hints(t, joined)
    return out


def _with_hints(t, hinted):
    """Sequence type ``t`` with the element hints of ``hinted`` (``t`` when either is no sequence)."""
    if not isinstance(t, SequenceType) or not isinstance(hinted, SequenceType):
        return t
    return SequenceType(t.elem if t.elem is not None else hinted.elem, dims=hinted.dims, empty=hinted.empty)


lib.op("If", IF_VERSIONS, infer_dtype=_if_dtype, data_dependent=True)(_if_shape)


def _if_prepare(ctx: InferContext):
    _if_branches(ctx)
    return ctx.subgraph("then_branch"), ctx.subgraph("else_branch")


@lib.kernel("If", prepare=_if_prepare)
def _if(inputs, outputs, prepared):
    """If: run then_branch when the one-element bool ``cond`` is true, else else_branch.

    Outputs: the branch's outputs (any shapes/dtypes it makes). Source: ONNX operator spec, If-21.
    """
    then_branch, else_branch = prepared
    return (then_branch if bool(_first(inputs[0])) else else_branch).run([], inputs)


# Loop --------------------------------------------------------------------------------

def _loop_body(ctx: InferContext) -> tuple[Graph, int, int]:
    """The body graph, N (loop-carried count) and K (scan output count), validated."""
    body = _graph_attr(ctx, "body")
    n_carried = len(ctx.node.inputs) - 2
    if n_carried < 0:
        ctx.fail("expects inputs (M, cond, v_initial...), with '' for an absent M or cond",
                 kind="InvalidInputs")
    if len(body.inputs) != n_carried + 2:
        ctx.fail(f"body has {len(body.inputs)} inputs, expected {n_carried + 2} "
                 f"(iteration_num, cond and {n_carried} loop-carried values)", kind="BodyInputCount")
    n_scan = len(body.outputs) - 1 - n_carried
    if n_scan < 0:
        ctx.fail(f"body has {len(body.outputs)} outputs, expected at least {n_carried + 1} "
                 f"(cond and {n_carried} loop-carried values)", kind="BodyOutputCount")
    if ctx.num_outputs != n_carried + n_scan:
        ctx.fail(f"node has {ctx.num_outputs} outputs, expected {n_carried + n_scan} "
                 f"({n_carried} loop-carried values and {n_scan} scan outputs)", kind="BodyOutputCount")
    return body, n_carried, n_scan


def _loop_shape(ctx: InferContext):
    """Loop: final loop-carried values, then scan outputs (trip count, *per-iteration shape).

    Carried values keep their rank (dims the body does not fix are fresh symbols); the trip
    count is data-dependent. Source: ONNX operator spec, Loop-1/11/13/16/19/21/23/24/25.
    """
    body, n_carried, n_scan = _loop_body(ctx)
    if ctx.has_input(0):
        _scalar_flag(ctx, 0, "M (the trip count)")
    if ctx.has_input(1):
        _scalar_flag(ctx, 1, "cond")
    out = []
    for j in range(n_carried):
        declared = body.outputs[1 + j]
        init = ctx.shape(2 + j)
        if declared.dims is not None:
            out.append(_declared_shape(ctx, declared))
        else:
            out.append(None if init is None else tuple(ctx.new_dim() for _ in init))
    for k in range(n_scan):
        out.append(_declared_shape(ctx, body.outputs[1 + n_carried + k], prefix=(ctx.new_dim(),)))
    return out


def _carried_dtype(ctx: InferContext, body: Graph, j: int):
    """A loop-carried value's type: the initial value's; for a sequence/optional, the body
    output's declared type filled in from it (an optional(seq) initial value may be carried
    on as the seq its body makes). Without the initial sequence's element hints: the body
    may insert other elements (:func:`_carried_fixpoint` finds those that hold)."""
    init, declared = ctx.dtype(2 + j), _declared_dtype(body.outputs[1 + j])
    if is_container(declared):
        return _unhinted(merge_types(declared, init))
    return _unhinted(init)


def _unhinted(t):
    """A type without the element hints of the sequences in it (SequenceType.dims, .empty)."""
    if isinstance(t, SequenceType):
        return SequenceType(_unhinted(t.elem))
    if isinstance(t, OptionalType):
        return OptionalType(_unhinted(t.elem))
    return t


def _loop_dtype(ctx: InferContext):
    body, n_carried, n_scan = _loop_body(ctx)
    carried = [_carried_dtype(ctx, body, j) for j in range(n_carried)]
    if _walks(ctx, carried):
        settled = _carried_fixpoint(ctx, body, n_carried)
        if settled is not None:
            carried = [_with_hints(t, hinted) for t, (_, hinted) in zip(carried, settled)]
    return carried + [_declared_dtype(body.outputs[1 + n_carried + k]) for k in range(n_scan)]


#: the most walks of a Loop's body :func:`_carried_fixpoint` makes (each one finding less
#: about the carried values, as a dim or a rank the body changes is let go)
LOOP_WALKS = 4


def _carried_fixpoint(ctx: InferContext, body: Graph, n_carried: int) -> list | None:
    """``(dims, type)`` of each loop-carried value, holding at every iteration: the initial
    values' joined with what the body makes of them, the body walked again with the joined
    ones until nothing changes. Dims are ints or None (a dim that differs between
    iterations, or is not known); a sequence's hints are those of every element it ever
    holds (an empty initial sequence adds none). None when a walk cannot be made or the
    values do not settle within LOOP_WALKS walks."""
    head = [(_fixed_dims(vi), _declared_dtype(vi)) for vi in body.inputs[:2]]
    state = [(known_dims(ctx.shape(2 + j)), ctx.dtype(2 + j)) for j in range(n_carried)]
    for _ in range(LOOP_WALKS):
        outs = ctx.scope.infer(body, head + state)
        if outs is None:
            return None
        joined = [_join_carried(s, o) for s, o in zip(state, outs[1:1 + n_carried])]
        if all(_same_carried(a, b) for a, b in zip(joined, state)):
            return state
        state = joined
    return None


def _fixed_dims(vi: ValueInfo) -> tuple | None:
    """A subgraph input's declared dims: fixed ones as ints, others None; None: no shape."""
    return None if vi.dims is None else tuple(d.value if d.kind == FIXED else None for d in vi.dims)


def _join_carried(before: tuple, after: tuple) -> tuple:
    """A carried value's ``(dims, type)`` covering both iterations: dims alike kept; a
    sequence's hints joined; another type stays ``before``'s (None: not known)."""
    (da, ta), (db, tb) = before, after
    if isinstance(ta, SequenceType) and isinstance(tb, SequenceType):
        return join_dims(da, db), join_sequences(ta, tb)
    return join_dims(da, db), ta


def _same_carried(a: tuple, b: tuple) -> bool:
    """Equal ``(dims, type)``, a sequence's hints included (its type's equality ignores them)."""
    (da, ta), (db, tb) = a, b
    if isinstance(ta, SequenceType) and isinstance(tb, SequenceType):
        return da == db and ta == tb and (ta.dims, ta.empty) == (tb.dims, tb.empty)
    return da == db and ta == tb


lib.op("Loop", LOOP_VERSIONS, infer_dtype=_loop_dtype, data_dependent=True)(_loop_shape)


def _loop_prepare(ctx: InferContext):
    body, n_carried, n_scan = _loop_body(ctx)
    ranks = [vi.rank or 0 for vi in body.inputs[:2]]
    return ctx.node, ctx.subgraph("body"), n_carried, n_scan, ranks[0], ranks[1]


@lib.kernel("Loop", prepare=_loop_prepare)
def _loop(inputs, outputs, prepared):
    """Loop: run the body while ``i < M`` and ``cond`` (each optional), carrying values.

    Outputs: the last loop-carried values, then each scan output stacked on a new axis 0
    (shape (0, ...) when the body never runs). Source: ONNX operator spec, Loop-21.
    """
    node, body, n_carried, n_scan, iter_rank, cond_rank = prepared
    runner, outer = body.runner, body.outer_values(inputs)
    trip = None if inputs[0] is None else int(_first(inputs[0]))
    use_cond = inputs[1] is not None
    keep = bool(_first(inputs[1])) if use_cond else True
    carried = list(inputs[2:2 + n_carried])
    scans: list = [[] for _ in range(n_scan)]
    i = 0
    while keep and (trip is None or i < trip):
        it = np.full((1,) * iter_rank, i, dtype=np.int64)
        flag = np.full((1,) * cond_rank, keep, dtype=np.bool_)
        res = runner.run_list([it, flag] + carried, outer)
        if use_cond:
            keep = bool(_first(res[0]))
        carried = res[1:1 + n_carried]
        for k in range(n_scan):
            scans[k].append(res[1 + n_carried + k])
        i += 1
    if i == 0:
        carried = [_owned(a) for a in carried]
        stacked = _zero_trip_scans(runner, inputs, outer, n_carried, n_scan, iter_rank, cond_rank)
    else:
        stacked = [_stack(p, 0, node, f"scan output {k}") for k, p in enumerate(scans)]
    return carried + stacked


def _zero_trip_scans(runner, inputs, outer, n_carried, n_scan, iter_rank, cond_rank) -> list:
    """Empty scan outputs, shaped as one body iteration would shape them (not run)."""
    if n_scan == 0:
        return []
    formal = [np.zeros((1,) * iter_rank, np.int64), np.ones((1,) * cond_rank, np.bool_)]
    resolved = runner.infer_outputs(formal + list(inputs[2:2 + n_carried]), outer)
    outs = runner.graph.outputs
    return [_empty_stack(outs[1 + n_carried + k], resolved[1 + n_carried + k], (0,)) for k in range(n_scan)]


# Scan --------------------------------------------------------------------------------

def _int_list(ctx: InferContext, name: str, n: int, default: int) -> list:
    v = ctx.attr(name)
    if v is None:
        return [default] * n
    v = [int(x) for x in v]
    if len(v) != n:
        ctx.fail(f"attribute '{name}' has {len(v)} entries, expected {n}", kind="InvalidAttribute")
    return v


def _directions(ctx: InferContext, name: str, n: int) -> list:
    dirs = _int_list(ctx, name, n, 0)
    if any(d not in (0, 1) for d in dirs):
        ctx.fail(f"attribute '{name}' must hold 0 (forward) or 1 (reverse), got {dirs}",
                 kind="InvalidAttribute")
    return dirs


def _scan_layout(ctx: InferContext) -> dict:
    """Scan's body, counts, axes and directions, validated (Scan-8: batch axis 0, 1 input more)."""
    body = _graph_attr(ctx, "body")
    v8 = ctx.opset < 9
    first = 1 if v8 else 0  # Scan-8's sequence_lens
    n_in = len(ctx.node.inputs) - first
    m = ctx.attr("num_scan_inputs")
    if m is None:
        ctx.fail("attribute 'num_scan_inputs' is required", kind="MissingAttribute")
    m = int(m)
    if m < 1 or m > n_in:
        ctx.fail(f"num_scan_inputs={m} must be in [1, {n_in}] (the number of state and scan inputs)",
                 kind="InvalidAttribute")
    n = n_in - m
    if len(body.inputs) != n_in:
        ctx.fail(f"body has {len(body.inputs)} inputs, expected {n_in} ({n} states, {m} scan slices)",
                 kind="BodyInputCount")
    k = len(body.outputs) - n
    if k < 0 or ctx.num_outputs != n + k:
        ctx.fail(f"body has {len(body.outputs)} outputs and the node {ctx.num_outputs}; both must be "
                 f"{n} states followed by the scan outputs", kind="BodyOutputCount")
    lay = {"body": body, "v8": v8, "first": first, "n": n, "m": m, "k": k}
    if v8:
        lay.update(in_dirs=_directions(ctx, "directions", m), in_axes=[0] * m,
                   out_dirs=[0] * k, out_axes=[0] * k)
        return lay
    in_axes = _int_list(ctx, "scan_input_axes", m, 0)
    out_axes = _int_list(ctx, "scan_output_axes", k, 0)
    for j, ax in enumerate(in_axes):
        shape = ctx.shape(n + j)
        if shape is not None:
            in_axes[j] = normalize_axis(ctx, ax, len(shape), "scan_input_axes")
    for j, ax in enumerate(out_axes):
        vi = body.outputs[n + j]
        if vi.rank is not None:
            out_axes[j] = normalize_axis(ctx, ax, vi.rank + 1, "scan_output_axes")
    lay.update(in_dirs=_directions(ctx, "scan_input_directions", m), in_axes=in_axes,
               out_dirs=_directions(ctx, "scan_output_directions", k), out_axes=out_axes)
    return lay


def _scan_length(ctx: InferContext, lay: dict):
    """The common sequence length of the scan inputs (a dim), checked where concrete."""
    first, n = lay["first"], lay["n"]
    length = None
    for j in range(lay["m"]):
        shape = ctx.shape(first + n + j)
        if shape is None:
            continue
        ax = lay["in_axes"][j] + (1 if lay["v8"] else 0)
        if len(shape) <= ax:
            ctx.fail(f"scan input {j} has rank {len(shape)}, expected at least {ax + 1}", kind="InvalidRank")
        d = shape[ax]
        if length is None:
            length = d
        else:
            require(ctx, d, "==", length, f"scan inputs have different sequence lengths {length} and {d}",
                    "SequenceLengthMismatch")
    return length


def _scan_shape(ctx: InferContext):
    """Scan: final states (shapes of the initial states), then scan outputs stacked on their axes.

    Scan-8 keeps a leading batch axis on every input and output. Source: ONNX operator
    spec, Scan-8/9/11/16/19/21/23/24/25.
    """
    lay = _scan_layout(ctx)
    if lay["v8"] and ctx.has_input(0) and ctx.shape(0) is not None and len(ctx.shape(0)) != 1:
        ctx.fail(f"sequence_lens must be 1-D, got rank {len(ctx.shape(0))}", kind="InvalidRank")
    length = _scan_length(ctx, lay)
    length = ctx.new_dim() if length is None else length
    first, n, body = lay["first"], lay["n"], lay["body"]
    out = [ctx.shape(first + j) for j in range(n)]
    batch = ()
    if lay["v8"]:
        st = next((ctx.shape(first + j) for j in range(n + lay["m"]) if ctx.shape(first + j)), None)
        batch = (st[0] if st else ctx.new_dim(),)
    for j in range(lay["k"]):
        per = _declared_shape(ctx, body.outputs[n + j])
        if per is None:
            out.append(None)
            continue
        ax = lay["out_axes"][j]
        out.append(batch + per[:ax] + (length,) + per[ax:])
    return out


def _scan_dtype(ctx: InferContext):
    lay = _scan_layout(ctx)
    first, n, body = lay["first"], lay["n"], lay["body"]
    return [_unhinted(ctx.dtype(first + j)) for j in range(n)] + \
        [_declared_dtype(body.outputs[n + j]) for j in range(lay["k"])]


lib.op("Scan", SCAN8_VERSIONS + SCAN_VERSIONS, infer_dtype=_scan_dtype, data_dependent=True)(_scan_shape)


def _scan_prepare(ctx: InferContext):
    lay = _scan_layout(ctx)
    lay["subgraph"] = ctx.subgraph("body")
    lay["runner"] = lay["subgraph"].runner
    lay["node"] = ctx.node
    lay["vector"] = None if lay["v8"] else _vector_body(ctx, lay)
    return lay


#: the most bytes a vectorized Scan body's intermediate tensors take in one run: longer scans
#: run it over chunks of the iterations
VECTOR_BYTES = 64 << 20


def _vector_body(ctx: InferContext, lay: dict):
    """(VectorBody, its runner) when the body's iterations are independent (scan_vectorize.py),
    else None; made once per body and input ranks (kept with the body's runner)."""
    first, n, m = lay["first"], lay["n"], lay["m"]
    ranks = []
    for j in range(n + m):
        shape = ctx.shape(first + j)
        ranks.append(None if shape is None else len(shape) - (1 if j >= n else 0))
    opset = ctx.services.opsets.get("", 1) if ctx.services is not None else 1
    derived = lay["runner"].derived
    key = ("vectorized", tuple(ranks), opset)
    if key not in derived:
        vb = vectorize_body(lay["body"], n, ranks, opset)
        derived[key] = None if vb is None else (vb, ctx.services.subgraph(vb.graph))
    return derived[key]


def _scan_vectorized(lay: dict, states: list, scans: list, length: int, outer: dict) -> list:
    """Every iteration in one run of the vectorized body (in chunks of iterations where its
    tensors would pass VECTOR_BYTES); the same outputs as :func:`_scan_run`."""
    vb, runner = lay["vector"]
    xs = [np.moveaxis(x, ax, 0) for x, ax in zip(scans, lay["in_axes"])]
    xs = [x[::-1] if d else x for x, d in zip(xs, lay["in_dirs"])]
    need = runner.arena_bytes(states + xs, outer)
    if need <= VECTOR_BYTES:
        outs = runner.run_list(states + xs, outer)
    else:
        step = max(1, length * VECTOR_BYTES // need)
        parts = [runner.run_list(states + [x[i:i + step] for x in xs], outer) for i in range(0, length, step)]
        outs = [np.concatenate([p[j] for p in parts]) if vb.batched[j] else parts[0][j] for j in range(lay["k"])]
    stacked = []
    for j, y in enumerate(outs):
        if not vb.batched[j]:
            y = np.broadcast_to(y, (length,) + y.shape)
        if lay["out_dirs"][j]:
            y = y[::-1]
        y = np.moveaxis(y, 0, lay["out_axes"][j])
        stacked.append(y if y.flags.c_contiguous and y.flags.owndata else np.ascontiguousarray(y))
    return [_owned(s) for s in states] + stacked


def _slice_at(a: np.ndarray, axis: int, i: int) -> np.ndarray:
    return a[(slice(None),) * axis + (i,)]


def _scan_run(lay: dict, states: list, scans: list, length: int, outer: dict) -> list:
    """One Scan-9 style pass: ``length`` body runs; returns final states + stacked scan outputs."""
    runner, n, k = lay["runner"], lay["n"], lay["k"]
    in_axes, in_dirs = lay["in_axes"], lay["in_dirs"]
    parts: list = [[] for _ in range(k)]
    for t in range(length):
        slices = [_slice_at(x, ax, length - 1 - t if d else t) for x, ax, d in zip(scans, in_axes, in_dirs)]
        res = runner.run_list(states + slices, outer)
        states = res[:n]
        for j in range(k):
            parts[j].append(res[n + j])
    if length == 0:
        states = [_owned(s) for s in states]
        slices = [np.zeros(x.shape[:ax] + x.shape[ax + 1:], x.dtype) for x, ax in zip(scans, in_axes)]
        resolved = runner.infer_outputs(states + slices, outer)
        outs = runner.graph.outputs
        stacked = []
        for j in range(k):
            e = _empty_stack(outs[n + j], resolved[n + j], (0,))
            stacked.append(np.moveaxis(e, 0, lay["out_axes"][j]).copy())
        return states + stacked
    stacked = []
    for j in range(k):
        p = parts[j][::-1] if lay["out_dirs"][j] else parts[j]
        stacked.append(_stack(p, lay["out_axes"][j], lay["node"], f"scan output {j}"))
    return states + stacked


def _scan_length_of(lay: dict, scans: list) -> int:
    lengths = {x.shape[ax] for x, ax in zip(scans, lay["in_axes"])}
    if len(lengths) != 1:
        node = lay["node"]
        raise ExecutionError(f"Scan node '{node.name}': scan inputs have different sequence lengths "
                             f"{sorted(lengths)}")
    return lengths.pop()


@lib.kernel("Scan", prepare=_scan_prepare)
def _scan(inputs, outputs, lay):
    """Scan: run the body once per slice of the scan inputs, carrying the states.

    Outputs: final states, then per-iteration outputs stacked along ``scan_output_axes``
    (reversed where ``scan_output_directions`` is 1). Scan-8: per batch entry, each
    sequence cut to ``sequence_lens`` and its scan outputs zero-padded.
    Source: ONNX operator spec, Scan-8 and Scan-21.
    """
    first, n, m = lay["first"], lay["n"], lay["m"]
    outer = lay["subgraph"].outer_values(inputs)
    states = list(inputs[first:first + n])
    scans = list(inputs[first + n:first + n + m])
    if not lay["v8"]:
        length = _scan_length_of(lay, scans)
        if lay["vector"] is not None and length > 0:
            return _scan_vectorized(lay, states, scans, length, outer)
        return _scan_run(lay, states, scans, length, outer)
    return _scan8(lay, inputs[0], states, scans, outer)


def _scan8(lay: dict, seq_lens, states: list, scans: list, outer: dict) -> list:
    """Scan-8: the Scan-9 pass per batch entry, outputs zero-padded to the longest sequence."""
    n = lay["n"]
    batch = (states + scans)[0].shape[0]
    max_len = scans[0].shape[1]
    lens = np.full(batch, max_len, np.int64) if seq_lens is None else np.asarray(seq_lens).reshape(-1)
    if lens.shape[0] != batch or np.any(lens < 0) or np.any(lens > max_len):
        raise ExecutionError(f"Scan node '{lay['node'].name}': sequence_lens {lens.tolist()} must hold "
                             f"{batch} lengths in [0, {max_len}]")
    if batch == 0:
        outs = lay["body"].outputs[n:]
        return [_owned(s) for s in states] + [_empty_stack(vi, (None, None), (0, max_len)) for vi in outs]
    per_batch = []
    for b in range(batch):
        length = int(lens[b])
        res = _scan_run(lay, [s[b] for s in states], [x[b, :length] for x in scans], length, outer)
        for j in range(lay["k"]):
            y = res[n + j]
            pad = np.zeros((max_len - length,) + y.shape[1:], y.dtype)
            res[n + j] = np.concatenate([y, pad], axis=0)
        per_batch.append(res)
    return [np.stack([r[i] for r in per_batch], axis=0) for i in range(n + lay["k"])]
