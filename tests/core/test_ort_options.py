"""onnxruntime's session options that act: ``optimized_model_filepath``, free dimension
overrides, ``add_initializer`` / ``add_external_initializers``, options read from the model,
``set_providers`` and the global thread pools; and onnxruntime's ``backend`` / ``datasets``
modules. Each compared with onnxruntime running the same model with the same options."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from tests.conftest import ort_predates
from dynashape import environment
from dynashape.capi import _pybind_state as C
from dynashape.options import session_settings

#: a test of onnxruntime's Python API as 1.32 has it (tox -e lowest runs an older onnxruntime)
ORT_1_32_API = pytest.mark.skipif(ort_predates((1, 32)), reason="onnxruntime's API before 1.32 differs here")


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr("dynashape.options._warned", set())


def _model(nodes, inputs, outputs, inits=(), opset: int = 17, ir_version: int = 8) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _folding_model() -> onnx.ModelProto:
    """y = x @ (Transpose(w) * 2) + Constant: the weight arithmetic folds, the MatMul stays."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    big = numpy_helper.from_array(np.linspace(-1, 1, 96, dtype=np.float32).reshape(4, 24), "big")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]),
             helper.make_node("Mul", ["wt", "two"], ["w2"]),
             helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(np.ones(4, np.float32))),
             helper.make_node("MatMul", ["x", "w2"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["y"]),
             helper.make_node("MatMul", ["y", "big"], ["z"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 24])], [w, two, big])


def _reference(model: onnx.ModelProto, feeds: dict) -> list:
    return onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)


def test_the_optimized_model_is_valid_onnx_with_constants_folded_and_runs_the_same(tmp_path):
    model = _folding_model()
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    so = dynashape.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    dynashape.InferenceSession(model, so)
    written = onnx.load(so.optimized_model_filepath)
    onnx.checker.check_model(written, full_check=True)
    assert [n.op_type for n in written.graph.node] == ["MatMul", "Add", "MatMul"]
    assert sorted(t.name for t in written.graph.initializer) == ["bias", "big", "w2"]
    want = _reference(model, {"x": x})[0]
    np.testing.assert_allclose(_reference(written, {"x": x})[0], want, rtol=1e-5)
    np.testing.assert_allclose(dynashape.InferenceSession(so.optimized_model_filepath).run(None, {"x": x})[0], want,
                               rtol=1e-5)
    so.graph_optimization_level = dynashape.GraphOptimizationLevel.ORT_DISABLE_ALL
    dynashape.InferenceSession(model, so)                     # nothing folded: the model's own nodes
    assert len(onnx.load(so.optimized_model_filepath).graph.node) == len(model.graph.node)


def test_large_initializers_of_the_optimized_model_go_to_the_external_file(tmp_path):
    so = dynashape.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "sub" / "opt.onnx")
    os.makedirs(tmp_path / "sub")
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "100")
    dynashape.InferenceSession(_folding_model(), so)
    written = onnx.load(so.optimized_model_filepath, load_external_data=False)
    external = {t.name for t in written.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert external == {"big"}                                  # 384 bytes; w2 is 48, bias 16
    assert os.path.getsize(tmp_path / "sub" / "weights.bin") == 96 * 4
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(onnxruntime.InferenceSession(so.optimized_model_filepath).run(None, {"x": x})[0],
                               _reference(_folding_model(), {"x": x})[0], rtol=1e-5)
    again = dynashape.SessionOptions()          # the written model (external data) written again
    again.optimized_model_filepath = str(tmp_path / "opt2.onnx")
    again.add_session_config_entry("session.optimized_model_external_initializers_file_name", "w2.bin")
    again.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "10")
    dynashape.InferenceSession(so.optimized_model_filepath, again)
    os.remove(so.optimized_model_filepath)
    np.testing.assert_allclose(dynashape.InferenceSession(again.optimized_model_filepath).run(None, {"x": x})[0],
                               _reference(_folding_model(), {"x": x})[0], rtol=1e-5)
    bad = dynashape.SessionOptions()
    bad.optimized_model_filepath = str(tmp_path / "opt3.onnx")
    bad.add_session_config_entry("session.optimized_model_external_initializers_file_name", "../up.bin")
    with pytest.raises(dynashape.InvalidArgumentError, match="must be a file name"):
        dynashape.InferenceSession(_folding_model(), bad)


def test_an_ir3_model_is_written_as_ir4_and_stays_valid(tmp_path):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "W")
    model = _model([helper.make_node("Mul", ["X", "W"], ["Y"])],
                   [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
                   [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])], [w], opset=7, ir_version=3)
    so = dynashape.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    dynashape.InferenceSession(model.SerializeToString(), so)
    written = onnx.load(so.optimized_model_filepath)
    onnx.checker.check_model(written)
    assert written.ir_version == 4


