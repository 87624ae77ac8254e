"""com.microsoft contrib ops of the example plugin (EmbedLayerNormalization,
SkipLayerNormalization, Attention) against ONNX Runtime's contrib kernels, each model on ONE
dynashape session through changing shapes (symbolic batch / sequence dims), and the
onnxruntime-optimized zoo models (../shared/zoo/ortopt) that use them."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dynashape_example")
pytest.importorskip("onnxruntime")

import dynashape  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tests.conftest import assert_runs_match_ort, expected_outputs, ort_run, ort_session, shared_path  # noqa: E402

MS = "com.microsoft"
RNG = np.random.default_rng(20240611)
F32, I32 = TensorProto.FLOAT, TensorProto.INT32


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def ms_model(op_type, inputs, outputs, attrs=None, initializers=(), name="node"):
    """One com.microsoft node. ``inputs``: (name, elem_type, dims) or None (absent optional
    input); initializers: (name, array) pairs, listed among ``inputs`` by name only (a str)."""
    names, vis = [], []
    for item in inputs:
        if item is None:
            names.append("")
        elif isinstance(item, str):
            names.append(item)
        else:
            names.append(item[0])
            vis.append(helper.make_tensor_value_info(*item))
    node = helper.make_node(op_type, names, list(outputs), domain=MS, name=name, **(attrs or {}))
    outs = [helper.make_tensor_value_info(o, I32 if o == "mask_index" else F32, None) for o in outputs if o]
    graph = helper.make_graph([node], "g", vis, outs,
                              initializer=[numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def first_run(model, feeds):
    """A session and its first run (a broken shape rule is found at import but reported by
    the run that meets it, naming the node)."""
    return dynashape.InferenceSession(model).run(None, feeds)


def assert_matches_ort(model, feeds_list, rtol=1e-4, atol=1e-5, ort_fixed_in=None, spec=None):
    """Like conftest's assert_runs_match_ort with float32 matmul/softmax tolerances: every feed
    dict on ONE session, each run compared (dtype, shape, values) with ONNX Runtime's, or with
    ``spec(model, feeds)`` where the installed onnxruntime predates ``ort_fixed_in``
    (conftest's expected_outputs)."""
    sess = dynashape.InferenceSession(model)
    results = [sess.run(None, feeds) for feeds in feeds_list]
    for k, (got, feeds) in enumerate(zip(results, feeds_list)):   # compared after all runs
        want = expected_outputs(model, feeds, ort_fixed_in, spec=spec)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.dtype, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"run {k}")
    return sess


# ----------------------------------------------------------------------------------------
# SkipLayerNormalization
# ----------------------------------------------------------------------------------------

H = 16

#: onnxruntime < 1.30 returns None for SkipLayerNormalization's optional mean and
#: inv_std_var outputs (outputs 1 and 2; no specific issue found, fixed in 1.30)
SLN_STATS_FIXED_IN = (1, 30)


