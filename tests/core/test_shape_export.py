"""``dynashape.shape_export.infer_shapes`` and ``dynashape infer-shapes``: every tensor of a
model gets its symbolic shape in value_info; onnx's checker and shape inference accept the
result, onnxruntime loads it, and the written dims are the real ones at two input shapes
(onnxruntime running the model with every tensor as an output)."""
from __future__ import annotations

import json

import dynashape
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from dynashape.cli import main
from dynashape.shape_export import infer_shapes
from dynashape.symbolic import evaluate, free_symbols
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.conftest import SHARED, load_shared_module, ort_session


def _hand_model() -> onnx.ModelProto:
    """Concat of a past and a new part (``past + sequence``), a Reshape from computed dims,
    a MatMul, and NonZero (a data-dependent count)."""
    w = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "w")
    minus_one = numpy_helper.from_array(np.array([-1], np.int64), "minus_one")
    nodes = [helper.make_node("Concat", ["past", "x"], ["total"], axis=1),
             helper.make_node("MatMul", ["total", "w"], ["proj"]),
             helper.make_node("Shape", ["proj"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch_dim"], axis=0),
             helper.make_node("Concat", ["batch_dim", "minus_one"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["proj", "flat_shape"], ["flat"]),
             helper.make_node("NonZero", ["flat"], ["where"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("past", T.FLOAT, ["batch", "past", 4]),
                                           helper.make_tensor_value_info("x", T.FLOAT, ["batch", "sequence", 4])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("where", T.INT64, None)], [w, minus_one, zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _shapes(model: onnx.ModelProto) -> dict:
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_param if d.dim_param else d.dim_value for d in dims]
    return out


def test_every_tensor_gets_its_symbolic_shape_and_onnx_accepts_the_model():
    written, report = infer_shapes(_hand_model())
    shapes = _shapes(onnx.load_from_string(written.SerializeToString()))
    assert shapes["total"] == ["batch", "past + sequence", 4]
    assert shapes["proj"] == ["batch", "past + sequence", 2]
    assert shapes["flat"] == shapes["y"] == ["batch", "past*2 + sequence*2"]
    assert shapes["where"][0] == 2 and shapes["where"][1].startswith("unk__")
    assert shapes["shape"] == [3] and shapes["flat_shape"] == [2]
    assert report.unknown == [] and report.data_dependent == 1
    model = onnx.load_from_string(written.SerializeToString())
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    _assert_real_shapes(written.SerializeToString(), [
        {"past": np.ones((2, 3, 4), np.float32), "x": np.ones((2, 5, 4), np.float32)},
        {"past": np.zeros((1, 0, 4), np.float32), "x": -np.ones((1, 1, 4), np.float32)}])


def _assert_real_shapes(model_bytes: bytes, feeds_list: list) -> None:
    """Every written shape, its symbols bound by the feeds' dims, equals the shape
    onnxruntime gives that tensor (data-dependent dims: only the rank)."""
    model = onnx.load_from_string(model_bytes)
    sess = dynashape.InferenceSession(model_bytes, optimize=False)
    sg, pg = sess.symbolic, sess.graph
    names = [vi.name for vi in model.graph.value_info
             if vi.type.HasField("tensor_type") and vi.name not in {o.name for o in model.graph.output}]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(vi for vi in model.graph.value_info if vi.name in names)
    ort = ort_session(probe.SerializeToString())
    for feeds in feeds_list:
        env = {sym: feeds[pg.names[slot]].shape[axis] for sym, (slot, axis) in sg.input_symbols.items()}
        got = dict(zip([o.name for o in ort.get_outputs()], ort.run(None, feeds)))
        for name in names + [o.name for o in model.graph.output if o.name in got]:
            shape = sg.shapes[pg.slot[name]] if sg.shapes[pg.slot[name]] is not None else \
                pg.constant_type(pg.slot[name])[0]
            real = got[name].shape
            assert len(shape) == len(real), (name, shape, real)
            for d, r in zip(shape, real):
                if isinstance(d, int) or not (free_symbols(d) & sg.fresh_symbols):
                    assert evaluate(d, env) == r, (name, shape, real, env)


def _zoo_keys() -> list:
    if not (SHARED / "zoo" / "zoo.json").exists():
        return []
    return sorted(json.loads((SHARED / "zoo" / "zoo.json").read_text()))


@pytest.mark.parametrize("key", _zoo_keys() or [pytest.param("zoo", marks=pytest.mark.skip("../shared absent"))])
def test_zoo_models_get_every_shape_and_the_real_ones_at_two_sizes(key):
    entry = json.loads((SHARED / "zoo" / "zoo.json").read_text())[key]
    path = SHARED / "zoo" / entry["file"]
    written, report = infer_shapes(str(path))
    assert report.unknown == [], report.unknown[:5]
    make = load_shared_module("zoo_make_inputs", "zoo", "make_inputs.py").make_inputs
    shapes = list(entry["shapes"])[:2]
    _assert_real_shapes(written.SerializeToString(), [make(str(path), shape=s) for s in shapes])


def _zoo2_keys() -> list:
    if not (SHARED / "zoo" / "zoo2" / "zoo2.json").exists():
        return []
    return sorted(json.loads((SHARED / "zoo" / "zoo2" / "zoo2.json").read_text()))


#: zoo2 models where a tensor's rank is not inferred, and why
RANK_NOT_INFERRED = {
    "seq_chunk_pool": "ConcatFromSequence of a sequence a Loop carries: the element rank the body gives is not "
                      "inferred at import (the body is compiled when the Loop first runs)",
}


def _zoo2_params() -> list:
    return [pytest.param(k, marks=[pytest.mark.xfail(strict=True, reason=RANK_NOT_INFERRED[k])]
                         if k in RANK_NOT_INFERRED else []) for k in _zoo2_keys()]


@pytest.mark.parametrize("key", _zoo2_params() or [pytest.param("zoo2", marks=pytest.mark.skip("../shared absent"))])
def test_zoo2_models_get_every_tensor_shape_and_load_in_onnxruntime(key, tmp_path):
    entry = json.loads((SHARED / "zoo" / "zoo2" / "zoo2.json").read_text())[key]
    path = SHARED / "zoo" / "zoo2" / entry["file"]
    out = tmp_path / "shapes.onnx"
    try:
        _, report = infer_shapes(str(path), out)
    except dynashape.UnsupportedOperatorError as exc:
        pytest.skip(f"not loadable here: {exc}")
    assert report.unknown == [], report.unknown[:5]
    if any((path.parent / f).exists() for f in (path.name + ".data", path.stem + ".onnx.data")):
        return   # (external data next to the model: the written model refers to it by a relative path)
    ort_session(str(out))


def test_the_command_writes_the_model_and_says_what_it_found(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "m.shapes.onnx"
    src.write_bytes(_hand_model().SerializeToString())
    result = CliRunner().invoke(main, ["infer-shapes", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (f"wrote {out}: 8 tensors with a shape, 8 symbolic dims, 1 data-dependent")
    assert _shapes(onnx.load(str(out)))["total"] == ["batch", "past + sequence", 4]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    result = CliRunner().invoke(main, ["infer-shapes", str(bad), "-o", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"Error: cannot load '{bad}'") and len(result.output.strip().splitlines()) == 1
