"""The rewrite harness: every builtin rewrite's patterns on graphs with symbolic dims, run
through changing shapes on one session with rewrites on, against the same graph with
rewrites off and against ONNX Runtime; and the cases where a rewrite must not fire
(a constant that would broadcast the output to a bigger shape, a weight of another length,
a reduction over another axis, a wrong constant), where the result still equals both.
"""
from __future__ import annotations

import math

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(7)
F = TensorProto.FLOAT
SQRT2 = math.sqrt(2.0)

#: (batch, seq) pairs every case runs through, in this order, on one session
SHAPES = ((1, 1), (3, 5), (2, 8), (1, 1), (4, 3))


class G:
    """A tiny graph builder: ``x = g.input("x", [...])``, ``y = g.op("Relu", x)``."""

    def __init__(self, opset: int = 17):
        self.opset, self.nodes, self.inits, self.inputs, self._n = opset, [], [], [], 0

    def input(self, name: str, dims, elem=F) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, dims))
        return name

    def const(self, value, dtype=np.float32) -> str:
        self._n += 1
        name = f"c{self._n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs):
        self._n += 1
        outs = [f"{op_type.lower()}{self._n}_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"{op_type}_{self._n}", **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, *outputs: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "g", self.inputs,
                                  [helper.make_tensor_value_info(o, F, None) for o in outputs], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        return m


def _feeds(model: onnx.ModelProto, batch: int, seq: int) -> dict:
    feeds = {}
    for vi in model.graph.input:
        dims = [batch if d.dim_param == "batch" else seq if d.dim_param == "seq" else d.dim_value
                for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = RNG.standard_normal(dims).astype(np.float32)
    return feeds


def check(model: onnx.ModelProto, fires: str | None, *, rtol: float = 1e-4, atol: float = 1e-5) -> dict:
    """Run ``model`` through SHAPES with rewrites on and off and in ONNX Runtime; assert the
    rewrite ``fires`` (a name prefix) fired, or with None that no rewrite fired at all.
    Returns the fired counts."""
    on = dynashape.InferenceSession(model.SerializeToString(), optimize=True)
    off = dynashape.InferenceSession(model.SerializeToString(), optimize=False)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    # the builtin rewrites only: the accelerated-kernel plugin adds its own (the channels-last pass)
    counts = dict(Counter(f.rewrite for f in on.rewrites.fired if f.plugin == "dynashape.ops_builtin"))
    if fires is None:
        assert counts == {}, f"expected no rewrite, fired {counts}"
    else:
        assert any(name.startswith(fires) for name in counts), f"{fires} did not fire: {counts}"
    results = []
    for batch, seq in SHAPES:
        feeds = _feeds(model, batch, seq)
        results.append((feeds, on.run(None, feeds), off.run(None, feeds)))
    for feeds, got, unfused in results:   # compared after the sequence: no output was overwritten
        want = ref.run(None, feeds)
        for g, u, w in zip(got, unfused, want):
            assert g.shape == u.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, u, rtol=rtol, atol=atol)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return counts


X = ["batch", "seq", 8]


# --- Transpose pairs and Casts -------------------------------------------------------

def test_transpose_pair_becomes_one_transpose_or_identity():
    g = G()
    x = g.input("x", X)
    y = g.op("Relu", g.op("Transpose", g.op("Transpose", x, perm=[1, 0, 2]), perm=[2, 0, 1]))
    z = g.op("Relu", g.op("Transpose", g.op("Transpose", x, perm=[1, 2, 0]), perm=[2, 0, 1]))
    assert check(g.model(y, z), "transpose_pair")["transpose_pair"] == 2


def test_a_transpose_read_by_two_nodes_is_kept():
    g = G()
    x = g.input("x", X)
    t = g.op("Transpose", x, perm=[1, 0, 2])
    check(g.model(g.op("Transpose", t, perm=[1, 0, 2]), g.op("Relu", t)), None)


def test_cast_to_its_own_dtype_is_removed_and_a_real_cast_is_kept():
    g = G()
    x = g.input("x", X)
    y = g.op("Relu", g.op("Cast", g.op("Cast", x, to=F), to=F))
    z = g.op("Cast", g.op("Cast", x, to=TensorProto.FLOAT16), to=F)
    assert check(g.model(y, z), "cast_noop", atol=2e-3, rtol=2e-3)["cast_noop"] == 2


def test_identity_and_inference_dropout_are_removed_but_a_graph_output_identity_stays():
    g = G()
    x = g.input("x", X)
    y = g.op("Relu", g.op("Dropout", g.op("Identity", x), g.const(0.3)))
    kept = g.op("Identity", y)
    sess = dynashape.InferenceSession(g.model(kept).SerializeToString(), optimize=True)
    assert sess.rewrites.counts() == {"identity": 1, "dropout_inference": 1}
    assert [pn.node.op_type for pn in sess.graph.nodes] == ["Relu", "Identity"]
    check(g.model(kept), "identity")


def test_a_training_mode_dropout_stays():
    g = G(opset=13)
    x = g.input("x", X)
    y = g.op("Dropout", x, g.const(0.0), g.const(True, np.bool_))   # ratio 0: deterministic
    check(g.model(g.op("Relu", y)), None)


# --- GELU, HardSwish -------------------------------------------------------------------

def _gelu_erf(g: G, x: str, form: int, scale_div: bool = True, half=0.5, shape=()):
    s = g.op("Div", x, g.const(np.full(shape, SQRT2))) if scale_div else g.op("Mul", x, g.const(1 / SQRT2))
    one_plus = g.op("Add", g.op("Erf", s), g.const(1.0))
    h = g.const(np.full(shape, half))
    if form == 0:
        return g.op("Mul", g.op("Mul", x, one_plus), h)
    if form == 1:
        return g.op("Mul", x, g.op("Mul", one_plus, h))
    return g.op("Mul", g.op("Mul", h, x), one_plus)


@pytest.mark.parametrize("scale_div", [True, False])
@pytest.mark.parametrize("form", [0, 1, 2])
def test_gelu_erf_forms(form, scale_div):
    g = G()
    x = g.input("x", X)
    check(g.model(_gelu_erf(g, x, form, scale_div)), "gelu_erf")


def test_gelu_erf_does_not_fire_where_a_constant_broadcasts_or_differs():
    g = G()
    x = g.input("x", ["batch", 8])
    wide = _gelu_erf(g, x, 0, shape=(1, 1, 1))       # (1, 1, 1) makes the output rank 3
    other = _gelu_erf(g, g.input("y", ["batch", 8]), 0, half=0.6)
    check(g.model(wide, other), None)


def _gelu_tanh(g: G, x: str, cube_by_pow: bool, form: int):
    cube = g.op("Pow", x, g.const(3.0)) if cube_by_pow else g.op("Mul", x, g.op("Mul", x, x))
    inner = g.op("Mul", g.op("Add", x, g.op("Mul", cube, g.const(0.044715))), g.const(math.sqrt(2 / math.pi)))
    one_plus = g.op("Add", g.op("Tanh", inner), g.const(1.0))
    if form == 0:
        return g.op("Mul", g.op("Mul", x, g.const(0.5)), one_plus)
    if form == 1:
        return g.op("Mul", g.op("Mul", x, one_plus), g.const(0.5))
    return g.op("Mul", x, g.op("Mul", one_plus, g.const(0.5)))


@pytest.mark.parametrize("cube_by_pow", [True, False])
@pytest.mark.parametrize("form", [0, 1, 2])
def test_gelu_tanh_forms(cube_by_pow, form):
    g = G()
    x = g.input("x", X)
    check(g.model(_gelu_tanh(g, x, cube_by_pow, form)), "gelu_tanh")


def _hard_swish(g: G, x: str, form: int):
    gate = g.op("Clip", g.op("Add", x, g.const(3.0)), g.const(0.0), g.const(6.0))
    if form == 0:
        return g.op("Div", g.op("Mul", x, gate), g.const(6.0))
    if form == 1:
        return g.op("Mul", g.op("Mul", x, gate), g.const(1 / 6))
    return g.op("Mul", x, g.op("Div", gate, g.const(6.0)))


@pytest.mark.parametrize("form", [0, 1, 2])
def test_hard_swish_forms(form):
    g = G(opset=13)
    x = g.input("x", X)
    check(g.model(_hard_swish(g, x, form)), "hard_swish")


# --- LayerNormalization, RMSNormalization -----------------------------------------------

def _mean(g: G, x: str, axes):
    if g.opset >= 18:
        return g.op("ReduceMean", x, g.const(axes, np.int64))
    return g.op("ReduceMean", x, axes=axes)


def _layer_norm(g: G, x: str, axes=(-1,), gamma_len=8):
    d = g.op("Sub", x, _mean(g, x, list(axes)))
    var = _mean(g, g.op("Pow", d, g.const(2.0)), list(axes))
    normed = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
    gamma, beta = RNG.standard_normal(gamma_len), RNG.standard_normal(gamma_len)
    return g.op("Add", g.op("Mul", normed, g.const(gamma)), g.const(beta))


@pytest.mark.parametrize("opset", [13, 18])
def test_decomposed_layer_norm(opset):
    g = G(opset=opset)
    x = g.input("x", X)
    assert check(g.model(_layer_norm(g, x)), "layer_norm")


@pytest.mark.parametrize("opset", [13, 18])
def test_layer_norm_over_another_axis_or_with_a_broadcast_gamma_stays(opset):
    g = G(opset=opset)
    x = g.input("x", ["batch", 8, 8])
    check(g.model(_layer_norm(g, x, axes=(1,)), _layer_norm(g, g.input("y", X), gamma_len=1)), None)


def _rms_norm(g: G, x: str, form: int, weight_len=8):
    ms = _mean(g, g.op("Pow", x, g.const(2.0)), [-1])
    root = g.op("Sqrt", g.op("Add", ms, g.const(1e-6)))
    if form == 0:
        scaled = g.op("Div", x, root)
    elif form == 1:
        scaled = g.op("Mul", x, g.op("Reciprocal", root))
    else:
        scaled = g.op("Mul", x, g.op("Div", g.const(1.0), root))
    return g.op("Mul", scaled, g.const(RNG.standard_normal(weight_len)))


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("form", [0, 1, 2])
def test_llama_rms_norm(form, opset):
    g = G(opset=opset)
    x = g.input("x", X)
    check(g.model(_rms_norm(g, x, form)), "rms_norm")


def test_rms_norm_with_a_weight_of_another_length_stays():
    g = G()
    check(g.model(_rms_norm(g, g.input("x", ["batch", "seq", 1]), 0, weight_len=8)), None)


# --- Conv ------------------------------------------------------------------------------

IMG = ["batch", 3, "seq", "seq"]


def _conv(g: G, x: str, bias: bool = True, **attrs):
    w = g.const(RNG.standard_normal((4, 3, 3, 3)) * 0.3)
    ins = [x, w] + ([g.const(RNG.standard_normal(4))] if bias else [])
    return g.op("Conv", *ins, pads=[1, 1, 1, 1], **attrs)


@pytest.mark.parametrize("bias", [True, False])
def test_conv_batchnorm_folds_into_the_weights(bias):
    g = G()
    y = _conv(g, g.input("x", IMG), bias)
    params = [g.const(RNG.uniform(0.5, 1.5, 4)), g.const(RNG.standard_normal(4)),
              g.const(RNG.standard_normal(4)), g.const(RNG.uniform(0.5, 2.0, 4))]
    check(g.model(g.op("BatchNormalization", y, *params, epsilon=1e-3)), "conv_batchnorm")


ACTIVATIONS = [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}), ("LeakyRelu", {"alpha": 0.1}),
               ("HardSigmoid", {"alpha": 0.25, "beta": 0.4}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
               ("Clip", "inputs")]


