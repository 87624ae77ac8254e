"""Building blocks of the differential recipes: dims, shapes, axes and tensors drawn with
hypothesis (``d`` is a ``st.data()`` object).

Dims come from :data:`DIMS`: 0 and 1 often, small primes, sizes that do not divide evenly;
axes now and then one past the rank (out of range); tensor values from a numpy generator
seeded by a drawn integer (a tensor's elements are not shrunk one by one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from hypothesis import strategies as st

#: the sizes an axis takes: empty, one, primes and other sizes that do not divide evenly
DIMS = (0, 1, 1, 2, 3, 4, 5, 7)
FLOAT = np.float32


@dataclass
class Example:
    """One node's inputs (None: an absent optional input), attributes, the inputs given as
    initializers, and the output count."""

    inputs: list
    attrs: dict = field(default_factory=dict)
    constant: tuple = ()
    n_outputs: int = 1


def dim(d, lo: int = 0, hi: int = 7) -> int:
    return d.draw(st.sampled_from([x for x in DIMS if lo <= x <= hi]))


def shape(d, lo_rank: int = 0, hi_rank: int = 4, lo_dim: int = 0, hi_dim: int = 7) -> tuple:
    rank = d.draw(st.integers(lo_rank, hi_rank))
    return tuple(dim(d, lo_dim, hi_dim) for _ in range(rank))


def rng(d) -> np.random.Generator:
    return np.random.default_rng(d.draw(st.integers(0, 2**32 - 1)))


def floats(d, shape_: Sequence[int], dtype=FLOAT, scale: float = 1.0) -> np.ndarray:
    return (rng(d).standard_normal(tuple(shape_)) * scale).astype(dtype)


def positive(d, shape_: Sequence[int], dtype=FLOAT) -> np.ndarray:
    return (rng(d).random(tuple(shape_)) + 0.5).astype(dtype)


def ints(d, shape_: Sequence[int], lo: int, hi: int, dtype=np.int64) -> np.ndarray:
    """Integers in [lo, hi] (inclusive)."""
    if hi < lo:
        hi = lo
    return rng(d).integers(lo, hi + 1, size=tuple(shape_)).astype(dtype)


def bools(d, shape_: Sequence[int]) -> np.ndarray:
    return rng(d).random(tuple(shape_)) < 0.5


def tensor(d, shape_: Sequence[int], dtype) -> np.ndarray:
    """Values suited to the dtype: normal floats, small ints (non-negative for unsigned), bools."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return bools(d, shape_)
    if dtype.kind == "f":
        return floats(d, shape_, dtype)
    if dtype.kind == "u":
        return ints(d, shape_, 0, 9, dtype)
    return ints(d, shape_, -9, 9, dtype)


def axis(d, rank: int, out_of_range: bool = True) -> int:
    """An axis in [-rank, rank) (rank 0: 0), now and then one just outside."""
    if rank == 0:
        return d.draw(st.sampled_from([0, 0, 0, 1, -1] if out_of_range else [0]))
    lo, hi = -rank, rank - 1
    if out_of_range and d.draw(st.integers(0, 9)) == 0:
        return d.draw(st.sampled_from([lo - 1, hi + 1]))
    return d.draw(st.integers(lo, hi))


def axes(d, rank: int, min_size: int = 0, unique: bool = True) -> list:
    """Distinct axes (negative now and then), now and then a repeated or out-of-range one."""
    if rank == 0:
        return []
    chosen = d.draw(st.lists(st.integers(0, rank - 1), min_size=min(min_size, rank), max_size=rank,
                             unique=unique))
    out = [a - rank if d.draw(st.booleans()) else a for a in chosen]
    if d.draw(st.integers(0, 14)) == 0:
        out.append(d.draw(st.sampled_from([rank, -rank - 1] + out[:1])))
    return out


def broadcastable(d, base: tuple) -> tuple:
    """A shape that broadcasts against ``base`` (a suffix, some dims 1), now and then one
    that does not."""
    keep = d.draw(st.integers(0, len(base)))
    out = [1 if d.draw(st.integers(0, 2)) == 0 else s for s in base[len(base) - keep:]]
    if out and d.draw(st.integers(0, 11)) == 0:
        i = d.draw(st.integers(0, len(out) - 1))
        out[i] = out[i] + 2
    if d.draw(st.integers(0, 5)) == 0:
        out = [1] * d.draw(st.integers(0, 2)) + out       # more leading dims than base
    return tuple(out)


def permutation(d, rank: int) -> list:
    return d.draw(st.permutations(list(range(rank))))


def one_of(d, values: Sequence):
    return d.draw(st.sampled_from(list(values)))


def maybe(d, p_none: int = 3) -> bool:
    """True with probability 1 - 1/p_none."""
    return d.draw(st.integers(0, p_none - 1)) != 0


def int64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def scalar(value, dtype) -> np.ndarray:
    return np.asarray(value, dtype=dtype)

