"""The builtin graph rewrites (docs/REWRITES.md has the table of what each replaces).

Order (priority, highest first): Transpose pairs, no-op Casts, Identity and inference-mode
Dropout (50; the last three are removed outright, their readers reading the input); GELU in its erf and
tanh forms, HardSwish, LayerNormalization and RMSNormalization decomposed into
elementwise ops and reductions (40); Conv + BatchNormalization folded into the Conv's
weights (30); the attention core MatMul -> scale -> + mask -> Softmax -> MatMul (25);
MatMul + bias Add and MatMul with a transposed B (20); sibling TreeEnsembleClassifiers of
one X walked as one TreeEnsembleRegressor (15, a graph pass: :mod:`.ml_forests_merge`); an
activation after a FusedMatMul or a Conv absorbed into it (10).

Every rewrite is exact for every shape its symbols allow: it checks dtypes (float32 or
float64 where a fused kernel computes), that constants broadcast without changing the
output's shape (a scalar-like constant has at most the rank of the tensor it meets),
which axes a reduction reduces, and that weights have the length of the axis they scale,
and declines (build returns None) otherwise. Sources: the ONNX operator spec sections
of Gelu-20, HardSwish-14, LayerNormalization-17, RMSNormalization-23, BatchNormalization-15
and Conv-11; onnxruntime's transformer fusions (onnxruntime/core/optimizer) for the
patterns exporters emit.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
from dynashape.dtypes import np_dtype
from dynashape.records import OpLibrary
from dynashape.rewrite import Match, Pattern, const, op, value

from .fusions import DOMAIN, EPILOGUES
from .ml_forests_merge import SIBLING_FORESTS

lib = OpLibrary(rewrites=[SIBLING_FORESTS])

_FLOAT_NAMES = ("float32", "float64")
_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _register(prefix: str, patterns, build, priority: int, description: str) -> None:
    """One rewrite per pattern, named ``prefix_0``, ``prefix_1``, ..., all built by ``build``."""
    for i, pattern in enumerate(patterns):
        lib.rewrite(f"{prefix}_{i}", pattern, priority=priority, description=description)(build)


# predicates --------------------------------------------------------------------------

def _is_float(m: Match, name: str) -> bool:
    dt = m.dtype(name)
    return dt is not None and np.dtype(dt).name in _FLOAT_NAMES


def _scalar_like(m: Match, c: str, x: str) -> bool:
    """Constant ``c`` holds one element and has at most ``x``'s rank and its dtype: ``x op c``
    keeps ``x``'s shape and dtype."""
    v, rank = m.const(c), m.rank(x)
    return v is not None and rank is not None and v.size == 1 and v.ndim <= rank and v.dtype == m.dtype(x)


def _scalar(m: Match, c: str) -> float:
    return float(np.asarray(m.const(c)).reshape(-1)[0])


def _last_axis_vector(m: Match, c: str, x: str) -> bool:
    """Constant ``c`` is 1-D with the length of ``x``'s last dim (and ``x``'s dtype)."""
    v, shape = m.const(c), m.shape(x)
    return (v is not None and shape is not None and len(shape) >= 1 and v.ndim == 1
            and m.same_dim(v.shape[0], shape[-1]) and v.dtype == m.dtype(x))


def _reduces_last_axis(m: Match, node: str, x: str) -> bool:
    """A ReduceMean over the last axis only, keeping dims (axes as attribute or constant input)."""
    n = m.node(node)
    if n.attrs.get("keepdims", 1) != 1 or n.attrs.get("noop_with_empty_axes", 0):
        return False
    axes = n.attrs.get("axes")
    if axes is None and len(n.inputs) > 1 and n.inputs[1]:
        axes = m.const(n.inputs[1])
        axes = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    rank = m.rank(x)
    return axes is not None and rank is not None and len(axes) == 1 and axes[0] in (-1, rank - 1)


def _mean_of(x: str, name: str):
    """ReduceMean(x) with its axes as attribute (opset < 18) or as a constant input."""
    return [op("ReduceMean", x, name=name), op("ReduceMean", x, const(), name=name)]


# Transpose pairs and no-op Casts -----------------------------------------------------

@lib.rewrite("transpose_pair", op("Transpose", op("Transpose", value("x"), name="inner"), name="outer"),
             priority=50, description="Transpose(Transpose(x)) -> one Transpose (or Identity)")
