"""``dynashape plan``: per-tensor table, JSON totals, both allocators, and the --plot PNG."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from dynashape.cli import main
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import shared_path


def _invoke(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def model_path(tmp_path):
    # x[batch, 16] -> Relu a -> MatMul b [batch, 32] -> Reshape v (view) -> Neg c (in place) -> Sum y
    w = numpy_helper.from_array(np.ones((16, 32), np.float32), "W")
    shape = numpy_helper.from_array(np.array([-1, 32], np.int64), "shape")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("MatMul", ["a", "W"], ["b"]),
             helper.make_node("Reshape", ["b", "shape"], ["v"]), helper.make_node("Neg", ["v"], ["c"]),
             helper.make_node("ReduceSum", ["c"], ["y"], keepdims=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [w, shape])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_plan_json_has_the_totals_and_every_tensor(model_path):
    code, out = _invoke("plan", model_path, "--dim", "batch=8", "--format", "json")
    assert code == 0, out
    report = json.loads(out)
    # a: 8*16*4 = 512 B; b: 8*32*4 = 1024 B (v its view, c in place over it); a dies at step 1
    assert report["arena_bytes"] == 1536 and report["lower_bound_bytes"] == 1536
    assert report["naive_bytes"] == 512 + 1024 + 1024
    assert report["planning_ms"] > 0 and report["ratio"] == 1.0
    kinds = {t["name"]: (t["kind"], t["bytes"], t["first"], t["last"], t["offset"]) for t in report["tensors"]}
    b_off = kinds["b"][4]
    assert kinds == {"a": ("own", 512, 0, 1, kinds["a"][4]), "b": ("own", 1024, 1, 2, b_off),
                     "v": ("view", 1024, 2, 3, b_off), "c": ("inplace", 1024, 3, 4, b_off)}
    assert report["unplanned"] == ["y"]


def test_plan_table_and_naive_allocator(model_path):
    code, out = _invoke("plan", model_path, "--shape", "x=2x16")
    assert code == 0, out
    assert "arena:       384 bytes" in out and "lower bound: 384 bytes" in out and "naive:       640 bytes" in out
    assert any(line.split()[:2] == ["c", "inplace"] for line in out.splitlines())
    code, out = _invoke("plan", model_path, "--shape", "x=2x16", "--allocator", "naive", "--format", "json")
    assert code == 0, out
    report = json.loads(out)
    assert report["allocator"] == "naive" and report["arena_bytes"] == report["naive_bytes"] == 128 + 256 + 256
    assert {t["kind"] for t in report["tensors"]} == {"own", "view"}


def test_plan_plot_writes_a_png(model_path, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    png = tmp_path / "plan.png"
    code, out = _invoke("plan", model_path, "--dim", "batch=4", "--plot", str(png))
    assert code == 0, out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(str(png))
    assert img.ndim == 3 and img.shape[0] >= 200 and img.shape[1] >= 400
    assert img[..., :3].std() > 0.01          # something was drawn


def test_plan_of_a_zoo_model(tmp_path):
    path = shared_path("zoo", "gpt2_tiny.onnx")
    png = tmp_path / "gpt2.png"
    code, out = _invoke("plan", str(path), "--dim", "batch=2", "--dim", "sequence=32", "--format", "json",
                        "--plot", str(png))
    assert code == 0, out
    report = json.loads(out)
    assert report["arena_bytes"] <= 1.05 * report["lower_bound_bytes"]
    assert 2 * report["arena_bytes"] <= report["naive_bytes"]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plan_reports_bad_dims(model_path):
    result = CliRunner().invoke(main, ["plan", model_path, "--dim", "batch"])
    assert result.exit_code != 0 and "NAME=VALUE" in result.output


@pytest.mark.parametrize("ext, magic", [("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml"), ("pdf", b"%PDF-")])
def test_plan_plot_format_follows_the_extension(model_path, tmp_path, ext, magic):
    pytest.importorskip("matplotlib")
    out_file = tmp_path / f"plan.{ext.upper() if ext == 'pdf' else ext}"
    code, out = _invoke("plan", model_path, "--dim", "batch=4", "--plot", str(out_file))
    assert code == 0, out
    data = out_file.read_bytes()
    assert data.startswith(magic)
    if ext == "svg":
        assert b"<svg" in data[:1000]


def _one_error_line(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return result.exit_code, errors[0]


def test_plan_plot_bad_extension_and_unwritable_path(model_path, tmp_path):
    pytest.importorskip("matplotlib")
    code, line = _one_error_line(["plan", model_path, "--dim", "batch=4", "--plot", str(tmp_path / "plan.jpg")])
    assert code == 2 and "'--plot'" in line and ".png, .svg or .pdf" in line and "plan.jpg" in line
    code, line = _one_error_line(["plan", model_path, "--dim", "batch=4", "--plot", str(tmp_path / "plan")])
    assert code == 2 and "'--plot'" in line
    code, line = _one_error_line(["plan", model_path, "--dim", "batch=4", "--plot", "/nonexistent/dir/p.png"])
    assert code == 1 and line.startswith("Error: cannot write the plot to /nonexistent/dir/p.png")
    assert list(tmp_path.glob("plan*")) == []


def _report(model_path, allocator="pool", batch=8):
    from dynashape.memreport import plan_report
    from dynashape.session import InferenceSession

    sess = InferenceSession(model_path, allocator=allocator, validate_memory=False)
    return plan_report(sess, sess.plan({"x": np.zeros((batch, 16), np.float32)}))


def test_plot_axis_legend_labels_and_title(model_path, tmp_path):
    pytest.importorskip("matplotlib")
    from dynashape.memreport import plot_plan, plot_title

    report = _report(model_path)
    title = plot_title(report, "m.onnx", {"x": [8, 16]})
    assert title == "m.onnx: pool plan for x[8, 16]\narena 1.50 KiB, lower bound 1.50 KiB, naive 2.50 KiB"
    fig = plot_plan(report, str(tmp_path / "p.svg"), title=title)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "arena offset (MiB)" and ax.get_xlabel() == "execution step"
    assert ax.get_title() == title
    # the y axis is in MiB, plain numbers without an offset / x1e-3 multiplier
    assert ax.get_ylim()[1] == pytest.approx(1.05 * 1536 / 2**20)
    assert ax.yaxis.get_offset_text().get_text() == ""
    assert all("e" not in t.get_text() for t in ax.get_yticklabels())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "tensor", "in place", "view", "arena 1.50 KiB", "lower bound 1.50 KiB"]
    # every non-view tensor is named on its rectangle (v, a view of b, is not)
    assert sorted(t.get_text() for t in ax.texts) == ["a", "b", "c"]


def test_plot_names_only_the_largest_and_legends_only_present_kinds(model_path, tmp_path):
    pytest.importorskip("matplotlib")
    from dynashape.memreport import largest_tensors, plot_plan

    report = _report(model_path, batch=4)
    # rectangles: a 256 B x 2 steps, b and c 512 B x 2 steps
    assert [t["name"] for t in largest_tensors(report, 2)] == ["b", "c"]
    fig = plot_plan(report, str(tmp_path / "p.png"), n_labels=2)
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["b", "c"]
    assert "pool plan for" not in fig.axes[0].get_title() and "arena 768 B" in fig.axes[0].get_title()
    naive = _report(model_path, allocator="naive", batch=4)
    fig = plot_plan(naive, str(tmp_path / "n.pdf"))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["tensor", "view"]
    assert ax.get_ylabel() == "MiB (one buffer per tensor)"
    assert (tmp_path / "n.pdf").read_bytes()[:5] == b"%PDF-"


def test_plan_plot_title_names_the_input_shapes(model_path, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import dynashape.memreport as memreport

    titles = []
    real = memreport.plot_plan
    monkeypatch.setattr(memreport, "plot_plan", lambda report, path, title=None: titles.append(title)
                        or real(report, path, title=title))
    code, out = _invoke("plan", model_path, "--shape", "x=3x16", "--plot", str(tmp_path / "p.png"))
    assert code == 0, out
    assert titles == ["m.onnx: pool plan for x[3, 16]\narena 576 B, lower bound 576 B, naive 960 B"]


def test_long_tensor_names_keep_their_distinct_ends(tmp_path):
    """Three LayerNorm outputs whose names share a long prefix stay three different rows."""
    from dynashape.memreport import short_name
    assert short_name("abc", 5) == "abc"
    assert short_name("/m/encoder/layer.10/output/LayerNorm_output_0", 24) == "...ut/LayerNorm_output_0"
    prefix = "/model/encoder/" + "very_long_block_name/" * 4
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node("Relu", ["x"], [prefix + "layer.1/LayerNorm_output_0"]),
             helper.make_node("Neg", [prefix + "layer.1/LayerNorm_output_0"], [prefix + "layer.2/LayerNorm_output_0"]),
             helper.make_node("Abs", [prefix + "layer.2/LayerNorm_output_0"], [prefix + "layer.3/LayerNorm_output_0"]),
             helper.make_node("Exp", [prefix + "layer.3/LayerNorm_output_0"], ["y"])]
    path = tmp_path / "long.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    result = CliRunner().invoke(main, ["plan", str(path), "--dim", "n=2"])
    assert result.exit_code == 0, result.output
    rows = [line.split()[0] for line in result.output.splitlines() if "LayerNorm_output_0" in line]
    assert len(rows) == len(set(rows)) == 3 and all(r.endswith(f"layer.{i}/LayerNorm_output_0")
                                                     for i, r in zip((1, 2, 3), rows))


def test_plan_says_what_is_written_at_run_time_and_what_is_planned_after_a_data_dependent_node(tmp_path):
    """The counts ``inspect`` gives (data-dependent tensors) and what ``plan`` leaves to run
    time agree: a NonZero's output and what follows it are planned when a run gets there."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["idx"]),
                               helper.make_node("Cast", ["idx"], ["y"], to=TensorProto.FLOAT),
                               helper.make_node("Neg", ["r"], ["z"])], "g", [x], [y, z])
    path = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    result = CliRunner().invoke(main, ["plan", str(path), "--dim", "n=5", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["later"] == ["idx", "y", "z"] and report["binding_ops"] == ["NonZero"]
    assert report["unplanned_kinds"] == {"data-dependent": 0, "graph output": 0, "kernel-made": 0}
    result = CliRunner().invoke(main, ["plan", str(path), "--dim", "n=5"])
    assert "; 3 more from the first data-dependent node on (NonZero), planned when a run gets there" in result.output
    inspect = json.loads(CliRunner().invoke(main, ["inspect", str(path), "--format", "json"]).output)
    assert sorted(t["name"] for t in inspect["tensors"] if t["data_dependent"]) == ["idx", "y"]
