"""The command line: demo, run (dims by name, shapes per input, ORT comparison), inspect."""
from __future__ import annotations

import json
import re

import numpy as np
import onnx
from click.testing import CliRunner

from dynashape.cli import main
from dynashape.demo import build_demo_model
from tests.conftest import shared_path


def _invoke(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_demo_prints_five_matching_rows_per_allocator():
    code, out = _invoke("demo")
    assert code == 0, out
    rows = [line.split() for line in out.splitlines() if re.match(r"^(naive|pool)\s+\d", line)]
    assert [(r[0], int(r[1])) for r in rows] == [(a, b) for a in ("naive", "pool") for b in (1, 2, 8, 3, 1)]
    assert all(float(r[-2]) <= 1e-5 for r in rows)  # max abs diff column
    assert "all runs match ONNX Runtime" in out


def test_run_binds_dims_by_name_and_compares_with_ort(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)
    code, out = _invoke("run", str(path), "--dim", "batch=5", "--compare-ort", "--repeat", "3")
    assert code == 0, out
    assert "input  x: float32[5, 2, 3]" in out
    line = next(line for line in out.splitlines() if line.startswith("output y"))
    assert "float32[5, 6]" in line and float(line.split("max_abs_diff_vs_ort=")[1]) <= 1e-6


class _ScriptedClock:
    """``perf_counter`` whose start/stop pairs are ``durations_ms`` apart, one pair per run."""

    def __init__(self, durations_ms):
        self.durations, self.now, self.started = list(durations_ms), 0.0, False

    def perf_counter(self):
        if self.started:
            self.now += self.durations.pop(0) / 1e3
        self.started = not self.started
        return self.now


def test_run_reports_the_first_run_apart_from_the_steady_median(tmp_path, monkeypatch):
    """Two warm-up runs by default (the first, cold, reported alone), then the median of three."""
    from dynashape.cli import run as run_command
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)
    clock = _ScriptedClock([10.0, 5.0, 1.0, 4.0, 2.0])
    monkeypatch.setattr(run_command, "time", clock)
    code, out = _invoke("run", str(path), "--dim", "batch=2")
    assert code == 0, out
    assert clock.durations == []     # five runs: 2 warm-up + 3 timed
    assert "first run: 10.000 ms (cold: plans the shape, makes the kernels)" in out
    assert "median run time: 2.000 ms over 3 run(s) after 2 warm-up run(s)" in out
    clock = _ScriptedClock([10.0, 1.0, 4.0])
    monkeypatch.setattr(run_command, "time", clock)
    code, out = _invoke("run", str(path), "--dim", "batch=2", "--no-warmup")
    assert code == 0 and clock.durations == [], out
    assert "median run time: 4.000 ms over 3 run(s), the first (cold) run included" in out
    clock = _ScriptedClock([10.0, 1.0])
    monkeypatch.setattr(run_command, "time", clock)
    code, out = _invoke("run", str(path), "--dim", "batch=2", "--warmup", "1", "--repeat", "1")
    assert code == 0 and clock.durations == [], out
    assert "median run time: 1.000 ms over 1 run(s) after 1 warm-up run(s)" in out


def test_run_with_an_input_file(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)
    x = np.ones((2, 2, 3), np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out = _invoke("run", str(path), "--input", f"x={tmp_path / 'x.npy'}")
    assert code == 0, out
    # y = 1 + bias; checksum = 2 * (6 + sum(bias)) = 2 * (6 + 4.25)
    assert "checksum=20.5" in out


def test_run_with_arbitrary_dim_names_and_whole_shapes():
    det = shared_path("zoo", "thirdparty", "rapidocr-onnxruntime", "ch_PP-OCRv4_det_infer.onnx")
    code, out = _invoke("run", str(det), "--dim", "p2o.DynamicDimension.0=1", "--dim", "p2o.DynamicDimension.1=64",
                        "--dim", "p2o.DynamicDimension.2=96")
    assert code == 0, out
    assert "input  x: float32[1, 3, 64, 96]" in out and "float32[1, 1, 64, 96]" in out
    code, out = _invoke("run", str(det), "--shape", "x=1x3x32x64", "--compare-ort")
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.startswith("output"))
    assert "float32[1, 1, 32, 64]" in line and float(line.split("max_abs_diff_vs_ort=")[1]) < 1e-4


def test_run_reports_invalid_feeds_as_an_error(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)
    result = CliRunner().invoke(main, ["run", str(path), "--shape", "x=2x4x3"])
    assert result.exit_code != 0
    assert "axis 1: expected 2" in result.output


def test_inspect_json_lists_every_tensor_with_symbolic_shapes(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)
    code, out = _invoke("inspect", str(path), "--format", "json")
    assert code == 0
    report = json.loads(out)
    by_name = {t["name"]: t for t in report["tensors"]}
    assert by_name["y"] == {"name": "y", "dtype": "float32", "shape": ["batch", 6], "producer": "Add",
                            "plugin": "dynashape.ops_builtin", "data_dependent": False}
    assert by_name["target"]["shape"] == [2]
    assert report["summary"] == {"tensors": 8, "fully_symbolic": 8, "data_dependent": 0}


def test_inspect_table_ends_with_the_summary_line(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)
    code, out = _invoke("inspect", str(path))
    assert out.strip().splitlines()[-1] == "8 of 8 tensors fully symbolic, 0 data-dependent"


