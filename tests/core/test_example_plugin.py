"""The separately installed plugins_example package, found through its entry point,
runs com.microsoft GELU ops equal to ONNX Runtime's contrib kernels."""
from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest
from onnx import TensorProto, helper

import dynashape
from tests.conftest import ort_run

pytestmark = pytest.mark.skipif(
    not any(ep.name == "example" for ep in metadata.entry_points(group="dynashape")),
    reason="plugins_example is not installed (pip install ./plugins_example)")


def _model(op_type, with_bias):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])]
    names = ["x"]
    if with_bias:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [8]))
        names.append("b")
    g = helper.make_graph([helper.make_node(op_type, names, ["y"], domain="com.microsoft")], "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_entry_point_plugin_is_registered_under_its_name():
    assert dynashape.get_registry().resolve_op("com.microsoft", "FastGelu", 1).plugin == "example"


@pytest.mark.parametrize("op_type,with_bias", [("FastGelu", False), ("FastGelu", True), ("BiasGelu", True),
                                               ("Gelu", False)])
def test_plugin_op_matches_ort_contrib_kernel(op_type, with_bias):
    model = _model(op_type, with_bias)
    sess = dynashape.InferenceSession(model)
    rng = np.random.default_rng(0)
    for shape in ((1, 3, 8), (4, 7, 8)):
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        if with_bias:
            feeds["b"] = rng.standard_normal(8).astype(np.float32)
        (y,) = sess.run(None, feeds)
        (exp,) = ort_run(model, feeds)
        np.testing.assert_allclose(y, exp, rtol=1e-4, atol=1e-5)