def _ort_with_numpy_stats(model, feeds):
    """ONNX Runtime's outputs of a one-node SkipLayerNormalization model, with mean and
    inv_std_var (which onnxruntime < 1.30 returns as None) computed in numpy instead: over the
    last axis of input + skip (+ bias), mean and 1 / sqrt(variance + epsilon), keepdims."""
    outs = ort_run(model, feeds)
    node = model.graph.node[0]
    values = {**{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **feeds}
    total = values[node.input[0]] + values[node.input[1]]
    if len(node.input) > 4 and node.input[4]:
        total = total + values[node.input[4]]
    epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
    total = total.astype(np.float64)
    mean = total.mean(-1, keepdims=True)
    stats = {1: mean.astype(np.float32),
             2: (1.0 / np.sqrt(np.square(total - mean).mean(-1, keepdims=True) + epsilon)).astype(np.float32)}
    slots = [list(node.output).index(o.name) for o in model.graph.output]
    return [stats.get(slot, out) for slot, out in zip(slots, outs)]


@pytest.mark.parametrize("skip_dims", [["batch", "seq", H], [1, "seq", H], ["seq", H]],
                         ids=["full", "batch1", "2d"])
@pytest.mark.parametrize("beta,bias", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("outputs", [("y",), ("y", "mean", "inv_std"), ("y", "", "", "sum"),
                                     ("y", "mean", "inv_std", "sum")], ids=["y", "stats", "sum", "all"])
def test_skip_layer_norm_matches_ort(skip_dims, beta, bias, outputs):
    inputs = [("x", F32, ["batch", "seq", H]), ("skip", F32, skip_dims), "gamma",
              "beta" if beta else None, "bias" if bias else None]
    while inputs[-1] is None:
        inputs.pop()
    inits = [("gamma", rand(H)), ("beta", rand(H)), ("bias", rand(H))]
    model = ms_model("SkipLayerNormalization", inputs, outputs, {"epsilon": 1e-5},
                     [(n, a) for n, a in inits if n in inputs])
    feeds = []
    for b, s in ((2, 3), (1, 7), (4, 1), (2, 3)):
        shape = [b if d == "batch" else s if d == "seq" else d for d in skip_dims]
        feeds.append({"x": rand(b, s, H, scale=2.0), "skip": rand(*shape)})
    sess = assert_runs_match_ort(model, feeds, ort_fixed_in=SLN_STATS_FIXED_IN, spec=_ort_with_numpy_stats)
    assert sess.get_inferred_outputs()[0].shape == ["batch", "seq", H]


def test_skip_layer_norm_2d_tokens_default_epsilon():
    """(tokens, hidden) input; epsilon absent is ONNX Runtime's default 1e-12 (small values
    make the difference to 1e-5 visible)."""
    model = ms_model("SkipLayerNormalization", [("x", F32, ["tokens", H]), ("skip", F32, ["tokens", H]), "gamma"],
                     ["y", "mean", "inv_std", "sum"], initializers=[("gamma", rand(H))])
    feeds = [{"x": rand(n, H, scale=1e-3), "skip": rand(n, H, scale=1e-3)} for n in (5, 2, 9)]
    sess = assert_matches_ort(model, feeds, ort_fixed_in=SLN_STATS_FIXED_IN, spec=_ort_with_numpy_stats)
    assert [o.shape for o in sess.get_inferred_outputs()] == [["tokens", H], ["tokens", 1], ["tokens", 1],
                                                              ["tokens", H]]


def test_skip_layer_norm_shape_errors():
    model = ms_model("SkipLayerNormalization", [("x", F32, ["batch", "seq", H]), ("skip", F32, ["batch", "seq", 8]),
                                                "gamma"], ["y"], initializers=[("gamma", rand(H))], name="sln")
    with pytest.raises(dynashape.ShapeInferenceError, match="skip hidden size") as info:
        first_run(model, {"x": rand(2, 3, H), "skip": rand(2, 3, 8)})
    assert info.value.node == "sln" and info.value.kind == "DimMismatch"
    sk = ms_model("SkipLayerNormalization", [("x", F32, ["batch", "seq", H]), ("skip", F32, ["b2", "seq", H]),
                                             "gamma"], ["y"], initializers=[("gamma", rand(H))], name="sln")
    sess = dynashape.InferenceSession(sk)
    sess.run(None, {"x": rand(2, 3, H), "skip": rand(1, 3, H)})
    with pytest.raises(dynashape.ShapeInferenceError, match="skip batch size"):
        sess.run(None, {"x": rand(2, 3, H), "skip": rand(3, 3, H)})


# ----------------------------------------------------------------------------------------
# EmbedLayerNormalization
# ----------------------------------------------------------------------------------------

VOCAB, MAX_POS, SEGMENTS = 50, 24, 2


def _embed_model(segment=True, mask=True, position_ids=None, outputs=("y", "mask_index"), epsilon=None):
    inputs = [("ids", I32, ["batch", "seq"]), ("seg", I32, ["batch", "seq"]) if segment else None,
              "word", "pos", "segemb" if segment else None, "gamma", "beta",
              ("mask", I32, ["batch", "seq"]) if mask else None]
    if position_ids is not None:
        inputs.append(("pid", I32, [position_ids, "seq"]))
    inits = [("word", rand(VOCAB, H)), ("pos", rand(MAX_POS, H)), ("segemb", rand(SEGMENTS, H)),
             ("gamma", rand(H)), ("beta", rand(H))]
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    return ms_model("EmbedLayerNormalization", inputs, outputs, attrs,
                    [(n, a) for n, a in inits if n in inputs], name="embed")


def _embed_feeds(b, s, segment=True, mask=True, position_ids=None):
    feeds = {"ids": RNG.integers(0, VOCAB, (b, s)).astype(np.int32)}
    if segment:
        feeds["seg"] = (np.arange(s)[None, :] >= s // 2).repeat(b, 0).astype(np.int32)
    if mask:
        m = np.ones((b, s), np.int32)
        m[0, s - s // 3:] = 0              # right padding
        if b > 1 and s > 2:
            m[-1, 1] = 0                   # a hole: mask_index counts the 1s
        feeds["mask"] = m
    if position_ids is not None:
        feeds["pid"] = RNG.integers(0, MAX_POS, (b if position_ids == "batch" else 1, s)).astype(np.int32)
    return feeds


@pytest.mark.parametrize("segment", [True, False], ids=["segments", "no_segments"])
@pytest.mark.parametrize("mask", [True, False], ids=["mask", "no_mask"])
@pytest.mark.parametrize("position_ids", [None, 1, "batch"], ids=["positions", "position_ids_1", "position_ids_b"])
@pytest.mark.parametrize("outputs", [("y", "mask_index"), ("y", "mask_index", "sum"), ("y", "", "sum")],
                         ids=["mask_index", "all", "sum"])
def test_embed_layer_norm_matches_ort(segment, mask, position_ids, outputs):
    model = _embed_model(segment, mask, position_ids, outputs)
    feeds = [_embed_feeds(b, s, segment, mask, position_ids) for b, s in ((2, 6), (1, 3), (3, 11), (2, 6))]
    sess = assert_runs_match_ort(model, feeds)
    shapes = [o.shape for o in sess.get_inferred_outputs()]
    assert shapes[0] == ["batch", "seq", H]
    if outputs[1]:
        assert shapes[1] == ["batch"]


def test_embed_layer_norm_mask_index_counts_ones_and_default_epsilon():
    model = _embed_model(outputs=("y", "mask_index"))
    feeds = _embed_feeds(3, 5)
    feeds["mask"] = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1], [0, 0, 0, 0, 0]], np.int32)
    y, mask_index = dynashape.InferenceSession(model).run(None, feeds)
    assert mask_index.dtype == np.int32 and mask_index.tolist() == [3, 4, 0]
    np.testing.assert_allclose(y, ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_embed_layer_norm_errors():
    sess = dynashape.InferenceSession(_embed_model())
    bad = _embed_feeds(2, 4)
    bad["ids"][1, 2] = VOCAB
    with pytest.raises(dynashape.ExecutionError, match="input id 50 is out of range"):
        sess.run(None, bad)
    bad = _embed_feeds(2, 4)
    bad["seg"][0, 0] = -1
    with pytest.raises(dynashape.ExecutionError, match="segment id -1 is out of range"):
        sess.run(None, bad)
    with pytest.raises(dynashape.ShapeInferenceError, match="exceeds the 24 rows of position_embedding") as info:
        sess.run(None, _embed_feeds(1, MAX_POS + 1))
    assert info.value.kind == "PositionOutOfRange" and info.value.node == "embed"
    sess.run(None, _embed_feeds(2, MAX_POS))      # the session still serves fitting shapes
    half = ms_model("EmbedLayerNormalization",
                    [("ids", I32, ["batch", "seq"]), ("seg", I32, ["batch", "seq"]), "word", "pos", None,
                     "gamma", "beta"], ["y", "mask_index"],
                    initializers=[("word", rand(VOCAB, H)), ("pos", rand(MAX_POS, H)), ("gamma", rand(H)),
                                  ("beta", rand(H))])
    feeds = _embed_feeds(2, 4, mask=False)
    with pytest.raises(dynashape.ShapeInferenceError, match="must be given together"):
        first_run(half, feeds)


# ----------------------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------------------

D, HEADS = 16, 2
HEAD = D // HEADS


def _attention_model(mask_dims=None, past=False, attn_bias_dims=None, n_out=1, bias=True, attrs=None,
                     qkv_sizes=None, input_hidden=D):
    sizes = qkv_sizes or (D, D, D)
    inits = [("w", rand(input_hidden, sum(sizes), scale=0.4)), ("b", rand(sum(sizes), scale=0.2))]
    inputs = [("x", F32, ["batch", "seq", input_hidden]), "w", "b" if bias else None,
              ("mask", I32, mask_dims) if mask_dims is not None else None,
              ("past", F32, [2, "batch", HEADS, "past", HEAD]) if past else None,
              ("ab", F32, attn_bias_dims) if attn_bias_dims is not None else None]
    while inputs[-1] is None:
        inputs.pop()
    attrs = dict({"num_heads": HEADS}, **(attrs or {}))
    if qkv_sizes:
        attrs["qkv_hidden_sizes"] = list(qkv_sizes)
    return ms_model("Attention", inputs, ["out", "present"][:n_out], attrs,
                    [(n, a) for n, a in inits if n in inputs], name="attn")


def _mask(form, b, s, total):
    """A mask_index of each form where every query row keeps at least one key (a row masked
    everywhere only shifts all scores by mask_filter_value: float32 rounding, not semantics)."""
    if form == "1d":
        return RNG.integers(1, total + 1, b).astype(np.int32)
    if form == "1d_start":
        end = RNG.integers(1, total + 1, b)
        start = RNG.integers(0, end)
        return np.concatenate([end, start]).astype(np.int32)
    if form == "2d":
        m = RNG.integers(0, 2, (b, total)).astype(np.int32)
        m[:, -1] = 1
        m[:, 0] = 1
        return m
    if form == "2d_dummy":
        return np.ones((b, 1), np.int32)
    if form == "3d":
        m = RNG.integers(0, 2, (b, s, total)).astype(np.int32)
        m[:, :, 0] = 1
        return m
    raise AssertionError(form)


MASK_DIMS = {"1d": ["batch"], "1d_start": ["mlen"], "2d": ["batch", "seq"], "2d_dummy": ["batch", 1],
             "3d": ["batch", "seq", "seq"]}
SHAPES = ((2, 5), (1, 1), (3, 7), (2, 5))


@pytest.mark.parametrize("form", [None, "1d", "1d_start", "2d", "2d_dummy", "3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_mask_forms_match_ort(form, unidirectional):
    model = _attention_model(MASK_DIMS.get(form), attrs={"unidirectional": unidirectional})
    feeds = []
    for b, s in SHAPES:
        f = {"x": rand(b, s, D)}
        if form is not None:
            f["mask"] = _mask(form, b, s, s)
        feeds.append(f)
    sess = assert_matches_ort(model, feeds)
    assert sess.get_inferred_outputs()[0].shape == ["batch", "seq", D]


@pytest.mark.parametrize("attrs", [{"mask_filter_value": -50.0}, {"scale": 0.2}, {"mask_filter_value": -1e6}],
                         ids=["mask_filter_value", "scale", "large_filter"])
def test_attention_attributes_match_ort(attrs):
    model = _attention_model(["batch", "seq"], attrs=attrs)
    feeds = [{"x": rand(b, s, D), "mask": _mask("2d", b, s, s)} for b, s in SHAPES]
    assert_matches_ort(model, feeds)


def test_attention_causal_mask_overrides_padding_mask():
    """unidirectional + a 2-D mask whose every visible key is padded: ONNX Runtime sets the
    causal positions to the lowest float, so the padded (but causally visible) keys win."""
    model = _attention_model(["batch", "seq"], attrs={"unidirectional": 1, "mask_filter_value": -1e4})
    mask = np.array([[0, 0, 1, 1], [0, 1, 1, 1]], np.int32)
    assert_matches_ort(model, [{"x": rand(2, 4, D), "mask": mask}])


#: com.microsoft Attention without its optional bias input crashes onnxruntime < 1.32
#: (https://github.com/microsoft/onnxruntime/issues/25005); it is not run there
ATTENTION_NO_BIAS_FIXED_IN = (1, 32)


def _ort_with_zero_bias(model, feeds):
    """ONNX Runtime's outputs of a one-node Attention model without bias, run with an explicit
    all-zero bias input instead (the contrib-op spec's meaning of the absent bias)."""
    biased = type(model)()
    biased.CopyFrom(model)
    node = biased.graph.node[0]
    weights = next(t for t in biased.graph.initializer if t.name == node.input[1])
    biased.graph.initializer.append(numpy_helper.from_array(np.zeros(weights.dims[1], np.float32), "zero_bias"))
    while len(node.input) < 3:
        node.input.append("")
    assert not node.input[2], "the model has a bias"
    node.input[2] = "zero_bias"
    return ort_run(biased, feeds)


def test_attention_without_bias_and_with_qkv_hidden_sizes():
    model = _attention_model(["batch"], bias=False)
    assert_matches_ort(model, [{"x": rand(b, s, D), "mask": _mask("1d", b, s, s)} for b, s in SHAPES],
                       ort_fixed_in=ATTENTION_NO_BIAS_FIXED_IN, spec=_ort_with_zero_bias)
    model = _attention_model(["batch", "seq"], qkv_sizes=(D, D, 12), input_hidden=10)
    sess = assert_matches_ort(model, [{"x": rand(b, s, 10), "mask": _mask("2d", b, s, s)} for b, s in SHAPES])
    assert sess.get_inferred_outputs()[0].shape == ["batch", "seq", 12]


@pytest.mark.parametrize("ab_dims", [[1, HEADS, "seq", "seq"], ["batch", HEADS, "seq", "seq"]],
                         ids=["broadcast_batch", "per_batch"])
def test_attention_bias_matches_ort(ab_dims):
    model = _attention_model(["batch"], attn_bias_dims=ab_dims)
    feeds = []
    for b, s in SHAPES:
        shape = [b if d == "batch" else s if d == "seq" else d for d in ab_dims]
        feeds.append({"x": rand(b, s, D), "mask": _mask("1d", b, s, s), "ab": rand(*shape)})
    assert_matches_ort(model, feeds)


def test_attention_bias_broadcast_heads_against_numpy():
    """attention_bias (batch, 1, seq, total) broadcast over the heads (the doc's "num_heads
    or 1"), compared with the same bias repeated per head."""
    model = _attention_model(attn_bias_dims=["batch", 1, "seq", "seq"])
    full = _attention_model(attn_bias_dims=["batch", HEADS, "seq", "seq"])
    full.graph.initializer[0].CopyFrom(model.graph.initializer[0])
    full.graph.initializer[1].CopyFrom(model.graph.initializer[1])
    sess = dynashape.InferenceSession(model)
    for b, s in SHAPES:
        x, ab = rand(b, s, D), rand(b, 1, s, s)
        (got,) = sess.run(None, {"x": x, "ab": ab})
        (want,) = ort_run(full, {"x": x, "ab": np.repeat(ab, HEADS, axis=1)})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask_form", [None, "1d", "2d", "3d"])
def test_attention_past_present_unidirectional_matches_ort(mask_form):
    """GPT-2 style: past (2, batch, heads, past, head) in, present (2, batch, heads,
    past + seq, head) out, causal mask shifted by the past length; mask dims over the total
    sequence are their own symbol ("total"), checked against past + seq for each shape."""
    dims = {None: None, "1d": ["batch"], "2d": ["batch", "total"], "3d": ["batch", "seq", "total"]}[mask_form]
    model = _attention_model(dims, past=True, n_out=2, attrs={"unidirectional": 1})
    feeds = []
    for b, s, p in ((2, 3, 4), (1, 1, 6), (3, 2, 0), (2, 5, 1), (2, 3, 4)):
        f = {"x": rand(b, s, D), "past": rand(2, b, HEADS, p, HEAD)}
        if mask_form is not None:
            f["mask"] = _mask(mask_form, b, s, p + s)
        feeds.append(f)
    sess = assert_matches_ort(model, feeds)
    assert [o.shape for o in sess.get_inferred_outputs()] == [["batch", "seq", D],
                                                              [2, "batch", HEADS, "past + seq", HEAD]]


def test_attention_decoding_loop_feeds_present_back_as_past():
    model = _attention_model(["batch", "total"], past=True, n_out=2, attrs={"unidirectional": 1})
    sess = dynashape.InferenceSession(model)
    b = 2
    past = np.zeros((2, b, HEADS, 0, HEAD), np.float32)
    mask_row = np.ones((b, 0), np.int32)
    for step, s in enumerate((4, 1, 1, 2)):
        x = rand(b, s, D)
        mask_row = np.concatenate([mask_row, np.ones((b, s), np.int32)], axis=1)
        mask_row[1, 0] = 0                        # batch 1 is left-padded by one token
        feeds = {"x": x, "past": past, "mask": mask_row}
        out, present = sess.run(None, feeds)
        want_out, want_present = ort_run(model, feeds)
        np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        np.testing.assert_allclose(present, want_present, rtol=1e-6, atol=1e-6)
        past = present


def test_attention_present_without_past_matches_ort():
    model = _attention_model(["batch", "seq"], n_out=2)
    sess = assert_matches_ort(model, [{"x": rand(b, s, D), "mask": _mask("2d", b, s, s)} for b, s in SHAPES])
    assert sess.get_inferred_outputs()[1].shape == [2, "batch", HEADS, "seq", HEAD]


def _numpy_attention(x, w, b, keep, past_kv=None):
    qkv = x @ w + b
    bsz, s, _ = x.shape
    q, k, v = (t.reshape(bsz, s, HEADS, HEAD).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
    if past_kv is not None:
        k, v = np.concatenate([past_kv[0], k], 2), np.concatenate([past_kv[1], v], 2)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(HEAD) + np.where(keep, 0.0, -10000.0)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(bsz, s, D)


def test_attention_4d_megatron_mask_against_numpy():
    """(batch, 1, max_seq, max_seq) mask: rows past .. past + seq and columns 0 .. total are
    used (ONNX Runtime's CPU kernel rejects this form, so the reference is numpy)."""
    model = _attention_model(["batch", 1, "max", "max"], past=True)
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    sess = dynashape.InferenceSession(model)
    for bsz, s, p, m in ((2, 3, 2, 8), (1, 4, 0, 4), (3, 1, 5, 9)):
        x, past = rand(bsz, s, D), rand(2, bsz, HEADS, p, HEAD)
        mask = RNG.integers(0, 2, (bsz, 1, m, m)).astype(np.int32)
        mask[..., 0] = 1
        (got,) = sess.run(None, {"x": x, "past": past, "mask": mask})
        keep = mask[:, :, p:p + s, :p + s] > 0
        np.testing.assert_allclose(got, _numpy_attention(x, w, b, keep, past), rtol=1e-4, atol=1e-5)
    with pytest.raises(dynashape.ShapeInferenceError, match="max_sequence_length"):
        sess.run(None, {"x": rand(1, 4, D), "past": rand(2, 1, HEADS, 2, HEAD),
                        "mask": np.ones((1, 1, 5, 5), np.int32)})


def test_attention_fully_masked_rows_follow_ort_within_float32_rounding():
    """A key length of 0 masks a whole row: every score is shifted by -10000, which keeps the
    softmax (up to float32 rounding of score - 10000, about 1e-3)."""
    model = _attention_model(["batch"])
    feeds = {"x": rand(2, 4, D), "mask": np.array([0, 2], np.int32)}
    (got,), (want,) = dynashape.InferenceSession(model).run(None, feeds), ort_run(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=5e-3)


def test_attention_unsupported_and_invalid():
    x = {"x": rand(2, 3, D)}
    with pytest.raises(NotImplementedError, match="do_rotary"):
        first_run(_attention_model(attrs={"do_rotary": 1}), x)
    with pytest.raises(dynashape.UnsupportedOperatorError, match="past_present_share_buffer"):
        first_run(_attention_model(attrs={"past_present_share_buffer": 1}), x)
    sess = dynashape.InferenceSession(_attention_model(["mlen"]))
    with pytest.raises(NotImplementedError, match="3 \\* batch \\+ 2"):
        sess.run(None, {"x": rand(2, 3, D), "mask": np.ones(8, np.int32)})
    with pytest.raises(dynashape.ShapeInferenceError, match="1-D mask_index has length 5") as info:
        sess.run(None, {"x": rand(2, 3, D), "mask": np.ones(5, np.int32)})
    assert info.value.node == "attn"
    sess.run(None, {"x": rand(2, 3, D), "mask": np.ones(4, np.int32)})      # (2 * batch) still fine
    with pytest.raises(dynashape.ShapeInferenceError, match="weights dim 0"):
        first_run(_bad_weights_model(), {"x": rand(2, 3, D + 1)})
    with pytest.raises(dynashape.ShapeInferenceError, match="4-D mask_index needs unidirectional=0"):
        first_run(_attention_model(["batch", 1, "max", "max"], attrs={"unidirectional": 1}),
                  {"x": rand(2, 3, D), "mask": np.ones((2, 1, 3, 3), np.int32)})
    sess = dynashape.InferenceSession(_attention_model(["batch", "total"], past=True))
    with pytest.raises(dynashape.ShapeInferenceError, match="total_sequence_length"):
        sess.run(None, {"x": rand(2, 3, D), "past": rand(2, 2, HEADS, 1, HEAD), "mask": np.ones((2, 3), np.int32)})
    with pytest.raises(dynashape.ExecutionError, match="must be >= 0"):
        dynashape.InferenceSession(_attention_model(["batch"])).run(
            None, {"x": rand(2, 3, D), "mask": np.array([2, -1], np.int32)})


def _bad_weights_model():
    model = _attention_model()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = D + 1
    return model


# ----------------------------------------------------------------------------------------
# onnxruntime-optimized zoo models
# ----------------------------------------------------------------------------------------

def _padding_mask(b, s):
    mask = np.ones((b, s), np.int64)
    for i in range(1, b):
        mask[i, s - min(i, s - 1):] = 0   # right padding, every row keeps its first token
    return mask


def _compare_zoo(path, feeds_list):
    sess = dynashape.InferenceSession(str(path))
    results = [sess.run(None, feeds) for feeds in feeds_list]
    for k, (got, feeds) in enumerate(zip(results, feeds_list)):
        want = ort_run(path, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (k, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"run {k}")


def test_ortopt_bert_tiny_matches_ort_at_two_shapes():
    path = shared_path("zoo", "ortopt", "bert_tiny.onnx")
    feeds = []
    for b, s in ((3, 7), (2, 12), (3, 7)):
        feeds.append({"input_ids": RNG.integers(0, 1000, (b, s)).astype(np.int64),
                      "attention_mask": _padding_mask(b, s),
                      "token_type_ids": (np.arange(s)[None, :] >= s // 2).repeat(b, 0).astype(np.int64)})
    _compare_zoo(path, feeds)


def test_ortopt_gpt2_tiny_matches_ort_at_two_shapes():
    path = shared_path("zoo", "ortopt", "gpt2_tiny.onnx")
    feeds = []
    for b, s in ((3, 7), (2, 12), (3, 7)):
        feeds.append({"input_ids": RNG.integers(0, 1000, (b, s)).astype(np.int64),
                      "attention_mask": _padding_mask(b, s)})
    _compare_zoo(path, feeds)


def test_ortopt_t5_encoder_tiny_matches_ort_at_two_shapes():
    """onnxruntime's transformer optimizer on a T5 encoder (SimplifiedLayerNormalization in the
    ONNX domain, RelativePositionBias, Attention): equal to onnxruntime at two shapes, one session."""
    path = shared_path("zoo", "ortopt", "t5_encoder_tiny.onnx")
    inputs = ort_session(path).get_inputs()
    feeds = []
    for b, s in ((1, 7), (2, 12), (1, 7)):
        feeds.append({i.name: _padding_mask(b, s) if "mask" in i.name else RNG.integers(0, 100, (b, s)).astype(np.int64)
                      for i in inputs})
    _compare_zoo(path, feeds)


@pytest.mark.parametrize("key", ["ortopt/bert_tiny", "ortopt/gpt2_tiny"])
def test_ortopt_models_run_the_zoo_shapes_on_one_session_equal_to_onnxruntime(key):
    """small, odd, large, small on ONE session (each new shape planned, the first one's plan
    reused at the end), rtol 1e-3 / atol 1e-4 against onnxruntime."""
    from tests.models.test_zoo import zoo_entry, zoo_expected, zoo_feeds
    path = shared_path("zoo", zoo_entry(key)["file"])
    sess = dynashape.InferenceSession(str(path))
    for shape in ("small", "odd", "large", "small"):
        got = sess.run(None, zoo_feeds(key, shape))
        for g, w in zip(got, zoo_expected(key, shape)):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
    assert sess.stats.cache_hits >= 1


@pytest.mark.parametrize("model,ops", [("bert_tiny.onnx", ["Attention", "BiasGelu", "EmbedLayerNormalization",
                                                           "SkipLayerNormalization"]),
                                       ("gpt2_tiny.onnx", ["FastGelu", "SkipLayerNormalization"])])
def test_without_the_plugin_every_missing_contrib_op_is_named(model, ops):
    import subprocess
    import sys
    path = shared_path("zoo", "ortopt", model)
    code = (f"import dynashape\ntry:\n dynashape.InferenceSession({str(path)!r})\n"
            "except Exception as e:\n print(type(e).__name__, e)")
    env = dict(__import__("os").environ, DYNASHAPE_PLUGINS_BLOCK="example")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"UnsupportedOperatorError {len(ops)} operator(s) of the model have no registered definition")
    for op in ops:
        assert f"com.microsoft::{op} (opset 1" in out
    assert "dynashape-contrib-ops plugin" in out


def test_simplified_layer_normalization_in_the_default_domain_as_onnxruntime_writes_it():
    """onnxruntime's transformer optimizer writes SimplifiedLayerNormalization in the ONNX
    domain (an optimized T5 encoder): the plugin runs it there, equal to onnxruntime, with the
    RMS norm's value by hand."""
    scale = np.linspace(0.5, 1.5, 8).astype(np.float32)
    graph = helper.make_graph([helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-1,
                                                epsilon=1e-6)], "t5_rms",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(scale, "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    feeds = [{"x": rand(b, s, 8)} for b, s in ((2, 3), (1, 7), (3, 1))]
    sess = assert_matches_ort(model, feeds)
    x = feeds[0]["x"]
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * scale
    np.testing.assert_allclose(sess.run(None, feeds[0])[0], want, rtol=1e-5, atol=1e-6)


# SparseToDenseMatMul ------------------------------------------------------------------------

def _sparse_matmul_model(elem, trans_a=0, trans_b=0, alpha=1.0) -> bytes:
    a = helper.make_tensor_value_info("A", elem, None)
    a.type.ClearField("tensor_type")
    a.type.sparse_tensor_type.elem_type = elem
    for d in ("m", "k"):
        a.type.sparse_tensor_type.shape.dim.add().dim_param = d
    node = helper.make_node("SparseToDenseMatMul", ["A", "B"], ["Y"], domain=MS, alpha=alpha, transA=trans_a,
                            transB=trans_b)
    g = helper.make_graph([node], "g", [a, helper.make_tensor_value_info("B", elem, ["p", "q"])],
                          [helper.make_tensor_value_info("Y", elem, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m.SerializeToString()


def _sparse_feeds(module, dense_a: np.ndarray, b: np.ndarray, csr: bool) -> dict:
    cpu = module.OrtDevice.make("cpu", 0)
    rows, cols = np.nonzero(dense_a)
    values = dense_a[rows, cols]
    if csr:
        outer = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense_a.shape[0]))]).astype(np.int64)
        sparse = module.SparseTensor.sparse_csr_from_numpy(list(dense_a.shape), values, cols.astype(np.int64), outer,
                                                           cpu)
    else:
        sparse = module.SparseTensor.sparse_coo_from_numpy(list(dense_a.shape), values,
                                                           np.stack([rows, cols], 1).astype(np.int64), cpu)
    return {"A": module.OrtValue.ort_value_from_sparse_tensor(sparse), "B": module.OrtValue.ortvalue_from_numpy(b)}


@pytest.mark.parametrize("trans_a,trans_b,alpha,csr", [(0, 0, 1.0, False), (1, 0, 0.5, False), (0, 1, 2.0, True),
                                                       (1, 1, -1.5, False)])
def test_sparse_to_dense_matmul_matches_ort(trans_a, trans_b, alpha, csr):
    """A sparse A (COO or CSR, fed as an OrtValue) times a dense B: onnxruntime's values for
    float32, through two shapes on one session; alpha scales A's values first, as there."""
    import onnxruntime as ort
    data = _sparse_matmul_model(F32, trans_a, trans_b, alpha)
    sess = dynashape.InferenceSession(data)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for m, k, n in ((5, 7, 3), (9, 4, 6)):
        a = np.where(RNG.random((m, k)) < 0.4, rand(m, k), 0).astype(np.float32)
        a = a.T.copy() if trans_a else a
        b = rand(n, k) if trans_b else rand(k, n)
        got = sess.run_with_ort_values(["Y"], _sparse_feeds(dynashape, a, b, csr))[0]
        want = ref.run_with_ort_values(["Y"], _sparse_feeds(ort, a, b, csr))[0]
        assert got.data_type() == want.data_type() == "tensor(float)" and got.shape() == want.shape() == [m, n]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
        by_hand = alpha * (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b)
        np.testing.assert_allclose(got.numpy(), by_hand, rtol=1e-5, atol=1e-5)


def test_sparse_to_dense_matmul_integer_and_double_products():
    """int64 equals onnxruntime; float64 is scaled by alpha as the contrib docs say (onnxruntime
    ignores alpha there: sparse-matmul-alpha); an integer product with alpha other than 1 is
    refused when the session is made."""
    import onnxruntime as ort
    a = np.array([[0, 2, 0], [3, 0, 0]], np.int64)
    b = np.array([[1, 2], [3, 4], [5, 6]], np.int64)
    data = _sparse_matmul_model(TensorProto.INT64)
    got = dynashape.InferenceSession(data).run_with_ort_values(["Y"], _sparse_feeds(dynashape, a, b, False))[0]
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run_with_ort_values(
        ["Y"], _sparse_feeds(ort, a, b, False))[0]
    assert got.numpy().tolist() == want.numpy().tolist() == [[6, 8], [3, 6]]
    data = _sparse_matmul_model(TensorProto.DOUBLE, alpha=0.5)
    got = dynashape.InferenceSession(data).run_with_ort_values(
        ["Y"], _sparse_feeds(dynashape, a.astype(np.float64), b.astype(np.float64), True))[0]
    assert got.numpy().tolist() == [[3.0, 4.0], [1.5, 3.0]]
    with pytest.raises(dynashape.ShapeInferenceError, match="integer product") as info:
        dynashape.InferenceSession(_sparse_matmul_model(TensorProto.INT64, alpha=2.0))
    assert info.value.kind == "InvalidAttribute"