def test_run_saves_the_outputs_and_the_feeds_to_an_npz(tmp_path):
    import dynashape
    from dynashape.demo import BIAS
    path, saved = tmp_path / "demo.onnx", tmp_path / "out.npz"
    onnx.save(build_demo_model(), path)
    code, out = _invoke("run", str(path), "--dim", "batch=3", "-o", str(saved))
    assert code == 0, out
    assert f"saved 1 output(s) and 1 input(s) to {saved}" in out
    with np.load(saved) as z:
        assert sorted(z.files) == ["input.x", "y"]
        x, y = z["input.x"], z["y"]
    assert x.shape == (3, 2, 3) and y.shape == (3, 6)
    np.testing.assert_allclose(y, x.reshape(3, 6) + BIAS, rtol=1e-6)
    (again,) = dynashape.InferenceSession(str(path)).run(None, {"x": x})
    np.testing.assert_array_equal(y, again)


def test_a_shape_written_with_commas_is_refused_with_the_x_spelling(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_demo_model(), path)
    result = CliRunner().invoke(main, ["run", str(path), "--shape", "x=2,4"])
    assert result.exit_code == 2
    assert "'x=2,4': '2,4' is not a non-negative integer; write a shape's dims joined by x, as 2x4" in result.output


def test_demo_says_why_its_arena_is_empty():
    code, out = _invoke("demo")
    assert code == 0 and "arena bytes: the intermediate tensors of the plan (0 here" in out


def test_a_run_that_fails_on_random_values_says_which_inputs_were_random(tmp_path):
    """A model that reads a value from an input (a Reshape's target shape here, a sample
    rate or an If's condition in real models) fails on random values: the error names the
    random inputs and --input; with the real value given it runs."""
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([helper.make_node("Reshape", ["x", "k"], ["y"])], "g", [x, k], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "reshape.onnx"
    onnx.save(model, path)
    for command in ("run", "bench", "profile"):
        result = CliRunner().invoke(main, [command, str(path)] + (["-o", str(tmp_path / "t.json")]
                                                                  if command == "profile" else []))
        assert result.exit_code == 1 and "Traceback" not in result.output, (command, result.output)
        assert "(the values of x, k were random: a model that reads values from its inputs" in result.output
        assert "--input NAME=FILE.npy)" in result.output
    np.save(tmp_path / "k.npy", np.array([2, 3], np.int64))
    code, out = _invoke("run", str(path), "--input", f"k={tmp_path / 'k.npy'}")
    assert code == 0 and "output y: float32[2, 3]" in out


def test_inspect_shows_a_model_with_an_unregistered_op_and_flags_it(tmp_path):
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                               helper.make_node("FancyOp", ["r"], ["y"], domain="my.domain")], "g", [x], [y],
                              value_info=[r])
    path = tmp_path / "missing.onnx"
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    code, out = _invoke("inspect", str(path))
    assert code == 0, out
    rows = [line.split() for line in out.splitlines()[1:4]]
    assert rows == [["x", "float32", "[n,", "3]", "input"],
                    ["r", "float32", "[n,", "3]", "Relu", "dynashape.ops_builtin"],
                    ["y", "float32", "[n,", "3]", "FancyOp", "MISSING"]]
    assert out.splitlines()[-1] == ("3 tensors with their declared shapes: the model does not run here, no plugin "
                                    "registers my.domain::FancyOp (dynashape ops lists what does)")
    code, out = _invoke("inspect", str(path), "--format", "json")
    report = json.loads(out)
    assert report["summary"]["missing"] == ["my.domain::FancyOp"] and report["tensors"][2]["plugin"] == "MISSING"
    result = CliRunner().invoke(main, ["inspect", str(path), "--rewrites"])
    assert result.exit_code == 1 and "FancyOp" in result.output and "Traceback" not in result.output


def test_inspect_lists_the_tensors_of_if_branches_with_their_symbolic_shapes(tmp_path):
    from tests.core.test_cli_tools import _if_model
    path = tmp_path / "if.onnx"
    onnx.save(_if_model(), path)
    code, out = _invoke("inspect", str(path), "--format", "json")
    assert code == 0, out
    tensors = {t["name"]: (t["shape"], t["producer"]) for t in json.loads(out)["tensors"]}
    assert tensors == {"c": ([], "input"), "x": (["n"], "input"), "y": (None, "If"),
                       "If_0/then_branch/x": (["n"], "input"), "If_0/then_branch/t1": (["n"], "Add"),
                       "If_0/then_branch/t": (["n"], "Relu"), "If_0/else_branch/x": (["n"], "input"),
                       "If_0/else_branch/e": (["n"], "Neg")}


def test_inspect_program_prints_every_generated_function_with_the_branches_and_node_names(tmp_path):
    from tests.core.test_cli_tools import _if_model
    path = tmp_path / "if.onnx"
    onnx.save(_if_model(), path)
    code, out = _invoke("inspect", str(path), "--program")
    assert code == 0, out
    titles = [line[len("# --- "):] for line in out.splitlines() if line.startswith("# --- ")]
    per_program = ["binder", "segment 0: sig", "segment 0: run_plan", "segment 0: bind", "segment 0: run"]
    assert titles[:5] == per_program      # the main graph's, then each branch's (in the If's attribute order)
    assert sorted(titles[5:]) == sorted(f"If_0/{b}: {t}" for b in ("then_branch", "else_branch") for t in per_program)
    assert "# Relu 'ReluA'" in out and "# Neg 'NegB'" in out
    calls = [line for line in out.splitlines() if "= _k" in line]
    assert calls and all("  # " in line for line in calls)       # every kernel call names its node
    code, js = _invoke("inspect", str(path), "--program", "--format", "json")
    assert code == 0 and [f["function"] for f in json.loads(js)] == titles
