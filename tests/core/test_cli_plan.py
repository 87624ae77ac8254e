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
