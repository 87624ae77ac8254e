"""Element types: ONNX ``TensorProto`` data types and their numpy dtypes.

bfloat16, the float8/float6/float4 variants and int4/uint4/int2/uint2 are the
``ml_dtypes`` types (through ``onnx.helper.tensor_dtype_to_np_dtype``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from onnx import TensorProto, helper

__all__ = [
    "np_dtype",
    "onnx_type",
    "type_string",
    "is_float",
    "is_integer",
    "ELEM_TYPE_NAMES",
]

#: ONNX elem type → the name used in ``"tensor(<name>)"`` type strings (ORT's spelling).
ELEM_TYPE_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "float",
    TensorProto.UINT8: "uint8",
    TensorProto.INT8: "int8",
    TensorProto.UINT16: "uint16",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "double",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
    TensorProto.FLOAT8E4M3FNUZ: "float8e4m3fnuz",
    TensorProto.FLOAT8E5M2: "float8e5m2",
    TensorProto.FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    TensorProto.UINT4: "uint4",
    TensorProto.INT4: "int4",
    TensorProto.FLOAT4E2M1: "float4e2m1",
}
for _name in ("FLOAT8E8M0", "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2"):
    if hasattr(TensorProto, _name):
        ELEM_TYPE_NAMES[getattr(TensorProto, _name)] = _name.lower()


@lru_cache(maxsize=None)
def np_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX elem type (``TensorProto.FLOAT`` → ``float32``).

    Raises:
        TypeError: ``elem_type`` is UNDEFINED or unknown to this onnx version.
    """
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception as exc:  # onnx raises KeyError/ValueError depending on version
        raise TypeError(f"unsupported ONNX element type {elem_type}") from exc


@lru_cache(maxsize=None)
def onnx_type(dtype: np.dtype | type) -> int:
    """The ONNX elem type of a numpy dtype (``float32`` → ``TensorProto.FLOAT``).

    Raises:
        TypeError: the dtype has no ONNX counterpart.
    """
    dt = np.dtype(dtype)
    if dt.kind in "OUS":
        return TensorProto.STRING
    try:
        return int(helper.np_dtype_to_tensor_dtype(dt))
    except Exception as exc:
        raise TypeError(f"numpy dtype {dt} has no ONNX element type") from exc


def type_string(elem_type: int) -> str:
    """ORT-style type string, e.g. ``"tensor(float)"``."""
    return f"tensor({ELEM_TYPE_NAMES.get(elem_type, str(elem_type))})"


def is_float(dtype: np.dtype) -> bool:
    """True for every floating type, the ml_dtypes ones (bfloat16, float8, float4) included."""
    dt = np.dtype(dtype)
    return dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)


def is_integer(dtype: np.dtype) -> bool:
    """True for signed and unsigned integers, int4/uint4/int2/uint2 included."""
    dt = np.dtype(dtype)
    return dt.kind in "iu" or (dt.kind == "V" and "int" in dt.name)