def _activation(g: G, y: str, op_type: str, attrs):
    if attrs == "inputs":
        return g.op("Clip", y, g.const(-0.5), g.const(0.8))
    return g.op(op_type, y, **attrs)


@pytest.mark.parametrize("op_type,attrs", ACTIVATIONS)
def test_conv_activation_fuses(op_type, attrs):
    g = G(opset=20)
    y = _activation(g, _conv(g, g.input("x", IMG)), op_type, attrs)
    check(g.model(y), f"fusedconv_conv_{op_type.lower()}")


def test_conv_clip_with_attributes_fuses():
    g = G(opset=6)
    check(g.model(g.op("Clip", _conv(g, g.input("x", IMG)), min=0.0, max=6.0)), "fusedconv_conv_clip")


def test_a_conv_output_read_twice_keeps_its_activation_apart():
    g = G()
    y = _conv(g, g.input("x", IMG))
    check(g.model(g.op("Relu", y), y), None)


# --- MatMul ----------------------------------------------------------------------------

def _linear(g: G, x: str, k: int = 8, n: int = 6, bias_shape=None):
    y = g.op("MatMul", x, g.const(RNG.standard_normal((k, n))))
    return g.op("Add", y, g.const(RNG.standard_normal(bias_shape or (n,))))


def test_matmul_bias():
    g = G()
    check(g.model(_linear(g, g.input("x", X))), "matmul_bias")


