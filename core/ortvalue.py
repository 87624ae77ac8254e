"""``OrtValue``: onnxruntime's value handle, held in host memory by numpy.

An OrtValue is a tensor (a numpy array), a sparse tensor (:class:`~dynashape.sparse.SparseTensor`),
a sequence (a list of arrays), a map (a dict) or an empty optional. A tensor made by
:meth:`OrtValue.ortvalue_from_numpy` from a C-contiguous array shares that array's memory, and
:meth:`OrtValue.numpy` returns the array itself, so writes through either show in the other, as
in onnxruntime on the CPU. ``data_ptr()`` is the address of the array's first byte: it is what
``IOBinding.bind_input`` / ``bind_output`` take.

One class serves both of onnxruntime's layers: the binding's ``C.OrtValue`` (its factory
methods take an :class:`~dynashape.devices.OrtDevice`) and the Python wrapper's ``OrtValue``
(device as a name and an index); ``_get_c_value()`` and ``_ortvalue`` return the value itself.

Deliberate differences from onnxruntime: string tensors (object or ``str`` arrays) and the
``ml_dtypes`` types (bfloat16, float8) can be made from numpy and read back with ``numpy()``
(onnxruntime 1.32 refuses both); ``update_inplace`` with an array of another dtype raises
(onnxruntime copies its bytes as they are).

Source: onnxruntime's Python API reference, "OrtValue"
(https://onnxruntime.ai/docs/api/python/api_summary.html#ortvalue).
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Sequence

import numpy as np

from .devices import cpu_device
from .dtypes import MapType, OptionalType, SequenceType, np_dtype, onnx_type, type_string, value_type_of, \
    value_type_string
from .errors import InvalidArgumentError, OrtValueError

__all__ = ["OrtValue", "OrtValueVector", "element_dtype", "array_at", "c_contiguous", "is_dlpack_uint8_tensor"]

_TENSOR, _SPARSE, _SEQ, _MAP, _NONE = "tensor", "sparse", "seq", "map", "none"


def element_dtype(element_type: Any) -> np.dtype:
    """The numpy dtype of an element type given as an ONNX ``TensorProto`` number (1 ->
    float32) or as a numpy type / dtype (``np.float32``).

    Raises:
        OrtValueError: a number that is no ONNX element type, or a numpy type with no ONNX
            element type (complex is allowed, as dynashape computes with it).
    """
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        try:
            return np_dtype(int(element_type))
        except TypeError:
            raise OrtValueError(f"tensor type {int(element_type)} is not supported") from None
    try:
        dt = np.dtype(element_type)
        onnx_type(dt)
    except TypeError:
        raise OrtValueError(f"numpy type {element_type!r} can't be converted to an ONNX element type") from None
    return np.dtype(object) if dt.kind in "US" else dt


def c_contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` itself when C-contiguous, else a C-contiguous copy (0-d arrays stay 0-d, unlike
    ``np.ascontiguousarray``)."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _as_tensor_array(arr: np.ndarray) -> np.ndarray:
    """``arr`` as an OrtValue keeps it: itself when C-contiguous and numeric, a C-contiguous
    copy otherwise; strings as an object array of ``str``."""
    if arr.dtype.kind in "US":
        return arr.astype(object)
    if arr.dtype.kind == "O":
        return c_contiguous(arr)
    element_dtype(arr.dtype)
    return c_contiguous(arr)


def array_at(address: int, dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
    """A writable array of ``shape`` and ``dtype`` over the memory at ``address`` (a
    ``data_ptr()``): what a binding by pointer reads and writes. The memory belongs to the
    caller, who keeps it alive while the binding is used (as with onnxruntime).

    Raises:
        OrtValueError: a null address, a negative dim, or a string dtype (no flat buffer).
    """
    dims = tuple(int(d) for d in shape)
    if dtype.kind == "O":
        raise OrtValueError("string tensors cannot be bound by pointer (their elements are Python objects)")
    if any(d < 0 for d in dims):
        raise OrtValueError(f"cannot bind memory of shape {list(dims)}: dims must be >= 0")
    count = int(np.prod(dims, dtype=np.int64))
    if count == 0:
        return np.empty(dims, dtype)
    if not address:
        raise OrtValueError("cannot bind a null pointer")
    buf = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(address))
    return np.frombuffer(memoryview(buf), dtype=dtype).reshape(dims)


class OrtValue:
    """A tensor, sparse tensor, sequence, map or empty optional, on the CPU (see the module)."""

    __slots__ = ("_value", "_kind", "_type", "__weakref__")
    _value: Any
    _kind: str
    _type: Any

    def __init__(self, ortvalue: Any = None, numpy_obj: Optional[np.ndarray] = None) -> None:
        """``OrtValue(other)`` is ``other``'s value (onnxruntime's wrapper constructor); use
        the factory methods to make one from data."""
        if isinstance(ortvalue, OrtValue):
            self._value, self._kind, self._type = ortvalue._value, ortvalue._kind, ortvalue._type
        elif ortvalue is None and numpy_obj is not None:
            self._value, self._kind, self._type = _as_tensor_array(np.asarray(numpy_obj)), _TENSOR, None
        else:
            raise InvalidArgumentError("OrtValue() takes another OrtValue; make one with OrtValue.ortvalue_from_numpy"
                                       "(array) or OrtValue.ortvalue_from_shape_and_type(shape, type)")

    @classmethod
    def _make(cls, value: Any, kind: str, vtype: Any = None) -> "OrtValue":
        ov = cls.__new__(cls)
        ov._value, ov._kind, ov._type = value, kind, vtype
        return ov

    @classmethod
    def from_run_value(cls, value: Any, declared: Any = None) -> "OrtValue":
        """The OrtValue of a value a run returned: an array (made C-contiguous), a list (a
        sequence), a dict (a map) or None (an empty optional of the ``declared`` type)."""
        if isinstance(value, np.ndarray):
            return cls._make(c_contiguous(value), _TENSOR)
        if isinstance(value, list):
            return cls._make(value, _SEQ, declared if isinstance(declared, SequenceType) else value_type_of(value))
        if isinstance(value, dict):
            return cls._make(value, _MAP, declared if isinstance(declared, MapType) else value_type_of(value))
        if value is None:
            return cls._make(None, _NONE, declared)
        from .sparse import SparseTensor
        if isinstance(value, SparseTensor):
            return cls._make(value, _SPARSE)
        return cls._make(_as_tensor_array(np.asarray(value)), _TENSOR)

    # construction ------------------------------------------------------------
    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj: np.ndarray, device_type: Any = "cpu", device_id: int = 0,
                            vendor_id: int = -1) -> "OrtValue":
        """A tensor of ``numpy_obj``'s shape and dtype: the array itself when it is C-contiguous
        (writes to either show in the other), else a C-contiguous copy.

        ``device_type`` is ``"cpu"`` or an :class:`OrtDevice` of the CPU.

        Raises:
            OrtValueError: ``numpy_obj`` is not an ndarray, or its dtype has no ONNX element type.
            DeviceNotAvailableError: a device other than the CPU. InvalidArgumentError: an unknown device name.
        """
        cpu_device(device_type, device_id)
        if not isinstance(numpy_obj, np.ndarray):
            raise OrtValueError(f"Creation of OrtValues is only supported from numpy arrays, got "
                                f"{type(numpy_obj).__name__}")
        return cls._make(_as_tensor_array(numpy_obj), _TENSOR)

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data: np.ndarray, onnx_element_type: int) -> "OrtValue":
        """A tensor of ONNX element type ``onnx_element_type`` over ``data``'s bytes (a view:
        uint16 data as bfloat16, float32 bytes as int32), on the CPU.

        Raises:
            OrtValueError: the element sizes differ ("Items size in the incoming array: 4
                specified by onnxtype: 2"), an unknown element type, or ``data`` not an ndarray.
        """
        if not isinstance(data, np.ndarray):
            raise OrtValueError(f"Creation of OrtValues is only supported from numpy arrays, got {type(data).__name__}")
        dtype = element_dtype(onnx_element_type)
        if dtype.kind == "O" or data.dtype.kind in "OUS":
            if dtype.kind == "O" and data.dtype.kind in "OUS":
                return cls._make(_as_tensor_array(data), _TENSOR)
            raise OrtValueError(f"cannot view {data.dtype} data as ONNX element type {onnx_element_type}")
        if dtype.itemsize != data.dtype.itemsize:
            raise OrtValueError(f"Items size in the incoming array: {data.dtype.itemsize} specified by onnxtype: "
                                f"{dtype.itemsize}")
        return cls._make(c_contiguous(data).view(dtype), _TENSOR)

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape: Sequence[int], element_type: Any, device_type: Any = "cpu",
                                     device_id: int = 0, vendor_id: int = -1) -> "OrtValue":
        """An uninitialised tensor of ``shape`` and ``element_type`` (a numpy type or an ONNX
        element type number); strings start as ``""``.

        Raises:
            OrtValueError: an unknown element type or a negative dim.
            DeviceNotAvailableError: a device other than the CPU.
        """
        cpu_device(device_type, device_id)
        dtype = element_dtype(element_type)
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise OrtValueError(f"cannot make a tensor of shape {list(dims)}: dims must be >= 0")
        arr = np.full(dims, "", dtype=object) if dtype.kind == "O" else np.empty(dims, dtype)
        return cls._make(arr, _TENSOR)

    # the binding's spellings (element type as an ONNX number)
    ortvalue_from_shape_and_onnx_type = ortvalue_from_shape_and_type

    @classmethod
    def ort_value_from_sparse_tensor(cls, sparse_tensor: Any) -> "OrtValue":
        """An OrtValue holding ``sparse_tensor`` (a :class:`~dynashape.sparse.SparseTensor`).

        Raises:
            InvalidArgumentError: not a SparseTensor.
        """
        from .sparse import SparseTensor
        if not isinstance(sparse_tensor, SparseTensor):
            raise InvalidArgumentError(f"expected a SparseTensor, got {type(sparse_tensor).__name__}")
        return cls._make(sparse_tensor, _SPARSE)

    @classmethod
    def from_dlpack(cls, data: Any, is_bool_tensor: bool = False) -> "OrtValue":
        """A tensor sharing the memory of a DLPack producer (an object with ``__dlpack__``)
        or capsule; ``is_bool_tensor`` reads uint8 data as bool.

        Raises:
            OrtValueError: the capsule or object is not a CPU DLPack tensor.
        """
        source = _CapsuleProducer(data) if type(data).__name__ == "PyCapsule" else data
        try:
            arr = np.from_dlpack(source)
        except (TypeError, BufferError, RuntimeError, ValueError) as exc:
            raise OrtValueError(f"cannot read a DLPack tensor from {type(data).__name__}: {exc}") from exc
        if is_bool_tensor and arr.dtype == np.uint8:
            arr = arr.view(np.bool_)
        return cls._make(c_contiguous(arr), _TENSOR)

    # reading -----------------------------------------------------------------
    def _tensor(self, what: str) -> np.ndarray:
        if self._kind != _TENSOR:
            raise OrtValueError(f"{what}: only OrtValues that are tensors support it; this one is "
                                f"{self.data_type() if self._kind != _NONE else 'an empty optional'}")
        return self._value

    def _get_c_value(self) -> "OrtValue":
        return self

    @property
    def _ortvalue(self) -> "OrtValue":
        return self

    def _is_webgpu_buffer(self) -> bool:
        return False

    def numpy(self) -> np.ndarray:
        """The tensor as a numpy array: the OrtValue's own memory (writes show in the value).

        Raises:
            OrtValueError: the value is not a tensor (a sequence, map, sparse tensor, none).
        """
        return self._tensor("numpy()")

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        arr = self._tensor("__array__")
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def data_ptr(self) -> int:
        """The address of the tensor's first byte."""
        return int(self._tensor("data_ptr()").__array_interface__["data"][0])

    def device_name(self) -> str:
        """``"cpu"`` for a tensor or sparse tensor.

        Raises:
            OrtValueError: a sequence, map or empty optional (as onnxruntime).
        """
        if self._kind not in (_TENSOR, _SPARSE):
            raise OrtValueError("device_name(): only OrtValues that are tensors or sparse tensors support it")
        return "cpu"

    def shape(self) -> list[int]:
        """The tensor's dims (a sparse tensor's dense shape).

        Raises:
            OrtValueError: a sequence, map or empty optional.
        """
        if self._kind == _SPARSE:
            return self._value.dense_shape()
        return [int(d) for d in self._tensor("shape()").shape]

    def data_type(self) -> str:
        """The value's type string: ``tensor(float)``, ``sparse_tensor(float)``,
        ``seq(tensor(int64))``, ``map(int64,tensor(float))``."""
        if self._kind == _TENSOR:
            return type_string(onnx_type(self._value.dtype))
        if self._kind == _SPARSE:
            return self._value.data_type()
        if self._type is None:
            return "optional(undefined)" if self._kind == _NONE else "undefined"
        return value_type_string(self._type)

    def element_type(self) -> int:
        """The ONNX element type number of the tensor's (a sequence's tensors', a sparse
        tensor's values', a map's values') elements.

        Raises:
            OrtValueError: the element type is unknown (an empty sequence of unknown type, none).
        """
        if self._kind == _TENSOR:
            return onnx_type(self._value.dtype)
        if self._kind == _SPARSE:
            return onnx_type(self._value.values().dtype)
        t = self._type
        while isinstance(t, (SequenceType, OptionalType, MapType)):
            t = t.value if isinstance(t, MapType) else t.elem
        if t is None:
            raise OrtValueError("element_type(): the element type of this value is not known")
        return onnx_type(t)

    def tensor_size_in_bytes(self) -> int:
        """The tensor's size in bytes (elements x element size).

        Raises:
            OrtValueError: not a tensor.
        """
        return int(self._tensor("tensor_size_in_bytes()").nbytes)

    def has_value(self) -> bool:
        """False for an empty optional, True otherwise."""
        return self._kind != _NONE

    def is_tensor(self) -> bool:
        return self._kind == _TENSOR

    def is_sparse_tensor(self) -> bool:
        return self._kind == _SPARSE

    def is_tensor_sequence(self) -> bool:
        return self._kind == _SEQ

    def as_sparse_tensor(self) -> Any:
        """The :class:`~dynashape.sparse.SparseTensor` this value holds.

        Raises:
            OrtValueError: the value is not a sparse tensor.
        """
        if self._kind != _SPARSE:
            raise OrtValueError("This OrtValue does not contain a SparseTensor. Check data_type() value.")
        return self._value

    def update_inplace(self, np_arr: np.ndarray) -> None:
        """Copy ``np_arr``'s elements into the tensor's memory (the shape may differ; the
        element count and dtype must not).

        Raises:
            OrtValueError: not a tensor, another element count ("The input size of numpy arrays
                does not match the size of the OrtValue."), another dtype, or read-only memory.
        """
        arr = self._tensor("update_inplace()")
        src = np.asarray(np_arr)
        if src.size != arr.size:
            raise OrtValueError(f"The input size of numpy arrays does not match the size of the OrtValue "
                                f"({src.size} elements for {arr.size})")
        if src.dtype != arr.dtype and not (arr.dtype.kind == "O" and src.dtype.kind in "OUS"):
            raise OrtValueError(f"update_inplace: the array's dtype {src.dtype} is not the OrtValue's {arr.dtype}")
        if not arr.flags.writeable:
            raise OrtValueError("update_inplace: the OrtValue's memory is read-only (made from a read-only array)")
        np.copyto(arr.reshape(-1), src.reshape(-1))

    # DLPack ----------------------------------------------------------------------
    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing the tensor's memory."""
        return self._tensor("to_dlpack()").__dlpack__()

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        return self._tensor("__dlpack__").__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: DLPack's CPU device."""
        return (1, 0)

    # feeding a session ------------------------------------------------------------
    def feed_value(self) -> Any:
        """What ``InferenceSession.run`` takes for this value: an array, a list, a dict,
        None, or the SparseTensor."""
        return self._value

    def __repr__(self) -> str:
        if self._kind == _TENSOR:
            return f"OrtValue({self.data_type()}, shape={self.shape()}, cpu)"
        return f"OrtValue({self.data_type() if self._kind != _NONE else 'none'})"


class _CapsuleProducer:
    """A raw DLPack capsule as an object ``np.from_dlpack`` reads (it takes producers only)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


class OrtValueVector(list):
    """A list of :class:`OrtValue` (onnxruntime's ``C.OrtValueVector``: what the binding's
    ``run_with_ort_values`` and ``SessionIOBinding.get_outputs`` return)."""

    def push_back(self, value: OrtValue) -> None:
        self.append(value)

    def push_back_batch(self, values: Sequence[OrtValue], *args: Any) -> None:
        self.extend(values)

    def reserve(self, n: int) -> None:
        """Accepted (a Python list grows as needed)."""

    def shrink_to_fit(self) -> None:
        """Accepted (a Python list grows as needed)."""

    def element_type_at(self, index: int) -> np.dtype:
        """The numpy dtype of the elements of value ``index``."""
        return np.dtype(np_dtype(self[index].element_type()))

    def dlpack_at(self, index: int) -> Any:
        return self[index].to_dlpack()

    def to_dlpacks(self, *args: Any) -> list:
        return [v.to_dlpack() for v in self]


def is_dlpack_uint8_tensor(capsule: Any) -> bool:
    """True when a DLPack capsule (``"dltensor"``) holds uint8 data (DLPack's ``DLDataType``
    code 1, 8 bits), read without consuming it.

    Raises:
        OrtValueError: not a DLPack capsule.
    """
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    valid = ctypes.pythonapi.PyCapsule_IsValid
    valid.restype, valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    if not valid(capsule, b"dltensor"):
        raise OrtValueError("expected a DLPack capsule named 'dltensor'")

    class _DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16)]

    t = _DLTensor.from_address(get(capsule, b"dltensor"))   # DLManagedTensor starts with its DLTensor
    return t.code == 1 and t.bits == 8
