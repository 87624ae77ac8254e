"""LSTM, GRU and RNN against onnxruntime (and hand-checked shapes/errors)."""
from __future__ import annotations

import os

import dynashape
import ml_dtypes
import numpy as np
import onnx
import onnxruntime
import pytest
from dynashape.model import Node
from dynashape.records import InferContext
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import infer_node, run_node
from onnx import helper, numpy_helper

from tests.conftest import ort_predates, symbolic_context

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
N_OUT = {"LSTM": 3, "GRU": 2, "RNN": 2}
INPUT_NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
RTOL, ATOL = 1e-4, 1e-5


def ort_run(op, inputs, attrs, n_outputs, opset=14, output_names=None):
    """onnxruntime's outputs for one node; ``inputs`` may hold None for absent optional inputs.

    onnxruntime lacks layout=1, double LSTM/GRU, RNN-22 and hidden_size inferred from R: the
    reference runs layout 0 on transposed tensors, float32 for double, opset <= 21, and
    always gets hidden_size."""
    attrs = dict(attrs)
    attrs.setdefault("hidden_size", inputs[2].shape[-1])
    layout = attrs.pop("layout", 0)
    dtype = inputs[0].dtype
    ins = [None if x is None else x.astype(np.float32) if x.dtype == np.float64 else x
           for x in inputs]
    if layout == 1:
        ins = [x if x is None or i not in (0, 5, 6) else x.transpose(1, 0, 2)
               for i, x in enumerate(ins)]
    outs = _ort_session_run(op, ins, attrs, n_outputs, min(opset, 21), output_names)
    if layout == 1:
        outs = [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2) for o in outs]
    return [o.astype(dtype) for o in outs]