def _transpose_pair(m: Match):
    rank = m.rank("x")
    if rank is None:
        return None
    inner = m.attr("inner", "perm") or list(range(rank))[::-1]
    outer = m.attr("outer", "perm") or list(range(rank))[::-1]
    perm = [inner[p] for p in outer]
    if perm == list(range(rank)):
        return [m.make("Identity", [m.value("x")])]
    return [m.make("Transpose", [m.value("x")], perm=perm)]


@lib.rewrite("cast_noop", op("Cast", value("x"), name="cast"), priority=50,
             description="Cast to the dtype the input already has: removed (its readers read the input)")
def _cast_noop(m: Match):
    dt = m.dtype("x")
    to = m.attr("cast", "to")
    if dt is None or to is None or np_dtype(int(to)) != np.dtype(dt):
        return None
    m.forward(m.root.outputs[0], m.value("x"))
    return []


@lib.rewrite("identity", op("Identity", value("x")), priority=50,
             description="Identity (not a graph output): removed, its readers read the input")
def _identity(m: Match):
    if m.dtype("x") is None or not isinstance(m.dtype("x"), np.dtype):
        return None   # sequences and optionals keep their Identity (a copy of the container)
    m.forward(m.root.outputs[0], m.value("x"))
    return []


@lib.rewrite("dropout_inference", op("Dropout", value("x"), more_inputs=True, name="dropout"), priority=50,
             description="Dropout in inference mode with only its output read: removed")
def _dropout(m: Match):
    n = m.node("dropout")
    used = [o for o in n.outputs[1:] if o]
    ins = list(n.inputs) + ["", ""]
    training = ins[2] and (m.const(ins[2]) is None or bool(np.asarray(m.const(ins[2])).reshape(-1)[0]))
    if used or training or n.attrs.get("is_test", 1) == 0 and m.opset("dropout") < 7 or \
            not isinstance(m.dtype("x"), np.dtype):
        return None
    m.forward(n.outputs[0], m.value("x"))
    return []


# GELU --------------------------------------------------------------------------------

def _gelu_erf_patterns():
    x = value("x")
    inner = [op("Div", x, const("s")), op("Mul", x, const("s"))]
    out = []
    for scaled in inner:
        one_plus = op("Add", op("Erf", scaled), const("one"))
        out += [op("Mul", op("Mul", x, one_plus), const("half")),       # (x * (1 + erf)) * 0.5
                op("Mul", x, op("Mul", one_plus, const("half"))),       # x * ((1 + erf) * 0.5)
                op("Mul", op("Mul", x, const("half")), one_plus)]       # (x * 0.5) * (1 + erf)
    return out


def _gelu_erf(m: Match):
    """x * 0.5 * (1 + erf(x / sqrt(2))) in any association -> Gelu (Gelu-20)."""
    x = m.value("x")
    if not _is_float(m, x) or not all(_scalar_like(m, c, x) for c in ("s", "one", "half")):
        return None
    scale = _scalar(m, "s")
    root = m.root
    divides = any(n.op_type == "Div" for n in m.matched)
    want = _SQRT2 if divides else 1.0 / _SQRT2
    if abs(scale - want) > 1e-5 * want or _scalar(m, "one") != 1.0 or _scalar(m, "half") != 0.5:
        return None
    return [m.make("Gelu", [x], outputs=root.outputs, opset=20, approximate="none")]


_register("gelu_erf", _gelu_erf_patterns(), _gelu_erf, 40,
          "x * 0.5 * (1 + erf(x / sqrt 2)) -> Gelu")


def _gelu_tanh_patterns():
    x = value("x")
    cube = [op("Pow", x, const("three")), op("Mul", x, op("Mul", x, x))]
    out = []
    for c in cube:
        inner = op("Mul", op("Add", x, op("Mul", c, const("k"))), const("r"))
        one_plus = op("Add", op("Tanh", inner), const("one"))
        out += [op("Mul", op("Mul", x, const("half")), one_plus),
                op("Mul", op("Mul", x, one_plus), const("half")),
                op("Mul", x, op("Mul", one_plus, const("half")))]
    return out


