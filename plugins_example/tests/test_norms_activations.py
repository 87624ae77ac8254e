"""The example plugin's RMS / layer norms and activations against ONNX Runtime's CPU kernels.

SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization, LayerNormalization
(com.microsoft), QuickGelu, BiasAdd, BiasSplitGelu, FusedMatMul, and the priority-5 kernel
for ai.onnx Softmax. Every model is one node built with onnx.helper, run on ONE dynashape
session through several shapes (symbolic batch / sequence dims) and compared with
onnxruntime on the same feeds: float32 / float64 within rtol 1e-4, atol 1e-5; float16
within one float16 ulp (both sides round a float32 result once). Where onnxruntime has no
CPU kernel or no schema of that domain, the reference is named in the test:

* SimplifiedLayerNormalization and LayerNormalization: onnxruntime registers these contrib
  schemas in the default domain (ai.onnx version 1; LayerNormalization below opset 17), not
  in com.microsoft: the reference is the same node in that domain.
* BiasAdd and BiasSplitGelu: onnxruntime has CUDA kernels only: the reference is the same
  arithmetic as a graph of ONNX ops (Add; Split, Erf, Mul) run by onnxruntime.

Each op also goes once through ``dynashape.testing.check_op`` over random sizes. This is the
plugin's own test suite: it uses dynashape's public API, numpy, onnx, onnxruntime and pytest
only (``python -m pytest plugins_example/tests``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.testing import check_op

pytest.importorskip("dynashape_example")
ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
H = 16
#: (batch, seq) of the runs on one session: new shapes, a shorter and a longer sequence, a
#: repeated signature (its plan is reused)
BATCH_SEQ = ((2, 3), (1, 7), (4, 1), (2, 3))
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
        np.dtype(np.float64): TensorProto.DOUBLE}
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
#: an IR version every onnxruntime this suite supports loads (helper's default may be newer)
IR_VERSION = 8


def rand(rng, *shape, dtype=F32, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(dtype)


def one_node(op_type, inputs, outputs, attrs=None, *, domain=MS, initializers=(), onnx_opset=17, name="node",
             out_dtypes=None):
    """A one-node model. ``inputs``: (name, np dtype, dims) graph inputs, names (str) of
    ``initializers`` ((name, array) pairs) or None for an absent optional input; ``outputs``:
    names, "" for an absent optional output; ``out_dtypes``: {name: np dtype} (default the
    dtype of the first input)."""
    names, graph_inputs = [], []
    for item in inputs:
        if item is None:
            names.append("")
        elif isinstance(item, str):
            names.append(item)
        else:
            names.append(item[0])
            graph_inputs.append(helper.make_tensor_value_info(item[0], ELEM[np.dtype(item[1])], item[2]))
    first = np.dtype(inputs[0][1])
    out_dtypes = out_dtypes or {}
    graph_outputs = [helper.make_tensor_value_info(o, ELEM[np.dtype(out_dtypes.get(o, first))], None)
                     for o in outputs if o]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op_type, names, list(outputs), domain=domain, name=name, **(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs, graph_outputs,
                              initializer=[numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, ir_version=IR_VERSION,
                             opset_imports=[helper.make_opsetid("", onnx_opset), helper.make_opsetid(MS, 1)])


def ort_outputs(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_close(got, want, where):
    """Same dtype and shape; float16 within one float16 ulp, else rtol 1e-4 / atol 1e-5."""
    assert got.dtype == want.dtype and got.shape == want.shape, (where, got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype == F16:
        np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=2.0 ** -10, atol=1e-5, err_msg=where)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=where)


def assert_matches(model, feeds_list, reference=None, **session_kwargs):
    """Every feed dict on ONE dynashape session, each run compared with onnxruntime on
    ``reference`` (default: the model itself); returns the session. Every plan must come
    from the symbolic program (no guard failed, no per-node re-inference)."""
    sess = dynashape.InferenceSession(model, **session_kwargs)
    for k, feeds in enumerate(feeds_list):
        got = sess.run(None, feeds)
        want = ort_outputs(reference if reference is not None else model, feeds)
        assert len(got) == len(want), (k, len(got), len(want))
        for j, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, f"run {k} output {j} {[v.shape for v in feeds.values()]}")
    assert sess.stats.resolved_plans == 0
    return sess


def in_domain(model, domain, onnx_opset=None):
    """A copy of a one-node model with its node in ``domain`` (and the default-domain opset
    import ``onnx_opset``)."""
    m = type(model)()
    m.CopyFrom(model)
    m.graph.node[0].domain = domain
    if onnx_opset is not None:
        for imp in m.opset_import:
            if imp.domain == "":
                imp.version = onnx_opset
    return m


def output_shapes(sess):
    return [o.shape for o in sess.get_inferred_outputs()]


# ----------------------------------------------------------------------------------------
# SkipSimplifiedLayerNormalization
# ----------------------------------------------------------------------------------------

SKIP_OUTPUTS = {"y": ("y",), "stats": ("y", "mean", "inv_std"), "inv": ("y", "", "inv_std"),
                "sum": ("y", "", "", "sum"), "all": ("y", "mean", "inv_std", "sum")}


@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
@pytest.mark.parametrize("outputs", list(SKIP_OUTPUTS), ids=list(SKIP_OUTPUTS))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("skip_dims", [["batch", "seq", H], [1, "seq", H], ["seq", H]],
                         ids=["full", "batch1", "2d"])
def test_skip_simplified_layer_norm_matches_ort(skip_dims, bias, outputs, dtype):
    rng = np.random.default_rng(1)
    inputs = [("x", dtype, ["batch", "seq", H]), ("skip", dtype, skip_dims), "gamma", "bias" if bias else None]
    inits = [("gamma", rand(rng, H, dtype=dtype))] + ([("bias", rand(rng, H, dtype=dtype))] if bias else [])
    outs = SKIP_OUTPUTS[outputs]
    model = one_node("SkipSimplifiedLayerNormalization", inputs, outs, {"epsilon": 1e-5}, initializers=inits,
                     out_dtypes={"mean": F32, "inv_std": F32})
    feeds = []
    for b, s in BATCH_SEQ:
        shape = [b if d == "batch" else s if d == "seq" else d for d in skip_dims]
        feeds.append({"x": rand(rng, b, s, H, dtype=dtype, scale=2.0, shift=0.5),
                      "skip": rand(rng, *shape, dtype=dtype)})
    sess = assert_matches(model, feeds)
    want = {"y": ["batch", "seq", H], "mean": ["batch", "seq", 1], "inv_std": ["batch", "seq", 1],
            "sum": ["batch", "seq", H]}
    assert output_shapes(sess) == [want[o] for o in outs if o]


def test_skip_simplified_layer_norm_2d_tokens_default_epsilon():
    """(tokens, hidden) input and skip; without the attribute epsilon is 1e-12 (small values
    make a difference to 1e-5 visible); the unused mean output is zeros, as onnxruntime's."""
    rng = np.random.default_rng(2)
    model = one_node("SkipSimplifiedLayerNormalization", [("x", F32, ["tokens", H]), ("skip", F32, ["tokens", H]),
                                                          "gamma"], ["y", "mean", "inv_std", "sum"],
                     initializers=[("gamma", rand(rng, H))])
    feeds = [{"x": rand(rng, n, H, scale=1e-3), "skip": rand(rng, n, H, scale=1e-3)} for n in (5, 2, 9)]
    sess = assert_matches(model, feeds)
    assert output_shapes(sess) == [["tokens", H], ["tokens", 1], ["tokens", 1], ["tokens", H]]
    y, mean, inv_std, total = sess.run(None, feeds[0])
    assert not mean.any()
    s = (feeds[0]["x"] + feeds[0]["skip"]).astype(np.float64)
    np.testing.assert_allclose(inv_std, 1 / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-12), rtol=1e-5)


