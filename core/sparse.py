"""``SparseTensor``: onnxruntime's sparse tensors (COO and CSR(C)) on the CPU, held by numpy.

A COO tensor holds its non-zero ``values`` (1-D) and their ``indices``: linear indices into
the dense shape (1-D, one per value) or coordinates (2-D, ``[nnz, rank]``). A CSR(C) tensor is
2-D: ``inner`` holds each value's column, ``outer`` (rows + 1 entries) where each row's values
start. Numeric arrays are kept as given (views of the caller's arrays when they are contiguous
and of the right index type), and every array read back is a read-only view, as in
onnxruntime; string values are copied.

Sessions treat sparse graph inputs and outputs as dense tensors: a SparseTensor fed to a run
is densified (:meth:`SparseTensor.to_dense`), and ``run_with_ort_values`` returns a COO
SparseTensor for an output the model declares ``sparse_tensor(...)``.

Source: onnxruntime's Python API reference, "SparseTensor"
(https://onnxruntime.ai/docs/api/python/api_summary.html#sparsetensor); ONNX IR.md "Sparse tensors".
"""
from __future__ import annotations

import enum
from typing import Any, Sequence

import numpy as np

from .devices import OrtDevice, cpu_device
from .dtypes import ELEM_TYPE_NAMES, onnx_type
from .errors import DeviceNotAvailableError, InvalidArgumentError, OrtValueError

__all__ = ["OrtSparseFormat", "SparseTensor", "SparseCooView", "SparseCsrView", "SparseBlockSparseView"]