def _free_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["Dim1", "Dim2", 5])
    for dim, mark in zip(x.type.tensor_type.shape.dim, ("DATA_BATCH", "DATA_CHANNEL", "")):
        dim.denotation = mark
    return _model([helper.make_node("Abs", ["x"], ["y"])], [x],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["Dim1", "Dim2", 5])])


@pytest.mark.parametrize("by_name, by_denotation", [
    ({"Dim1": 4, "Dim2": 6}, {}),
    ({}, {"DATA_BATCH": 3, "DATA_CHANNEL": 5}),
    ({"Dim1": 4}, {}),
    ({"Nope": 4}, {"NOPE": 2}),
    ({"Dim1": 2}, {"DATA_BATCH": 2}),
])
def test_free_dimension_overrides_pin_the_dims_as_onnxruntime(by_name, by_denotation):
    sessions = []
    for module in (dynashape, onnxruntime):
        so = module.SessionOptions()
        for k, v in by_name.items():
            so.add_free_dimension_override_by_name(k, v)
        for k, v in by_denotation.items():
            so.add_free_dimension_override_by_denotation(k, v)
        sessions.append(module.InferenceSession(_free_model().SerializeToString(), so))
    ours, theirs = sessions
    assert ours.get_inputs()[0].shape == theirs.get_inputs()[0].shape
    assert ours.get_outputs()[0].shape == theirs.get_outputs()[0].shape
    shape = [d if isinstance(d, int) else 2 for d in theirs.get_inputs()[0].shape]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(ours.run(None, {"x": x})[0], theirs.run(None, {"x": x})[0])


def test_a_feed_of_another_size_than_an_override_names_the_input_and_axis():
    ours, theirs = [], []
    for module, out in ((dynashape, ours), (onnxruntime, theirs)):
        so = module.SessionOptions()
        so.add_free_dimension_override_by_name("Dim1", 4)
        sess = module.InferenceSession(_free_model().SerializeToString(), so)
        with pytest.raises(Exception) as info:
            sess.run(None, {"x": np.ones((3, 2, 5), np.float32)})
        out.append(info.value)
    assert type(theirs[0]).__name__ == "InvalidArgument" and isinstance(ours[0], dynashape.InvalidFeedError)
    assert isinstance(ours[0], dynashape.InputFixedDimMismatch)
    assert isinstance(ours[0], C.InvalidArgument)
    assert "input 'x', axis 0: expected 4 (fixed dim), got 3" in str(ours[0])
    so = dynashape.SessionOptions()
    so.add_free_dimension_override_by_name("Dim1", 4)
    sess = dynashape.InferenceSession(_free_model(), so)
    assert sess.get_inferred_outputs()[0].shape == [4, "Dim2", 5]       # the compiled program computes with 4
    assert sess.run(None, {"x": np.ones((4, 7, 5), np.float32)})[0].shape == (4, 7, 5)
    with pytest.raises(dynashape.InvalidArgumentError, match="must be an int"):
        so.add_free_dimension_override_by_name("Dim1", "4")


def test_conflicting_overrides_raise_invalid_argument_as_onnxruntime():
    for module in (dynashape, onnxruntime):
        so = module.SessionOptions()
        so.add_free_dimension_override_by_denotation("DATA_BATCH", 3)
        so.add_free_dimension_override_by_name("Dim1", 4)
        with pytest.raises(Exception, match="Conflicting free dimension overrides") as info:
            module.InferenceSession(_free_model().SerializeToString(), so)
        assert type(info.value).__name__ in ("InvalidArgument", "InvalidArgumentError")


def _mul_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "W")
    return _model([helper.make_node("Mul", ["X", "W"], ["Y"])],
                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])], [w])


def test_add_initializer_replaces_the_models_initializer_as_onnxruntime():
    x = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    w = np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], np.float32)
    results = []
    for module in (dynashape, onnxruntime):
        so = module.SessionOptions()
        value = module.OrtValue.ortvalue_from_numpy(w)
        so.add_initializer("W", value)
        so.add_initializer("not_in_the_model", module.OrtValue.ortvalue_from_numpy(w))     # ignored
        sources = [_mul_model().SerializeToString()] + ([dynashape.model.load_model(_mul_model())]
                                                        if module is dynashape else [])
        for source in sources:         # (a dynashape Model too: its initializers are replaced in the session's copy)
            results.append(module.InferenceSession(source, so, providers=["CPUExecutionProvider"])
                           .run(None, {"X": x})[0])
        with pytest.raises(RuntimeError):
            so.add_initializer("W", w)                     # not an OrtValue
        with pytest.raises(RuntimeError, match="equal length"):
            so.add_external_initializers(["a", "b"], [value])
    for r in results:
        np.testing.assert_array_equal(r, x * w)
    assert w.flags.writeable      # the caller's array is left writable
    so = dynashape.SessionOptions()
    so.add_initializer("W", dynashape.OrtValue.ortvalue_from_numpy(np.ones((2, 2), np.float32)))
    with pytest.raises(dynashape.InvalidArgumentError, match=r"initializer 'W'.*shape \[2, 2\]"):
        dynashape.InferenceSession(_mul_model(), so)
    so = dynashape.SessionOptions()
    so.add_initializer("W", dynashape.OrtValue.ortvalue_from_numpy(np.ones((3, 2), np.float64)))
    with pytest.raises(dynashape.InvalidArgumentError, match="float64"):
        dynashape.InferenceSession(_mul_model().SerializeToString(), so)


