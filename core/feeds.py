"""Feeds for a session's inputs: shapes from dims bound by dim_param name (or ``"input:axis"``)
or whole shapes per input, values chosen from what the model does with each input."""
from __future__ import annotations

from collections import defaultdict
from typing import Optional

import numpy as np

from .dtypes import is_container, is_float, is_integer
from .errors import InvalidFeedError
from .model import FIXED, SYMBOLIC, Graph

__all__ = ["random_feeds", "placeholder_feeds", "check_feeds_fit", "input_shape", "check_tensor_inputs",
           "unbound_dims", "dims_of_given", "index_bounds", "declared_shape"]

#: op_type -> (indices input, table input) pairs: the indices' values must lie in
#: [0, rows of the table along the op's axis) (Gather's ``axis`` attribute, else 0).
INDEX_TABLES = {
    "Gather": ((1, 0),),
    # com.microsoft: input_ids -> word_embedding, segment_ids -> segment_embedding, position_ids -> position_embedding
    "EmbedLayerNormalization": ((0, 2), (1, 4), (8, 3)),
}
#: ops whose output 0 holds the values of input 0 (rearranged or retyped): indices pass through them.
PASS_THROUGH = frozenset({"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Transpose", "Expand"})
TYPE_ID_NAMES = ("type_ids", "token_type")


def declared_shape(vi) -> str:
    """``int64[batch, sequence]``: the declared dtype and dims of an input (``?`` for an unknown dim)."""
    dims = "?" if vi.dims is None else ", ".join("?" if d.value is None else str(d.value) for d in vi.dims)
    return f"{'?' if vi.dtype is None else vi.dtype}[{dims}]"


def _dim_value(vi, axis: int, d, dims: dict) -> Optional[int]:
    """The value of one declared dim: fixed, ``dims["input:axis"]``, then ``dims[dim_param]``."""
    if d.kind == FIXED:
        return int(d.value)
    key = f"{vi.name}:{axis}"
    if key in dims:
        return int(dims[key])
    if d.kind == SYMBOLIC and d.value in dims:
        return int(dims[d.value])
    return None


def input_shape(vi, dims: dict, shapes: dict) -> list[int]:
    """Concrete shape of an input: ``shapes[name]`` if given, else its declared dims, each
    looked up as ``dims["input:axis"]`` then ``dims[dim_param]``.

    Raises:
        InvalidFeedError: the input has no declared shape, or a dim has no value.
    """
    if vi.name in shapes:
        return list(shapes[vi.name])
    if vi.dims is None:
        raise InvalidFeedError(f"input '{vi.name}' has no declared shape: give its whole shape")
    out = [_dim_value(vi, axis, d, dims) for axis, d in enumerate(vi.dims)]
    if None in out:
        axis = out.index(None)
        raise InvalidFeedError(f"input '{vi.name}' axis {axis} ({declared_shape(vi)}): no value given for "
                               f"'{vi.dims[axis].value or f'{vi.name}:{axis}'}'")
    return out


def check_tensor_inputs(inputs, given=()) -> None:
    """Random feeds are tensors: an input of sequence or optional type not in ``given`` has none.

    Raises:
        InvalidFeedError: naming those inputs and their types.
    """
    containers = [vi for vi in inputs if is_container(vi.dtype) and vi.name not in given]
    if containers:
        raise InvalidFeedError(
            "no random feeds for inputs of sequence/optional type: " + ", ".join(f"'{vi.name}' ({vi.type})"
                                                                               for vi in containers)
            + "; run the model from Python with a list (or None) for them")


def unbound_dims(inputs, dims: dict, shapes: dict, given=()) -> list[str]:
    """Names of the dims that no value reaches, in input order without repeats: the dim_param,
    or ``"input:axis"`` for an unknown dim (``"input"`` alone when it has no declared shape).
    Inputs in ``shapes`` or ``given`` need nothing."""
    missing: dict[str, None] = {}
    for vi in inputs:
        if vi.name in shapes or vi.name in given:
            continue
        if vi.dims is None:
            missing[vi.name] = None
            continue
        for axis, d in enumerate(vi.dims):
            if _dim_value(vi, axis, d, dims) is None:
                missing[d.value if d.kind == SYMBOLIC else f"{vi.name}:{axis}"] = None
    return list(missing)