class OrtSparseFormat(enum.IntEnum):
    """onnxruntime's sparse formats."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


def _read_only(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


def _index_array(arr: Any, what: str) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{what} must be an integer array, got {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _values_array(values: Any) -> np.ndarray:
    v = np.asarray(values)
    if v.ndim != 1:
        raise InvalidArgumentError(f"sparse values must be 1-D, got shape {list(v.shape)}")
    if v.dtype.kind in "OUS":
        return v.astype(object)
    try:
        onnx_type(v.dtype)
    except TypeError:
        raise InvalidArgumentError(f"sparse values of dtype {v.dtype} have no ONNX element type") from None
    return np.ascontiguousarray(v)


class SparseCooView:
    """The COO indices of a SparseTensor (read-only)."""

    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return _read_only(self._indices)


class SparseCsrView:
    """The CSR(C) indices of a SparseTensor (read-only): ``inner`` (columns) and ``outer`` (row starts)."""

    def __init__(self, inner: np.ndarray, outer: np.ndarray) -> None:
        self._inner, self._outer = inner, outer

    def inner(self) -> np.ndarray:
        return _read_only(self._inner)

    def outer(self) -> np.ndarray:
        return _read_only(self._outer)


class SparseBlockSparseView:
    """The block-sparse indices of a SparseTensor (read-only)."""

    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return _read_only(self._indices)


class SparseTensor:
    """A sparse tensor on the CPU in COO or CSR(C) format (see the module)."""

    __slots__ = ("_format", "_shape", "_values", "_indices", "_outer", "__weakref__")
    _format: OrtSparseFormat
    _shape: list[int]
    _values: np.ndarray
    _indices: np.ndarray
    _outer: Any

    def __init__(self, sparse_tensor: "SparseTensor") -> None:
        """``SparseTensor(other)`` is ``other`` (onnxruntime's wrapper constructor); make one
        with :meth:`sparse_coo_from_numpy` or :meth:`sparse_csr_from_numpy`."""
        if not isinstance(sparse_tensor, SparseTensor):
            raise InvalidArgumentError("SparseTensor() takes another SparseTensor; make one with "
                                       "SparseTensor.sparse_coo_from_numpy or sparse_csr_from_numpy")
        for name in SparseTensor.__slots__[:-1]:
            setattr(self, name, getattr(sparse_tensor, name))

    @classmethod
    def _make(cls, fmt: OrtSparseFormat, shape: Sequence[int], values: np.ndarray, indices: np.ndarray,
              outer: Any = None) -> "SparseTensor":
        st = cls.__new__(cls)
        st._format, st._shape, st._values, st._indices, st._outer = fmt, [int(d) for d in shape], values, indices, outer
        return st

    @classmethod
    def sparse_coo_from_numpy(cls, dense_shape: Sequence[int], values: np.ndarray, coo_indices: np.ndarray,
                              ort_device: Any) -> "SparseTensor":
        """A COO tensor of ``dense_shape``: ``values`` (1-D) at ``coo_indices`` (linear, 1-D;
        or coordinates, ``[nnz, rank]``), on ``ort_device`` (the CPU).

        Raises:
            InvalidArgumentError: indices that do not fit the values or the shape.
            DeviceNotAvailableError: a device other than the CPU.
        """
        cpu_device(ort_device, what="a SparseTensor")
        shape = [int(d) for d in dense_shape]
        vals = _values_array(values)
        idx = _index_array(coo_indices, "COO indices")
        nnz, size = len(vals), int(np.prod(shape, dtype=np.int64))
        if idx.ndim == 1:
            if len(idx) != nnz:
                raise InvalidArgumentError(f"COO indices: {len(idx)} linear indices for {nnz} values")
            if nnz and (idx.min() < 0 or idx.max() >= size):
                raise InvalidArgumentError(f"COO indices: a linear index is outside the dense shape {shape}")
        elif idx.ndim == 2:
            if idx.shape != (nnz, len(shape)):
                raise InvalidArgumentError(f"COO indices of shape {list(idx.shape)} do not fit {nnz} values of "
                                           f"rank {len(shape)} (expected [{nnz}, {len(shape)}])")
            if nnz and ((idx < 0).any() or (idx >= np.asarray(shape, np.int64)).any()):
                raise InvalidArgumentError(f"COO indices: a coordinate is outside the dense shape {shape}")
        else:
            raise InvalidArgumentError(f"COO indices must be 1-D or 2-D, got shape {list(idx.shape)}")
        return cls._make(OrtSparseFormat.ORT_SPARSE_COO, shape, vals, idx)

    @classmethod
    def sparse_csr_from_numpy(cls, dense_shape: Sequence[int], values: np.ndarray, inner_indices: np.ndarray,
                              outer_indices: np.ndarray, ort_device: Any) -> "SparseTensor":
        """A 2-D CSR(C) tensor: ``inner_indices`` the column of each value, ``outer_indices``
        (rows + 1 entries, non-decreasing, from 0 to the value count) where each row starts.

        Raises:
            InvalidArgumentError: a shape that is not 2-D, or indices that do not fit.
            DeviceNotAvailableError: a device other than the CPU.
        """
        cpu_device(ort_device, what="a SparseTensor")
        shape = [int(d) for d in dense_shape]
        if len(shape) != 2:
            raise InvalidArgumentError(f"CSR(C) tensors are 2-D, got dense shape {shape}")
        vals = _values_array(values)
        inner = _index_array(inner_indices, "CSR inner indices")
        outer = _index_array(outer_indices, "CSR outer indices")
        if inner.ndim != 1 or len(inner) != len(vals):
            raise InvalidArgumentError(f"CSR inner indices: {inner.size} for {len(vals)} values")
        if outer.ndim != 1 or len(outer) != shape[0] + 1 or (len(vals) and (outer[0] != 0 or outer[-1] != len(vals))) \
                or (np.diff(outer) < 0).any():
            raise InvalidArgumentError(f"CSR outer indices must be {shape[0] + 1} non-decreasing offsets from 0 to "
                                       f"{len(vals)}, got {outer.tolist()}")
        if len(inner) and (inner.min() < 0 or inner.max() >= shape[1]):
            raise InvalidArgumentError(f"CSR inner indices: a column is outside the dense shape {shape}")
        return cls._make(OrtSparseFormat.ORT_SPARSE_CSRC, shape, vals, inner, outer)

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> "SparseTensor":
        """The COO tensor (linear indices) of a dense array's non-zero (non-empty) elements."""
        flat = np.asarray(dense).reshape(-1)
        idx = np.flatnonzero(flat != ("" if flat.dtype.kind in "OUS" else 0)).astype(np.int64)
        return cls._make(OrtSparseFormat.ORT_SPARSE_COO, dense.shape, flat[idx], idx)

    def _get_c_tensor(self) -> "SparseTensor":
        return self

    def values(self) -> np.ndarray:
        """The non-zero values (1-D, read-only)."""
        return _read_only(self._values)

    def as_coo_view(self) -> SparseCooView:
        """Raises OrtValueError unless the tensor is COO."""
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise OrtValueError(f"this sparse tensor is {self._format.name}, not COO")
        return SparseCooView(self._indices)

    def as_csrc_view(self) -> SparseCsrView:
        """Raises OrtValueError unless the tensor is CSR(C)."""
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise OrtValueError(f"this sparse tensor is {self._format.name}, not CSR(C)")
        return SparseCsrView(self._indices, self._outer)

    def as_blocksparse_view(self) -> SparseBlockSparseView:
        """Raises OrtValueError: block-sparse tensors are not made here."""
        raise OrtValueError(f"this sparse tensor is {self._format.name}, not block-sparse")

    # the binding's accessors
    def get_coo_data(self) -> SparseCooView:
        return self.as_coo_view()

    def get_csrc_data(self) -> SparseCsrView:
        return self.as_csrc_view()

    def get_blocksparse_data(self) -> SparseBlockSparseView:
        return self.as_blocksparse_view()

    def to_cuda(self, ort_device: Any) -> "SparseTensor":
        """Raises DeviceNotAvailableError: dynashape has no CUDA device (onnxruntime's CPU build
        raises too)."""
        name = ort_device.name if isinstance(ort_device, OrtDevice) else str(ort_device)
        raise DeviceNotAvailableError(f"cannot copy a SparseTensor to '{name}': dynashape runs on the CPU only")

    def format(self) -> OrtSparseFormat:
        return self._format

    def dense_shape(self) -> list[int]:
        return list(self._shape)

    def data_type(self) -> str:
        """``sparse_tensor(float)``, ``sparse_tensor(string)``, ..."""
        return f"sparse_tensor({ELEM_TYPE_NAMES[onnx_type(self._values.dtype)]})"

    def device_name(self) -> str:
        return "cpu"

    def to_dense(self) -> np.ndarray:
        """The dense array (zeros, or ``""`` for strings, where no value is given)."""
        fill = "" if self._values.dtype == object else 0
        dense = np.full(int(np.prod(self._shape, dtype=np.int64)), fill, dtype=self._values.dtype)
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            flat = self._indices if self._indices.ndim == 1 else \
                np.ravel_multi_index(tuple(self._indices.T), self._shape) if len(self._indices) else self._indices[:, 0]
            dense[flat] = self._values
        else:
            rows = np.repeat(np.arange(self._shape[0]), np.diff(self._outer))
            dense[rows * self._shape[1] + self._indices] = self._values
        return dense.reshape(self._shape)

    def __repr__(self) -> str:
        return (f"SparseTensor({self._format.name}, {self.data_type()}, dense_shape={self._shape}, "
                f"nnz={len(self._values)})")