def _ort_session_run(op, inputs, attrs, n_outputs, opset, output_names):
    names = [INPUT_NAMES[i] if x is not None else "" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outs = output_names or [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    feeds = {n: x for n, x in zip(names, inputs) if n}
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in feeds.items()],
        [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(inputs[0].dtype), None)
         for o in outs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def make_inputs(op, *, seq=5, batch=3, inp=4, hidden=6, nd=1, layout=0, bias=True,
                seq_lens=None, init=False, peep=False, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    G = GATES[op]
    x_shape = (seq, batch, inp) if layout == 0 else (batch, seq, inp)
    st_shape = (nd, batch, hidden) if layout == 0 else (batch, nd, hidden)

    def f(*s):
        return rng.standard_normal(s).astype(dtype)

    ins = [f(*x_shape), f(nd, G * hidden, inp) * 0.5, f(nd, G * hidden, hidden) * 0.5,
           f(nd, 2 * G * hidden) * 0.5 if bias else None,
           None if seq_lens is None else np.array(seq_lens, np.int32),
           f(*st_shape) if init else None]
    if op == "LSTM":
        ins += [f(*st_shape) if init else None, f(nd, 3 * hidden) * 0.5 if peep else None]
    while ins and ins[-1] is None:
        ins.pop()
    return ins


def check(op, ins, attrs, opset=14, rtol=RTOL, atol=ATOL, ort_fixed_in=None):
    """dynashape vs onnxruntime, or vs ``rnn_spec`` (RNN only) on an onnxruntime older than
    ``ort_fixed_in``."""
    n = N_OUT[op]
    got = run_node(op, ins, attrs, opset=opset, n_outputs=n)
    if ort_fixed_in is not None and ort_predates(ort_fixed_in):
        want = rnn_spec(ins, attrs)
    else:
        want = ort_run(op, ins, attrs, n, opset=opset)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("init", [False, True])
def test_directions_layouts_states(op, direction, layout, init):
    nd = 2 if direction == "bidirectional" else 1
    ins = make_inputs(op, nd=nd, layout=layout, init=init, seed=layout * 2 + init)
    check(op, ins, {"hidden_size": 6, "direction": direction, "layout": layout})


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_sequence_lens(op, direction, layout):
    nd = 2 if direction == "bidirectional" else 1
    ins = make_inputs(op, nd=nd, layout=layout, init=True, seq=5, batch=4, seq_lens=[5, 2, 1, 4])
    got = check(op, ins, {"hidden_size": 6, "direction": direction, "layout": layout})
    y = got[0] if layout == 0 else got[0].transpose(1, 2, 0, 3)  # -> [seq, dirs, batch, hidden]
    assert not y[2:, :, 1].any() and not y[1:, :, 2].any()  # zero past each sequence's end


def test_sequence_lens_all_full_and_no_bias():
    ins = make_inputs("LSTM", bias=False, seq_lens=[5, 5, 5], nd=2)
    check("LSTM", ins, {"hidden_size": 6, "direction": "bidirectional"})


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("opset", [7, 22])
def test_opset_versions_and_hidden_from_weights(op, opset):
    ins = make_inputs(op, init=True)
    check(op, ins, {}, opset=opset)  # hidden_size taken from R's shape


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_opset1_matches_opset7(op):
    ins = make_inputs(op, init=True, nd=2)
    attrs = {"hidden_size": 6, "direction": "bidirectional"}
    old = run_node(op, ins, attrs, opset=1, n_outputs=N_OUT[op])
    new = run_node(op, ins, attrs, opset=7, n_outputs=N_OUT[op])
    for a, b in zip(old, new):
        np.testing.assert_array_equal(a, b)


def test_lstm_peepholes_clip_input_forget():
    ins = make_inputs("LSTM", nd=2, init=True, peep=True, seq_lens=[5, 3, 4])
    check("LSTM", ins, {"hidden_size": 6, "direction": "bidirectional", "clip": 0.7})
    check("LSTM", ins, {"hidden_size": 6, "direction": "bidirectional", "input_forget": 1})
    ins = make_inputs("LSTM", init=True)
    check("LSTM", ins, {"hidden_size": 6, "clip": 0.5, "input_forget": 1})


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("bias", [False, True])
def test_gru_linear_before_reset_and_clip(lbr, bias):
    ins = make_inputs("GRU", nd=2, init=True, bias=bias, seq_lens=[3, 5, 1])
    check("GRU", ins, {"hidden_size": 6, "direction": "bidirectional", "linear_before_reset": lbr})
    check("GRU", ins, {"hidden_size": 6, "direction": "bidirectional", "linear_before_reset": lbr,
                       "clip": 0.4})


#: RNN activations: f(x, alpha, beta) and the defaults of the alpha and beta they take, those of
#: the ONNX operator of that name (Affine and ScaledTanh have none); "-": not taken
SPEC_ACTIVATIONS = {
    "Sigmoid": (lambda x, a, b: 1 / (1 + np.exp(-x)), "-", "-"),
    "Tanh": (lambda x, a, b: np.tanh(x), "-", "-"),
    "Relu": (lambda x, a, b: np.maximum(x, 0), "-", "-"),
    "Affine": (lambda x, a, b: a * x + b, None, None),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, "-"),
    "ThresholdedRelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, "-"),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), None, None),
    "HardSigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(x)), 1.0, "-"),
    "Softsign": (lambda x, a, b: x / (1 + np.abs(x)), "-", "-"),
    "Softplus": (lambda x, a, b: np.log1p(np.exp(x)), "-", "-"),
}

#: onnxruntime < 1.29 reads RNN's activation_alpha/beta by direction, aborting on a shorter,
#: spec-legal list, and uses 0 for a missing value instead of the ONNX default:
#: https://github.com/microsoft/onnxruntime/pull/31675
ORT_RNN_ACTIVATION_PARAMS_FIXED = (1, 29)


def _take(values: list, default):
    """An activation's next alpha (beta) from ``values``, consumed in order; ``default`` "-":
    the activation takes none."""
    return default if default == "-" or not values else values.pop(0)


def rnn_spec(ins, attrs):
    """RNN's [Y, Y_h] by the ONNX spec's Ht = f(Xt*(Wi^T) + Ht-1*(Ri^T) + Wbi + Rbi), the
    alphas and betas consumed in order by the activations taking them (layout 0, no
    sequence_lens, no clip)."""
    X, W, R, B, _, H0 = ins + [None] * (6 - len(ins))
    n_dirs, batch, hidden = W.shape[0], X.shape[1], R.shape[-1]
    B = np.zeros((n_dirs, 2 * hidden), X.dtype) if B is None else B
    H0 = np.zeros((n_dirs, batch, hidden), X.dtype) if H0 is None else H0
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    Y = np.zeros((len(X), n_dirs, batch, hidden), X.dtype)
    Y_h = np.zeros((n_dirs, batch, hidden), X.dtype)
    for d, name in enumerate(attrs.get("activations", ["Tanh"] * n_dirs)):
        f, alpha, beta = SPEC_ACTIVATIONS[name]
        alpha, beta = _take(alphas, alpha), _take(betas, beta)
        reverse = d == 1 or attrs.get("direction") == "reverse"
        h = H0[d]
        for t in reversed(range(len(X))) if reverse else range(len(X)):
            h = Y[t, d] = f(X[t] @ W[d].T + h @ R[d].T + B[d, :hidden] + B[d, hidden:], alpha, beta)
        Y_h[d] = h
    return [Y, Y_h]


ACTS = [("Sigmoid", [], []), ("Tanh", [], []), ("Relu", [], []), ("Affine", [0.7], [0.2]),
        ("LeakyRelu", [0.3], []), ("ThresholdedRelu", [0.2], []), ("ScaledTanh", [1.5], [0.8]),
        ("HardSigmoid", [0.3], [0.4]), ("Elu", [0.9], []), ("Softsign", [], []),
        ("Softplus", [], [])]


@pytest.mark.parametrize("name,alpha,beta", ACTS)
def test_rnn_activations(name, alpha, beta):
    ins = make_inputs("RNN", nd=2, init=True)
    attrs = {"hidden_size": 6, "direction": "bidirectional", "activations": [name, "Tanh"],
             "activation_alpha": alpha, "activation_beta": beta}
    check("RNN", ins, {k: v for k, v in attrs.items() if v != []},
          ort_fixed_in=ORT_RNN_ACTIVATION_PARAMS_FIXED if alpha or beta else None)


@pytest.mark.parametrize("name", ["LeakyRelu", "ThresholdedRelu", "HardSigmoid", "Elu"])
def test_activation_default_params(name):
    ins = make_inputs("RNN", init=True)
    # ThresholdedRelu's missing alpha is 0 in every onnxruntime (the spec says 1.0) and here too
    fixed_in = None if name == "ThresholdedRelu" else ORT_RNN_ACTIVATION_PARAMS_FIXED
    check("RNN", ins, {"hidden_size": 6, "activations": [name]}, ort_fixed_in=fixed_in)


def test_lstm_gru_custom_activations_consume_params_in_order():
    ins = make_inputs("LSTM", nd=2, init=True, peep=True)
    check("LSTM", ins, {"hidden_size": 6, "direction": "bidirectional",
                        "activations": ["HardSigmoid", "LeakyRelu", "Softsign",
                                        "Sigmoid", "Affine", "ScaledTanh"],
                        "activation_alpha": [0.25, 0.1, 0.8, 1.2],
                        "activation_beta": [0.45, 0.1, 0.9]})
    ins = make_inputs("GRU", init=True)
    check("GRU", ins, {"hidden_size": 6, "activations": ["HardSigmoid", "Elu"],
                       "activation_alpha": [0.3, 0.7], "activation_beta": [0.4]})


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_float16_float64(op, dtype):
    ins = make_inputs(op, nd=2, init=True, dtype=dtype, seq_lens=[5, 2, 4])
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {}
    check(op, ins, {"hidden_size": 6, "direction": "bidirectional"}, **tol)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_bfloat16_opset22(op):
    ins = make_inputs(op, nd=2, init=True, seq_lens=[5, 2, 4])
    ins = [x if x is None or x.dtype == np.int32 else x.astype(ml_dtypes.bfloat16).astype(np.float32)
           for x in ins]
    ins_bf = [x if x is None or x.dtype == np.int32 else x.astype(ml_dtypes.bfloat16) for x in ins]
    attrs = {"hidden_size": 6, "direction": "bidirectional"}
    got = run_node(op, ins_bf, attrs, opset=22, n_outputs=N_OUT[op])
    want = ort_run(op, ins, attrs, N_OUT[op], opset=22)
    for g, w in zip(got, want):
        assert g.dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=2e-2, atol=2e-2)