def test_matmul_with_a_bias_that_is_not_a_vector_of_n_stays():
    g = G()
    x = g.input("x", ["batch", 8])
    check(g.model(_linear(g, x, bias_shape=(3, 1, 6))), None)   # broadcasts the output to rank 3


@pytest.mark.parametrize("x_dims, bias_shape", [(["batch", 8], (1, 6)), (X, (1, 1, 6)), (X, (1, 6))])
def test_matmul_bias_row_behind_leading_ones_fuses_as_a_vector(x_dims, bias_shape):
    """scikit-learn's MLP writes intercepts [1, N]: no higher in rank than the output, so adding
    it is adding its 1-D form; the fused node takes a 1-D copy."""
    g = G()
    check(g.model(_linear(g, g.input("x", x_dims), bias_shape=bias_shape)), "matmul_bias")


def test_matmul_bias_row_of_a_higher_rank_than_the_output_stays():
    g = G()
    check(g.model(_linear(g, g.input("x", ["batch", 8]), bias_shape=(1, 1, 6))), None)   # output rank 3


@pytest.mark.parametrize("op_type,attrs", ACTIVATIONS)
def test_matmul_bias_activation_fuses(op_type, attrs):
    g = G(opset=20)
    y = _activation(g, _linear(g, g.input("x", X)), op_type, attrs)
    check(g.model(y), f"fusedmatmul_fusedmatmul_{op_type.lower()}")