def test_external_initializers_are_taken_from_the_options_and_their_file_is_not_read(tmp_path):
    pads = TensorProto(name="pads", data_type=TensorProto.INT64, dims=[4])
    pads.data_location = TensorProto.EXTERNAL
    pads.external_data.add(key="location", value="pads_not_on_disk.bin")
    model = _model([helper.make_node("Pad", ["X", "pads"], ["Y"])],
                   [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2]),
                    helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],      # (as onnxruntime's test)
                   [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [pads])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    x = np.array([[1.0, 2.0]], np.float32)
    with pytest.raises(dynashape.ExternalDataError):
        dynashape.InferenceSession(str(path))
    results = []
    for module in (dynashape, onnxruntime):
        so = module.SessionOptions()
        so.add_external_initializers(["pads"], [module.OrtValue.ortvalue_from_numpy(np.array([0, 1, 1, 0]))])
        results.append(module.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, {"X": x}))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[0][0].shape == (2, 3)


def _configured_model(config: str) -> bytes:
    model = _mul_model()
    helper.set_model_props(model, {"ort_config": config, "other": "x"})
    return model.SerializeToString()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_options_are_read_from_the_model_when_onnxruntime_would(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    config = ('{"session_options": {"inter_op_num_threads": 5, "intra_op_num_threads": 2, '
              '"graph_optimization_level": 99, "enable_profiling": 1}}')
    got = []
    for module in (dynashape, onnxruntime):
        so = module.SessionOptions()
        so.intra_op_num_threads = 7
        so.execution_mode = module.ExecutionMode.ORT_PARALLEL
        monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
        sess = module.InferenceSession(_configured_model(config), so)
        o = sess.get_session_options()
        got.append((o.inter_op_num_threads, o.intra_op_num_threads, int(o.execution_mode),
                    int(o.graph_optimization_level), o.enable_profiling, so.intra_op_num_threads))
        os.remove(sess.end_profiling())
        monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "0")
        assert module.InferenceSession(_configured_model(config), so).get_session_options().intra_op_num_threads == 7
    assert got[0] == got[1] == (5, 2, 0, 99, True, 7)
    so = dynashape.SessionOptions()
    so.add_session_config_entry("session.load_model_config_from_model", "1")
    assert dynashape.InferenceSession(_configured_model(config), so).get_session_options().enable_profiling
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    broken = _configured_model(config + "}")
    for module in (dynashape, onnxruntime):
        with pytest.raises(Exception, match="cannot be parsed"):
            module.InferenceSession(broken)
    with pytest.raises(dynashape.InvalidArgumentError, match="'log_id'"):
        dynashape.InferenceSession(_configured_model('{"session_options": {"log_id": 1}}'))


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")
@ORT_1_32_API
def test_set_providers_falls_back_for_known_providers_and_raises_for_unknown_ones():
    for module in (dynashape, onnxruntime):
        sess = module.InferenceSession(_mul_model().SerializeToString())
        with pytest.warns((RuntimeWarning, UserWarning)):
            sess.set_providers(["CUDAExecutionProvider"])
        assert sess.get_providers() == ["CPUExecutionProvider"]
        with pytest.raises(RuntimeError, match="Unknown Provider Type: NoSuchProvider"):
            sess.set_providers(["CPUExecutionProvider", "NoSuchProvider"])
    assert dynashape.get_all_providers() == onnxruntime.get_all_providers()


