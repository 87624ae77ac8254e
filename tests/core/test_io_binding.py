"""I/O binding, ``run_with_iobinding`` and ``run_async``: the same bindings and runs made on
dynashape and on onnxruntime, the outputs and the memory they land in compared, every error
case checked for its class and message."""
from __future__ import annotations

import threading

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dynashape
from tests.conftest import ort_predates
from dynashape.capi import _pybind_state as C

X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _square_model() -> bytes:
    """Y = X * X, X [n, 2] float; Z = X + 1."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 2])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    return _model([helper.make_node("Mul", ["X", "X"], ["Y"]), helper.make_node("Add", ["X", "one"], ["Z"])], [x],
                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 2]),
                   helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["n", 2])], [one])


def _identity_model(elem: int) -> bytes:
    return _model([helper.make_node("Identity", ["X"], ["Y"])],
                  [helper.make_tensor_value_info("X", elem, [None, 2])],
                  [helper.make_tensor_value_info("Y", elem, [None, 2])])


MODULES = (dynashape, onnxruntime)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_a_bound_cpu_array_and_a_device_output_give_the_run_outputs(module):
    sess = module.InferenceSession(_square_model())
    binding = sess.io_binding()
    x = X.copy()
    binding.bind_cpu_input("X", x)
    binding.bind_output("Y")
    binding.bind_output("Z", "cpu", 0)
    binding.synchronize_inputs()
    sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    y, z = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(y, X * X)
    np.testing.assert_array_equal(z, X + 1)
    outs = binding.get_outputs()
    assert [o.device_name() for o in outs] == ["cpu", "cpu"] and isinstance(outs[0], module.OrtValue)
    assert isinstance(binding.get_outputs_as_ortvaluevector(),
                      (C if module is dynashape else onnxruntime.capi._pybind_state).OrtValueVector)
    x[0, 0] = 10.0          # the bound array itself is read by the next run
    sess.run_with_iobinding(binding)
    assert binding.copy_outputs_to_cpu()[0][0, 0] == 100.0


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_an_output_bound_to_a_device_keeps_its_memory_across_runs_of_one_shape(module):
    sess = module.InferenceSession(_square_model())
    binding = sess.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("Y")
    sess.run_with_iobinding(binding)
    first = binding.get_outputs()[0]
    ptr = first.data_ptr()
    binding.bind_cpu_input("X", 2 * X)
    sess.run_with_iobinding(binding)
    again = binding.get_outputs()[0]
    assert again.data_ptr() == ptr
    np.testing.assert_array_equal(first.numpy(), 4 * X * X)     # the first OrtValue sees the new run, as in ORT


def test_a_new_output_shape_gets_new_memory_here():
    sess = dynashape.InferenceSession(_square_model())
    binding = sess.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("Y")
    sess.run_with_iobinding(binding)
    first = binding.get_outputs()[0]
    binding.bind_cpu_input("X", np.ones((5, 2), np.float32))     # (onnxruntime raises: the bound {3,2} differs)
    sess.run_with_iobinding(binding)
    assert binding.get_outputs()[0].shape() == [5, 2] and first.shape() == [3, 2]
    np.testing.assert_array_equal(first.numpy(), X * X)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_pointer_bindings_read_and_write_the_callers_memory(module):
    sess = module.InferenceSession(_square_model())
    x = module.OrtValue.ortvalue_from_numpy(X.copy())
    y = module.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    z = np.zeros((3, 2), np.float32)
    binding = sess.io_binding()
    binding.bind_input("X", "cpu", 0, np.float32, [3, 2], x.data_ptr())
    binding.bind_output("Y", "cpu", 0, np.float32, [3, 2], y.data_ptr())
    binding.bind_output("Z", "cpu", 0, TensorProto.FLOAT, [3, 2], z.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(y.numpy(), X * X)
    np.testing.assert_array_equal(z, X + 1)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], X * X)
    x.update_inplace(2 * X)        # rewritten between runs: the binding reads it at the next run
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(y.numpy(), 4 * X * X)
    np.testing.assert_array_equal(z, 2 * X + 1)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_ortvalue_bindings_write_into_the_bound_value(module):
    sess = module.InferenceSession(_square_model())
    binding = sess.io_binding()
    out = module.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    binding.bind_ortvalue_input("X", module.OrtValue.ortvalue_from_numpy(X))
    binding.bind_ortvalue_output("Y", out)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out.numpy(), X * X)
    binding.bind_ortvalue_input("X", module.OrtValue.ortvalue_from_numpy(3 * X))
    sess.run_with_iobinding(binding, module.RunOptions())
    np.testing.assert_array_equal(out.numpy(), 9 * X * X)
    binding.clear_binding_outputs()
    assert binding.get_outputs() == []
    binding.clear_binding_inputs()
    binding.bind_output("Y")
    with pytest.raises(Exception, match="X"):       # the input is no longer bound
        sess.run_with_iobinding(binding)


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.UINT8,
                                  TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32,
                                  TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL, TensorProto.FLOAT16])
def test_the_binding_level_session_iobinding_takes_devices_and_onnx_types(elem):
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = np.arange(8).reshape(4, 2).astype(dtype)
    for module, cmod in ((dynashape, C), (onnxruntime, onnxruntime.capi._pybind_state)):
        sess = module.InferenceSession(_identity_model(elem))
        device = cmod.OrtDevice(cmod.OrtDevice.cpu(), cmod.OrtDevice.default_memory(), 0)
        value = cmod.OrtValue.ortvalue_from_numpy(x, device)
        bind = cmod.SessionIOBinding(sess._sess)
        bind.bind_ortvalue_input("X", value)
        bind.bind_output("Y", device)
        sess._sess.run_with_iobinding(bind, None)
        outs = bind.get_outputs()
        assert isinstance(outs, cmod.OrtValueVector)
        np.testing.assert_array_equal(outs[0].numpy(), x)
        target = module.OrtValue.ortvalue_from_shape_and_type(x.shape, elem)
        bind = cmod.SessionIOBinding(sess._sess)
        bind.bind_input("X", device, elem, x.shape, value.data_ptr())
        bind.bind_output("Y", device, elem, x.shape, target.data_ptr())
        sess._sess.run_with_iobinding(bind, None)
        np.testing.assert_array_equal(target.numpy(), x)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_binding_errors_are_runtime_errors_as_in_onnxruntime(module):
    if module is not dynashape and ort_predates((1, 32)):
        pytest.skip("onnxruntime's binding messages before 1.32 differ")
    sess = module.InferenceSession(_square_model())
    binding = sess.io_binding()
    with pytest.raises(RuntimeError, match="Failed to find NodeArg with name: Q"):
        binding.bind_cpu_input("Q", X)
    with pytest.raises(RuntimeError, match="Failed to find input name in the mapping: Q"):
        binding.bind_ortvalue_input("Q", module.OrtValue.ortvalue_from_numpy(X))
    with pytest.raises(RuntimeError):
        binding.bind_cpu_input("X", X.tolist())
    binding = sess.io_binding()       # (onnxruntime's binding is unusable after a failed bind)
    binding.bind_cpu_input("X", X)
    with pytest.raises(RuntimeError, match="At least one output should be requested"):
        sess.run_with_iobinding(binding)
    binding.bind_output("Q")                               # an unknown output: reported by the run
    with pytest.raises(RuntimeError, match="Q"):
        sess.run_with_iobinding(binding)
    binding.clear_binding_outputs()
    binding.bind_ortvalue_output("Y", module.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32))
    with pytest.raises(RuntimeError, match=r"output 'Y' .*has shape \{2,2\} but the computed output shape for "
                                           r"this run is \{3,2\}"):
        sess.run_with_iobinding(binding)
    binding.bind_ortvalue_output("Y", module.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float64))
    with pytest.raises(RuntimeError, match=r"Unexpected output data type. Actual: \(tensor\(double\)\)"):
        sess.run_with_iobinding(binding)
    binding.bind_output("Y")
    binding.bind_cpu_input("X", X.astype(np.float64))
    with pytest.raises(RuntimeError, match="tensor\\(double\\)"):
        sess.run_with_iobinding(binding)
    with pytest.raises(ValueError, match="`element_type` and `shape` are to be provided"):
        binding.bind_output("Y", "cpu", 0, np.float32, None, X.ctypes.data)
    with pytest.raises(RuntimeError):
        binding.bind_input("X", "cpu", 0, np.dtype("V4"), [3, 2], X.ctypes.data)


def test_a_failed_binding_run_keeps_the_sessions_error_as_its_cause_and_writes_nothing():
    sess = dynashape.InferenceSession(_square_model())
    binding = sess.io_binding()
    binding.bind_cpu_input("X", X.astype(np.float64))
    binding.bind_output("Y")
    with pytest.raises(dynashape.IOBindingError, match="Error in execution") as info:
        sess.run_with_iobinding(binding)
    assert isinstance(info.value.__cause__, dynashape.InputDtypeMismatch)
    assert binding.get_outputs() == []
    y = dynashape.OrtValue.ortvalue_from_numpy(np.full((3, 2), -1.0, np.float32))
    z = dynashape.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32)
    binding.bind_cpu_input("X", X)
    binding.bind_ortvalue_output("Y", y)
    binding.bind_ortvalue_output("Z", z)        # wrong shape: checked before Y is written
    with pytest.raises(dynashape.IOBindingError, match="output: Z"):
        sess.run_with_iobinding(binding)
    assert (y.numpy() == -1.0).all()
    with pytest.raises(dynashape.DeviceNotAvailableError, match="CPU only"):
        binding.bind_output("Y", "cuda", 0)
    with pytest.raises(dynashape.IOBindingError, match="another session"):
        dynashape.InferenceSession(_square_model()).run_with_iobinding(binding)


def test_run_async_calls_back_with_the_results_or_the_error_as_onnxruntime():
    results = {}
    for module in MODULES:
        sess = module.InferenceSession(_square_model())
        done = threading.Event()
        got: list = []

        def callback(res, data, err, got=got, done=done):
            got.append((res, data, err))
            done.set()

        sess.run_async(["Y"], {"X": X}, callback, "token")
        assert done.wait(10)
        res, data, err = got[0]
        assert data == "token" and err == "" and len(res) == 1
        results[module.__name__] = res[0]
        done.clear()
        got.clear()
        sess.run_async(["Y"], {"X": X.astype(np.float64)}, callback, 5)
        assert done.wait(10)
        res, data, err = got[0]
        assert res == [] and data == 5 and ("tensor(double)" in err or "float64" in err)
        with pytest.raises(ValueError, match=r"Required inputs \(\['X'\]\) are missing"):
            sess.run_async(["Y"], {}, callback, None)
    np.testing.assert_array_equal(results["dynashape"], results["onnxruntime"])