def _gemm(g: G, x: str, trans_b: int = 0, **attrs):
    w = RNG.standard_normal((6, 8) if trans_b else (8, 6))
    return g.op("Gemm", x, g.const(w), g.const(RNG.standard_normal(6)), transB=trans_b, **attrs)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("op_type,attrs", ACTIVATIONS)
def test_gemm_activation_fuses(op_type, attrs, trans_b):
    g = G(opset=20)
    y = _activation(g, _gemm(g, g.input("x", ["batch", 8]), trans_b), op_type, attrs)
    check(g.model(y), f"fusedmatmul_gemm_{op_type.lower()}")


def _reshaped(g: G, y: str, shape) -> str:
    return g.op("Reshape", y, g.const(np.array(shape), np.int64))


def _clip_suffix(attrs) -> str:
    return "_2" if attrs == "inputs" else ""


@pytest.mark.parametrize("op_type,attrs", ACTIVATIONS)
def test_an_activation_after_a_reshape_of_a_gemm_fuses_and_the_reshape_follows(op_type, attrs):
    """GPT-2's MLP (transformers' Conv1D): Gemm on the flattened rows, Reshape back, Gelu."""
    g = G(opset=20)
    y = _activation(g, _reshaped(g, _gemm(g, g.input("x", ["batch", 8])), [-1, 2, 3]), op_type, attrs)
    counts = check(g.model(y), "fusedmatmul_gemm")
    assert counts == {f"fusedmatmul_gemm_{op_type.lower()}{_clip_suffix(attrs)}_through_reshape": 1}