def test_empty_sequence_gives_initial_state():
    ins = make_inputs("LSTM", seq=0, init=True, nd=2)
    y, yh, yc = run_node("LSTM", ins, {"hidden_size": 6, "direction": "bidirectional"},
                         opset=14, n_outputs=3)
    assert y.shape == (0, 2, 3, 6)
    np.testing.assert_array_equal(yh, ins[5])
    np.testing.assert_array_equal(yc, ins[6])


def run_with_output_names(op, ins, attrs, output_names, opset=14):
    """run_node, but with some outputs absent (named "")."""
    reg = get_registry()
    node = Node("n", op, "", tuple("" if x is None else f"in{i}" for i, x in enumerate(ins)),
                tuple(output_names), attrs)
    ctx = InferContext(node, opset, [None if x is None else x.shape for x in ins],
                       [None if x is None else x.dtype for x in ins], list(ins))
    opdef = reg.resolve_op("", op, opset)
    ctx.output_shapes = list(opdef.infer_shape(ctx))
    ctx.output_dtypes = list(opdef.infer_dtype(ctx))
    outs = [np.full(s, np.nan, d) if n else None
            for n, s, d in zip(output_names, ctx.output_shapes, ctx.output_dtypes)]
    kernel = reg.resolve_kernel("", op, opset, ins[0].dtype)
    res = kernel.compute(ins, outs, kernel.prepare(ctx))
    return outs if res is None else res


