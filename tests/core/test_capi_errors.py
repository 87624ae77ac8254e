"""``dynashape.capi``: onnxruntime's binding modules, and dynashape raising onnxruntime's status
exceptions (``Fail``, ``InvalidArgument``, ``NoSuchFile``, ...) where onnxruntime raises them,
each also the dynashape error (and builtin exception) it was before."""
from __future__ import annotations

import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import dynashape
from dynashape import environment, errors
from dynashape.capi import _pybind_state as C
from dynashape.capi import onnxruntime_pybind11_state as state

STATUS_NAMES = ("Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException",
                "InvalidProtobuf", "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail", "ModelLoadCanceled",
                "ModelRequiresCompilation", "NotFound", "DeviceReset")


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _vi(name: str, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _raised(fn, *args):
    """The exception ``fn(*args)`` raises (pytest.fail when none)."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - what was raised is the subject
        return exc
    pytest.fail("no exception raised")


def test_capi_exports_every_status_exception_of_onnxruntime_as_a_dynashape_error():
    theirs = {n for n in dir(ort_state) if isinstance(getattr(ort_state, n), type)
              and issubclass(getattr(ort_state, n), BaseException)}
    assert theirs <= set(STATUS_NAMES)
    for name in STATUS_NAMES:
        cls = getattr(state, name)
        assert cls is getattr(C, name) is errors.ORT_STATUS_ERRORS[name]
        assert issubclass(cls, dynashape.DynashapeError) and issubclass(cls, errors.OrtStatusError)
        assert not issubclass(cls, RuntimeError)     # onnxruntime's derive from Exception only


def test_capi_names_the_tests_and_helpers_import_resolve():
    for name in ("OrtValue", "OrtValueVector", "SessionIOBinding", "OrtDevice", "RunOptions", "SessionOptions",
                 "SparseTensor", "OrtSparseFormat", "OrtMemoryInfo", "OrtArenaCfg", "get_available_providers",
                 "get_all_providers", "get_device", "get_default_session_options", "InferenceSession", "NodeArg",
                 "ModelMetadata", "LoraAdapter", "AdapterFormat", "is_dlpack_uint8_tensor", "set_seed"):
        assert getattr(C, name) is getattr(state, name), name
    assert C.InferenceSession is dynashape.InferenceSession and C.OrtValue is dynashape.OrtValue
    assert C.get_available_providers() == ["CPUExecutionProvider"]
    with pytest.raises(AttributeError):
        C.NoSuchThing  # noqa: B018


def test_existing_error_classes_keep_their_bases_and_gain_onnxruntimes():
    expected = {
        errors.ModelLoadError: (ValueError, errors.Fail),
        errors.InvalidModelError: (errors.ModelLoadError, errors.InvalidGraph),
        errors.UndefinedValueError: (errors.InvalidModelError, errors.InvalidArgument),
        errors.InvalidAttributeError: (TypeError, errors.InvalidGraph),
        errors.InvalidFeedError: (ValueError, errors.InvalidArgument),
        errors.InputNameError: (KeyError, ValueError, errors.InvalidArgument),
        errors.InputDtypeMismatch: (TypeError, errors.InvalidArgument),
        errors.ShapeInferenceError: (ValueError, errors.Fail),
        errors.UnsupportedOperatorError: (NotImplementedError, errors.NotImplemented, errors.InvalidGraph),
        errors.ExecutionError: (RuntimeError, errors.Fail),
        errors.ResourceLimitError: (MemoryError, errors.Fail),
        errors.RunTerminated: (RuntimeError, errors.Fail),
        errors.MemoryPlanError: (RuntimeError, errors.EngineError),
        errors.InvalidArgumentError: (ValueError, errors.InvalidArgument),
        errors.PluginError: (RuntimeError, errors.Fail),
    }
    for cls, bases in expected.items():
        assert issubclass(cls, dynashape.DynashapeError), cls
        for base in bases:
            assert issubclass(cls, base), (cls, base)


def test_model_load_failures_raise_the_status_onnxruntime_raises(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x01\x02garbage")
    x, y = _vi("X", shape=[2]), _vi("Y", shape=[2])
    cases = {
        "missing file": str(tmp_path / "nope.onnx"),
        "garbage bytes": b"\x01\x02garbage",
        "garbage file": str(bad),
        "duplicate output": _model([helper.make_node("Relu", ["X"], ["Y"]), helper.make_node("Relu", ["X"], ["Y"])],
                                   [x], [y]),
        "undefined input": _model([helper.make_node("Relu", ["Q"], ["Y"])], [x], [y]),
        "unknown attribute": _model([helper.make_node("Relu", ["X"], ["Y"], foo=1)], [x], [y]),
        "unknown op": _model([helper.make_node("NoSuchOp", ["X"], ["Y"])], [x], [y]),
    }
    for what, source in cases.items():
        theirs = _raised(onnxruntime.InferenceSession, source)
        ours = _raised(dynashape.InferenceSession, source)
        assert isinstance(ours, getattr(state, type(theirs).__name__)), (what, type(theirs), type(ours))
        assert isinstance(ours, dynashape.ModelLoadError | dynashape.UnsupportedOperatorError), what
    missing = _raised(dynashape.InferenceSession, cases["missing file"])
    assert isinstance(missing, dynashape.ModelFileNotFoundError) and "does not exist" in str(missing)


def _mul_session(module):
    x = _vi("X", shape=[3, 2])
    w = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    return module.InferenceSession(_model([helper.make_node("Mul", ["X", "W"], ["Y"])], [x], [_vi("Y", shape=[3, 2])],
                                          [w]))


@pytest.mark.parametrize("feed, output, status", [
    ({"X": np.zeros((3, 2), np.float64)}, None, "InvalidArgument"),
    ({"X": np.zeros((3, 3), np.float32)}, None, "InvalidArgument"),
    ({"X": np.zeros((3,), np.float32)}, None, "InvalidArgument"),
    ({"X": np.zeros((3, 2), np.float32)}, ["Z"], "InvalidArgument"),
])
def test_bad_feeds_and_names_raise_invalid_argument_as_onnxruntime(feed, output, status):
    theirs = _raised(lambda: _mul_session(onnxruntime).run(output, feed))
    ours = _raised(lambda: _mul_session(dynashape).run(output, feed))
    assert type(theirs).__name__ == status
    assert isinstance(ours, getattr(state, status)) and isinstance(ours, dynashape.InvalidFeedError)


def test_a_missing_input_names_the_inputs_as_onnxruntime_and_dynashape_did():
    theirs = _raised(lambda: _mul_session(onnxruntime).run(None, {}))
    ours = _raised(lambda: _mul_session(dynashape).run(None, {}))
    assert isinstance(theirs, ValueError) and isinstance(ours, ValueError)
    assert str(theirs).rstrip(".") in str(ours)          # "Required inputs (['X']) are missing from input feed ([])"
    assert "missing input 'X'" in str(ours) and isinstance(ours, dynashape.InputNameError)


def test_failing_kernels_and_terminated_runs_raise_fail_as_onnxruntime():
    a, b = _vi("A"), _vi("B")
    model = _model([helper.make_node("MatMul", ["A", "B"], ["Y"])], [a, b], [_vi("Y")])
    feed = {"A": np.zeros((2, 3), np.float32), "B": np.zeros((4, 2), np.float32)}
    theirs = _raised(lambda: onnxruntime.InferenceSession(model).run(None, feed))
    ours = _raised(lambda: dynashape.InferenceSession(model).run(None, feed))
    assert type(theirs).__name__ == "Fail" and isinstance(ours, state.Fail)
    assert isinstance(ours, dynashape.ShapeInferenceError)
    for module in (onnxruntime, dynashape):
        ro = module.RunOptions()
        ro.terminate = True
        exc = _raised(_mul_session(module).run, None, {"X": np.ones((3, 2), np.float32)}, ro)
        assert type(exc).__name__ in ("Fail", "RunTerminated") and "terminate" in str(exc)
    assert isinstance(exc, state.Fail) and isinstance(exc, RuntimeError)


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")
def test_runtime_errors_of_onnxruntime_are_runtime_errors_and_value_errors_here():
    for module in (onnxruntime, dynashape):
        sess = _mul_session(module)
        with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
            sess.set_providers(["InvalidProvider"])
        with pytest.raises(RuntimeError, match="SessionOptions does not have configuration with key: K"):
            module.SessionOptions().get_session_config_entry("K")
        with pytest.raises(RuntimeError):
            module.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32), "cuda", 0)
    with pytest.raises(dynashape.UnknownProviderError) as info:
        _mul_session(dynashape).set_providers(["InvalidProvider"])
    assert isinstance(info.value, ValueError) and isinstance(info.value, state.InvalidArgument)
    with pytest.raises(dynashape.InvalidArgumentError, match="not set"):
        dynashape.SessionOptions().get_session_config_entry("K")
    with pytest.raises(dynashape.DeviceNotAvailableError, match="CPU only"):
        dynashape.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32), "cuda", 0)


def test_a_custom_op_library_raises_fail_and_not_implemented():
    with pytest.raises(state.Fail) as info:
        dynashape.SessionOptions().register_custom_ops_library("/nonexistent/libcustom.so")
    assert isinstance(info.value, NotImplementedError) and "plugins" in str(info.value)
    with pytest.raises(ort_state.Fail):
        onnxruntime.SessionOptions().register_custom_ops_library("/nonexistent/libcustom.so")


def test_a_second_global_thread_pool_raises_fail(monkeypatch):
    monkeypatch.setitem(environment._state, "pools", None)
    dynashape.set_global_thread_pool_sizes(2, 1)
    assert environment.global_thread_pool_sizes() == (2, 1)
    with pytest.raises(state.Fail, match="already been created"):
        dynashape.set_global_thread_pool_sizes(2, 1)
    with pytest.raises(dynashape.InvalidArgumentError, match="must be an int"):
        environment.set_seed("7")


@pytest.mark.parametrize("providers, options", [
    (None, None), (["a"], None), (["a", "b"], None), ([("a", {1: 2}), "b"], None), (["a", "b"], [{1: 2}, {}]),
    (["a", "b", "a"], [{"x": 1}, {}, {"y": 2}]), (["a", "zz"], None),
    (3, None), ([3], None), (["a"], 3), (["a"], ["not dict"]), (["a", "b"], [{1: 2}]), ([("a", {1: 2})], [{3: 4}]),
])
def test_provider_arguments_normalize_as_onnxruntimes(providers, options):
    from onnxruntime.capi.onnxruntime_inference_collection import check_and_normalize_provider_args as theirs

    from dynashape.capi.onnxruntime_inference_collection import check_and_normalize_provider_args as ours
    results = []
    for fn in (ours, theirs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                results.append((fn(providers, options, ["a", "b", "c"]), len(caught)))
            except ValueError:
                results.append(("ValueError", len(caught)))
    assert results[0] == results[1]