def test_skip_simplified_layer_norm_errors_name_the_node():
    rng = np.random.default_rng(3)
    model = one_node("SkipSimplifiedLayerNormalization", [("x", F32, ["batch", "seq", H]),
                                                          ("skip", F32, ["batch", "seq", H]), "gamma"], ["y"],
                     initializers=[("gamma", rand(rng, 8))], name="rms")
    with pytest.raises(dynashape.ShapeInferenceError, match="gamma length") as info:
        dynashape.InferenceSession(model).run(None, {"x": rand(rng, 2, 3, H), "skip": rand(rng, 2, 3, H)})
    assert info.value.node == "rms" and info.value.kind == "DimMismatch" and "'rms'" in str(info.value)
    model = one_node("SkipSimplifiedLayerNormalization", [("x", F32, ["batch", "seq", H]),
                                                          ("skip", F32, ["b2", "seq", H]), "gamma"], ["y"],
                     initializers=[("gamma", rand(rng, H))], name="rms")
    sess = dynashape.InferenceSession(model)
    sess.run(None, {"x": rand(rng, 2, 3, H), "skip": rand(rng, 1, 3, H)})
    with pytest.raises(dynashape.ShapeInferenceError, match="skip batch size") as info:
        sess.run(None, {"x": rand(rng, 2, 3, H), "skip": rand(rng, 3, 3, H)})
    assert info.value.node == "rms"


