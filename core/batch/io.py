"""Datasets on disk: Parquet, NPZ and folders of ``.npy`` files, read as columns of rows and written back.

Read (:func:`read_columns`), ``{column: list of per-row arrays}``:

* ``.parquet``: one column per model input. A list column is a variable-length input (row
  ``i`` is the list of row ``i``; lists of lists are 2-D rows); a plain column holds one
  value per row. Needs pyarrow (``pip install pyarrow``, or ``pip install ".[ray]"`` in the checkout).
* ``.npz``: one array per input, axis 0 the rows (every row the same shape); a ragged column
  ``NAME`` is stored flat with ``NAME__shape`` (int64 ``[rows, row ndim]``: each row's shape,
  rows concatenated in order after ``ravel``), as :func:`write_columns` writes it.
* a folder: ``*.npy`` files, one row each in file-name order, for a model with one input
  that has no default (a ``*mask*`` or ``*type_ids*`` input is filled in by the predictor);
  or one sub-folder per input name, each with one ``.npy`` per row.

Write (:func:`write_columns`), one column / array per output, one row per input row in
input order: ``.parquet`` (rows of rank >= 1 as nested lists) or ``.npz`` (as above).
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, InvalidFeedError

__all__ = ["read_columns", "write_columns", "SHAPE_SUFFIX", "FORMATS"]

#: the suffix of the array that holds a ragged NPZ column's row shapes
SHAPE_SUFFIX = "__shape"
FORMATS = (".parquet", ".npz")


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidArgumentError("Parquet needs pyarrow: pip install pyarrow (or pip install \".[ray]\" in the "
                                   "dynashape checkout)") from None
    return pa, pq


# --------------------------------------------------------------------------- Parquet
def _arrow_rows(array) -> list:
    """The rows of an Arrow array as ndarrays: list arrays by their offsets (one level per
    recursion), fixed-size lists reshaped, plain arrays one value per row."""
    import pyarrow as pa

    t = array.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if array.null_count:
            raise InvalidFeedError(f"a list column has {array.null_count} null row(s)")
        if pa.types.is_fixed_size_list(t):
            size = t.list_size
            offsets = np.arange(len(array) + 1) * size
            values = array.flatten()
        else:
            offsets = np.asarray(array.offsets) - array.offsets[0].as_py()
            values = array.flatten()
        inner = _arrow_rows(values)
        flat = _stack_rows(inner)
        if flat is not None:
            return [flat[offsets[i]:offsets[i + 1]] for i in range(len(array))]
        rows = []
        for i in range(len(array)):
            part = inner[offsets[i]:offsets[i + 1]]
            try:
                rows.append(np.stack(part) if part else np.zeros((0,)))
            except ValueError:
                raise InvalidFeedError("a row is ragged below its first axis (lists of lists of different "
                                       "lengths)") from None
        return rows
    return list(array.to_numpy(zero_copy_only=False))


def _stack_rows(rows: list) -> Optional[np.ndarray]:
    """``rows`` stacked when they share one shape (one array, cheap slices), else None."""
    if not rows:
        return np.zeros((0,))
    first = np.shape(rows[0])
    if all(np.shape(r) == first for r in rows):
        return np.asarray(rows) if first == () else np.stack(rows)
    return None


def _read_parquet(path: Path) -> dict:
    _, pq = _pyarrow()
    table = pq.read_table(path)
    return {name: _arrow_rows(table.column(name).combine_chunks()) for name in table.column_names}


def _list_array(offsets: np.ndarray, values):
    pa, _ = _pyarrow()
    large = offsets[-1] >= 2**31
    make = pa.LargeListArray if large else pa.ListArray
    return make.from_arrays(pa.array(offsets.astype(np.int64 if large else np.int32)), values)


def _arrow_array(rows):
    """An Arrow array of ``rows`` (a list of per-row arrays, or one ndarray whose axis 0 is the
    rows): plain values for scalar rows, nested lists (one level per axis) otherwise, built from
    offsets rather than element by element."""
    pa, _ = _pyarrow()
    if isinstance(rows, np.ndarray):
        if rows.ndim == 1:
            return pa.array(rows)
        offsets = np.arange(rows.shape[0] + 1, dtype=np.int64) * rows.shape[1]
        return _list_array(offsets, _arrow_array(rows.reshape(-1, *rows.shape[2:])))
    if not rows:
        return pa.array(np.zeros(0))
    if all(r.ndim == 0 for r in rows):
        return pa.array(np.asarray(rows))
    if len({r.ndim for r in rows}) != 1:
        raise InvalidArgumentError("an output has rows of different ranks: it cannot be one Parquet column")
    offsets = np.concatenate([[0], np.cumsum([r.shape[0] for r in rows])]).astype(np.int64)
    if len({r.shape[1:] for r in rows}) == 1:
        values = _arrow_array(np.concatenate(rows))
    else:
        values = _arrow_array([x for r in rows for x in r])
    return _list_array(offsets, values)


def _write_parquet(path: Path, columns: Mapping[str, Sequence[np.ndarray]]) -> None:
    pa, pq = _pyarrow()
    pq.write_table(pa.table({name: _arrow_array(list(rows)) for name, rows in columns.items()}), path)


# --------------------------------------------------------------------------- NPZ / .npy
def _read_npz(path: Path) -> dict:
    arrays = {}
    with np.load(path, allow_pickle=False) as data:
        for k in data.files:
            try:
                arrays[k] = data[k]
            except ValueError as exc:
                if "allow_pickle" not in str(exc):
                    raise
                raise InvalidFeedError(
                    f"'{path}': '{k}' is an object array (rows of different lengths?), which .npz columns cannot "
                    f"be: store a ragged column flat as '{k}' (the rows concatenated after ravel) with "
                    f"'{k}{SHAPE_SUFFIX}' (int64 [rows, row ndim]: each row's shape), as "
                    "dynashape.batch.io.write_columns writes it") from None
    columns = {}
    for name, arr in arrays.items():
        if name.endswith(SHAPE_SUFFIX) and name[:-len(SHAPE_SUFFIX)] in arrays:
            continue
        shapes = arrays.get(name + SHAPE_SUFFIX)
        if shapes is None:
            columns[name] = list(arr)
            continue
        sizes = np.prod(shapes, axis=1).astype(np.int64) if shapes.shape[1] else np.ones(len(shapes), np.int64)
        if sizes.sum() != arr.size:
            raise InvalidFeedError(f"'{path}': '{name}' has {arr.size} values, its {name}{SHAPE_SUFFIX} "
                                   f"says {int(sizes.sum())}")
        starts = np.concatenate([[0], np.cumsum(sizes)])
        flat = arr.reshape(-1)
        columns[name] = [flat[starts[i]:starts[i + 1]].reshape(tuple(shapes[i])) for i in range(len(shapes))]
    return columns


def _write_npz(path: Path, columns: Mapping[str, Sequence[np.ndarray]]) -> None:
    arrays = {}
    for name, rows in columns.items():
        rows = list(rows)
        if rows and all(r.shape == rows[0].shape for r in rows):
            arrays[name] = np.stack(rows)
            continue
        arrays[name] = np.concatenate([r.ravel() for r in rows]) if rows else np.zeros(0)
        arrays[name + SHAPE_SUFFIX] = np.array([r.shape for r in rows], dtype=np.int64).reshape(len(rows), -1)
    np.savez(path, **arrays)  # type: ignore[arg-type]


def _read_folder(path: Path, input_names: Sequence[str]) -> dict:
    subdirs = [n for n in input_names if (path / n).is_dir()]
    if subdirs:
        return {n: [np.load(f, allow_pickle=False) for f in sorted((path / n).glob("*.npy"))] for n in subdirs}
    from .columns import default_fill

    files = sorted(path.glob("*.npy"))
    if not files:
        raise InvalidFeedError(f"folder '{path}' has no .npy files and no sub-folder named after an input "
                               f"{list(input_names)}")
    needed = [n for n in input_names if default_fill(n) is None] if len(input_names) > 1 else list(input_names)
    if len(needed) != 1:
        raise InvalidFeedError(f"folder '{path}' holds .npy rows for one input, the model has {len(input_names)} "
                               f"{list(input_names)} of which {len(needed)} have no default ({needed}): put each "
                               "input's rows in a sub-folder named after it")
    return {needed[0]: [np.load(f, allow_pickle=False) for f in files]}


# --------------------------------------------------------------------------- entry points
def read_columns(path: Any, input_names: Sequence[str] = ()) -> dict:
    """``{column: [per-row arrays]}`` from a ``.parquet`` or ``.npz`` file or a folder of
    ``.npy`` files (see the module). ``input_names``: the model's inputs (a folder of bare
    ``.npy`` files is the rows of the only one).

    Raises:
        InvalidFeedError: a file or folder that does not hold rows (names it).
        InvalidArgumentError: an unknown format; Parquet without pyarrow.
        OSError: the path cannot be read.
    """
    p = Path(path)
    if p.is_dir():
        columns = _read_folder(p, input_names)
    elif not p.exists():
        raise InvalidFeedError(f"'{p}' does not exist")
    elif p.suffix == ".parquet":
        columns = _read_parquet(p)
    elif p.suffix == ".npz":
        try:
            columns = _read_npz(p)
        except (ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise InvalidFeedError(f"cannot read '{p}' as .npz: {exc}") from None
    else:
        raise InvalidArgumentError(f"'{p}': expected a .parquet or .npz file or a folder of .npy files")
    sizes = {k: len(v) for k, v in columns.items()}
    if len(set(sizes.values())) > 1:
        raise InvalidFeedError(f"'{p}': its columns have different numbers of rows: {sizes}")
    return columns


def write_columns(path: Any, columns: Mapping[str, Sequence[np.ndarray]]) -> None:
    """Write ``{column: [per-row arrays]}`` to ``path`` (``.parquet`` or ``.npz``, see the module).

    Raises:
        InvalidArgumentError: another suffix; Parquet without pyarrow; rows of different ranks (Parquet).
        OSError: the file cannot be written.
    """
    p = Path(path)
    if p.suffix not in FORMATS:
        raise InvalidArgumentError(f"'{p}': the output must end in .parquet or .npz")
    if p.parent and not p.parent.exists():
        os.makedirs(p.parent, exist_ok=True)
    (_write_parquet if p.suffix == ".parquet" else _write_npz)(p, columns)
