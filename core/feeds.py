"""Random feeds for a session's inputs, with dims bound by name or whole shapes by input."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .errors import InvalidFeedError
from .model import FIXED, SYMBOLIC

__all__ = ["random_feeds", "input_shape"]


def input_shape(vi, dims: dict, shapes: dict, default: int = 1) -> list[int]:
    """Concrete shape of an input: ``shapes[name]`` if given, else its dims with dim_params
    looked up in ``dims`` (also by ``"input:axis"``), unknown dims as ``default``."""
    if vi.name in shapes:
        return list(shapes[vi.name])
    if vi.dims is None:
        raise InvalidFeedError(f"input '{vi.name}' has no declared shape; give it with --shape {vi.name}=AxB")
    out = []
    for axis, d in enumerate(vi.dims):
        if d.kind == FIXED:
            out.append(int(d.value))
        elif d.kind == SYMBOLIC and d.value in dims:
            out.append(int(dims[d.value]))
        elif f"{vi.name}:{axis}" in dims:
            out.append(int(dims[f"{vi.name}:{axis}"]))
        else:
            out.append(default)
    return out


def random_feeds(session, dims: Optional[dict] = None, shapes: Optional[dict] = None,
                 given: Optional[dict] = None, seed: int = 0) -> dict:
    """Feeds for every input not in ``given``: floats N(0,1), integers in [0, 10), bools random."""
    dims, shapes, given = dims or {}, shapes or {}, dict(given or {})
    rng = np.random.default_rng(seed)
    for vi in session.model.graph.inputs:
        if vi.name in given:
            continue
        shape = input_shape(vi, dims, shapes)
        dt = vi.dtype
        if dt is None:
            raise InvalidFeedError(f"input '{vi.name}' has no element type")
        if dt.kind in "iu":
            given[vi.name] = rng.integers(0, 10, size=shape).astype(dt)
        elif dt.kind == "b":
            given[vi.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            given[vi.name] = rng.standard_normal(shape).astype(dt)
    return given