# ----------------------------------------------------------------------------------------
# SimplifiedLayerNormalization and LayerNormalization (com.microsoft)
# ----------------------------------------------------------------------------------------

#: (X dims, axis, scale / B shape): the last axis; two axes with a parameter of their full
#: shape, and with one that broadcasts; every axis (statistics of shape (1, 1, 1))
LN_CASES = {"last": (["batch", "seq", H], -1, (H,)),
            "two_axes": (["batch", 4, H], 1, (4, H)),
            "two_axes_bcast": (["batch", "seq", H], -2, (1, H)),
            "all_axes": (["batch", "seq", H], 0, (H,))}


def _ln_feeds(rng, dims, dtype):
    out = []
    for b, s in BATCH_SEQ:
        shape = [b if d == "batch" else s if d == "seq" else d for d in dims]
        out.append({"x": rand(rng, *shape, dtype=dtype, scale=3.0, shift=1.5)})
    return out


def _stats_dims(dims, axis):
    axis = axis % len(dims)
    return list(dims[:axis]) + [1] * (len(dims) - axis)


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("with_inv", [True, False], ids=["inv_std", "y_only"])
@pytest.mark.parametrize("case", list(LN_CASES))
def test_simplified_layer_norm_matches_ort(case, with_inv, dtype):
    rng = np.random.default_rng(4)
    dims, axis, pshape = LN_CASES[case]
    outs = ("y", "inv_std") if with_inv else ("y",)
    model = one_node("SimplifiedLayerNormalization", [("x", dtype, dims), "scale"], outs,
                     {"axis": axis, "epsilon": 1e-4}, initializers=[("scale", rand(rng, *pshape, dtype=dtype))],
                     out_dtypes={"inv_std": F32})
    sess = assert_matches(model, _ln_feeds(rng, dims, dtype), reference=in_domain(model, ""))
    assert output_shapes(sess) == [dims, _stats_dims(dims, axis)][:len(outs)]


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("outputs", [("y",), ("y", "mean"), ("y", "", "inv_std"), ("y", "mean", "inv_std")],
                         ids=["y", "mean", "inv_std", "all"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("case", list(LN_CASES))
def test_contrib_layer_norm_matches_ort(case, bias, outputs, dtype):
    """com.microsoft LayerNormalization against onnxruntime's contrib kernel of the same
    schema in ai.onnx version 1 (a model of opset 16: from 17 ONNX's own op takes over)."""
    rng = np.random.default_rng(5)
    dims, axis, pshape = LN_CASES[case]
    inits = [("scale", rand(rng, *pshape, dtype=dtype))] + ([("B", rand(rng, *pshape, dtype=dtype))] if bias else [])
    model = one_node("LayerNormalization", [("x", dtype, dims), "scale", "B" if bias else None], outputs,
                     {"axis": axis}, initializers=inits, out_dtypes={"mean": F32, "inv_std": F32})
    sess = assert_matches(model, _ln_feeds(rng, dims, dtype), reference=in_domain(model, "", onnx_opset=16))
    assert output_shapes(sess) == [dims] + [_stats_dims(dims, axis)] * (sum(map(bool, outputs)) - 1)


def test_contrib_layer_norm_default_epsilon():
    """Without the attribute epsilon is 1e-5 (a small spread makes the difference visible)."""
    rng = np.random.default_rng(6)
    model = one_node("LayerNormalization", [("x", F32, ["rows", H]), "scale"], ["y", "mean", "inv_std"],
                     initializers=[("scale", np.ones(H, np.float32))])
    feeds = [{"x": rand(rng, n, H, scale=0.01)} for n in (3, 5)]
    assert_matches(model, feeds, reference=in_domain(model, "", onnx_opset=16))


@pytest.mark.parametrize("op_type", ["LayerNormalization", "SimplifiedLayerNormalization"])
def test_norm_of_a_large_mean_over_a_small_spread(op_type):
    """A mean of 30 over a spread of 0.05: the float64 mean and the centred variance keep
    the digits that sum(x^2) / n - mean^2 in float32 loses (several % of inv_std_var here).
    Checked against float64 numpy: onnxruntime agrees on x86 with AVX2 (its MLAS kernel
    computes so), its scalar path does not. Y within 1e-4: x - mean in float32 is exact to
    an ulp of 30 (2e-6), times inv_std_var (about 20)."""
    rng = np.random.default_rng(21)
    n_out = 3 if op_type == "LayerNormalization" else 2
    model = one_node(op_type, [("x", F32, ["rows", H]), "scale"], ["y", "mean", "inv_std"][:n_out],
                     initializers=[("scale", np.ones(H, np.float32))])
    sess = dynashape.InferenceSession(model)
    for rows in (3, 8):
        x = rand(rng, rows, H, scale=0.05, shift=30.0)
        got = sess.run(None, {"x": x})
        x64 = x.astype(np.float64)
        if op_type == "LayerNormalization":
            mean = x64.mean(-1, keepdims=True)
            inv = 1 / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
            want = [(x64 - mean) * inv, mean, inv]
        else:
            inv = 1 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5)
            want = [x64 * inv, inv]
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == F32 and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4 if k == 0 else 0)
        if op_type == "LayerNormalization":   # what the float32 E[x^2] - mean^2 would give
            m32 = x.mean(-1, keepdims=True)
            naive = 1 / np.sqrt((x * x).mean(-1, keepdims=True) - m32 * m32 + np.float32(1e-5))
            assert np.abs(naive / inv - 1).max() > 1e-3