@pytest.mark.parametrize("op_type,attrs", ACTIVATIONS)
def test_an_activation_after_a_reshape_of_a_fused_matmul_fuses(op_type, attrs):
    g = G(opset=20)
    y = _activation(g, _reshaped(g, _linear(g, g.input("x", X)), [0, 0, 3, 2]), op_type, attrs)
    counts = check(g.model(y), "fusedmatmul_fusedmatmul")
    assert f"fusedmatmul_fusedmatmul_{op_type.lower()}{_clip_suffix(attrs)}_through_reshape" in counts


def test_a_clip_without_bounds_after_a_reshape_fuses():
    g = G(opset=11)
    y = g.op("Clip", _reshaped(g, _linear(g, g.input("x", X)), [0, -1]))
    assert "fusedmatmul_fusedmatmul_clip_0_through_reshape" in check(g.model(y), "fusedmatmul")
    g = G(opset=11)
    y = g.op("Clip", _reshaped(g, _gemm(g, g.input("x", ["batch", 8])), [-1, 3, 2]))
    assert check(g.model(y), "fusedmatmul") == {"fusedmatmul_gemm_clip_0_through_reshape": 1}


def test_a_reshape_read_twice_keeps_the_activation_apart():
    g = G(opset=13)
    r = _reshaped(g, _gemm(g, g.input("x", ["batch", 8])), [-1, 2, 3])
    check(g.model(g.op("Relu", r), r), None)
    g = G(opset=13)
    h = _gemm(g, g.input("x", ["batch", 8]))
    check(g.model(g.op("Relu", _reshaped(g, h, [-1, 3, 2])), h), None)   # the Gemm's output read too


def test_gemm_with_alpha_or_transposed_a_keeps_its_activation_apart():
    g = G(opset=13)
    y = g.op("Relu", _gemm(g, g.input("x", ["batch", 8]), alpha=2.0))
    z = g.op("Relu", g.op("Gemm", g.input("xt", [8, "batch"]), g.const(RNG.standard_normal((8, 6))), transA=1))
    check(g.model(y, z), None)


def test_matmul_with_transposed_b():
    g = G()
    a, b = g.input("a", ["batch", "seq", 8]), g.input("b", ["batch", 5, 8])
    check(g.model(g.op("MatMul", a, g.op("Transpose", b, perm=[0, 2, 1]))), "matmul_transposed_b")


def test_matmul_with_another_transpose_stays():
    g = G()
    a, b = g.input("a", ["seq", 8]), g.input("b", [8, 2, 4])
    check(g.model(g.op("MatMul", a, g.op("Transpose", b, perm=[1, 0, 2]))), None)


# --- attention -------------------------------------------------------------------------

HEADS = ["batch", 2, "seq", 4]


def _attention(g: G, scale_op, mask_dims=None, axis=-1, opset_mask=False):
    q, k, v = g.input("q", HEADS), g.input("k", HEADS), g.input("v", HEADS)
    s = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    if scale_op == "Mul":
        s = g.op("Mul", s, g.const(0.5))
    elif scale_op == "Div":
        s = g.op("Div", s, g.const(2.0))
    if mask_dims is not None:
        s = g.op("Add", s, g.input("mask", mask_dims))
    return g.op("MatMul", g.op("Softmax", s, axis=axis), v)


@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("scale_op", ["Mul", "Div", None])
def test_attention_core(scale_op, with_mask):
    g = G(opset=13)
    check(g.model(_attention(g, scale_op, ["batch", 1, 1, "seq"] if with_mask else None)), "attention")


def test_attention_with_a_mask_that_broadcasts_the_scores_or_softmax_over_another_axis_stays():
    g = G(opset=13)
    wide = _attention(g, "Mul", [3, "batch", 1, 1, "seq"])     # the mask makes the scores rank 5
    check(g.model(wide), "matmul_transposed_b")                # only the K transpose is absorbed
    g = G(opset=13)
    check(g.model(_attention(g, "Div", None, axis=2)), "matmul_transposed_b")