def _gelu_tanh(m: Match):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> Gelu(approximate="tanh")."""
    x = m.value("x")
    consts = [c for c in ("three", "k", "r", "one", "half") if c in m.values]
    if not _is_float(m, x) or not all(_scalar_like(m, c, x) for c in consts):
        return None
    want = {"three": 3.0, "k": 0.044715, "r": _SQRT_2_OVER_PI, "one": 1.0, "half": 0.5}
    if any(abs(_scalar(m, c) - want[c]) > 1e-5 * want[c] for c in consts):
        return None
    return [m.make("Gelu", [x], opset=20, approximate="tanh")]


_register("gelu_tanh", _gelu_tanh_patterns(), _gelu_tanh, 40,
          "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) -> Gelu(tanh)")


# HardSwish ---------------------------------------------------------------------------

def _hard_swish_patterns():
    x = value("x")
    gate = op("Clip", op("Add", x, const("three")), const("lo"), const("hi"))
    return [op("Div", op("Mul", x, gate), const("six")),
            op("Mul", op("Mul", x, gate), const("sixth")),
            op("Mul", x, op("Div", gate, const("six")))]


def _hard_swish(m: Match):
    """x * Clip(x + 3, 0, 6) / 6 -> HardSwish (HardSwish-14)."""
    x = m.value("x")
    consts = [c for c in ("three", "lo", "hi", "six", "sixth") if c in m.values]
    if not _is_float(m, x) or not all(_scalar_like(m, c, x) for c in consts):
        return None
    want = {"three": 3.0, "lo": 0.0, "hi": 6.0, "six": 6.0, "sixth": 1.0 / 6.0}
    if any(abs(_scalar(m, c) - want[c]) > 1e-6 * max(want[c], 1.0) for c in consts):
        return None
    return [m.make("HardSwish", [x], opset=14)]


_register("hard_swish", _hard_swish_patterns(), _hard_swish, 40,
          "x * Clip(x + 3, 0, 6) / 6 -> HardSwish")


# LayerNormalization ------------------------------------------------------------------

def _layer_norm_patterns():
    x = value("x")
    out = []
    for form in range(2):   # both ReduceMeans with axes as attribute (opset < 18), or both as input
        d = op("Sub", x, _mean_of(x, "mean")[form], name="d")
        var = _mean_of(op("Pow", d, const("two")), "var")[form]
        normed = op("Div", d, op("Sqrt", op("Add", var, const("eps"))))
        out.append(op("Add", op("Mul", normed, const("gamma")), const("beta")))
    return out


def _layer_norm(m: Match):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis -> LayerNormalization-17."""
    x = m.value("x")
    if not (_is_float(m, x) and _reduces_last_axis(m, "mean", x) and _reduces_last_axis(m, "var", x)):
        return None
    if not (_scalar_like(m, "two", x) and _scalar(m, "two") == 2.0 and _scalar_like(m, "eps", x)):
        return None
    if not (_last_axis_vector(m, "gamma", x) and _last_axis_vector(m, "beta", x)):
        return None
    return [m.make("LayerNormalization", [x, m.value("gamma"), m.value("beta")], opset=17, axis=-1,
                   epsilon=_scalar(m, "eps"))]


_register("layer_norm", _layer_norm_patterns(), _layer_norm, 40,
          "decomposed LayerNorm over the last axis -> LayerNormalization")


# RMSNormalization (LLaMA's Pow / ReduceMean / Add / Sqrt / Div / Mul) -----------------

def _rms_norm_patterns():
    x = value("x")
    out = []
    for ms in _mean_of(op("Pow", x, const("two")), "ms"):
        root = op("Sqrt", op("Add", ms, const("eps")))
        scaled = [op("Div", x, root), op("Mul", x, op("Reciprocal", root)),
                  op("Mul", x, op("Div", const("one"), root))]
        out += [op("Mul", s, const("weight")) for s in scaled]
    return out