def test_norm_attribute_and_shape_errors_name_the_node():
    rng = np.random.default_rng(7)
    x = rand(rng, 2, 3, H)
    m = one_node("SimplifiedLayerNormalization", [("x", F32, ["b", "s", H]), "scale"], ["y"], {"stash_type": 10},
                 initializers=[("scale", rand(rng, H))], name="rms")
    with pytest.raises(dynashape.UnsupportedOperatorError, match="'rms'.*stash_type 10"):
        dynashape.InferenceSession(m).run(None, {"x": x})
    m = one_node("LayerNormalization", [("x", F32, ["b", "s", H]), "scale"], ["y"], {"axis": 3},
                 initializers=[("scale", rand(rng, H))], name="ln")
    with pytest.raises(dynashape.ShapeInferenceError, match="axis 3 is out of range") as info:
        dynashape.InferenceSession(m).run(None, {"x": x})
    assert info.value.node == "ln" and info.value.kind == "AxisOutOfRange"
    m = one_node("LayerNormalization", [("x", F32, ["b", "s", H]), "scale"], ["y"],
                 initializers=[("scale", rand(rng, 5))], name="ln")
    with pytest.raises(dynashape.ShapeInferenceError, match="scale") as info:
        dynashape.InferenceSession(m).run(None, {"x": x})
    assert info.value.node == "ln" and info.value.kind == "BroadcastMismatch"


# ----------------------------------------------------------------------------------------
# QuickGelu
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("alpha", [None, 1.0, -0.5], ids=["default", "alpha1", "negative"])
def test_quick_gelu_matches_ort(alpha, dtype):
    rng = np.random.default_rng(8)
    model = one_node("QuickGelu", [("x", dtype, ["batch", "seq", H])], ["y"],
                     {} if alpha is None else {"alpha": alpha})
    feeds = [{"x": rand(rng, b, s, H, dtype=dtype, scale=4.0)} for b, s in BATCH_SEQ]
    feeds[0]["x"][0, 0, :4] = [-200, -60, 60, 200]     # the logistic's saturated ends
    sess = assert_matches(model, feeds)
    assert output_shapes(sess) == [["batch", "seq", H]]


# ----------------------------------------------------------------------------------------
# BiasAdd and BiasSplitGelu (CUDA-only in onnxruntime: checked against ONNX-op graphs)
# ----------------------------------------------------------------------------------------

def _graph_model(nodes, inputs, outputs, initializers=()):
    """A reference graph of ONNX ops (opset 18: Split with num_outputs)."""
    graph = helper.make_graph(nodes, "ref", [helper.make_tensor_value_info(n, ELEM[np.dtype(d)], s)
                                             for n, d, s in inputs],
                              [helper.make_tensor_value_info(n, ELEM[np.dtype(d)], None) for n, d in outputs],
                              initializer=[numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])


def _bias_add_reference(dtype, c):
    """(X + bias) + skip in the dtype: float16 through float32 Adds rounded to float16 after
    each (float32 holds a float16 sum exactly, so that is float16 arithmetic)."""
    elem = ELEM[np.dtype(dtype)]
    cast = [] if dtype == F32 else [helper.make_node("Cast", [n], [n + "32"], to=TensorProto.FLOAT)
                                     for n in ("x", "bias", "skip")]
    sfx = "" if dtype == F32 else "32"
    nodes = cast + [helper.make_node("Add", ["x" + sfx, "bias" + sfx], ["t"])]
    if dtype != F32:
        nodes += [helper.make_node("Cast", ["t"], ["t16"], to=elem),
                  helper.make_node("Cast", ["t16"], ["t32"], to=TensorProto.FLOAT),
                  helper.make_node("Add", ["t32", "skip32"], ["u"]), helper.make_node("Cast", ["u"], ["y"], to=elem)]
    else:
        nodes.append(helper.make_node("Add", ["t", "skip"], ["y"]))
    return _graph_model(nodes, [("x", dtype, ["batch", "seq", c]), ("bias", dtype, [c]),
                                ("skip", dtype, ["batch", "seq", c])], [("y", dtype)])


