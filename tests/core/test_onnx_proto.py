"""The ONNX messages without ``import onnx`` (:mod:`dynashape.onnx_proto`): the same
classes as onnx's, and tensors read as ``onnx.numpy_helper.to_array`` reads them."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dynashape import onnx_proto
from dynashape.dtypes import np_dtype, onnx_type

NATIVE = [TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16,
          TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE,
          TensorProto.UINT32, TensorProto.UINT64, TensorProto.COMPLEX64, TensorProto.COMPLEX128]


def test_the_messages_are_onnx_s_own_classes():
    assert onnx_proto.ModelProto is onnx.ModelProto
    assert onnx_proto.TensorProto is onnx.TensorProto
    assert onnx_proto.IR_VERSION == onnx.IR_VERSION
    assert onnx_proto.onnx_version() == onnx.__version__


def _values(elem: int) -> np.ndarray:
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    base = np.array([[0, 1, 3], [7, 100, 2]])
    if np.dtype(dtype) == np.bool_:
        return (base % 2).astype(bool)
    if np.dtype(dtype).kind == "c":
        return (base + 0.5j * base).astype(dtype)
    if np.dtype(dtype).kind == "f":
        return (base * -1.25).astype(dtype)
    return base.astype(dtype)


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_field"])
@pytest.mark.parametrize("elem", NATIVE, ids=[TensorProto.DataType.Name(e) for e in NATIVE])
def test_a_tensor_reads_as_numpy_helper_reads_it(elem, raw):
    t = numpy_helper.from_array(_values(elem), "t")
    if not raw:
        t = helper.make_tensor("t", elem, [2, 3], _values(elem).reshape(-1).tolist())
    want = numpy_helper.to_array(t)
    got = onnx_proto.to_array(t)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_strings_and_low_precision_types_read_as_numpy_helper_reads_them():
    s = helper.make_tensor("s", TensorProto.STRING, [2], [b"ab", "c\u00e9".encode()])
    assert onnx_proto.to_array(s).tolist() == ["ab", "c\u00e9"] and onnx_proto.to_array(s).dtype == object
    bf = helper.make_tensor("b", TensorProto.BFLOAT16, [3], [1.0, -2.5, 0.125])
    np.testing.assert_array_equal(onnx_proto.to_array(bf).astype(np.float32), [1.0, -2.5, 0.125])
    assert onnx_proto.to_array(bf).dtype == numpy_helper.to_array(bf).dtype


def test_data_that_does_not_fit_the_dims_raises():
    t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[2, 2], float_data=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        onnx_proto.to_array(t)


@pytest.mark.parametrize("elem", [e for e in TensorProto.DataType.values() if e != TensorProto.UNDEFINED])
def test_element_types_map_to_onnx_helper_s_dtypes(elem):
    want = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    assert np_dtype(elem) == want
    if want.kind != "O":
        assert onnx_type(want) == helper.np_dtype_to_tensor_dtype(want)


def test_an_unknown_element_type_is_a_type_error():
    with pytest.raises(TypeError, match="unsupported ONNX element type 0"):
        np_dtype(TensorProto.UNDEFINED)
    with pytest.raises(TypeError, match="no ONNX element type"):
        onnx_type(np.dtype("datetime64[s]"))
