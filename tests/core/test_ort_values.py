"""OrtValue, SparseTensor, OrtDevice, the module functions and LoRA adapters: each call made on
dynashape and on onnxruntime with the same data, the results compared."""
from __future__ import annotations

import gc
import warnings

import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from tests.conftest import ort_predates
from dynashape import environment
from dynashape.capi import _pybind_state as C

DTYPES = (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64, np.bool_)

#: a test of onnxruntime's Python API as 1.32 has it (tox -e lowest runs an older onnxruntime)
ORT_1_32_API = pytest.mark.skipif(ort_predates((1, 32)), reason="onnxruntime's API before 1.32 differs here")


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _mul_model() -> bytes:
    """Y = X * W, X [3, 2] float."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    return _model([helper.make_node("Mul", ["X", "W"], ["Y"])],
                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])], [w])


def _sequence_model() -> bytes:
    """S = SequenceConstruct(A, B) of int64 tensors; N = SequenceLength(S)."""
    a, b = (helper.make_tensor_value_info(n, TensorProto.INT64, [2, "n"]) for n in "AB")
    s = helper.make_tensor_sequence_value_info("S", TensorProto.INT64, None)
    return _model([helper.make_node("SequenceConstruct", ["A", "B"], ["S"]),
                   helper.make_node("SequenceLength", ["S"], ["N"])],
                  [a, b], [s, helper.make_tensor_value_info("N", TensorProto.INT64, [])])


def _same_value(ours, theirs) -> None:
    assert ours.is_tensor() == theirs.is_tensor()
    assert ours.shape() == theirs.shape()
    assert ours.data_type() == theirs.data_type()
    assert ours.element_type() == theirs.element_type()
    assert ours.tensor_size_in_bytes() == theirs.tensor_size_in_bytes()
    assert ours.device_name() == theirs.device_name() == "cpu"
    assert ours.has_value() and theirs.has_value()
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours.numpy().dtype == theirs.numpy().dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_ortvalue_from_numpy_describes_the_array_as_onnxruntime_does(dtype):
    x = np.arange(12).reshape(3, 4).astype(dtype)
    _same_value(dynashape.OrtValue.ortvalue_from_numpy(x), onnxruntime.OrtValue.ortvalue_from_numpy(x))
    empty = np.zeros((0, 5), dtype)
    _same_value(dynashape.OrtValue.ortvalue_from_numpy(empty), onnxruntime.OrtValue.ortvalue_from_numpy(empty))


def test_a_cpu_ortvalue_shares_its_array_both_ways_as_onnxruntime():
    for module in (dynashape, onnxruntime):
        src = np.arange(6, dtype=np.float32).reshape(2, 3)
        v = module.OrtValue.ortvalue_from_numpy(src)
        assert v.data_ptr() == src.ctypes.data
        src[0, 0] = 55.0
        out = v.numpy()
        assert out[0, 0] == 55.0
        out[1, 1] = -1.0
        assert v.numpy()[1, 1] == -1.0 and src[1, 1] == -1.0
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]     # not contiguous: copied
    ours, theirs = dynashape.OrtValue.ortvalue_from_numpy(strided), onnxruntime.OrtValue.ortvalue_from_numpy(strided)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours.numpy().flags.c_contiguous and ours.data_ptr() != strided.ctypes.data


@pytest.mark.parametrize("element_type", [np.float32, np.int64, np.uint8, np.bool_, TensorProto.FLOAT,
                                          TensorProto.FLOAT16, TensorProto.INT32, TensorProto.DOUBLE])
def test_ortvalue_from_shape_and_type_takes_numpy_types_and_onnx_numbers(element_type):
    ours = dynashape.OrtValue.ortvalue_from_shape_and_type([2, 3], element_type)
    theirs = onnxruntime.OrtValue.ortvalue_from_shape_and_type([2, 3], element_type)
    assert (ours.shape(), ours.data_type(), ours.element_type(), ours.tensor_size_in_bytes()) == \
        (theirs.shape(), theirs.data_type(), theirs.element_type(), theirs.tensor_size_in_bytes())
    assert ours.numpy().dtype == theirs.numpy().dtype
    for module in (dynashape, onnxruntime):
        with pytest.raises(RuntimeError, match="99"):
            module.OrtValue.ortvalue_from_shape_and_type([2], 99)


def test_ortvalue_with_onnx_type_views_the_bytes_as_onnxruntime():
    data = np.array([1.5, -2.0, 3.25], np.float32)
    for onnx_type in (TensorProto.INT32, TensorProto.UINT32, TensorProto.FLOAT):
        ours = dynashape.OrtValue.ortvalue_from_numpy_with_onnx_type(data, onnx_type)
        theirs = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(data, onnx_type)
        assert ours.element_type() == theirs.element_type() == onnx_type
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    bf16 = np.array([0x3F80, 0x4000], np.uint16)          # 1.0 and 2.0 in bfloat16
    ours = dynashape.OrtValue.ortvalue_from_numpy_with_onnx_type(bf16, TensorProto.BFLOAT16)
    theirs = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(bf16, TensorProto.BFLOAT16)
    assert ours.data_type() == theirs.data_type() == "tensor(bfloat16)"
    np.testing.assert_array_equal(ours.numpy().astype(np.float32), [1.0, 2.0])   # (onnxruntime: no numpy type)
    for module in (dynashape, onnxruntime):
        with pytest.raises(RuntimeError, match="Items size in the incoming array: 4 specified by onnxtype: 2"):
            module.OrtValue.ortvalue_from_numpy_with_onnx_type(data, TensorProto.FLOAT16)


def test_non_arrays_are_refused_and_strings_and_bfloat16_are_kept_here():
    for module in (dynashape, onnxruntime):
        with pytest.raises(RuntimeError):
            module.OrtValue.ortvalue_from_numpy([1.0, 2.0])
    words = dynashape.OrtValue.ortvalue_from_numpy(np.array(["a", "bc"]))       # (onnxruntime 1.32 refuses)
    assert words.data_type() == "tensor(string)" and words.numpy().tolist() == ["a", "bc"]
    half = dynashape.OrtValue.ortvalue_from_numpy(np.ones(2, ml_dtypes.bfloat16))
    assert half.data_type() == "tensor(bfloat16)" and half.element_type() == TensorProto.BFLOAT16


def test_update_inplace_copies_into_the_same_memory_as_onnxruntime():
    x0 = np.zeros((2, 3), np.float32)
    for module in (dynashape, onnxruntime):
        v = module.OrtValue.ortvalue_from_numpy(x0.copy())
        ptr = v.data_ptr()
        v.update_inplace(np.arange(6, dtype=np.float32).reshape(3, 2))     # same element count, other shape
        assert v.data_ptr() == ptr and v.shape() == [2, 3]
        np.testing.assert_array_equal(v.numpy().ravel(), np.arange(6))
        with pytest.raises(RuntimeError, match="The input size of numpy arrays does not match the size"):
            v.update_inplace(np.ones(4, np.float32))
    v = dynashape.OrtValue.ortvalue_from_numpy(x0.copy())
    with pytest.raises(dynashape.OrtValueError, match="dtype float64 is not the OrtValue's float32"):
        v.update_inplace(np.ones(6, np.float64))        # (onnxruntime copies the bytes as they are)
    frozen = np.zeros(3, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(dynashape.OrtValueError, match="read-only"):
        dynashape.OrtValue.ortvalue_from_numpy(frozen).update_inplace(np.ones(3, np.float32))


def test_a_run_takes_ortvalue_feeds_and_run_with_ort_values_returns_ortvalues():
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    results = {}
    for module in (dynashape, onnxruntime):
        sess = module.InferenceSession(_mul_model())
        v = module.OrtValue.ortvalue_from_numpy(x)
        (y,) = sess.run(["Y"], {"X": v})
        outs = sess.run_with_ort_values(["Y"], {"X": v})
        assert len(outs) == 1 and isinstance(outs[0], module.OrtValue)
        np.testing.assert_array_equal(outs[0].numpy(), y)
        assert sess.run_with_ort_values(None, {"X": v})[0].shape() == [3, 2]
        vector = sess._sess.run_with_ort_values({"X": v._get_c_value()}, ["Y"], module.RunOptions())
        assert isinstance(vector, (C if module is dynashape else onnxruntime.capi._pybind_state).OrtValueVector)
        np.testing.assert_array_equal(vector[0].numpy(), y)
        with pytest.raises(ValueError, match=r"Required inputs \(\['X'\]\) are missing"):
            sess.run_with_ort_values(["Y"], {})
        with pytest.raises(Exception, match="Invalid output name|unknown output name"):
            sess.run_with_ort_values(["Z"], {"X": v})
        with pytest.raises(Exception, match="tensor\\(double\\)|float64"):
            sess.run(None, {"X": module.OrtValue.ortvalue_from_numpy(x.astype(np.float64))})
        results[module.__name__] = y
    np.testing.assert_array_equal(results["dynashape"], results["onnxruntime"])
    with pytest.raises(dynashape.InvalidFeedError, match="takes OrtValues"):
        dynashape.InferenceSession(_mul_model()).run_with_ort_values(["Y"], {"X": x})


def test_sequence_outputs_are_sequence_ortvalues_that_refuse_tensor_calls_as_onnxruntime():
    feeds = {"A": np.ones((2, 3), np.int64), "B": np.arange(6, dtype=np.int64).reshape(2, 3)}
    got = {}
    for module in (dynashape, onnxruntime):
        sess = module.InferenceSession(_sequence_model())
        seq, n = sess.run_with_ort_values(["S", "N"], {k: module.OrtValue.ortvalue_from_numpy(v)
                                                       for k, v in feeds.items()})
        assert (seq.is_tensor(), seq.is_tensor_sequence(), seq.has_value()) == (False, True, True)
        assert seq.data_type() == "seq(tensor(int64))" and seq.element_type() == TensorProto.INT64
        for call in (seq.numpy, seq.shape, seq.device_name, seq.tensor_size_in_bytes, seq.data_ptr):
            with pytest.raises(RuntimeError):
                call()
        got[module.__name__] = int(n.numpy())
        (length,) = module.InferenceSession(_model(
            [helper.make_node("SequenceLength", ["S"], ["N"])],
            [helper.make_tensor_sequence_value_info("S", TensorProto.INT64, None)],
            [helper.make_tensor_value_info("N", TensorProto.INT64, [])])).run(None, {"S": seq})
        assert int(length) == 2
    assert got["dynashape"] == got["onnxruntime"] == 2


@ORT_1_32_API
def test_dlpack_shares_the_memory_both_ways():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = dynashape.OrtValue.ortvalue_from_numpy(x)
    capsule = v._ortvalue.to_dlpack()
    assert not C.is_dlpack_uint8_tensor(capsule)
    back = C.OrtValue.from_dlpack(capsule, False)
    assert back.data_ptr() == v.data_ptr()
    np.testing.assert_array_equal(back.numpy(), x)
    assert v.__dlpack_device__() == (1, 0) == onnxruntime.OrtValue.ortvalue_from_numpy(x).__dlpack_device__()
    np.testing.assert_array_equal(np.from_dlpack(v), x)
    flags = np.array([1, 0, 1], np.uint8)
    cap = dynashape.OrtValue.ortvalue_from_numpy(flags).to_dlpack()
    assert C.is_dlpack_uint8_tensor(cap)
    as_bool = C.OrtValue.from_dlpack(cap, True)
    assert as_bool.numpy().dtype == np.bool_ and as_bool.numpy().tolist() == [True, False, True]


def _same_sparse(ours, theirs) -> None:
    assert ours.format().value == theirs.format().value
    assert ours.dense_shape() == list(theirs.dense_shape())
    assert ours.data_type() == theirs.data_type()
    assert ours.device_name() == theirs.device_name() == "cpu"
    np.testing.assert_array_equal(ours.values(), theirs.values())
    assert not ours.values().flags.writeable


def test_sparse_coo_tensors_match_onnxruntimes():
    values = np.array([1.0, 2.0, 3.0], np.float32)
    for indices in (np.array([3, 5, 15], np.int64), np.array([[0, 3], [0, 5], [1, 6]], np.int64)):
        ours = dynashape.SparseTensor.sparse_coo_from_numpy([9, 9], values, indices, dynashape.OrtDevice.make("cpu", 0))
        theirs = onnxruntime.SparseTensor.sparse_coo_from_numpy([9, 9], values, indices,
                                                                 onnxruntime.OrtDevice.make("cpu", 0))
        _same_sparse(ours, theirs)
        coo = ours.as_coo_view().indices()
        np.testing.assert_array_equal(coo, theirs.as_coo_view().indices())
        assert not coo.flags.writeable
        gc.collect()
        dense = np.zeros(81, np.float32)
        dense[[3, 5, 15]] = values
        np.testing.assert_array_equal(ours.to_dense(), dense.reshape(9, 9))
        wrapped = dynashape.OrtValue.ort_value_from_sparse_tensor(ours)
        assert wrapped.is_sparse_tensor() and not wrapped.is_tensor()
        assert wrapped.as_sparse_tensor() is ours and wrapped.data_type() == "sparse_tensor(float)"
        assert wrapped.shape() == [9, 9]
    words = dynashape.SparseTensor.sparse_coo_from_numpy([9, 9], np.array(["xyz", "yxz", "zyx"]),
                                                         np.array([3, 5, 15], np.int64),
                                                         dynashape.OrtDevice.make("cpu", 0))
    assert words.data_type() == "sparse_tensor(string)" and words.values().tolist() == ["xyz", "yxz", "zyx"]
    with pytest.raises(dynashape.InvalidArgumentError, match="outside the dense shape"):
        dynashape.SparseTensor.sparse_coo_from_numpy([2, 2], values, np.array([0, 1, 4]),
                                                     dynashape.OrtDevice.make("cpu", 0))
    with pytest.raises(dynashape.InvalidArgumentError, match="2 linear indices for 3 values"):
        dynashape.SparseTensor.sparse_coo_from_numpy([9, 9], values, np.array([0, 1]),
                                                     dynashape.OrtDevice.make("cpu", 0))


def test_sparse_csr_tensors_match_onnxruntimes_and_cuda_copies_raise():
    values = np.array([1.0, 2.0, 3.0], np.float32)
    inner = np.array([1, 1, 1], np.int64)
    outer = np.array([0, 1, 2, 3, 3, 3, 3, 3, 3, 3], np.int64)
    ours = dynashape.SparseTensor.sparse_csr_from_numpy([9, 9], values, inner, outer,
                                                        dynashape.OrtDevice.make("cpu", 0))
    theirs = onnxruntime.SparseTensor.sparse_csr_from_numpy([9, 9], values, inner, outer,
                                                            onnxruntime.OrtDevice.make("cpu", 0))
    _same_sparse(ours, theirs)
    np.testing.assert_array_equal(ours.as_csrc_view().inner(), theirs.as_csrc_view().inner())
    np.testing.assert_array_equal(ours.as_csrc_view().outer(), theirs.as_csrc_view().outer())
    dense = np.zeros((9, 9), np.float32)
    dense[[0, 1, 2], 1] = values
    np.testing.assert_array_equal(ours.to_dense(), dense)
    with pytest.raises(dynashape.OrtValueError, match="not COO"):
        ours.as_coo_view()
    for module, tensor in ((dynashape, ours), (onnxruntime, theirs)):
        with pytest.raises(RuntimeError):
            tensor.to_cuda(module.OrtDevice.make("cuda", 0))
    with pytest.raises(dynashape.InvalidArgumentError, match="non-decreasing offsets"):
        dynashape.SparseTensor.sparse_csr_from_numpy([2, 2], values, inner, np.array([0, 2, 1]),
                                                     dynashape.OrtDevice.make("cpu", 0))


def test_a_sparse_constant_output_comes_back_as_a_sparse_tensor_equal_to_onnxruntimes():
    sparse = helper.make_sparse_tensor(helper.make_tensor("v", TensorProto.FLOAT, [3], [1.5, 0.25, 7.0]),
                                       helper.make_tensor("i", TensorProto.INT64, [3], [2, 3, 5]), [3, 3])
    out = helper.make_value_info("values", helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [3, 3]))
    model = _model([helper.make_node("Constant", [], ["values"], sparse_value=sparse)], [], [out], opset=12)
    (ours,) = dynashape.InferenceSession(model).run_with_ort_values(["values"], {})
    (theirs,) = onnxruntime.InferenceSession(model).run_with_ort_values(["values"], {})
    assert ours.is_sparse_tensor() and theirs.is_sparse_tensor()
    _same_sparse(ours.as_sparse_tensor(), theirs.as_sparse_tensor())
    np.testing.assert_array_equal(ours.as_sparse_tensor().as_coo_view().indices(),
                                  theirs.as_sparse_tensor().as_coo_view().indices())


@ORT_1_32_API
def test_devices_memory_infos_and_arena_configs_carry_onnxruntimes_numbers():
    for name in ("cpu", "cuda", "dml", "cann", "npu", "gpu", "webgpu"):
        ours, theirs = dynashape.OrtDevice.make(name, 1), onnxruntime.OrtDevice.make(name, 1)
        assert (ours.device_type(), ours.device_id(), ours.device_vendor_id(), ours.device_mem_type()) == \
            (theirs.device_type(), theirs.device_id(), theirs.device_vendor_id(), theirs.device_mem_type()), name
    T = onnxruntime.capi._pybind_state.OrtDevice
    for fn in ("cpu", "cuda", "dml", "fpga", "npu", "gpu", "webgpu", "cann", "default_memory"):
        assert getattr(C.OrtDevice, fn)() == getattr(T, fn)(), fn
    d = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
    assert (d.device_type(), d.mem_type(), d.vendor_id(), d.device_id()) == (0, 0, 0, 0)
    assert d == dynashape.OrtDevice.make("cpu", 0)._get_c_device() and d != dynashape.OrtDevice.make("cuda", 0)
    for module in (dynashape, onnxruntime):
        with pytest.raises(Exception, match="Unsupported device type: foo"):
            module.OrtDevice.make("foo", 0)
    ours = dynashape.OrtMemoryInfo("Cpu", dynashape.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                   dynashape.OrtMemType.DEFAULT)
    theirs = onnxruntime.OrtMemoryInfo("Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                       onnxruntime.OrtMemType.DEFAULT)
    for field in ("name", "device_id", "allocator_type", "mem_type", "device_mem_type", "device_vendor_id"):
        assert int(getattr(ours, field)) == int(getattr(theirs, field)) if field != "name" else ours.name == theirs.name
    for module in (dynashape, onnxruntime):
        with pytest.raises(RuntimeError, match="Specified device is not supported"):
            module.OrtMemoryInfo("Foo", module.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, module.OrtMemType.DEFAULT)
        module.OrtMemoryInfo("Cuda", module.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, module.OrtMemType.DEFAULT)
        module.create_and_register_allocator(
            module.OrtMemoryInfo("Cpu", module.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, module.OrtMemType.DEFAULT),
            None)
    cfg = {"max_mem": 16, "arena_extend_strategy": 1, "initial_chunk_size_bytes": 8, "max_dead_bytes_per_chunk": 4,
           "initial_growth_chunk_size_bytes": 2}
    for args in ((8, 0, 4, 2), (cfg,)):
        ours, theirs = dynashape.OrtArenaCfg(*args), onnxruntime.OrtArenaCfg(*args)
        for field in ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes", "max_dead_bytes_per_chunk",
                      "initial_growth_chunk_size_bytes", "max_power_of_two_extend_bytes"):
            assert getattr(ours, field) == getattr(theirs, field), field
    with pytest.raises(dynashape.InvalidArgumentError, match="Invalid OrtArenaCfg option: foo"):
        dynashape.OrtArenaCfg({"foo": 1})
    infos = dynashape.InferenceSession(_mul_model()).get_input_memory_infos()
    assert len(infos) == len(onnxruntime.InferenceSession(_mul_model()).get_input_memory_infos()) == 1
    assert infos[0].name == "Cpu" and infos[0].device_id == 0


@ORT_1_32_API
def test_module_functions_exist_and_the_default_severity_silences_warnings(monkeypatch):
    assert dynashape.get_version_string() == dynashape.__version__
    assert "Build Info" in dynashape.get_build_info()
    dynashape.disable_telemetry_events()
    dynashape.enable_telemetry_events()
    assert "CPU" in dynashape.get_device() and dynashape.get_all_providers()[-1] == "CPUExecutionProvider"
    assert set(onnxruntime.get_all_providers()) <= set(dynashape.get_all_providers())
    monkeypatch.setitem(environment._state, "seed", None)
    dynashape.set_seed(7)
    assert environment.global_seed() == 7
    dynashape.set_default_logger_verbosity(1)
    model = _model([helper.make_node("Add", ["a", "b"], ["y"])],
                   [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
                    helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(1, np.float32)}      # n bound to 3 and 1: a hint warns
    monkeypatch.setattr("dynashape.options._warned", set())
    monkeypatch.setitem(environment._state, "severity", 2)
    dynashape.set_default_logger_severity(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dynashape.InferenceSession(model).run(None, feeds)
    dynashape.set_default_logger_severity(2)
    with pytest.warns(RuntimeWarning, match="dim_param 'n'"):
        dynashape.InferenceSession(model).run(None, feeds)


def _lora_model() -> bytes:
    """y = x @ W + (x @ A) @ B with A [4, r], B [r, 4] overridable (empty by default)."""
    x = helper.make_tensor_value_info("input_x", TensorProto.FLOAT, [4, 4])
    a = helper.make_tensor_value_info("lora_a", TensorProto.FLOAT, [4, "r"])
    b = helper.make_tensor_value_info("lora_b", TensorProto.FLOAT, ["r", 4])
    inits = [numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "weight"),
             numpy_helper.from_array(np.zeros((4, 0), np.float32), "lora_a"),
             numpy_helper.from_array(np.zeros((0, 4), np.float32), "lora_b")]
    nodes = [helper.make_node("MatMul", ["input_x", "weight"], ["base"]),
             helper.make_node("MatMul", ["input_x", "lora_a"], ["low"]),
             helper.make_node("MatMul", ["low", "lora_b"], ["delta"]),
             helper.make_node("Add", ["base", "delta"], ["y"])]
    return _model(nodes, [x, a, b], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], inits)


def _ort_adapter(path: str):
    adapter = onnxruntime.LoraAdapter()
    adapter.Load(path)
    return adapter


def test_lora_adapter_files_round_trip_with_onnxruntime_and_feed_their_parameters(tmp_path):
    params = {"lora_a": np.arange(8, dtype=np.float32).reshape(4, 2) / 8,
              "lora_b": np.arange(8, dtype=np.float32).reshape(2, 4) - 3}
    for writer, reader in ((dynashape, onnxruntime), (onnxruntime, dynashape)):
        fmt = writer.AdapterFormat()
        fmt.set_adapter_version(3)
        fmt.set_model_version(5)
        fmt.set_parameters({k: writer.OrtValue.ortvalue_from_numpy(v) for k, v in params.items()})
        path = tmp_path / f"{writer.__name__}.onnx_adapter"
        fmt.export_adapter(str(path))
        back = reader.AdapterFormat.read_adapter(str(path))
        assert (back.get_adapter_version(), back.get_model_version()) == (3, 5)
        got = back.get_parameters()
        assert set(got) == set(params)
        for k, v in params.items():
            assert got[k].element_type() == writer.OrtValue.ortvalue_from_numpy(v).element_type()
            np.testing.assert_array_equal(got[k].numpy(), v)
    x = np.ones((4, 4), np.float32)
    extra = dynashape.AdapterFormat.read_adapter(str(tmp_path / "dynashape.onnx_adapter"))
    extra.set_parameters({**extra.get_parameters(), "extra": dynashape.OrtValue.ortvalue_from_numpy(np.arange(3))})
    extra.export_adapter(str(tmp_path / "extra.onnx_adapter"))
    outs = {}
    for module in (dynashape, onnxruntime):
        adapter = module.LoraAdapter()
        adapter.Load(str(tmp_path / "onnxruntime.onnx_adapter"))
        ro = module.RunOptions()
        ro.add_active_adapter(adapter)
        sess = module.InferenceSession(_lora_model())
        outs[module.__name__] = (sess.run(None, {"input_x": x}, ro)[0], sess.run(None, {"input_x": x})[0])
        unknown = module.RunOptions()
        held = _ort_adapter(str(tmp_path / "extra.onnx_adapter")) if module is onnxruntime else \
            dynashape.LoraAdapter.create_from_file(str(tmp_path / "extra.onnx_adapter"))
        unknown.add_active_adapter(held)      # (onnxruntime's RunOptions does not keep the adapter alive)
        with pytest.raises(ValueError if module is dynashape else Exception, match="extra"):
            sess.run(None, {"input_x": x}, unknown)     # a parameter the model lacks: an unknown input
    for ours, theirs in zip(*outs.values()):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert not np.allclose(outs["dynashape"][0], outs["dynashape"][1])
    bad = tmp_path / "bad.onnx_adapter"
    bad.write_bytes(b"\x0c\x00\x00\x00NOPE")
    with pytest.raises(dynashape.ModelParseError, match="TORT"):
        dynashape.LoraAdapter().Load(str(bad))
    with pytest.raises(dynashape.InvalidArgumentError, match="LoraAdapter"):
        dynashape.RunOptions().add_active_adapter(object())