@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
def test_bias_add_matches_ort_graph(dtype):
    rng = np.random.default_rng(9)
    c = 24
    model = one_node("BiasAdd", [("x", dtype, ["batch", "seq", c]), ("bias", dtype, [c]),
                                 ("skip", dtype, ["batch", "seq", c])], ["y"])
    feeds = [{"x": rand(rng, b, s, c, dtype=dtype), "bias": rand(rng, c, dtype=dtype),
              "skip": rand(rng, b, s, c, dtype=dtype)} for b, s in BATCH_SEQ]
    sess = assert_matches(model, feeds, reference=_bias_add_reference(dtype, c))
    assert output_shapes(sess) == [["batch", "seq", c]]


def _bias_split_gelu_reference(dtype, d):
    """h = X + bias (in the dtype), split in halves, left * 0.5 * right * (1 + erf(right /
    sqrt 2)) in float32, rounded to the dtype (``d``: the hidden dim, an int or a name)."""
    elem = ELEM[np.dtype(dtype)]
    consts = [("sqrt2", np.array(np.sqrt(2.0), np.float32)), ("one", np.array(1.0, np.float32)),
              ("halfc", np.array(0.5, np.float32))]
    nodes = []
    if dtype == F32:
        nodes.append(helper.make_node("Add", ["x", "bias"], ["h"]))
    else:
        nodes += [helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
                  helper.make_node("Cast", ["bias"], ["b32"], to=TensorProto.FLOAT),
                  helper.make_node("Add", ["x32", "b32"], ["h32"]),
                  helper.make_node("Cast", ["h32"], ["h16"], to=elem),
                  helper.make_node("Cast", ["h16"], ["h"], to=TensorProto.FLOAT)]
    nodes += [helper.make_node("Split", ["h"], ["left", "right"], axis=-1, num_outputs=2),
              helper.make_node("Div", ["right", "sqrt2"], ["r1"]), helper.make_node("Erf", ["r1"], ["r2"]),
              helper.make_node("Add", ["r2", "one"], ["r3"]), helper.make_node("Mul", ["right", "halfc"], ["r4"]),
              helper.make_node("Mul", ["r4", "r3"], ["gelu"]),
              helper.make_node("Mul", ["left", "gelu"], ["y" if dtype == F32 else "y32"])]
    if dtype != F32:
        nodes.append(helper.make_node("Cast", ["y32"], ["y"], to=elem))
    return _graph_model(nodes, [("x", dtype, ["batch", "seq", d]), ("bias", dtype, [d])], [("y", dtype)], consts)


@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
def test_bias_split_gelu_matches_ort_graph(dtype):
    rng = np.random.default_rng(10)
    d = 2 * H
    model = one_node("BiasSplitGelu", [("x", dtype, ["batch", "seq", d]), ("bias", dtype, [d])], ["y"])
    feeds = [{"x": rand(rng, b, s, d, dtype=dtype, scale=2.0), "bias": rand(rng, d, dtype=dtype)}
             for b, s in BATCH_SEQ]
    sess = assert_matches(model, feeds, reference=_bias_split_gelu_reference(dtype, d))
    assert output_shapes(sess) == [["batch", "seq", H]]


def test_bias_split_gelu_symbolic_hidden_and_errors():
    """A symbolic hidden size D gives D // 2; an odd D or a bias of another length fails,
    naming the node."""
    rng = np.random.default_rng(11)
    model = one_node("BiasSplitGelu", [("x", F32, ["batch", "seq", "D"]), ("bias", F32, ["D"])], ["y"], name="bsg")
    feeds = [{"x": rand(rng, 2, 3, d), "bias": rand(rng, d)} for d in (8, 4, 8)]
    sess = assert_matches(model, feeds, reference=_bias_split_gelu_reference(F32, "D"))
    assert output_shapes(sess) == [["batch", "seq", "D//2"]]
    with pytest.raises(dynashape.ShapeInferenceError, match="must be even") as info:
        sess.run(None, {"x": rand(rng, 2, 3, 5), "bias": rand(rng, 5)})
    assert info.value.node == "bsg" and info.value.kind == "OddHiddenSize"
    with pytest.raises(dynashape.ShapeInferenceError, match="bias length") as info, \
            pytest.warns(RuntimeWarning, match="dim_param 'D' is bound to 8"):
        sess.run(None, {"x": rand(rng, 2, 3, 8), "bias": rand(rng, 6)})
    assert info.value.node == "bsg" and info.value.kind == "DimMismatch"


