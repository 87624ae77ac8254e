"""ONNX's protobuf messages (``ModelProto``, ``TensorProto``, ...) without ``import onnx``.

Importing the ``onnx`` package costs a process 0.6-1.2 s on the machines we measure
(``python -X importtime``: ~0.6-0.9 s of it the ``ml_dtypes`` C extension initialising, which
onnx imports at once), against ~20 ms for the one module a runtime needs of it: the message
classes protoc generated, ``onnx/onnx_ml_pb2.py``, which imports nothing but
``google.protobuf``. So that module is loaded from onnx's installed files by itself, and the
session reads, checks and runs a model without the rest of onnx. The classes are the ones
``import onnx`` gives later in the same process (protobuf's message classes belong to the
descriptor pool, where the file is registered once): an ``onnx.ModelProto`` a user built is
an instance of :data:`ModelProto`.

What is left of onnx is imported where it is used: tensors of the low-precision types
(bfloat16, float8, 4/2/6-bit: ``ml_dtypes``) and external data inside attributes are read by
``onnx.numpy_helper``; schemas onnx's disk cache does not hold come from ``onnx.defs``
(:mod:`dynashape.onnx_schemas`).
"""
from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache

import numpy as np

__all__ = ["ModelProto", "GraphProto", "NodeProto", "TensorProto", "AttributeProto", "ValueInfoProto", "TypeProto",
           "SparseTensorProto", "IR_VERSION", "load_from_string", "to_array", "onnx_version"]

#: the name the standalone module is registered under (onnx's own import loads it as
#: ``onnx.onnx_ml_pb2``; both hold the same classes)
_MODULE = "dynashape._onnx_ml_pb2"


def _messages():
    """onnx's generated ``onnx_ml_pb2`` module: the one onnx imported, else loaded from its
    file alone; ``import onnx`` where that file cannot be found or loaded."""
    loaded = sys.modules.get("onnx.onnx_ml_pb2") or sys.modules.get(_MODULE)
    if loaded is not None:
        return loaded
    try:
        spec = importlib.util.find_spec("onnx")
        locations = list(spec.submodule_search_locations or ()) if spec is not None else []
        for folder in locations:
            module_spec = importlib.util.spec_from_file_location(_MODULE, f"{folder}/onnx_ml_pb2.py")
            if module_spec is None or module_spec.loader is None:
                continue
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[_MODULE] = module
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[_MODULE]
                raise
            return module
    except (ImportError, OSError):
        pass
    from onnx import onnx_ml_pb2
    return onnx_ml_pb2


_pb = _messages()
ModelProto = _pb.ModelProto
GraphProto = _pb.GraphProto
NodeProto = _pb.NodeProto
TensorProto = _pb.TensorProto
AttributeProto = _pb.AttributeProto
ValueInfoProto = _pb.ValueInfoProto
TypeProto = _pb.TypeProto
SparseTensorProto = _pb.SparseTensorProto
#: the newest IR version this onnx defines (``onnx.IR_VERSION``)
IR_VERSION = int(_pb.IR_VERSION)


def load_from_string(data: bytes) -> ModelProto:
    """``onnx.load_from_string``: the ModelProto of serialized bytes.

    Raises:
        google.protobuf.message.DecodeError: the bytes are not a ModelProto (or protobuf
            consumed fewer of them than there are).
    """
    proto = ModelProto()
    decoded = proto.ParseFromString(data)
    if decoded is not None and decoded != len(data):
        from google.protobuf.message import DecodeError
        raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {len(data)}")
    return proto


@lru_cache(maxsize=None)
def onnx_version() -> str:
    """The installed onnx's version (``onnx.__version__``), without importing onnx: read from
    its ``.dist-info`` folder (:mod:`dynashape.distributions`), else from its metadata."""
    from . import distributions
    found = distributions.version("onnx")
    if found is not None:
        return found
    from importlib import metadata
    try:
        return metadata.version("onnx")
    except metadata.PackageNotFoundError:
        import onnx
        return onnx.__version__


#: element types numpy holds natively -> (numpy dtype, the TensorProto field of their data)
_NATIVE = {
    TensorProto.FLOAT: (np.dtype(np.float32), "float_data"),
    TensorProto.UINT8: (np.dtype(np.uint8), "int32_data"),
    TensorProto.INT8: (np.dtype(np.int8), "int32_data"),
    TensorProto.UINT16: (np.dtype(np.uint16), "int32_data"),
    TensorProto.INT16: (np.dtype(np.int16), "int32_data"),
    TensorProto.INT32: (np.dtype(np.int32), "int32_data"),
    TensorProto.INT64: (np.dtype(np.int64), "int64_data"),
    TensorProto.BOOL: (np.dtype(np.bool_), "int32_data"),
    TensorProto.FLOAT16: (np.dtype(np.float16), "int32_data"),
    TensorProto.DOUBLE: (np.dtype(np.float64), "double_data"),
    TensorProto.UINT32: (np.dtype(np.uint32), "uint64_data"),
    TensorProto.UINT64: (np.dtype(np.uint64), "uint64_data"),
    TensorProto.COMPLEX64: (np.dtype(np.complex64), "float_data"),
    TensorProto.COMPLEX128: (np.dtype(np.complex128), "double_data"),
}
#: int32_data holds these as the bits of each element (ONNX's onnx.proto, TensorProto.int32_data)
_BITS_IN_INT32 = {TensorProto.FLOAT16: np.uint16, TensorProto.INT16: np.uint16, TensorProto.UINT16: np.uint16,
                  TensorProto.BOOL: np.uint8}


def native_dtype(elem_type: int):
    """The numpy dtype of an element type numpy holds without ``ml_dtypes`` (None otherwise;
    ``object`` for STRING)."""
    if elem_type == TensorProto.STRING:
        return np.dtype(object)
    entry = _NATIVE.get(elem_type)
    return None if entry is None else entry[0]


def to_array(t: TensorProto) -> np.ndarray:
    """``onnx.numpy_helper.to_array``: the array of a TensorProto, equal to it element for
    element and in dtype. The types numpy holds natively are read here; the low-precision
    ones (``ml_dtypes``), external data and big-endian hosts by onnx itself.

    Raises:
        ValueError / TypeError: the data does not fit the dims and type (numpy's messages).
    """
    entry = _NATIVE.get(t.data_type)
    uses_external = t.data_location == TensorProto.EXTERNAL
    if t.data_type == TensorProto.STRING and not uses_external and not t.HasField("segment"):
        return np.asarray([s.decode("utf-8") for s in t.string_data]).astype(object).reshape(tuple(t.dims))
    if entry is None or uses_external or t.HasField("segment") or sys.byteorder != "little":
        from onnx import numpy_helper
        return numpy_helper.to_array(t)
    dtype, field = entry
    dims = tuple(t.dims)
    if t.HasField("raw_data"):
        return np.frombuffer(t.raw_data, dtype=dtype).reshape(dims)
    bits = _BITS_IN_INT32.get(t.data_type)
    if bits is not None:
        return np.array(t.int32_data, dtype=np.int32).view(np.uint32).astype(bits).reshape(dims).view(dtype)
    storage = _STORAGE[field]
    if dtype.kind == "c":
        return np.array(getattr(t, field), dtype=storage).view(dtype).reshape(dims)
    return np.asarray(getattr(t, field), dtype=storage).astype(dtype).reshape(dims)


#: the numpy dtype of each TensorProto data field's elements
_STORAGE = {"float_data": np.float32, "int32_data": np.int32, "int64_data": np.int64, "double_data": np.float64,
            "uint64_data": np.uint64}