def test_the_global_thread_pool_sizes_sessions_without_their_own_threads(monkeypatch):
    monkeypatch.setitem(environment._state, "pools", None)
    so = dynashape.SessionOptions()
    so.use_per_session_threads = False
    with pytest.warns(RuntimeWarning, match="use_per_session_threads"):
        assert session_settings(so, None).blas_threads == 0
    dynashape.set_global_thread_pool_sizes(3, 1)
    assert session_settings(so, None).blas_threads == 3
    so.intra_op_num_threads = 1
    assert session_settings(so, None).blas_threads == 3
    with pytest.raises(RuntimeError, match="use_per_session_threads must be false when using a global thread pool"):
        dynashape.InferenceSession(_mul_model(), dynashape.SessionOptions())
    (y,) = dynashape.InferenceSession(_mul_model(), so).run(None, {"X": np.ones((3, 2), np.float32)})
    np.testing.assert_array_equal(y, np.arange(6, dtype=np.float32).reshape(3, 2))


def test_the_backend_runs_paths_bytes_and_protos_as_onnxruntimes_backend():
    from dynashape.backend import backend_rep
    from dynashape.backend.backend import OnnxRuntimeBackend

    import onnxruntime.backend as ort_backend
    x = np.ones((3, 2), np.float32)
    ir3 = _mul_model()
    ir3.ir_version = 3           # an initializer not listed as an input: the checker refuses IR 3
    rep = dynashape.backend.prepare(ir3.SerializeToString())
    assert isinstance(rep, backend_rep.OnnxRuntimeBackendRep)
    np.testing.assert_array_equal(rep.run(x)[0], ort_backend.prepare(ir3.SerializeToString()).run(x)[0])
    assert dynashape.backend.prepare(rep) is rep
    np.testing.assert_array_equal(OnnxRuntimeBackend.run_model(_mul_model(), x)[0], x * np.arange(6).reshape(3, 2))
    with pytest.raises(onnx.checker.ValidationError):
        dynashape.backend.prepare(ir3)
    with pytest.raises(dynashape.InvalidArgumentError, match="Incompatible device"):
        dynashape.backend.prepare(_mul_model(), "CUDA")


def test_datasets_examples_run_here_and_in_onnxruntime(tmp_path, monkeypatch):
    """The example models of onnxruntime's names, where no onnxruntime is installed: dynashape's
    own, valid ONNX that both runtimes run with the same values."""
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dynashape.datasets, "ONNXRUNTIME_DISTRIBUTIONS", ())
    x = np.linspace(-2, 2, 60, dtype=np.float32).reshape(3, 4, 5)
    path = dynashape.datasets.get_example("sigmoid.onnx")
    assert path == str(tmp_path / "examples" / "sigmoid.onnx")
    (y,) = dynashape.InferenceSession(path).run(None, {"x": x})
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x)), rtol=1e-6)
    (y,) = dynashape.InferenceSession(dynashape.datasets.get_example("mul_1.onnx")).run(
        None, {"X": np.ones((3, 2), np.float32)})
    np.testing.assert_array_equal(y, [[1, 2], [3, 4], [5, 6]])
    iris = np.array([[5.1, 3.5, 1.4, 0.2], [6.0, 2.7, 5.1, 1.6], [7.7, 3.0, 6.1, 2.3]], np.float32)
    path = dynashape.datasets.get_example("logreg_iris.onnx")
    onnx.checker.check_model(onnx.load(path))
    labels, probabilities = dynashape.InferenceSession(path).run(None, {"float_input": iris})
    ort_labels, ort_probabilities = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"float_input": iris})
    assert labels.tolist() == ort_labels.tolist() and labels[0] == 0 and labels[2] == 2
    for got, want in zip(probabilities, ort_probabilities):
        assert list(got) == list(want) == [0, 1, 2]
        np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-5, atol=1e-6)
        assert abs(sum(got.values()) - 1) < 1e-6
    with pytest.raises(FileNotFoundError, match="Unable to find example"):
        dynashape.datasets.get_example("nope.onnx")


def test_an_installed_onnxruntimes_examples_are_its_own_files():
    """With onnxruntime installed, get_example names its file (without importing it), and its
    logreg_iris.onnx (12 coefficients for 3 classes of 2 declared features: onnxruntime reads
    the first 6) gives onnxruntime's numbers, which its own backend test hard-codes."""
    import pathlib
    path = pathlib.Path(dynashape.datasets.get_example("logreg_iris.onnx"))
    assert path.parent.parts[-2:] == ("onnxruntime", "datasets")
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    with pytest.warns(RuntimeWarning, match="coefficients has 12 values for 3 class.es. of 2 features; the first 6"):
        labels, probabilities = dynashape.InferenceSession(str(path)).run(None, {"float_input": x})
    ort_labels, ort_probabilities = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"float_input": x})
    assert labels.tolist() == ort_labels.tolist() == [0, 0, 0]
    np.testing.assert_allclose(list(probabilities[0].values()), [0.950599730014801, 0.027834169566631317,
                                                                 0.02156602405011654], rtol=1e-6)
    for got, want in zip(probabilities, ort_probabilities):
        np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-5, atol=1e-7)
