"""onnxruntime's Python API summary (docs/python/api_summary.rst: OrtValue, the five IOBinding
scenarios, get_device, datasets.get_example, InferenceSession / NodeArg / ModelMetadata /
RunOptions / SessionOptions, the backend functions), its calls made the same way on both
modules, with 'cpu' where the summary places data on 'cuda' (onnxruntime's CPU package refuses
'cuda' too, as dynashape does): every result dynashape gives equals onnxruntime's."""
from __future__ import annotations

import importlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ort = pytest.importorskip("onnxruntime")
X = np.array([[-1, 2], [3, -4], [5, 6]], np.float32)


def _relu_model(path, name_in: str, name_out: str) -> str:
    g = helper.make_graph([helper.make_node("Relu", [name_in], [name_out])], "g",
                          [helper.make_tensor_value_info(name_in, TensorProto.FLOAT, [3, 2])],
                          [helper.make_tensor_value_info(name_out, TensorProto.FLOAT, [3, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def _summary(rt, tmp_path) -> dict:
    """What each block of the summary yields with the module ``rt``."""
    out = {}
    xy = _relu_model(tmp_path / "xy.onnx", "X", "Y")
    value = rt.OrtValue.ortvalue_from_numpy(X, "cpu", 0)
    out["ortvalue"] = (value.device_name(), value.shape(), value.data_type(), value.is_tensor(),
                       np.array_equal(value.numpy(), X))
    out["run with an OrtValue"] = rt.InferenceSession(xy).run(["Y"], {"X": value})[0]
    path = _relu_model(tmp_path / "io.onnx", "input", "output")
    session = rt.InferenceSession(path)
    binding = session.io_binding()                 # 1: a CPU input, the output copied to the CPU
    binding.bind_cpu_input("input", X)
    binding.bind_output("output")
    session.run_with_iobinding(binding)
    out["scenario 1"] = binding.copy_outputs_to_cpu()[0]
    x_value = rt.OrtValue.ortvalue_from_numpy(X, "cpu", 0)

    def bind_input(b):
        b.bind_input(name="input", device_type=x_value.device_name(), device_id=0, element_type=np.float32,
                     shape=x_value.shape(), buffer_ptr=x_value.data_ptr())
    binding = session.io_binding()                 # 2: the input's memory bound by pointer
    bind_input(binding)
    binding.bind_output("output")
    session.run_with_iobinding(binding)
    out["scenario 2"] = binding.copy_outputs_to_cpu()[0]
    y_value = rt.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32, "cpu", 0)
    binding = session.io_binding()                 # 3: the output's memory bound by pointer too
    bind_input(binding)
    binding.bind_output(name="output", device_type=y_value.device_name(), device_id=0, element_type=np.float32,
                        shape=y_value.shape(), buffer_ptr=y_value.data_ptr())
    session.run_with_iobinding(binding)
    out["scenario 3"] = y_value.numpy().copy()
    binding = session.io_binding()                 # 4: the runtime allocates the output on a device
    bind_input(binding)
    binding.bind_output("output", "cpu")
    session.run_with_iobinding(binding)
    got = binding.get_outputs()[0]
    out["scenario 4"] = (type(got).__name__, got.numpy())
    y_value = rt.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32, "cpu", 0)
    binding = session.io_binding()                 # 5: OrtValues bound directly
    binding.bind_ortvalue_input("input", x_value)
    binding.bind_ortvalue_output("output", y_value)
    session.run_with_iobinding(binding)
    out["scenario 5"] = y_value.numpy().copy()
    out["get_device"] = rt.get_device()
    example = importlib.import_module(rt.__name__ + ".datasets").get_example("sigmoid.onnx")
    out["get_example"] = rt.InferenceSession(example).get_inputs()[0].name
    arg = session.get_inputs()[0]
    out["NodeArg"] = (arg.name, arg.shape, arg.type)
    out["ModelMetadata"] = type(session.get_modelmeta()).__name__
    options = rt.RunOptions()
    options.log_severity_level = 3
    out["RunOptions"] = session.run(None, {"input": X}, options)[0]
    so = rt.SessionOptions()
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    out["SessionOptions"] = rt.InferenceSession(path, so).run(None, {"input": X})[0]
    backend = importlib.import_module(rt.__name__ + ".backend")
    model = onnx.load(path)
    out["backend"] = (backend.is_compatible(model), backend.supports_device("CPU"), backend.prepare(model).run(X)[0],
                      backend.run(model, X)[0])
    with pytest.raises(RuntimeError):           # the summary's 'cuda': a CPU package refuses it
        rt.OrtValue.ortvalue_from_numpy(X, "cuda", 0)
    return out


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def test_the_api_summary_gives_onnxruntimes_results(tmp_path):
    want = _summary(ort, tmp_path / "ort")
    got = _summary(importlib.import_module("dynashape"), tmp_path / "dyn")
    assert got.keys() == want.keys()
    assert [k for k in want if not _same(got[k], want[k])] == []
    np.testing.assert_array_equal(got["scenario 1"], np.maximum(X, 0))


@pytest.fixture(autouse=True)
def _folders(tmp_path):
    (tmp_path / "ort").mkdir()
    (tmp_path / "dyn").mkdir()
