"""Columns of a batch (one entry per row) to per-row arrays and back.

A batch is ``{column name: column}`` as Ray Data hands it with ``batch_format="numpy"``: a
column is an ndarray whose axis 0 is the rows (every row the same shape), or an object array
(or list) of per-row arrays, which may differ in length (a ragged, variable-length column:
Parquet lists, Ray's variable-shaped tensors). Output columns go back the same way: stacked
when every row of the output has one shape by construction, an object array of rows otherwise.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..errors import InputDtypeMismatch, InputFixedDimMismatch, InputNameError, InputRankMismatch, InvalidFeedError
from .axes import InputLayout, ModelLayout

__all__ = ["column_rows", "input_rows", "row_lengths", "rows_column", "slice_columns", "default_fill"]


def _row_array(value: Any) -> np.ndarray:
    """One row as an ndarray; nested object arrays (Parquet lists of lists) are stacked."""
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype == object and arr.ndim >= 1 and arr.size and isinstance(arr.flat[0], (np.ndarray, list, tuple)):
        return np.stack([_row_array(x) for x in arr])
    return arr


def column_rows(column: Any) -> list[np.ndarray]:
    """The rows of one column: views of a stacked ndarray, or each element of an object array /
    list as an ndarray.

    Raises:
        InvalidFeedError: a row cannot be made an array (nested rows of different lengths).
    """
    if isinstance(column, np.ndarray) and column.dtype != object:
        return list(column)
    try:
        return [_row_array(x) for x in column]
    except ValueError as exc:
        raise InvalidFeedError(f"a row is ragged below its first axis ({exc})") from None


def rows_column(rows: Sequence[np.ndarray], ragged: bool) -> np.ndarray:
    """A column from per-row arrays: an object array when ``ragged`` (each element one row),
    else the rows stacked (axis 0 the rows)."""
    if not ragged and rows:
        return np.stack(rows)
    col = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        col[i] = r
    return col


def _cast(rows: list[np.ndarray], vi: InputLayout) -> list[np.ndarray]:
    """Rows in the input's dtype: same-kind casts (int32 -> int64, float64 -> float32) and ints
    to floats, as onnxruntime converts Python lists; anything else is refused."""
    out = []
    for k, r in enumerate(rows):
        if r.dtype != vi.dtype:
            if r.size and not (np.can_cast(r.dtype, vi.dtype, "same_kind") or
                               (r.dtype.kind in "biu" and vi.dtype.kind in "biuf")):
                raise InputDtypeMismatch(f"input '{vi.name}' row {k}: expected numpy {vi.dtype}, got {r.dtype}")
            r = r.astype(vi.dtype)
        out.append(r)
    return out


def _check_rank(rows: list[np.ndarray], vi: InputLayout) -> None:
    for k, r in enumerate(rows):
        if r.ndim != len(vi.row_dims):
            raise InputRankMismatch(f"input '{vi.name}' row {k}: expected {len(vi.row_dims)} axes per row "
                                    f"({list(vi.row_dims)}), got shape {list(r.shape)}")
        for axis, d in enumerate(vi.row_dims):
            if isinstance(d, int) and r.shape[axis] != d:
                raise InputFixedDimMismatch(f"input '{vi.name}' row {k} axis {axis}: expected {d} (fixed dim), "
                                            f"got shape {list(r.shape)}")


def default_fill(name: str) -> Any:
    """The value of an input missing from the batch: 1 for ``*mask*`` inputs, 0 for
    ``*type_ids*`` / ``*token_type*``; None when the input has no default."""
    low = name.lower()
    if "mask" in low:
        return 1
    if "type_ids" in low or "token_type" in low:
        return 0
    return None


def row_lengths(rows: Mapping[str, list[np.ndarray]], layout: ModelLayout, n: int) -> list[tuple[int, ...]]:
    """Each row's length for every length symbol (in ``layout.lengths`` order), from the inputs given.

    Raises:
        InvalidFeedError: two inputs of one row bind a length symbol to different sizes, or
            no given input carries a length symbol.
    """
    index = {s: k for k, s in enumerate(layout.lengths)}
    out = []
    for r in range(n):
        found: list = [None] * len(layout.lengths)
        where: list = [None] * len(layout.lengths)
        for vi in layout.inputs:
            if vi.name not in rows:
                continue
            shape = rows[vi.name][r].shape
            for axis, s in vi.length_axes:
                k, size = index[s], shape[axis]
                if found[k] is None:
                    found[k], where[k] = size, f"input '{vi.name}' axis {axis + 1}"
                elif found[k] != size:
                    raise InvalidFeedError(f"row {r}: '{layout.label(s)}' is {found[k]} in {where[k]} and {size} "
                                           f"in input '{vi.name}' axis {axis + 1}")
        missing = [layout.label(s) for s, v in zip(layout.lengths, found) if v is None]
        if missing:
            raise InvalidFeedError(f"no column of the batch gives the length {missing}")
        out.append(tuple(found))
    return out


def input_rows(batch: Mapping[str, Any], layout: ModelLayout) -> tuple[int, dict[str, list[np.ndarray]],
                                                                    list[tuple[int, ...]]]:
    """(rows, {input: per-row arrays in its dtype}, per-row lengths) from a batch of columns.

    An input missing from the batch is filled per :func:`default_fill` (ones for a mask over
    each row's length); other missing inputs are an error.

    Raises:
        InputNameError: a model input without a column and without a default.
        InvalidFeedError: columns of different lengths; a row that does not fit its input
            (InputRankMismatch, InputFixedDimMismatch, InputDtypeMismatch), lengths that disagree.
    """
    names = [vi.name for vi in layout.inputs]
    given = [n for n in names if n in batch]
    missing = [vi for vi in layout.inputs if vi.name not in batch]
    for vi in missing:
        if default_fill(vi.name) is None:
            raise InputNameError(f"the batch has no column for input '{vi.name}' (its columns are {list(batch)}; "
                                 f"the model's inputs are {names})")
    if not given:
        raise InputNameError(f"the batch has none of the model's inputs {names} (its columns are {list(batch)})")
    sizes = {n: len(batch[n]) for n in given}
    if len(set(sizes.values())) > 1:
        raise InvalidFeedError(f"the batch's columns have different numbers of rows: {sizes}")
    n = sizes[given[0]]
    rows = {}
    for vi in layout.inputs:
        if vi.name in batch:
            rows[vi.name] = _cast(column_rows(batch[vi.name]), vi)
            _check_rank(rows[vi.name], vi)
    lengths = row_lengths(rows, layout, n)
    index = {s: k for k, s in enumerate(layout.lengths)}
    for vi in missing:
        fill = default_fill(vi.name)
        rows[vi.name] = [np.full(tuple(d if isinstance(d, int) else lengths[r][index[d]] for d in vi.row_dims),
                                 fill, vi.dtype) for r in range(n)]
    return n, rows, lengths


def slice_columns(columns: Mapping[str, Any], rows_per_batch: int) -> Iterator[dict]:
    """Consecutive batches of ``rows_per_batch`` rows from whole columns (ndarrays are sliced,
    lists become object arrays of their rows)."""
    if not columns:
        return
    n = len(next(iter(columns.values())))
    for start in range(0, n, rows_per_batch):
        batch = {}
        for name, col in columns.items():
            part = col[start:start + rows_per_batch]
            batch[name] = part if isinstance(part, np.ndarray) else rows_column(list(part), ragged=True)
        yield batch