def test_bias_add_shape_errors_name_the_node():
    rng = np.random.default_rng(12)
    model = one_node("BiasAdd", [("x", F32, ["b", "s", 8]), ("bias", F32, [8]), ("skip", F32, ["b2", "s", 8])],
                     ["y"], name="badd")
    sess = dynashape.InferenceSession(model)
    sess.run(None, {"x": rand(rng, 2, 3, 8), "bias": rand(rng, 8), "skip": rand(rng, 2, 3, 8)})
    with pytest.raises(dynashape.ShapeInferenceError, match="skip dim 0") as info:
        sess.run(None, {"x": rand(rng, 2, 3, 8), "bias": rand(rng, 8), "skip": rand(rng, 1, 3, 8)})
    assert info.value.node == "badd" and info.value.kind == "DimMismatch"


# ----------------------------------------------------------------------------------------
# FusedMatMul
# ----------------------------------------------------------------------------------------

def _raw_dims(effective, trans, trans_batch):
    """The dims an operand is given as so that it multiplies as ``effective`` (batch, rows,
    cols): the inverse of transA/B, then of transBatchA/B."""
    dims = list(effective)
    if trans:
        dims[-2], dims[-1] = dims[-1], dims[-2]
    if trans_batch:
        dims = [dims[-2]] + dims[:-2] + [dims[-1]]
    return dims


def _shape_of(dims, b, s):
    return tuple(b if d == "batch" else s if d == "seq" else d for d in dims)


def _matmul_feeds(rng, a_dims, b_dims, b, s, dtype):
    return {"a": rand(rng, *_shape_of(a_dims, b, s), dtype=dtype),
            "b": rand(rng, *_shape_of(b_dims, b, s), dtype=dtype)}


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("alpha", [1.0, 0.25], ids=["alpha1", "alpha025"])
@pytest.mark.parametrize("tba,tbb", [(0, 0), (1, 0), (0, 1), (1, 1)], ids=["", "tbA", "tbB", "tbAB"])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)], ids=["", "tA", "tB", "tAB"])
def test_fused_matmul_batched_matches_ort(ta, tb, tba, tbb, alpha, dtype):
    """A' (batch, seq, 8) @ B' (batch, 8, 5) given in every layout the four flags describe."""
    rng = np.random.default_rng(13)
    a_dims = _raw_dims(["batch", "seq", 8], ta, tba)
    b_dims = _raw_dims(["batch", 8, 5], tb, tbb)
    attrs = {"alpha": alpha, "transA": ta, "transB": tb, "transBatchA": tba, "transBatchB": tbb}
    model = one_node("FusedMatMul", [("a", dtype, a_dims), ("b", dtype, b_dims)], ["y"], attrs)
    feeds = [_matmul_feeds(rng, a_dims, b_dims, b, s, dtype) for b, s in BATCH_SEQ]
    sess = assert_matches(model, feeds)
    assert output_shapes(sess) == [["batch", "seq", 5]]


#: (A dims, B dims, attributes, output dims): broadcast batches, a shared matrix, vectors
#: (transA / transB do nothing to a 1-D operand), a 4-D batch transposed with transBatch
FMM_CASES = {
    "matrix_B": (["batch", "seq", 8], [8, 5], {}, ["batch", "seq", 5]),
    "matrix_B_transB": (["batch", "seq", 8], [5, 8], {"transB": 1}, ["batch", "seq", 5]),
    "matrix_A_transA": ([8, "seq"], ["batch", 8, 5], {"transA": 1, "alpha": 2.0}, ["batch", "seq", 5]),
    "broadcast_batch": (["batch", 1, "seq", 8], [1, 3, 8, 5], {"transB": 0}, ["batch", 3, "seq", 5]),
    "vector_A": ([8], ["batch", 8, 5], {"transA": 1}, ["batch", 5]),
    "vector_B": (["batch", "seq", 8], [8], {"transB": 1, "alpha": 0.5}, ["batch", "seq"]),
    "vectors": ([8], [8], {}, []),
    "rank4_trans_batch": (["seq", "batch", 2, 8], [8, "batch", 2, 5], {"transBatchA": 1, "transBatchB": 1},
                          ["batch", 2, "seq", 5]),
}


@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
@pytest.mark.parametrize("case", list(FMM_CASES))
def test_fused_matmul_shapes_match_ort(case, dtype):
    rng = np.random.default_rng(14)
    a_dims, b_dims, attrs, out_dims = FMM_CASES[case]
    model = one_node("FusedMatMul", [("a", dtype, a_dims), ("b", dtype, b_dims)], ["y"], attrs)
    feeds = [_matmul_feeds(rng, a_dims, b_dims, b, s, dtype) for b, s in BATCH_SEQ]
    sess = assert_matches(model, feeds)
    assert output_shapes(sess) == [out_dims]