def _attention_of_projections(g: G, k_as_output: bool):
    """BERT's layout: Q, K, V (B, S, H, D) made heads-first by Transposes, K's straight to
    (B, H, D, S) ([0, 2, 3, 1]); or GPT-2's: K (B, H, S, D), also a graph output (the
    present cache), transposed [0, 1, 3, 2]."""
    x = ["batch", "seq", 2, 4]
    q = g.op("Transpose", g.input("q", x), perm=[0, 2, 1, 3])
    v = g.op("Transpose", g.input("v", x), perm=[0, 2, 1, 3])
    if k_as_output:
        k = g.op("Identity", g.op("Transpose", g.input("k", x), perm=[0, 2, 1, 3]))
        kt = g.op("Transpose", k, perm=[0, 1, 3, 2])
    else:
        k, kt = None, g.op("Transpose", g.input("k", x), perm=[0, 2, 3, 1])
    s = g.op("Div", g.op("MatMul", q, kt), g.const(2.0))
    y = g.op("MatMul", g.op("Softmax", s, axis=-1), v)
    return (y, k) if k_as_output else (y,)


@pytest.mark.parametrize("compiled", [True, {"fast"}, False], ids=["onednn", "numba", "numpy"])
@pytest.mark.parametrize("k_as_output", [False, True], ids=["bert", "gpt2"])
def test_the_transpose_that_makes_kt_is_read_as_a_view_by_fused_attention(k_as_output, compiled):
    g = G(opset=13)
    model = g.model(*_attention_of_projections(g, k_as_output))
    counts = check(model, "attention_k_transpose")
    assert counts.get("attention_k_transpose") == 1
    sess = dynashape.InferenceSession(model.SerializeToString(), optimize=True, compiled_kernels=compiled)
    attention = [st.node.node for st in sess.program.steps if st.node.node.op_type == "FusedAttention"]
    assert [list(n.attrs["perm_k"]) for n in attention] == [[0, 1, 3, 2] if k_as_output else [0, 2, 3, 1]]
    assert sum(st.node.node.op_type == "Transpose" for st in sess.program.steps) == (3 if k_as_output else 2)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq in SHAPES:
        feeds = _feeds(model, batch, seq)
        for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fused_attention_names_a_perm_k_that_is_no_permutation():
    """perm_k must permute input 1's axes: a bad one is a ShapeInferenceError of kind
    InvalidAttribute naming it, not a crash inside a kernel; a good one permutes K's shape."""
    from dynashape.ops_builtin import fusions
    from dynashape.testing import infer_node
    q, k, v = np.zeros((1, 2, 3, 4), np.float32), np.zeros((1, 5, 2, 4), np.float32), np.zeros((1, 2, 5, 6), np.float32)
    shapes, _ = infer_node("FusedAttention", [q, k, v], {"perm_k": [0, 2, 3, 1]}, domain=fusions.DOMAIN, opset=1)
    assert shapes == [(1, 2, 3, 6)]
    with pytest.raises(dynashape.ShapeInferenceError, match=r"perm_k \[0, 2, 2, 1\] is not a permutation") as e:
        infer_node("FusedAttention", [q, k, v], {"perm_k": [0, 2, 2, 1]}, domain=fusions.DOMAIN, opset=1)
    assert e.value.kind == "InvalidAttribute"


# --- coverage --------------------------------------------------------------------------

def _sibling_stumps():
    """Two three-class TreeEnsembleClassifiers of one X, labels unread (tests/ops/test_ml_trees.py
    checks their values)."""
    stump = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                 nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0],
                 nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0],
                 class_nodeids=[1, 2], class_ids=[0, 2], class_weights=[1.0, 1.0], classlabels_int64s=[0, 1, 2])
    nodes = [helper.make_node("TreeEnsembleClassifier", ["x"], [f"label{k}", f"z{k}"], domain="ai.onnx.ml", **stump)
             for k in range(2)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["batch", 2])],
                              [helper.make_tensor_value_info(f"z{k}", F, None) for k in range(2)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])


