"""onnxruntime's Python API on dynashape: a script written for onnxruntime runs with
``import dynashape as ort``; options, providers, metadata, overridable initializers, feed
conversion, run options and the profiler behave as onnxruntime's do."""
from __future__ import annotations

import os

import json
import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape.threads import BlasThreads

from ..conftest import shared_path

ORT_SCRIPT = """
so = ort.SessionOptions(); so.intra_op_num_threads = 1
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.enable_profiling = True
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
print(sess.get_providers(), sess.get_modelmeta().producer_name)
names = [o.name for o in sess.get_outputs()]
feeds = {i.name: np.ones([d if isinstance(d, int) else 4 for d in i.shape], np.int64)
         for i in sess.get_inputs()}
out = sess.run(names, feeds)
print(sess.end_profiling())
"""


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Each test sees the once-per-process warnings afresh."""
    monkeypatch.setattr("dynashape.options._warned", set())


def _embedding_model(ir_version: int = 8, override: bool = False):
    """ids [batch, seq] int64 -> Gather(table 5x3) -> MatMul(w 3x2) + bias; w listed as a graph
    input too when ``override`` (an overridable initializer)."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("MatMul", ["e", "w"], ["m"], name="project"),
             helper.make_node("Add", ["m", "bias"], ["y"], name="bias_add")]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])]
    if override:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 2]))
    graph = helper.make_graph(
        nodes, "embedding", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 2])],
        initializer=[helper.make_tensor("table", TensorProto.FLOAT, [5, 3], table.ravel()),
                     helper.make_tensor("w", TensorProto.FLOAT, [3, 2], w.ravel()),
                     helper.make_tensor("bias", TensorProto.FLOAT, [2], [0.5, -1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="dynashape-tests",
                              model_version=7, doc_string="a test model")
    model.ir_version = ir_version
    helper.set_model_props(model, {"author": "tests", "license": "Apache-2.0"})
    return model


def _run_script(module, path: str, capsys) -> tuple[str, dict]:
    scope = {"ort": module, "np": np, "path": path}
    exec(ORT_SCRIPT, scope)
    return capsys.readouterr().out, scope


def _check_script(path: str, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ours, got = _run_script(dynashape, path, capsys)
    theirs, want = _run_script(onnxruntime, path, capsys)
    assert ours.splitlines()[0] == theirs.splitlines()[0]
    assert len(got["out"]) == len(want["out"])
    for a, b in zip(got["out"], want["out"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    trace = json.loads((tmp_path / ours.splitlines()[1]).read_text())
    return trace


def test_the_onnxruntime_script_runs_unchanged(tmp_path, monkeypatch, capsys):
    path = tmp_path / "embedding.onnx"
    path.write_bytes(_embedding_model().SerializeToString())
    trace = _check_script(str(path), tmp_path, monkeypatch, capsys)
    ops = [e["args"]["op_name"] for e in trace if e["cat"] == "Node"]
    fused = os.environ.get("DYNASHAPE_OPTIMIZE", "1") != "0"   # MatMul + bias Add fused at session creation
    assert ops == (["Gather", "FusedMatMul"] if fused else ["Gather", "MatMul", "Add"])


def test_the_onnxruntime_script_runs_unchanged_on_bert_tiny(tmp_path, monkeypatch, capsys):
    trace = _check_script(str(shared_path("zoo", "bert_tiny.onnx")), tmp_path, monkeypatch, capsys)
    fused = os.environ.get("DYNASHAPE_OPTIMIZE", "1") != "0"
    want = {"Gather", "FusedMatMul", "FusedAttention"} if fused else {"Gather", "MatMul", "Softmax"}
    assert want <= {e["args"]["op_name"] for e in trace if e["cat"] == "Node"}


def test_profile_is_a_chrome_trace_of_runs_plans_and_nodes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    so = dynashape.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = "emb_"
    sess = dynashape.InferenceSession(_embedding_model(), so, optimize=False)   # one event per model node
    assert sess.get_profiling_start_time_ns() > 0
    for shape in ((1, 2), (1, 2), (3, 4)):
        sess.run(None, {"ids": np.ones(shape, np.int64)})
    path = sess.end_profiling()
    assert path.startswith("emb_") and path.endswith(".json")
    sess.run(None, {"ids": np.ones((2, 2), np.int64)})            # no longer profiled
    assert sess.end_profiling() == ""
    events = json.loads((tmp_path / path).read_text())
    names = [e["name"] for e in events if e["cat"] == "Session"]
    assert names.count("model_run") == 3 and names.count("plan") == 2
    assert names[0] == "session_initialization"
    nodes = [e for e in events if e["cat"] == "Node"]
    assert [e["name"] for e in nodes[:3]] == ["embed_kernel_time", "project_kernel_time", "bias_add_kernel_time"]
    assert len(nodes) == 9
    last = nodes[-3]
    assert last["args"]["input_type_shape"] == [{"float": [5, 3]}, {"int64": [3, 4]}]
    assert last["args"]["output_type_shape"] == [{"float": [3, 4, 3]}]
    assert last["args"]["output_size"] == str(3 * 4 * 3 * 4)
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    runs = [e for e in events if e["name"] == "model_run"]
    for node in nodes:          # every node lies inside a run
        assert any(r["ts"] <= node["ts"] and node["ts"] + node["dur"] <= r["ts"] + r["dur"] + 1 for r in runs)


def test_memory_options_choose_the_allocator_and_level_0_turns_folding_off():
    model = _embedding_model()
    assert dynashape.InferenceSession(model).allocator == "pool"
    for field in ("enable_cpu_mem_arena", "enable_mem_pattern"):
        so = dynashape.SessionOptions()
        setattr(so, field, False)
        assert dynashape.InferenceSession(model, so).allocator == "naive"
    assert dynashape.InferenceSession(model, dynashape.SessionOptions(), allocator="pool").allocator == "pool"
    # a Shape -> Cast chain folds at the default level, not at ORT_DISABLE_ALL; same values
    graph = helper.make_graph([helper.make_node("Shape", ["c"], ["s"]), helper.make_node("Cast", ["s"], ["f"], to=1),
                               helper.make_node("Add", ["x", "f"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
                              initializer=[helper.make_tensor("c", TensorProto.FLOAT, [2, 3], np.zeros(6))])
    folded = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = dynashape.SessionOptions()
    so.graph_optimization_level = dynashape.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain, optimized = dynashape.InferenceSession(folded, so), dynashape.InferenceSession(folded)
    assert plain.folded_nodes == 0 and optimized.folded_nodes == 2
    x = np.array([1.0, 2.0], np.float32)
    for sess in (plain, optimized):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [3.0, 5.0])


def test_intra_op_num_threads_limits_blas_during_a_run_and_restores_it():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    assert before, "numpy's BLAS is not visible to threadpoolctl: the limit would test nothing"
    limit = BlasThreads(1)
    limit.enter()
    limit.enter()                   # overlapping runs: the outer one restores
    inside = blas_threads()
    limit.leave()
    assert blas_threads() == inside
    limit.leave()
    assert inside == [1] * len(before) and blas_threads() == before
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 1
    sess = dynashape.InferenceSession(_embedding_model(), so)
    ref = dynashape.InferenceSession(_embedding_model())
    ids = np.array([[0, 4, 2]], np.int64)
    np.testing.assert_array_equal(sess.run(None, {"ids": ids})[0], ref.run(None, {"ids": ids})[0])
    assert blas_threads() == before
    so.intra_op_num_threads = -1
    with pytest.raises(dynashape.InvalidArgumentError, match="intra_op_num_threads"):
        dynashape.InferenceSession(_embedding_model(), so)


def test_unmapped_options_warn_once_and_config_entries_are_kept():
    so = dynashape.SessionOptions()
    so.enable_mem_reuse = False
    so.execution_mode = dynashape.ExecutionMode.ORT_PARALLEL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with pytest.warns(RuntimeWarning) as record:
        dynashape.InferenceSession(_embedding_model(), so)
    messages = " ".join(str(w.message) for w in record)
    assert "enable_mem_reuse" in messages and "ORT_PARALLEL" in messages
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dynashape.InferenceSession(_embedding_model(), so)      # once per process
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(dynashape.InvalidArgumentError, match="not set"):
        so.get_session_config_entry("missing.key")
    with pytest.raises(NotImplementedError, match="plugins"):
        so.register_custom_ops_library("libcustom.so")


def test_log_severity_3_silences_dim_param_hints():
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(1, np.float32)}     # n bound to 3 and 1: broadcast
    so = dynashape.SessionOptions()
    so.log_severity_level = 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = dynashape.InferenceSession(model, so).run(None, feeds)
    np.testing.assert_array_equal(y, [2.0, 2.0, 2.0])
    with pytest.warns(RuntimeWarning, match="dim_param 'n'"):
        dynashape.InferenceSession(model).run(None, feeds)


def test_providers_fall_back_to_the_cpu_and_keep_their_options():
    model = _embedding_model()
    with pytest.warns(RuntimeWarning, match="'CUDAExecutionProvider' is not in available provider names"):
        sess = dynashape.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    sess = dynashape.InferenceSession(model, providers=[("CPUExecutionProvider", {"arena_extend_strategy": 1})])
    assert sess.get_provider_options() == {"CPUExecutionProvider": {"arena_extend_strategy": "1"}}
    sess = dynashape.InferenceSession(model, None, ["CPUExecutionProvider"], [{"use_arena": True}])
    assert sess.get_provider_options() == {"CPUExecutionProvider": {"use_arena": "True"}}
    assert isinstance(sess.get_session_options(), dynashape.SessionOptions)
    assert dynashape.get_available_providers() == ["CPUExecutionProvider"] and dynashape.get_device() == "CPU"
    with pytest.raises(dynashape.InvalidArgumentError, match="list of provider names"):
        dynashape.InferenceSession(model, providers="CPUExecutionProvider")
    with pytest.raises(dynashape.InvalidArgumentError, match="2 entries for 1 providers"):
        dynashape.InferenceSession(model, providers=["CPUExecutionProvider"], provider_options=[{}, {}])
    with pytest.raises(dynashape.InvalidArgumentError, match="sess_options"):
        dynashape.InferenceSession(model, {"intra_op_num_threads": 1})
    with pytest.raises(TypeError, match="unexpected keyword argument 'allocater'"):
        dynashape.InferenceSession(model, allocater="naive")
    with pytest.warns(RuntimeWarning, match="disabled_optimizers"):
        dynashape.InferenceSession(model, disabled_optimizers=["ConstantFolding"])


def test_model_metadata_matches_onnxruntime():
    model = _embedding_model()
    ours = dynashape.InferenceSession(model).get_modelmeta()
    theirs = onnxruntime.InferenceSession(model.SerializeToString()).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                  "custom_metadata_map"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.custom_metadata_map == {"author": "tests", "license": "Apache-2.0"}


def test_feeding_an_overridable_initializer_overrides_it_as_onnxruntime_does():
    model = _embedding_model(override=True)
    sess = dynashape.InferenceSession(model)
    ref = onnxruntime.InferenceSession(model.SerializeToString())
    assert [(i.name, i.shape, i.type) for i in sess.get_overridable_initializers()] == [("w", [3, 2], "tensor(float)")]
    assert [i.name for i in sess.get_inputs()] == ["ids"]
    ids = np.array([[1, 3], [0, 4]], np.int64)
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    for feeds in ({"ids": ids}, {"ids": ids, "w": w}, {"ids": ids[:1], "w": -w}, {"ids": ids}):
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-6)
    with pytest.raises(dynashape.InputDtypeMismatch, match="input 'w'"):
        sess.run(None, {"ids": ids, "w": w.astype(np.float64)})
    assert dynashape.InferenceSession(_embedding_model()).get_overridable_initializers() == []


def test_lists_and_scalars_take_the_declared_dtype():
    sess = dynashape.InferenceSession(_embedding_model())
    (y,) = sess.run(None, {"ids": [[1, 2]]})
    np.testing.assert_array_equal(y, sess.run(None, {"ids": np.array([[1, 2]], np.int64)})[0])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    scale = dynashape.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    for x, s in (([1.0, 2.5], 2.0), ([1, 2], np.float64(3.0)), ((4,), np.int32(2))):
        (y,) = scale.run(None, {"x": x, "s": s})
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y, np.asarray(x, np.float32) * np.float32(s))


@pytest.mark.parametrize("value, error, words", [
    (None, dynashape.InvalidFeedError, "input 'ids': got None"),
    (object(), dynashape.InvalidFeedError, "input 'ids': cannot make a tensor(int64)"),
    ([[1.5, 2.0]], dynashape.InputDtypeMismatch, "input 'ids': expected tensor(int64)"),
    ([["a", "b"]], dynashape.InputDtypeMismatch, "input 'ids'"),
    ([[1], [2, 3]], dynashape.InvalidFeedError, "input 'ids': cannot make"),
    (np.ones((1, 2), np.int32), dynashape.InputDtypeMismatch, "input 'ids': expected tensor(int64)"),
])
def test_bad_feeds_name_the_input_and_leave_the_session_usable(value, error, words):
    sess = dynashape.InferenceSession(_embedding_model())
    with pytest.raises(error) as info:
        sess.run(None, {"ids": value})
    assert words in str(info.value)
    assert sess.run(None, {"ids": [[0]]})[0].shape == (1, 1, 2)


def test_run_options_terminate_and_config_entries():
    sess = dynashape.InferenceSession(_embedding_model())
    ro = dynashape.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    assert sess.run(None, {"ids": [[1]]}, ro)[0].shape == (1, 1, 2)
    ro.terminate = True
    with pytest.raises(dynashape.RunTerminated, match="terminate"):
        sess.run(None, {"ids": [[1]]}, ro)
    assert sess.stats.runs == 1