@pytest.mark.parametrize("names", [["", "h", "c"], ["y", "", "c"], ["y"], ["", "h"], ["y", "h", ""]])
def test_absent_outputs(names):
    ins = make_inputs("LSTM", nd=2, init=True, seq_lens=[4, 5, 2])
    attrs = {"hidden_size": 6, "direction": "bidirectional"}
    got = run_with_output_names("LSTM", ins, attrs, names)
    want = ort_run("LSTM", ins, attrs, 3, output_names=names)
    present = [g for g, n in zip(got, names) if n]
    assert len(present) == len(want)
    for g, w in zip(present, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


# shapes ---------------------------------------------------------------------------------

def test_symbolic_shapes_layout0_and_1():
    seq, batch = sym("seq"), sym("batch")
    for layout, x_shape, y, st in (
            (0, (seq, batch, 4), (seq, 2, batch, 6), (2, batch, 6)),
            (1, (batch, seq, 4), (batch, seq, 2, 6), (batch, 2, 6))):
        shapes = [x_shape, (2, 24, 4), (2, 24, 6), (2, 48), None, st, st]
        f32 = np.dtype(np.float32)
        ctx, opdef = symbolic_context("LSTM", shapes, [f32] * 4 + [None] + [f32] * 2,
                                      attrs={"hidden_size": 6, "direction": "bidirectional", "layout": layout},
                                      opset=14, n_outputs=3)
        assert opdef.infer_shape(ctx) == [y, st, st]
        assert opdef.infer_dtype(ctx) == [f32] * 3


def test_infer_hidden_from_R_and_output_counts():
    ins = make_inputs("GRU", hidden=5)
    shapes, dtypes = infer_node("GRU", ins, {}, opset=14, n_outputs=2)
    assert shapes == [(5, 1, 3, 5), (1, 3, 5)]
    assert dtypes == [np.dtype(np.float32)] * 2


@pytest.mark.parametrize("op,ins_kw,attrs,match", [
    ("LSTM", {}, {"direction": "sideways"}, "direction"),
    ("LSTM", {}, {"layout": 2}, "layout"),
    ("LSTM", {}, {"hidden_size": 7}, "W dim 1"),
    ("GRU", {"nd": 2}, {"direction": "forward"}, "W dim 0"),
    ("RNN", {}, {"activations": ["Tanh", "Relu"]}, "activations has 2 entries"),
    ("RNN", {}, {"activations": ["Swish"]}, "unsupported activation"),
])
def test_invalid_attributes(op, ins_kw, attrs, match):
    ins = make_inputs(op, **ins_kw)
    with pytest.raises(dynashape.ShapeInferenceError, match=match):
        infer_node(op, ins, attrs, opset=14, n_outputs=N_OUT[op])


def test_invalid_inputs():
    ins = make_inputs("LSTM", init=True)
    bad = list(ins)
    bad[0] = ins[0][0]
    with pytest.raises(dynashape.ShapeInferenceError, match="X must have rank 3"):
        infer_node("LSTM", bad, {}, opset=14)
    bad = list(ins)
    bad[3] = np.zeros((1, 10), np.float32)
    with pytest.raises(dynashape.ShapeInferenceError, match="B dim 1"):
        infer_node("LSTM", bad, {}, opset=14)
    bad = list(ins)
    bad[4] = np.array([1, 2, 3], np.int64)
    with pytest.raises(dynashape.ShapeInferenceError, match="sequence_lens has dtype"):
        infer_node("LSTM", bad, {}, opset=14)
    bad = list(ins)
    bad[5] = np.zeros((1, 4, 6), np.float32)
    with pytest.raises(dynashape.ShapeInferenceError, match="initial_h dim 1"):
        infer_node("LSTM", bad, {}, opset=14)
    bad = list(ins)
    bad[1] = ins[1].astype(np.float64)
    with pytest.raises(dynashape.ShapeInferenceError, match="expected X's dtype"):
        infer_node("LSTM", bad, {}, opset=14)
    with pytest.raises(dynashape.ShapeInferenceError, match="X has dtype"):
        infer_node("RNN", [ins[0].astype(np.int32)] + ins[1:3], {}, opset=14)
    bf = [x.astype(ml_dtypes.bfloat16) for x in ins[:3]]
    with pytest.raises(dynashape.ShapeInferenceError, match="X has dtype bfloat16"):
        infer_node("RNN", bf, {}, opset=14)
    with pytest.raises(dynashape.ShapeInferenceError, match="at most 2 outputs"):
        infer_node("GRU", make_inputs("GRU"), {}, opset=14, n_outputs=3)


# the LSTM nodes of real models ----------------------------------------------------------

ZOO = "/work/shared/zoo"


def _model_lstm_nodes(path):
    model = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return [(n, inits, opset) for n in model.graph.node if n.op_type == "LSTM"]


@pytest.mark.parametrize("path", [f"{ZOO}/lstm_small.onnx",
                                  f"{ZOO}/thirdparty/silero-vad/silero_vad_16k_sequence.onnx"])
def test_real_model_lstm_nodes(path):
    if not os.path.exists(path):
        pytest.skip("zoo model not available")
    rng = np.random.default_rng(0)
    for node, inits, opset in _model_lstm_nodes(path):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        W, R = inits[node.input[1]], inits[node.input[2]]
        nd, hidden, inp = W.shape[0], R.shape[2], W.shape[2]
        seq, batch = 7, 2
        ins = [rng.standard_normal((seq, batch, inp)).astype(np.float32), W, R,
               inits[node.input[3]] if node.input[3] else None, None]
        for k in (5, 6):
            ins.append(rng.standard_normal((nd, batch, hidden)).astype(np.float32)
                       if len(node.input) > k and node.input[k] else None)
        attrs = {k: v for k, v in attrs.items()}
        check("LSTM", ins, attrs, opset=opset)