def dims_of_given(inputs, given: dict) -> dict:
    """``{dim_param: size}`` read from the given arrays' shapes (the first input declaring a
    dim_param wins; arrays of the wrong rank bind nothing: the session reports them)."""
    bound: dict = {}
    for vi in inputs:
        arr = given.get(vi.name)
        if arr is None or vi.dims is None or np.ndim(arr) != len(vi.dims):
            continue
        for d, size in zip(vi.dims, np.shape(arr)):
            if d.kind == SYMBOLIC:
                bound.setdefault(d.value, int(size))
    return bound


def _graphs(graph: Graph):
    """The graph and, recursively, its subgraphs (If branches, Loop / Scan bodies)."""
    yield graph
    for node in graph.nodes:
        for a in node.attrs.values():
            for g in (a if isinstance(a, list) else [a]):
                if isinstance(g, Graph):
                    yield from _graphs(g)


def _table_shapes(graphs) -> dict:
    """``{name: shape}`` of the constant tensors: initializers and Constant nodes' values."""
    shapes = {}
    for g in graphs:
        shapes.update({k: shape for k, (shape, _) in g.released.items()})
        shapes.update({k: v.shape for k, v in g.initializers.items()})
        shapes.update({n.outputs[0]: np.shape(n.attrs["value"]) for n in g.nodes
                       if n.op_type == "Constant" and "value" in n.attrs})
    return shapes


def _rows_reached(name: str, consumers: dict, tables: dict) -> list[int]:
    """Rows of every constant table that ``name``'s values index, directly or through PASS_THROUGH ops."""
    rows, stack, seen = [], [name], set()
    while stack:
        tensor = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for node, pos in consumers.get(tensor, ()):
            if node.op_type in PASS_THROUGH and pos == 0 and node.outputs:
                stack.append(node.outputs[0])
            for indices, table in INDEX_TABLES.get(node.op_type, ()):
                shape = tables.get(node.inputs[table]) if pos == indices and table < len(node.inputs) else None
                if shape:
                    rows.append(int(shape[node.attrs.get("axis", 0) % len(shape)]))
    return rows


def index_bounds(graph: Graph) -> dict[str, int]:
    """``{input name: n}`` for the inputs whose values index a constant table (Gather's
    indices, EmbedLayerNormalization's ids), directly or through Cast / Unsqueeze / Reshape /
    ...: valid values are ``[0, n)``, ``n`` the fewest rows (along the op's axis) of the
    tables it indexes. Subgraphs are searched too."""
    graphs = list(_graphs(graph))
    consumers = defaultdict(list)
    for g in graphs:
        for node in g.nodes:
            for pos, name in enumerate(node.inputs):
                if name:
                    consumers[name].append((node, pos))
    tables = _table_shapes(graphs)
    bounds = {vi.name: _rows_reached(vi.name, consumers, tables) for vi in graph.inputs}
    return {name: min(rows) for name, rows in bounds.items() if rows}


def _values(vi, shape: list[int], bound: Optional[int], rng: np.random.Generator) -> np.ndarray:
    """One input's random values (the rules of :func:`random_feeds`)."""
    dt, lname = vi.dtype, vi.name.lower()
    integer, boolean = dt is not None and is_integer(dt), dt == np.bool_
    floating = dt is not None and (is_float(dt) or dt.kind == "c")
    if not (integer or boolean or floating):
        raise InvalidFeedError(f"input '{vi.name}' ({vi.type}): no random values for this element type; "
                               "give it as a file")
    if "mask" in lname:
        return np.ones(shape, dt)
    if integer and any(s in lname for s in TYPE_ID_NAMES):
        return np.zeros(shape, dt)
    if integer:
        return rng.integers(0, 10 if bound is None else max(1, bound), size=shape).astype(dt)
    if boolean:
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.standard_normal(shape).astype(dt)