def test_fused_matmul_errors_name_the_node():
    rng = np.random.default_rng(15)
    m = one_node("FusedMatMul", [("a", F32, ["m", 8]), ("b", F32, [8, 5])], ["y"], {"transBatchA": 1}, name="fmm")
    with pytest.raises(dynashape.ShapeInferenceError, match="same rank >= 3") as info:
        dynashape.InferenceSession(m).run(None, {"a": rand(rng, 3, 8), "b": rand(rng, 8, 5)})
    assert info.value.node == "fmm" and info.value.kind == "InvalidRank"
    m = one_node("FusedMatMul", [("a", F32, ["batch", "m", "k"]), ("b", F32, ["k2", 5])], ["y"], name="fmm")
    sess = dynashape.InferenceSession(m)
    sess.run(None, {"a": rand(rng, 2, 3, 8), "b": rand(rng, 8, 5)})
    with pytest.raises(dynashape.ShapeInferenceError, match="inner dims") as info:
        sess.run(None, {"a": rand(rng, 2, 3, 8), "b": rand(rng, 7, 5)})
    assert info.value.node == "fmm" and info.value.kind == "DimMismatch"


# ----------------------------------------------------------------------------------------
# Softmax: the priority-5 kernel for the builtin ai.onnx op
# ----------------------------------------------------------------------------------------

_RESOLVE = textwrap.dedent("""
    import json, numpy as np, dynashape
    r = dynashape.get_registry()
    out = {str(v) + d: r.resolve_kernel("", "Softmax", v, np.dtype(d)).plugin
           for v in (11, 13, 21) for d in ("float32", "float64", "float16")}
    print(json.dumps(out))
""")


def _subprocess(code, **env):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, **env})
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_softmax_kernel_priority_with_and_without_compiled_kernels():
    """Priority 5 sits between dynashape's compiled kernels (``fast``, numba, 10; ``onednn``,
    float32, 20) and its numpy ones (0): it wins for float32 at opset >= 13 only when the
    compiled kernels are off."""
    reg = dynashape.get_registry()
    assert {k.plugin: k.priority for k in reg.kernels("", "Softmax")}["example"] == 5
    compiled = {k.plugin for k in reg.kernels("", "Softmax")} & {"fast", "onednn"}
    winner = reg.resolve_kernel("", "Softmax", 13, np.dtype("float32")).plugin
    assert winner == ("onednn" if "onednn" in compiled else "fast" if compiled else "example")
    off = _subprocess(_RESOLVE, DYNASHAPE_FAST="0")
    assert off["13float32"] == off["21float32"] == "example"
    assert off["11float32"] == off["13float64"] == off["13float16"] == "dynashape.ops_builtin"
    on = _subprocess(_RESOLVE)
    if compiled:
        assert on["13float32"] == on["11float32"] == winner
        assert on["13float64"] == ("fast" if "fast" in compiled else "dynashape.ops_builtin")
        assert on["13float16"] == "dynashape.ops_builtin"
    else:
        assert on == off


_SOFTMAX_VALUES = textwrap.dedent("""
    import json, sys, numpy as np, dynashape
    from dynashape.testing import run_node
    rng = np.random.default_rng(16)
    out = {}
    for shape in ((3, 7), (2, 5, 33), (4, 1, 6), (0, 4)):
        x = (rng.standard_normal(shape) * 8).astype(np.float32)
        for axis in range(-len(shape), len(shape)):
            y, = run_node("Softmax", [x], {"axis": axis}, opset=13)
            out[f"{shape}/{axis}"] = [dynashape.get_registry().resolve_kernel("", "Softmax", 13, x.dtype).plugin,
                                      y.view(np.int32).ravel().tolist()]
    print(json.dumps(out))
""")


def test_softmax_override_equals_the_builtin_kernel():
    """With the compiled kernels off, this plugin's kernel and the builtin one (the plugin
    blocked) give the same float32 bits, along the last axis and along every other one."""
    ours = _subprocess(_SOFTMAX_VALUES, DYNASHAPE_FAST="0")
    builtin = _subprocess(_SOFTMAX_VALUES, DYNASHAPE_FAST="0", DYNASHAPE_PLUGINS_BLOCK="example")
    assert ours.keys() == builtin.keys()
    for key in ours:
        assert ours[key][0] == "example" and builtin[key][0] == "dynashape.ops_builtin", key
        assert ours[key][1] == builtin[key][1], key


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_override_matches_ort(axis):
    """The override running (compiled kernels off for the session) against onnxruntime."""
    rng = np.random.default_rng(17)
    model = one_node("Softmax", [("x", F32, ["batch", "seq", H])], ["y"], {"axis": axis}, domain="")
    feeds = [{"x": rand(rng, b, s, H, scale=6.0)} for b, s in BATCH_SEQ]
    sess = assert_matches(model, feeds, compiled_kernels=False)
    assert sess.registry.resolve_kernel("", "Softmax", 17, F32).plugin == "example"


