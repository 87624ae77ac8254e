"""Import keeps each input dim's kind; initializers are not inputs; opsets are read per domain."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.model import FIXED, SYMBOLIC, UNKNOWN, load_model


def _model(dims, extra_inputs=(), inits=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x, *extra_inputs], [y], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 3)])


def test_dim_kinds_fixed_symbolic_unknown_are_kept():
    m = _model(["batch", 2, None])
    vi = load_model(m).graph.inputs[0]
    assert [(d.kind, d.value) for d in vi.dims] == [(SYMBOLIC, "batch"), (FIXED, 2), (UNKNOWN, None)]


def test_get_inputs_shows_symbols_ints_and_none():
    sess = dynashape.InferenceSession(_model(["batch", 2, None]))
    (arg,) = sess.get_inputs()
    assert (arg.name, arg.shape, arg.type) == ("x", ["batch", 2, None], "tensor(float)")


def test_initializer_listed_as_graph_input_is_not_a_model_input():
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])
    m = _model([2], extra_inputs=[w], inits=[numpy_helper.from_array(np.ones(2, np.float32), "w")])
    assert [i.name for i in dynashape.InferenceSession(m).get_inputs()] == ["x"]


def test_opsets_are_read_per_domain():
    assert load_model(_model([1])).opsets == {"": 17, "com.example": 3}


def test_load_from_path_bytes_and_proto_agree(tmp_path):
    m = _model(["n"])
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    x = np.arange(3, dtype=np.float32)
    for source in (m, m.SerializeToString(), str(p), p):
        (y,) = dynashape.InferenceSession(source).run(None, {"x": x})
        np.testing.assert_array_equal(y, x)


def test_missing_file_and_garbage_bytes_raise_model_load_error(tmp_path):
    with pytest.raises(dynashape.ModelLoadError, match="does not exist"):
        dynashape.InferenceSession(str(tmp_path / "nope.onnx"))
    with pytest.raises(dynashape.ModelLoadError):
        dynashape.InferenceSession(b"not a model")


def test_unsupported_op_names_op_domain_opset_and_registered_versions():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.acme")], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 2)])
    with pytest.raises(dynashape.UnsupportedOperatorError, match=r"NoSuchOp.*com\.acme.*opset 2.*none"):
        dynashape.InferenceSession(m)


def test_op_registered_only_for_later_opsets_lists_its_versions():
    # Shape exists since opset 1; LayerNormalization only since 17
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("LayerNormalization", ["x", "s"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.ones(3, np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(NotImplementedError, match=r"LayerNormalization.*opset 13.*17"):
        dynashape.InferenceSession(m)