def random_feeds(session, dims: Optional[dict] = None, shapes: Optional[dict] = None,
                 given: Optional[dict] = None, seed: int = 0) -> dict:
    """Feeds ``{input name: np.ndarray}`` for every input of ``session`` not in ``given``
    (given arrays are kept as they are).

    Shapes: ``shapes[input]`` (a list of ints) if given, else the declared dims, each from
    ``dims["input:axis"]``, else ``dims[dim_param]``, else the size of that dim_param in a
    given array. Values, by element type and name (dtype as declared):

    * inputs named ``*mask*``: ones;
    * integer inputs named ``*type_ids*`` / ``*token_type*``: zeros;
    * integer inputs that index a constant table (a Gather's indices, directly or through
      Cast / Unsqueeze / Reshape / ...): uniform in ``[0, rows)``, ``rows`` the table's
      size along the Gather's axis (the fewest when several Gathers read the input);
    * other integers: uniform in ``[0, 10)``; bools: random; floats: N(0, 1).

    Raises:
        InvalidFeedError: a dim has no value (the message lists every input with its
            declared shape and the missing dims), or an input has no numeric element type.
    """
    inputs, dims, shapes, given = _request(session, dims, shapes, given)
    bounds = index_bounds(session.model.graph)
    rng = np.random.default_rng(seed)
    for vi in inputs:
        if vi.name not in given:
            given[vi.name] = _values(vi, input_shape(vi, dims, shapes), bounds.get(vi.name), rng)
    return given


def _request(session, dims: Optional[dict], shapes: Optional[dict], given: Optional[dict]) -> tuple:
    """(inputs, dims, shapes, given) of a feeds request, every dim bound (the dims of the given
    arrays included), or InvalidFeedError naming what is missing."""
    dims, shapes, given = dict(dims or {}), shapes or {}, dict(given or {})
    inputs = session.model.graph.inputs
    check_tensor_inputs(inputs, given)
    dims = {**dims_of_given(inputs, given), **dims}
    missing = unbound_dims(inputs, dims, shapes, given)
    if missing:
        raise InvalidFeedError(
            f"no value for dim(s) {', '.join(map(repr, missing))} of the inputs "
            f"{', '.join(f'{vi.name} {declared_shape(vi)}' for vi in inputs)}: bind them in dims "
            "(by dim_param, or 'input:axis') or give whole shapes")
    return inputs, dims, shapes, given


def placeholder_feeds(session, dims: Optional[dict] = None, shapes: Optional[dict] = None,
                      given: Optional[dict] = None) -> dict:
    """Feeds of the shapes and dtypes :func:`random_feeds` would make, allocating nothing:
    each a read-only zero-stride view of one zero element (``np.broadcast_to``); given
    arrays as they are. What a plan needs (shapes and dtypes) without the data, e.g. to check
    a request against the session's ``memory_limit`` before building real feeds.

    Raises:
        InvalidFeedError: as :func:`random_feeds`.
    """
    inputs, dims, shapes, given = _request(session, dims, shapes, given)
    for vi in inputs:
        if vi.name not in given:
            given[vi.name] = np.broadcast_to(np.zeros((), vi.dtype), input_shape(vi, dims, shapes))
    return given


def check_feeds_fit(session, feeds: dict) -> None:
    """Refuse a request whose feeds or plan exceed the session's ``memory_limit`` before
    anything of that size is allocated: ``feeds`` (placeholders, :func:`placeholder_feeds`)
    are checked as the tensors they stand for, then planned (the session's own plan check,
    ``InferenceSession.check_fits``: every tensor and the arena against the limit; the plan is
    not kept, so the first run is still a cold one).

    Raises:
        ResourceLimitError: naming the input or the tensor, its bytes and the limit.
    """
    from .errors import DynashapeError, ResourceLimitError
    from .limits import check_tensor, format_bytes
    limit = session.memory_limit
    total = 0
    for name, a in feeds.items():
        if isinstance(a, np.ndarray):
            check_tensor(a.shape, a.dtype.itemsize, limit, f"input '{name}'")
            total += int(np.prod(a.shape, dtype=object)) * a.dtype.itemsize
    if total > limit:
        raise ResourceLimitError(f"the feeds ({', '.join(feeds)}) take {format_bytes(total)} ({total} bytes) "
                                 f"together, over the session's memory_limit of {format_bytes(limit)} ({limit} bytes)",
                                 nbytes=total, limit=limit)
    try:
        session.check_fits(feeds)
    except ResourceLimitError:
        raise
    except DynashapeError:
        pass    # a plan that needs the feeds' values: the run itself decides