def _rms_norm(m: Match):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis -> RMSNormalization-23."""
    x = m.value("x")
    if not (_is_float(m, x) and _reduces_last_axis(m, "ms", x) and _last_axis_vector(m, "weight", x)):
        return None
    if not (_scalar_like(m, "two", x) and _scalar(m, "two") == 2.0 and _scalar_like(m, "eps", x)):
        return None
    if "one" in m.values and not (_scalar_like(m, "one", x) and _scalar(m, "one") == 1.0):
        return None
    return [m.make("RMSNormalization", [x, m.value("weight")], opset=23, axis=-1, epsilon=_scalar(m, "eps"))]


_register("rms_norm", _rms_norm_patterns(), _rms_norm, 40,
          "x / sqrt(mean(x^2) + eps) * w over the last axis -> RMSNormalization")


# Conv + BatchNormalization -----------------------------------------------------------

def _conv_bn_patterns():
    bn_inputs = (const("scale"), const("bias"), const("mean"), const("var"))
    return [op("BatchNormalization", op("Conv", value("x"), const("w"), name="conv"), *bn_inputs, name="bn"),
            op("BatchNormalization", op("Conv", value("x"), const("w"), const("b"), name="conv"), *bn_inputs,
               name="bn")]


def _conv_bn(m: Match):
    """BatchNormalization(Conv(x, W, B)) in inference mode with constant parameters -> one Conv
    with W' = W * s and B' = (B - mean) * s + bias, s = scale / sqrt(var + epsilon)."""
    bn = m.node("bn")
    if bn.attrs.get("training_mode", 0) or len([o for o in bn.outputs if o]) != 1:
        return None
    w = m.const("w")
    if w.dtype.name not in _FLOAT_NAMES or w.ndim < 3:
        return None
    params = [m.const(c) for c in ("scale", "bias", "mean", "var")]
    channels = w.shape[0]
    if any(p.dtype != w.dtype or p.shape != (channels,) for p in params):
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    s = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    b0 = m.const("b").astype(np.float64) if "b" in m.values else np.zeros(channels)
    if b0.shape != (channels,):
        return None
    new_w = (w.astype(np.float64) * s.reshape((channels,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    new_b = ((b0 - mean) * s + bias).astype(w.dtype)
    conv = m.node("conv")
    return [m.make("Conv", [m.value("x"), m.constant(new_w, "w_bn"), m.constant(new_b, "b_bn")],
                   outputs=bn.outputs[:1], name=conv.name, **conv.attrs)]


_register("conv_batchnorm", _conv_bn_patterns(), _conv_bn, 30,
          "Conv -> BatchNormalization (inference) folded into the Conv's weights")


# MatMul + bias, MatMul with a transposed B -------------------------------------------

@lib.rewrite("matmul_bias", op("Add", op("MatMul", value("a"), value("b"), name="mm"), const("bias")),
             priority=20, description="MatMul(A, B) + bias vector -> dynashape::FusedMatMul")
def _matmul_bias(m: Match):
    a, b, y = m.value("a"), m.value("b"), m.node("mm").outputs[0]
    if not (_is_float(m, a) and m.dtype(b) == m.dtype(a)) or (m.rank(a) or 0) < 2 or m.rank(b) != 2:
        return None
    if _last_axis_vector(m, "bias", y):
        return [m.make("FusedMatMul", [a, b, m.value("bias")], domain=DOMAIN)]
    bias = _leading_ones_row(m, "bias", y)
    if bias is None:
        return None
    return [m.make("FusedMatMul", [a, b, m.constant(bias.reshape(-1), "bias_vector")], domain=DOMAIN)]


def _leading_ones_row(m: Match, c: str, y: str):
    """Constant ``c`` when it is a row of ``y``'s last dim behind leading 1s ([1, N], as
    scikit-learn's exports write intercepts) and no longer in rank than ``y``: adding it is
    adding its 1-D form. None otherwise."""
    v, shape = m.const(c), m.shape(y)
    if v is None or shape is None or not 2 <= v.ndim <= len(shape) or any(d != 1 for d in v.shape[:-1]):
        return None
    return v if m.same_dim(v.shape[-1], shape[-1]) and v.dtype == m.dtype(y) else None


@lib.rewrite("matmul_transposed_b", op("MatMul", value("a"), op("Transpose", value("b"), name="t"), name="mm"),
             priority=20, description="MatMul(A, Transpose(B) of its last two axes) -> FusedMatMul(transB=1)")
def _matmul_transposed_b(m: Match):
    a, b = m.value("a"), m.value("b")
    rank = m.rank(b)
    if not (_is_float(m, a) and m.dtype(b) == m.dtype(a)) or rank is None or rank < 2:
        return None
    perm = m.attr("t", "perm") or list(range(rank))[::-1]
    if list(perm) != list(range(rank - 2)) + [rank - 1, rank - 2]:
        return None
    return [m.make("FusedMatMul", [a, b], domain=DOMAIN, transB=1)]


# activations absorbed into the op before them ----------------------------------------

def _activation_of(m: Match, node_name: str) -> Optional[tuple]:
    """A standalone activation node as (epilogue name, its float params), None if not one."""
    n = m.node(node_name)
    t = n.op_type
    if t in ("Relu", "Sigmoid", "Tanh", "HardSwish"):
        return t, []
    if t == "LeakyRelu":
        return t, [float(n.attrs.get("alpha", 0.01))]
    if t == "HardSigmoid":
        return t, [float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))]
    if t == "Gelu":
        approximate = n.attrs.get("approximate", "none")
        return ("GeluTanh" if approximate == "tanh" else "Gelu"), []
    if t == "Clip":
        lo, hi = n.attrs.get("min", -np.inf), n.attrs.get("max", np.inf)
        ins = list(n.inputs) + ["", ""]
        if ins[1]:
            if m.const(ins[1]) is None:
                return None
            lo = float(np.asarray(m.const(ins[1])).reshape(-1)[0])
        if ins[2]:
            if m.const(ins[2]) is None:
                return None
            hi = float(np.asarray(m.const(ins[2])).reshape(-1)[0])
        return "Clip", [float(lo), float(hi)]
    return None


_ACTIVATION_OPS = ("Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "HardSigmoid", "Gelu", "Clip")


def _absorb(m: Match, fused_op: str, attrs: dict):
    """The matched ``inner`` node with the activation ``act`` as its epilogue; where a Reshape
    (``view``) stands between them, the Reshape then follows the fused node: an elementwise
    activation commutes with relabelling the shape (transformers' Conv1D, GPT-2's MLP, runs
    ``Gemm`` on the flattened rows and reshapes before its Gelu)."""
    act = _activation_of(m, "act")
    inner = m.node("inner")
    if act is None or inner.attrs.get("activation") or not _is_float(m, inner.outputs[0]):
        return None
    assert act[0] in EPILOGUES
    attrs.update(activation=act[0], activation_params=act[1])
    view = m.nodes.get("view")
    if view is None:
        return [m.make(fused_op, list(inner.inputs), domain=DOMAIN, name=inner.name, **attrs)]
    fused = m.fresh(inner.outputs[0])
    return [m.make(fused_op, list(inner.inputs), [fused], domain=DOMAIN, name=inner.name, **attrs),
            m.make(view.op_type, [fused, *view.inputs[1:]], opset=view.opset, name=view.name, **view.attrs)]


def _activation_patterns(inner: Pattern, views: tuple):
    """(name suffix, description, pattern) of each activation read straight from ``inner`` or
    through one of the ``views`` of it."""
    for t in _ACTIVATION_OPS:
        for n_extra in ({0, 2} if t == "Clip" else {0}):
            suffix = f"_{n_extra}" if t == "Clip" else ""
            for through in ("",) + views:
                src = op(through, inner, value(), name="view") if through else inner
                tail = f"_through_{through.lower()}" if through else ""
                how = f"{t} after {through} of " if through else f"{t} after "
                yield f"_{t.lower()}{suffix}{tail}", how, op(t, src, *(const(), const())[:n_extra], name="act")


def _register_absorbing(inner_op: str, inner_domain: str, fused_op: str, views: tuple = ()) -> None:
    inner = op(inner_op, value(), value(), name="inner", domain=inner_domain, more_inputs=True)
    for suffix, how, pattern in _activation_patterns(inner, views):
        def build(m: Match):
            return _absorb(m, fused_op, dict(m.node("inner").attrs))
        lib.rewrite(f"{fused_op.lower()}_{inner_op.lower()}{suffix}", pattern, priority=10,
                    description=f"{how}{inner_op} -> {fused_op}(activation=...)")(build)


def _gemm_as_matmul(m: Match) -> Optional[dict]:
    """FusedMatMul attributes for the matched Gemm when it is A @ B' + C with alpha = beta = 1,
    A not transposed and C absent or a vector of N (Gemm-11/13: C broadcasts to (M, N))."""
    n = m.node("inner")
    if n.attrs.get("transA", 0) or n.attrs.get("alpha", 1.0) != 1.0 or n.attrs.get("beta", 1.0) != 1.0:
        return None
    if m.opset("inner") < 11 or m.rank(n.inputs[0]) != 2 or m.rank(n.inputs[1]) != 2:
        return None
    if len(n.inputs) > 2 and n.inputs[2] and not _last_axis_vector(m, n.inputs[2], n.outputs[0]):
        return None
    return {"transB": int(n.attrs.get("transB", 0))}


def _register_gemm_absorbing() -> None:
    inner = op("Gemm", value(), value(), name="inner", more_inputs=True)
    for suffix, how, pattern in _activation_patterns(inner, ("Reshape",)):
        def build(m: Match):
            attrs = _gemm_as_matmul(m)
            return None if attrs is None else _absorb(m, "FusedMatMul", attrs)
        lib.rewrite(f"fusedmatmul_gemm{suffix}", pattern, priority=10,
                    description=f"{how}Gemm (alpha = beta = 1) -> FusedMatMul(activation=...)")(build)


_register_absorbing("Conv", "", "FusedConv")
_register_absorbing("FusedMatMul", DOMAIN, "FusedMatMul", ("Reshape",))
_register_gemm_absorbing()


# the attention core ------------------------------------------------------------------

def _attention_patterns():
    scores = op("MatMul", value("q"), value("kt"), name="qk")
    out = []
    for scale_op in ("Mul", "Div", None):
        scaled = scores if scale_op is None else op(scale_op, scores, const("scale"), name="scaled")
        for masked in (scaled, op("Add", scaled, value("mask"), name="masked")):
            out.append(op("MatMul", op("Softmax", masked, name="softmax"), value("v")))
    return out   # (an Identity or inference Dropout between Softmax and MatMul is removed first)


def _attention(m: Match):
    """MatMul(Softmax(MatMul(Q, KT) * or / scale + mask, last axis), V) -> FusedAttention."""
    q, kt, v = m.value("q"), m.value("kt"), m.value("v")
    scores = m.node("qk").outputs[0]
    shape = m.shape(scores)
    if not _is_float(m, q) or m.dtype(kt) != m.dtype(q) or m.dtype(v) != m.dtype(q) or shape is None:
        return None
    if len(shape) < 2 or (m.rank(q) or 0) < 2 or (m.rank(kt) or 0) < 2 or (m.rank(v) or 0) < 2:
        return None
    softmax = m.node("softmax")
    axis = softmax.attrs.get("axis", -1 if m.opset("softmax") >= 13 else 1)
    if axis not in (-1, len(shape) - 1):
        return None
    attrs = {}
    if "scale" in m.values:
        if not _scalar_like(m, "scale", scores):
            return None
        attrs = {"scale": _scalar(m, "scale"), "divide": int(m.node("scaled").op_type == "Div")}
    inputs = [q, kt, v]
    if "mask" in m.values:
        masked = m.shape(m.node("masked").outputs[0])
        mask = m.shape("mask")
        if masked is None or mask is None or len(masked) != len(shape) or len(mask) > len(shape) or \
                not all(m.same_dim(a, b) for a, b in zip(masked, shape)) or m.dtype("mask") != m.dtype(q):
            return None
        inputs.append(m.value("mask"))
    return [m.make("FusedAttention", inputs, domain=DOMAIN, **attrs)]


_register("attention", _attention_patterns(), _attention, 25,
          "MatMul -> scale -> + mask -> Softmax -> MatMul -> FusedAttention")


def _attention_k_transpose(m: Match):
    """FusedAttention(Q, Transpose(K), V, ...) -> FusedAttention(Q, K, V, ..., perm_k): the
    transpose becomes a view the kernels read K through (composed with a perm_k already there)."""
    rank = m.rank("k")
    if rank is None:
        return None
    perm = [int(a) for a in m.attr("t", "perm", None) or range(rank - 1, -1, -1)]
    inner = m.attr("attention", "perm_k", None)
    if inner is not None:
        perm = [perm[a] for a in inner]
    node = m.node("attention")
    inputs = [node.inputs[0], m.value("k")] + list(node.inputs[2:])
    return [m.make("FusedAttention", inputs, domain=DOMAIN, **{**node.attrs, "perm_k": perm})]


lib.rewrite("attention_k_transpose",
            op("FusedAttention", value("q"), op("Transpose", value("k"), name="t"), value("v"), more_inputs=True,
               name="attention", domain=DOMAIN),
            priority=24, description="Transpose -> FusedAttention's KT: read through perm_k, not copied")(
    _attention_k_transpose)