def _cases_fired() -> set:
    """Names of the builtin rewrites the positive cases above make fire."""
    models = []
    for form in range(3):
        for scale_div in (True, False):
            g = G()
            models.append(g.model(_gelu_erf(g, g.input("x", X), form, scale_div)))
        for cube in (True, False):
            g = G()
            models.append(g.model(_gelu_tanh(g, g.input("x", X), cube, form)))
        g = G(opset=13)
        models.append(g.model(_hard_swish(g, g.input("x", X), form)))
        for opset in (13, 18):
            g = G(opset=opset)
            models.append(g.model(_rms_norm(g, g.input("x", X), form)))
    for opset in (13, 18):
        g = G(opset=opset)
        models.append(g.model(_layer_norm(g, g.input("x", X))))
    for bias in (True, False):
        g = G()
        y = _conv(g, g.input("x", IMG), bias)
        models.append(g.model(g.op("BatchNormalization", y, *[g.const(np.ones(4))] * 4)))
    for op_type, attrs in ACTIVATIONS:
        g = G(opset=20)
        models.append(g.model(_activation(g, _conv(g, g.input("x", IMG)), op_type, attrs)))
        g = G(opset=20)
        models.append(g.model(_activation(g, _linear(g, g.input("x", X)), op_type, attrs)))
        g = G(opset=20)
        models.append(g.model(_activation(g, _gemm(g, g.input("x", ["batch", 8])), op_type, attrs)))
        g = G(opset=20)
        models.append(g.model(_activation(g, _reshaped(g, _gemm(g, g.input("x", ["batch", 8])), [-1, 2, 3]),
                                          op_type, attrs)))
        g = G(opset=20)
        models.append(g.model(_activation(g, _reshaped(g, _linear(g, g.input("x", X)), [0, 0, 3, 2]),
                                          op_type, attrs)))
    for opset in (6,):
        g = G(opset=opset)
        models.append(g.model(g.op("Clip", _conv(g, g.input("x", IMG)), min=0.0, max=6.0)))
        g = G(opset=opset)
        models.append(g.model(g.op("Clip", _linear(g, g.input("x", X)), min=0.0, max=6.0)))
    g = G(opset=11)
    models.append(g.model(g.op("Clip", _gemm(g, g.input("x", ["batch", 8])))))
    g = G(opset=11)
    models.append(g.model(g.op("Clip", _reshaped(g, _linear(g, g.input("x", X)), [0, -1]))))
    g = G(opset=11)
    models.append(g.model(g.op("Clip", _reshaped(g, _gemm(g, g.input("x", ["batch", 8])), [-1, 3, 2]))))
    g = G()
    x = g.input("x", X)
    models.append(g.model(g.op("Transpose", g.op("Transpose", x, perm=[1, 0, 2]), perm=[1, 0, 2]),
                          g.op("Relu", g.op("Cast", x, to=F))))
    g = G()
    a, b = g.input("a", ["batch", "seq", 8]), g.input("b", ["batch", 5, 8])
    models.append(g.model(g.op("MatMul", a, g.op("Transpose", b, perm=[0, 2, 1]))))
    for scale_op in ("Mul", "Div", None):
        for mask in (None, ["batch", 1, 1, "seq"]):
            g = G(opset=13)
            models.append(g.model(_attention(g, scale_op, mask)))
    g = G()
    x = g.input("x", X)
    models.append(g.model(g.op("Relu", g.op("Dropout", g.op("Identity", x)))))
    models.append(_sibling_stumps())
    fired = set()
    for m in models:
        fired |= set(dynashape.InferenceSession(m.SerializeToString(), optimize=True).rewrites.counts())
    return fired


def test_every_builtin_rewrite_has_a_case():
    builtin = {rw.name for rw in dynashape.get_registry().rewrites() if rw.plugin == "dynashape.ops_builtin"}
    assert builtin - _cases_fired() == set()


@pytest.mark.parametrize("optimize", [True, False])
def test_a_session_fed_an_overridable_initializer_keeps_its_rewrite_setting(optimize):
    g = G()
    y = _linear(g, g.input("x", X))
    m = g.model(y)
    w = m.graph.initializer[0]
    m.graph.input.append(helper.make_tensor_value_info(w.name, F, list(w.dims)))   # overridable
    sess = dynashape.InferenceSession(m.SerializeToString(), optimize=optimize)
    feeds = {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32), w.name: np.ones(w.dims, np.float32)}
    (got,) = sess.run(None, feeds)
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (inner,) = sess._overriding.values()
    assert bool(inner.rewrites.fired) is optimize and inner.compiled_kernels is sess.compiled_kernels