# ----------------------------------------------------------------------------------------
# dynashape.testing.check_op: declared shapes / dtypes (concrete and symbolic) vs the kernel
# ----------------------------------------------------------------------------------------

def _r(rng, *shape, dtype=F32):
    return rand(rng, *shape, dtype=dtype)


CHECKS = {
    "SkipSimplifiedLayerNormalization": dict(
        make=lambda rng, b, s, h: [_r(rng, b, s, h), _r(rng, 1, s, h), _r(rng, h), _r(rng, h)],
        dims={"b": (1, 4), "s": (1, 9), "h": (1, 40)}, attrs={"epsilon": 1e-5}, n_outputs=4,
        symbolic=[("b", "s", "h"), (1, "s", "h"), ("h",), ("h",)]),
    "SimplifiedLayerNormalization": dict(
        make=lambda rng, b, s, h: [_r(rng, b, s, h, dtype=F16), _r(rng, s, h, dtype=F16)],
        dims={"b": (1, 4), "s": (1, 9), "h": (1, 40)}, attrs={"axis": 1}, n_outputs=2,
        symbolic=[("b", "s", "h"), ("s", "h")]),
    "LayerNormalization": dict(
        make=lambda rng, b, s, h: [_r(rng, b, s, h), _r(rng, h), _r(rng, h)],
        dims={"b": (1, 4), "s": (1, 9), "h": (1, 40)}, attrs={}, n_outputs=3,
        symbolic=[("b", "s", "h"), ("h",), ("h",)]),
    "QuickGelu": dict(
        make=lambda rng, b, s, h: [_r(rng, b, s, h, dtype=F64)],
        dims={"b": (0, 4), "s": (1, 9), "h": (1, 40)}, attrs={"alpha": 1.5}, n_outputs=1,
        symbolic=[("b", "s", "h")]),
    "BiasAdd": dict(
        make=lambda rng, b, s, h: [_r(rng, b, s, h), _r(rng, h), _r(rng, b, s, h)],
        dims={"b": (0, 4), "s": (1, 9), "h": (1, 40)}, attrs={}, n_outputs=1,
        symbolic=[("b", "s", "h"), ("h",), ("b", "s", "h")]),
    "BiasSplitGelu": dict(
        make=lambda rng, b, s, h: [_r(rng, b, s, 2 * h, dtype=F16), _r(rng, 2 * h, dtype=F16)],
        dims={"b": (1, 4), "s": (1, 9), "h": (1, 20)}, attrs={}, n_outputs=1, symbolic=None),
    "FusedMatMul": dict(
        make=lambda rng, b, s, h: [_r(rng, s, b, h), _r(rng, h, b, 3)],
        dims={"b": (1, 4), "s": (1, 9), "h": (1, 40)}, attrs={"transBatchA": 1, "transBatchB": 1, "alpha": 0.5},
        n_outputs=1, symbolic=[("s", "b", "h"), ("h", "b", 3)]),
}


@pytest.mark.parametrize("op_type", list(CHECKS))
def test_check_op_over_random_sizes(op_type):
    c = CHECKS[op_type]
    result = check_op(op_type, c["make"], c["dims"], c["attrs"], domain=MS, opset=1, n_outputs=c["n_outputs"],
                      trials=12, seed=18, symbolic_shapes=c["symbolic"])
    assert len(result.draws) == 12
    assert result.symbolic_checked == (12 if c["symbolic"] is not None else 0)


def test_check_op_bias_split_gelu_symbolic_batch_and_sequence():
    """BiasSplitGelu with symbolic batch and sequence (check_op draws any hidden size, odd
    ones too, so the random-hidden check above runs without symbolic shapes)."""
    result = check_op("BiasSplitGelu", lambda rng, b, s: [_r(rng, b, s, 12), _r(rng, 12)],
                      {"b": (0, 4), "s": (1, 9)}, domain=MS, opset=1, trials=6, seed=19,
                      symbolic_shapes=[("b", "s", 12), (12,)])
    assert result.symbolic_checked == 6


def test_check_op_softmax_override():
    result = check_op("Softmax", lambda rng, b, n: [_r(rng, b, n)], {"b": (0, 5), "n": (1, 50)}, {"axis": -1},
                      opset=13, trials=10, seed=20, symbolic_shapes=[("b", "n")])
    assert result.symbolic_checked == 10
