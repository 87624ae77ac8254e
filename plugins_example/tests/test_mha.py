"""The example plugin's MultiHeadAttention, GroupQueryAttention and RotaryEmbedding
(com.microsoft) against ONNX Runtime's CPU contrib kernels.

Every model is one node built with onnx.helper, run on ONE dynashape session through several
shapes (symbolic batch / sequence / past dims) and compared with onnxruntime on the same
feeds: float32 within rtol 1e-4, atol 1e-5; float16 within a few float16 ulps. Where
onnxruntime's CPU kernel has no implementation the reference is named in the test:

* MultiHeadAttention's packed QKV (batch, seq, num_heads, 3, head_size) and packed KV (batch,
  kv_seq, num_heads, 2, head_size) layouts (CUDA only in onnxruntime): the same node with the
  unpacked query / key / value, run by onnxruntime.
* MultiHeadAttention in float16 (float32 only on onnxruntime's CPU): the float32 node on the
  same (widened) feeds, run by onnxruntime.

The unsupported attributes and inputs raise dynashape.UnsupportedOperatorError naming the
node and the attribute. Each op also goes once through ``dynashape.testing.check_op`` over
random sizes. This is the plugin's own test suite: it uses dynashape's public API, numpy,
onnx, onnxruntime and pytest only (``python -m pytest plugins_example/tests``).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape.testing import check_op

pytest.importorskip("dynashape_example")
ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
F16, F32, I32, I64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64)
ELEM = {F32: TensorProto.FLOAT, F16: TensorProto.FLOAT16, I32: TensorProto.INT32, I64: TensorProto.INT64}
#: an IR version every onnxruntime this suite supports loads (helper's default may be newer)
IR_VERSION = 8
RTOL, ATOL = 1e-4, 1e-5


def rng_for(seed: int):
    return np.random.default_rng(seed)


def rand(rng, *shape, dtype=F32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def one_node(op_type, inputs, outputs, attrs=None, *, name="node", out_dtypes=None):
    """A one-node com.microsoft model. ``inputs``: (name, np dtype, dims) graph inputs or None
    for an absent optional input; ``outputs``: names ("" for an absent optional output);
    ``out_dtypes``: {name: np dtype} (default the first input's dtype)."""
    names, graph_inputs = [], []
    for item in inputs:
        if item is None:
            names.append("")
        else:
            names.append(item[0])
            graph_inputs.append(helper.make_tensor_value_info(item[0], ELEM[np.dtype(item[1])], item[2]))
    while names and not names[-1]:
        names.pop()
    first = np.dtype(inputs[0][1])
    out_dtypes = out_dtypes or {}
    graph_outputs = [helper.make_tensor_value_info(o, ELEM[np.dtype(out_dtypes.get(o, first))], None)
                     for o in outputs if o]
    node = helper.make_node(op_type, names, list(outputs), domain=MS, name=name, **(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs, graph_outputs)
    return helper.make_model(graph, ir_version=IR_VERSION,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def ort_session(model):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def assert_close(got, want, rtol, atol, what):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, err_msg=what)


def assert_session_matches_ort(model, feeds_list, rtol=RTOL, atol=ATOL, reference=None, valid=None):
    """Every feed dict on ONE dynashape session (all runs first, then the comparisons: a later
    run must not disturb an earlier result), each compared output by output (dtype, shape,
    values) with onnxruntime's CPU run of ``reference`` (default the model itself; its graph
    outputs of the model's output names). ``valid(feeds, name, shape)``: a boolean mask of the
    elements the contract specifies (None: all)."""
    sess = dynashape.InferenceSession(model)
    results = [sess.run(None, feeds) for feeds in feeds_list]
    ref = ort_session(reference if reference is not None else model)
    names = [o.name for o in model.graph.output]
    for k, (got, feeds) in enumerate(zip(results, feeds_list)):
        want = ref.run(names, feeds)
        assert len(got) == len(want)
        for j, (g, w) in enumerate(zip(got, want)):
            keep = valid(feeds, names[j], w.shape) if valid is not None else None
            if keep is not None:
                g, w = np.where(keep, g, 0).astype(g.dtype), np.where(keep, w, 0).astype(w.dtype)
            assert_close(g, w, rtol, atol, f"run {k} output {j}")
    return sess


def output_shapes(sess):
    return [o.shape for o in sess.get_inferred_outputs()]


# ----------------------------------------------------------------------------------------
# MultiHeadAttention
# ----------------------------------------------------------------------------------------

N, HEAD = 2, 4
D = N * HEAD
MHA_OUTS = ("out", "present_key", "present_value", "qk")


def mha_model(key="3d", bias=False, mask_dims=None, attn_bias_dims=None, past=False, outputs=MHA_OUTS,
              attrs=None, v_hidden=D, dtype=F32, name="mha"):
    """MultiHeadAttention with symbolic batch B, sequence S, kv sequence L and past P."""
    v_head = v_hidden // N
    if key == "3d":
        kv = [("key", dtype, ["B", "L", D]), ("value", dtype, ["B", "L", v_hidden])]
    elif key == "bnsh":
        kv = [("key", dtype, ["B", N, "L", HEAD]), ("value", dtype, ["B", N, "L", v_head])]
    elif key == "packed_kv":
        kv = [("key", dtype, ["B", "L", N, 2, HEAD]), None]
    else:
        kv = [None, None]
    query = ("query", dtype, ["B", "S", N, 3, HEAD]) if key == "packed_qkv" else ("query", dtype, ["B", "S", D])
    inputs = [query, *kv, ("bias", dtype, [2 * D + v_hidden]) if bias else None,
              ("mask", I32, mask_dims) if mask_dims is not None else None,
              ("attn_bias", dtype, attn_bias_dims) if attn_bias_dims is not None else None,
              ("past_key", dtype, ["B", N, "P", HEAD]) if past else None,
              ("past_value", dtype, ["B", N, "P", v_head]) if past else None]
    return one_node("MultiHeadAttention", inputs, list(outputs), dict({"num_heads": N}, **(attrs or {})), name=name)


def mha_mask(rng, form, b, s, total):
    """A key_padding_mask of each form where every query row keeps key 0 (a row masked
    everywhere only shifts its scores by mask_filter_value: float32 rounding, not semantics)."""
    if form == "1d":
        return rng.integers(1, total + 1, b).astype(np.int32)
    if form == "1d_3b2":        # the CPU kernel reads the first batch entries as key lengths
        return np.concatenate([rng.integers(1, total + 1, b), rng.integers(0, total + 1, 2 * b + 2)]).astype(np.int32)
    if form == "2d":
        m = rng.integers(-1, 3, (b, total)).astype(np.int32)
    else:
        m = rng.integers(-1, 3, (b, s, total)).astype(np.int32)
    m[..., 0] = 1
    return m


MASK_DIMS = {"1d": ["B"], "1d_3b2": ["M"], "2d": ["B", "T"], "3d": ["B", "S", "T"]}


def mha_feeds(rng, b, s, kv_seq, past=None, key="3d", bias=False, mask=None, attn_bias=None, v_hidden=D,
              dtype=F32):
    v_head = v_hidden // N
    f = {}
    if key == "packed_qkv":
        f["query"] = rand(rng, b, s, N, 3, HEAD, dtype=dtype)
    else:
        f["query"] = rand(rng, b, s, D, dtype=dtype)
    if key == "3d":
        f["key"], f["value"] = rand(rng, b, kv_seq, D, dtype=dtype), rand(rng, b, kv_seq, v_hidden, dtype=dtype)
    elif key == "bnsh":
        f["key"], f["value"] = rand(rng, b, N, kv_seq, HEAD, dtype=dtype), rand(rng, b, N, kv_seq, v_head, dtype=dtype)
    elif key == "packed_kv":
        f["key"] = rand(rng, b, kv_seq, N, 2, HEAD, dtype=dtype)
    if bias:
        f["bias"] = rand(rng, 2 * D + v_hidden, dtype=dtype)
    p = past or 0
    if past is not None:
        f["past_key"] = rand(rng, b, N, p, HEAD, dtype=dtype)
        f["past_value"] = rand(rng, b, N, p, v_head, dtype=dtype)
    if mask is not None:
        f["mask"] = mha_mask(rng, mask, b, s, p + kv_seq)
    if attn_bias is not None:
        dims = {"B": b, "S": s, "T": p + kv_seq}
        f["attn_bias"] = rand(rng, *[dims.get(d, d) for d in attn_bias])
    return f


#: (batch, seq, kv_seq, past) of the runs on one session: new shapes, decoding (seq 1), no
#: past, cross attention (kv_seq != seq) and a repeated signature (its plan is reused)
MHA_SHAPES = ((2, 3, 3, 2), (1, 1, 1, 5), (3, 4, 4, 0), (2, 3, 5, 1), (2, 3, 3, 2))


@pytest.mark.parametrize("outputs", [("out",), ("out", "present_key", "present_value"), MHA_OUTS,
                                     ("out", "", "", "qk")], ids=["out", "present", "all", "qk"])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_mha_self_and_cross_attention_with_past_match_ort(bias, outputs):
    """past_key / past_value are prepended whichever outputs are requested. onnxruntime's CPU
    kernel ignores the past when neither present output is requested (and then writes a qk of
    past + kv_seq columns from kv_seq keys): the reference is its run of the same node with
    every output requested."""
    rng = rng_for(1)
    model = mha_model(bias=bias, past=True, outputs=outputs)
    feeds = [mha_feeds(rng, b, s, kv, p, bias=bias) for b, s, kv, p in MHA_SHAPES]
    sess = assert_session_matches_ort(model, feeds, reference=mha_model(bias=bias, past=True))
    want = {"out": ["B", "S", D], "present_key": ["B", N, "P + L", HEAD], "present_value": ["B", N, "P + L", HEAD],
            "qk": ["B", N, "S", "P + L"]}
    assert output_shapes(sess) == [want[o] for o in outputs if o]


def test_mha_without_past_and_with_other_value_hidden_size_matches_ort():
    rng = rng_for(2)
    model = mha_model(bias=True, v_hidden=6, outputs=MHA_OUTS)
    feeds = [mha_feeds(rng, b, s, kv, None, bias=True, v_hidden=6) for b, s, kv, _ in MHA_SHAPES]
    sess = assert_session_matches_ort(model, feeds)
    assert output_shapes(sess) == [["B", "S", 6], ["B", N, "L", HEAD], ["B", N, "L", 3], ["B", N, "S", "L"]]


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("form", ["1d", "1d_3b2", "2d", "3d"])
def test_mha_key_padding_mask_forms_match_ort(form, unidirectional):
    """The mask forms the CPU kernel takes, with a past: (batch) key lengths, (3 * batch + 2)
    (first batch entries read as key lengths), (batch, total) and (batch, seq, total) (values
    > 0 attend); the total dim is its own symbol, checked against past + kv_seq."""
    rng = rng_for(3)
    model = mha_model(mask_dims=MASK_DIMS[form], past=True, attrs={"unidirectional": unidirectional})
    feeds = [mha_feeds(rng, b, s, kv, p, mask=form) for b, s, kv, p in MHA_SHAPES]
    assert_session_matches_ort(model, feeds)


@pytest.mark.parametrize("dims", [[1, N, "S", "T"], ["B", 1, "S", "T"], ["B", N, "S", "T"], [1, 1, "S", "T"]],
                         ids=["1_heads", "batch_1", "full", "1_1"])
def test_mha_attention_bias_broadcast_matches_ort(dims):
    rng = rng_for(4)
    model = mha_model(attn_bias_dims=dims, mask_dims=["B"], past=True, bias=True)
    feeds = [mha_feeds(rng, b, s, kv, p, bias=True, mask="1d", attn_bias=dims) for b, s, kv, p in MHA_SHAPES]
    assert_session_matches_ort(model, feeds)


@pytest.mark.parametrize("attrs", [{"scale": 0.3}, {"mask_filter_value": -50.0}, {"mask_filter_value": -1e6},
                                   {"unidirectional": 1}, {"unidirectional": 1, "scale": 2.0}],
                         ids=["scale", "mask_filter_value", "large_filter", "unidirectional", "uni_scale"])
def test_mha_attributes_match_ort(attrs):
    """unidirectional also with kv_seq != seq: the CPU kernel's causal mask hides keys
    ``j > past + s`` for every query row but the last."""
    rng = rng_for(5)
    model = mha_model(mask_dims=["B", "T"], past=True, attrs=attrs)
    feeds = [mha_feeds(rng, b, s, kv, p, mask="2d") for b, s, kv, p in MHA_SHAPES + ((2, 4, 2, 0), (1, 2, 6, 3))]
    assert_session_matches_ort(model, feeds)


@pytest.mark.parametrize("past", [False, True], ids=["no_past", "past"])
def test_mha_bnsh_key_value_match_ort(past):
    """key / value already in BNSH (batch, num_heads, kv_seq, head_size), as a decoder's cached
    cross-attention K/V: only the Q part of bias is added, as on onnxruntime's CPU."""
    rng = rng_for(6)
    model = mha_model(key="bnsh", bias=True, mask_dims=["B"], past=past, attrs={"unidirectional": 1})
    feeds = [mha_feeds(rng, b, s, kv, p if past else None, key="bnsh", bias=True, mask="1d")
             for b, s, kv, p in MHA_SHAPES]
    sess = assert_session_matches_ort(model, feeds)
    total = "P + L" if past else "L"
    assert output_shapes(sess)[1] == ["B", N, total, HEAD]


def test_mha_decoding_loop_feeds_present_back_as_past():
    rng = rng_for(7)
    model = mha_model(bias=True, mask_dims=["B", "T"], past=True, attrs={"unidirectional": 1},
                      outputs=("out", "present_key", "present_value"))
    sess, ref = dynashape.InferenceSession(model), ort_session(model)
    b, bias = 2, rand(rng, 3 * D)
    pk, pv = np.zeros((b, N, 0, HEAD), np.float32), np.zeros((b, N, 0, HEAD), np.float32)
    mask = np.ones((b, 0), np.int32)
    for step, s in enumerate((4, 1, 1, 3, 1)):
        mask = np.concatenate([mask, np.ones((b, s), np.int32)], axis=1)
        mask[1, 0] = 0                                   # batch 1 is left-padded by one token
        x = rand(rng, b, s, D)
        feeds = {"query": x, "key": x, "value": x, "bias": bias, "mask": mask, "past_key": pk, "past_value": pv}
        got, want = sess.run(None, feeds), ref.run(None, feeds)
        for j, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, RTOL, ATOL, f"step {step} output {j}")
        pk, pv = got[1], got[2]


def _unpacked_reference(packed: str, bias: bool):
    """The node with the unpacked query / key / value that a packed layout means."""
    if packed == "packed_qkv":
        inputs = [("q", F32, ["B", "S", D]), ("k", F32, ["B", "S", D]), ("v", F32, ["B", "S", D]),
                  ("bias", F32, [3 * D]) if bias else None]
    else:
        inputs = [("query", F32, ["B", "S", D]), ("k", F32, ["B", "L", D]), ("v", F32, ["B", "L", D])]
    return one_node("MultiHeadAttention", inputs, list(MHA_OUTS[:3]), {"num_heads": N, "unidirectional": 1})


@pytest.mark.parametrize("packed,bias", [("packed_qkv", False), ("packed_qkv", True), ("packed_kv", False)])
def test_mha_packed_layouts_match_ort_on_unpacked_inputs(packed, bias):
    """Packed QKV (batch, seq, num_heads, 3, head_size) and packed KV (batch, kv_seq,
    num_heads, 2, head_size): onnxruntime implements them on CUDA only; the reference is its
    CPU run of the same node on the unpacked inputs."""
    rng = rng_for(8)
    model = mha_model(key=packed, bias=bias, outputs=MHA_OUTS[:3], attrs={"unidirectional": 1})
    sess = dynashape.InferenceSession(model)
    ref = ort_session(_unpacked_reference(packed, bias))
    for b, s, kv, _ in MHA_SHAPES:
        feeds = mha_feeds(rng, b, s, kv, None, key=packed, bias=bias)
        got = sess.run(None, feeds)
        if packed == "packed_qkv":
            qkv = feeds["query"].transpose(0, 1, 3, 2, 4).reshape(b, s, 3, D)
            ref_feeds = {"q": qkv[:, :, 0], "k": qkv[:, :, 1], "v": qkv[:, :, 2]}
            if bias:
                ref_feeds["bias"] = feeds["bias"]
        else:
            pkv = feeds["key"].transpose(0, 1, 3, 2, 4).reshape(b, kv, 2, D)
            ref_feeds = {"query": feeds["query"], "k": pkv[:, :, 0], "v": pkv[:, :, 1]}
        for j, (g, w) in enumerate(zip(got, ref.run(None, ref_feeds))):
            assert_close(g, w, RTOL, ATOL, f"{(b, s, kv)} output {j}")
    assert output_shapes(sess)[0] == ["B", "S", D]


def test_mha_float16_matches_ort_float32_on_widened_feeds():
    """float16 (onnxruntime's CPU kernel is float32 only): computed in float32 and rounded
    once, so within a float16 ulp or two of onnxruntime's float32 result rounded."""
    rng = rng_for(9)
    model = mha_model(bias=True, mask_dims=["B", "T"], past=True, outputs=MHA_OUTS[:3], dtype=F16,
                      attrs={"unidirectional": 1})
    ref = ort_session(mha_model(bias=True, mask_dims=["B", "T"], past=True, outputs=MHA_OUTS[:3],
                                attrs={"unidirectional": 1}))
    sess = dynashape.InferenceSession(model)
    for b, s, kv, p in MHA_SHAPES:
        feeds = mha_feeds(rng, b, s, kv, p, bias=True, mask="2d", dtype=F16)
        got = sess.run(None, feeds)
        want = ref.run(None, {k: v.astype(np.float32) if v.dtype == F16 else v for k, v in feeds.items()})
        for j, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == F16
            assert_close(g.astype(np.float32), w.astype(F16).astype(np.float32), 2e-3, 2e-3, f"output {j}")


def test_mha_unsupported_inputs_raise_naming_node_and_input():
    rng = rng_for(10)
    x = rand(rng, 2, 3, D)
    packed_3d = one_node("MultiHeadAttention", [("query", F32, ["B", "S", 3 * D])], ["out"], {"num_heads": N},
                         name="mha3d")
    with pytest.raises(dynashape.UnsupportedOperatorError, match="mha3d.*3-D query without key"):
        dynashape.InferenceSession(packed_3d).run(None, {"query": rand(rng, 2, 3, 3 * D)})
    base = [("query", F32, ["B", "S", D]), ("key", F32, ["B", "L", D]), ("value", F32, ["B", "L", D]),
            None, None, None, ("past_key", F32, ["B", N, "P", HEAD]), ("past_value", F32, ["B", N, "P", HEAD])]
    feeds = {"query": x, "key": x, "value": x, "past_key": rand(rng, 2, N, 1, HEAD),
             "past_value": rand(rng, 2, N, 1, HEAD)}
    shared = one_node("MultiHeadAttention", base + [("past_len", I32, [1])], ["out"], {"num_heads": N}, name="share")
    with pytest.raises(dynashape.UnsupportedOperatorError, match="share.*past_sequence_length"):
        dynashape.InferenceSession(shared).run(None, dict(feeds, past_len=np.array([1], np.int32)))
    beams = one_node("MultiHeadAttention", base + [None, ("beams", I32, ["B", 1, 4])], ["out"], {"num_heads": N},
                     name="beam")
    with pytest.raises(dynashape.UnsupportedOperatorError, match="beam.*cache_indirection"):
        dynashape.InferenceSession(beams).run(None, dict(feeds, beams=np.zeros((2, 1, 4), np.int32)))
    pkv_inputs = [("query", F32, ["B", "S", D]), ("key", F32, ["B", "L", N, 2, HEAD]), None, ("bias", F32, [3 * D])]
    packed_kv_bias = one_node("MultiHeadAttention", pkv_inputs, ["out"], {"num_heads": N}, name="pkv")
    with pytest.raises(dynashape.UnsupportedOperatorError, match="pkv.*bias with a packed KV key"):
        dynashape.InferenceSession(packed_kv_bias).run(
            None, {"query": x, "key": rand(rng, 2, 3, N, 2, HEAD), "bias": rand(rng, 3 * D)})


def test_mha_invalid_shapes_raise_shape_inference_errors_naming_node():
    rng = rng_for(11)
    sess = dynashape.InferenceSession(mha_model(mask_dims=["M"], past=True, name="mha1"))
    feeds = mha_feeds(rng, 2, 3, 3, 1)
    with pytest.raises(dynashape.ShapeInferenceError, match="1-D key_padding_mask has length 5") as info:
        sess.run(None, dict(feeds, mask=np.ones(5, np.int32)))
    assert info.value.node == "mha1" and info.value.kind == "MaskShapeMismatch"
    sess.run(None, dict(feeds, mask=np.ones(8, np.int32)))     # (3 * batch + 2) is fine
    sess = dynashape.InferenceSession(mha_model(mask_dims=["B", "T"], past=True, name="mha2"))
    with pytest.raises(dynashape.ShapeInferenceError, match="total_sequence_length"):
        sess.run(None, dict(feeds, mask=np.ones((2, 3), np.int32)))      # (batch, kv_seq) with a past
    sess = dynashape.InferenceSession(mha_model(attn_bias_dims=["B", "H", "S", "T"], name="mha3"))
    with pytest.raises(dynashape.ShapeInferenceError, match="attention_bias dim 1"):
        sess.run(None, dict(mha_feeds(rng, 2, 3, 3), attn_bias=rand(rng, 2, 3, 3, 3)))
    bad_heads = one_node("MultiHeadAttention", [("query", F32, ["B", "S", 6]), ("key", F32, ["B", "L", 6]),
                                                ("value", F32, ["B", "L", 6])], ["out"], {"num_heads": 4}, name="mha4")
    with pytest.raises(dynashape.ShapeInferenceError, match="mha4.*multiple of 4"):
        x = rand(rng, 1, 2, 6)
        dynashape.InferenceSession(bad_heads).run(None, {"query": x, "key": x, "value": x})


# ----------------------------------------------------------------------------------------
# GroupQueryAttention
# ----------------------------------------------------------------------------------------

GH, GKV, GHEAD = 4, 2, 16
GQA_OUTS = ("out", "present_key", "present_value")


def gqa_model(heads=GH, kv_heads=GKV, head=GHEAD, packed=False, past=True, rotary_half=None, position_ids=False,
              attn_bias=False, head_sink=False, attrs=None, outputs=GQA_OUTS, dtype=F32, name="gqa"):
    """GroupQueryAttention with symbolic batch B, sequence S, past buffer P; cos/sin (M, R)."""
    d, dkv = heads * head, kv_heads * head
    inputs = [("query", dtype, ["B", "S", d + 2 * dkv if packed else d]),
              None if packed else ("key", dtype, ["B", "S", dkv]),
              None if packed else ("value", dtype, ["B", "S", dkv]),
              ("past_key", dtype, ["B", kv_heads, "P", head]) if past else None,
              ("past_value", dtype, ["B", kv_heads, "P", head]) if past else None,
              ("seqlens_k", I32, ["B"]), ("total_sequence_length", I32, []),
              ("cos", dtype, ["M", "R"]) if rotary_half else None, ("sin", dtype, ["M", "R"]) if rotary_half else None,
              ("position_ids", I64, ["B", "S"]) if position_ids else None,
              ("attn_bias", dtype, ["AB", "AN", "S", "T"]) if attn_bias else None,
              ("head_sink", dtype, [heads]) if head_sink else None]
    a = dict({"num_heads": heads, "kv_num_heads": kv_heads}, **(attrs or {}))
    if rotary_half:
        a["do_rotary"] = 1
    return one_node("GroupQueryAttention", inputs, list(outputs), a, name=name)


class GqaFeeds:
    """Feeds of one GroupQueryAttention step."""

    def __init__(self, rng, heads=GH, kv_heads=GKV, head=GHEAD, packed=False, dtype=F32, rotary_half=None,
                 max_seq=48):
        self.rng, self.heads, self.kv_heads, self.head = rng, heads, kv_heads, head
        self.packed, self.dtype = packed, dtype
        self.cos = self.sin = None
        if rotary_half:
            angles = rng.uniform(0, 6, (max_seq, rotary_half))
            self.cos, self.sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)

    def step(self, b, s, seqlens, total, past=None, past_len=0, **extra):
        r, d, dkv = self.rng, self.heads * self.head, self.kv_heads * self.head
        f = {}
        if self.packed:
            f["query"] = rand(r, b, s, d + 2 * dkv, dtype=self.dtype)
        else:
            f["query"] = rand(r, b, s, d, dtype=self.dtype)
            f["key"], f["value"] = rand(r, b, s, dkv, dtype=self.dtype), rand(r, b, s, dkv, dtype=self.dtype)
        if past is not None:
            f["past_key"], f["past_value"] = past
        elif past_len is not None:
            shape = (b, self.kv_heads, past_len, self.head)
            f["past_key"], f["past_value"] = rand(r, *shape, dtype=self.dtype), rand(r, *shape, dtype=self.dtype)
        f["seqlens_k"] = np.asarray(seqlens, np.int32)
        f["total_sequence_length"] = np.array(total, np.int32)
        if self.cos is not None:
            f["cos"], f["sin"] = self.cos, self.sin
        f.update(extra)
        return f


def gqa_specified(feeds, name, shape):
    """The elements of output / qk the contract specifies: in a right-padded first prompt the
    query rows past an entry's tokens are unspecified (onnxruntime's two kernel paths differ
    there with local_window_size)."""
    s, total = feeds["query"].shape[1], int(feeds["total_sequence_length"])
    if name not in ("out", "qk") or s != total:
        return None
    rows = np.arange(s)[None, :] < feeds["seqlens_k"][:, None] + 1           # (B, S)
    return np.broadcast_to(rows[:, :, None] if name == "out" else rows[:, None, :, None], shape)


def gqa_steps(g: GqaFeeds, with_past=True):
    """A prompt (right-padded second entry), three decoding steps with a growing cache, a
    static-cache step (past buffer longer than total_sequence_length) and the prompt again."""
    past_len = 0 if with_past else None
    steps = [g.step(2, 5, [4, 2], 5, past_len=past_len),
             g.step(2, 1, [5, 3], 6, past_len=5 if with_past else None),
             g.step(3, 1, [7, 2, 4], 8, past_len=7 if with_past else None),
             g.step(1, 1, [2], 3, past_len=2 if with_past else None)]
    if with_past:
        steps.append(g.step(2, 1, [6, 9], 7, past_len=12))
    steps.append(steps[0])
    return steps


@pytest.mark.parametrize("kv_heads", [1, 2, 4], ids=["mqa", "gqa", "mha"])
@pytest.mark.parametrize("packed", [False, True], ids=["qkv", "packed"])
def test_gqa_prompt_and_decoding_match_ort(packed, kv_heads):
    rng = rng_for(20)
    model = gqa_model(kv_heads=kv_heads, packed=packed)
    feeds = gqa_steps(GqaFeeds(rng, kv_heads=kv_heads, packed=packed))
    assert_session_matches_ort(model, feeds, valid=gqa_specified)


def test_gqa_without_past_matches_ort():
    rng = rng_for(21)
    g = GqaFeeds(rng)
    feeds = [g.step(2, 5, [4, 2], 5, past_len=None), g.step(1, 3, [2], 3, past_len=None),
             g.step(3, 1, [0, 0, 0], 1, past_len=None)]
    assert_session_matches_ort(gqa_model(past=False), feeds)


def test_gqa_decoding_loop_feeds_present_back_as_past():
    rng = rng_for(22)
    model = gqa_model()
    sess, ref = dynashape.InferenceSession(model), ort_session(model)
    g = GqaFeeds(rng)
    lengths = np.array([6, 3])                          # batch 1 is right-padded in the prompt
    feeds = g.step(2, 6, lengths - 1, 6, past_len=0)
    for step in range(5):
        got, want = sess.run(None, feeds), ref.run(None, feeds)
        for j, (gv, wv) in enumerate(zip(got, want)):
            assert_close(gv, wv, RTOL, ATOL, f"step {step} output {j}")
        lengths = lengths + 1                           # growing cache: total = past + 1
        feeds = g.step(2, 1, lengths - 1, got[1].shape[2] + 1, past=(got[1], got[2]))


def test_gqa_subsequent_prompt_chunks_match_ort():
    """Interactive decoding: chunks of several tokens after a past (batch 1)."""
    rng = rng_for(23)
    g = GqaFeeds(rng)
    feeds = [g.step(1, 3, [5], 6, past_len=3), g.step(1, 2, [8], 9, past_len=7), g.step(1, 4, [5], 7, past_len=9)]
    assert_session_matches_ort(gqa_model(attrs={"local_window_size": 3}), feeds)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("head,half", [(16, 8), (32, 8)], ids=["full", "partial"])
@pytest.mark.parametrize("packed", [False, True], ids=["qkv", "packed"])
def test_gqa_rotary_matches_ort(packed, head, half, interleaved):
    rng = rng_for(24)
    model = gqa_model(head=head, packed=packed, rotary_half=half, attrs={"rotary_interleaved": interleaved})
    feeds = gqa_steps(GqaFeeds(rng, head=head, packed=packed, rotary_half=half))
    assert_session_matches_ort(model, feeds, valid=gqa_specified)


def test_gqa_rotary_position_ids_match_ort():
    """position_ids: in the first prompt onnxruntime reads only its first element (positions
    position_ids[0, 0] + s); when decoding each entry."""
    rng = rng_for(25)
    g = GqaFeeds(rng, rotary_half=8)
    model = gqa_model(rotary_half=8, position_ids=True)
    feeds = [g.step(2, 4, [3, 3], 4, past_len=0, position_ids=np.array([[3, 4, 5, 6], [0, 1, 2, 3]], np.int64)),
             g.step(2, 1, [4, 2], 5, past_len=4, position_ids=np.array([[9], [2]], np.int64)),
             g.step(1, 3, [5], 6, past_len=3, position_ids=np.array([[20, 21, 22]], np.int64))]
    assert_session_matches_ort(model, feeds)


@pytest.mark.parametrize("attrs", [{"local_window_size": 2}, {"local_window_size": 1}, {"softcap": 0.5},
                                   {"scale": 0.3}, {"smooth_softmax": 1}, {"causal": 0},
                                   {"local_window_size": 3, "softcap": 2.0, "scale": 0.5}],
                         ids=["window2", "window1", "softcap", "scale", "smooth", "noncausal", "combined"])
def test_gqa_attributes_match_ort(attrs):
    rng = rng_for(26)
    assert_session_matches_ort(gqa_model(attrs=attrs), gqa_steps(GqaFeeds(rng)), valid=gqa_specified)


def test_gqa_attention_bias_and_head_sink_match_ort():
    rng = rng_for(27)
    model = gqa_model(attn_bias=True, head_sink=True, attrs={"softcap": 1.5})
    g = GqaFeeds(rng)
    sink = rand(rng, GH)
    feeds = [g.step(2, 5, [4, 4], 5, past_len=0, attn_bias=rand(rng, 2, GH, 5, 5), head_sink=sink),
             g.step(2, 1, [5, 3], 6, past_len=5, attn_bias=rand(rng, 1, 1, 1, 6), head_sink=sink),
             g.step(3, 1, [6, 2, 4], 7, past_len=6, attn_bias=rand(rng, 3, 1, 1, 7), head_sink=sink)]
    assert_session_matches_ort(model, feeds)


@pytest.mark.parametrize("qk_output", [1, 2])
def test_gqa_qk_output_matches_ort(qk_output):
    rng = rng_for(28)
    model = gqa_model(outputs=GQA_OUTS + ("qk",), attrs={"qk_output": qk_output, "local_window_size": 3,
                                                         "softcap": 1.0})
    assert_session_matches_ort(model, gqa_steps(GqaFeeds(rng)), valid=gqa_specified)


def test_gqa_float16_matches_ort():
    rng = rng_for(29)
    model = gqa_model(rotary_half=8, dtype=F16, attrs={"local_window_size": 4})
    feeds = gqa_steps(GqaFeeds(rng, dtype=F16, rotary_half=8))
    assert_session_matches_ort(model, feeds, rtol=4e-3, atol=4e-3, valid=gqa_specified)


def gqa_with_computed_total(model, nodes, inputs=()):
    """``model`` (gqa_model's) with total_sequence_length computed by ``nodes`` (the last one
    writes ``total``) from the graph's inputs and ``inputs`` instead of fed."""
    graph = model.graph
    gqa = graph.node[0]
    gqa.input[6] = "total"
    graph.input.extend(inputs)
    del graph.input[6]
    graph.node.extend(nodes)
    del graph.node[0]
    graph.node.append(gqa)
    return model


def test_gqa_present_length_is_symbolic_when_total_comes_from_shapes():
    """With total_sequence_length computed from shapes (past + seq) the present length is
    the symbol ``P + S`` at import (no data-dependent step)."""
    model = gqa_with_computed_total(gqa_model(), [
        helper.make_node("Shape", ["past_key"], ["pshape"], start=2, end=3),
        helper.make_node("Shape", ["query"], ["qshape"], start=1, end=2),
        helper.make_node("Add", ["pshape", "qshape"], ["total64"]),
        helper.make_node("Squeeze", ["total64"], ["total64s"]),
        helper.make_node("Cast", ["total64s"], ["total"], to=TensorProto.INT32)])
    sess = dynashape.InferenceSession(model)
    assert output_shapes(sess) == [["B", "S", GH * GHEAD]] + [["B", GKV, "P + S", GHEAD]] * 2
    rng = rng_for(30)
    g = GqaFeeds(rng)
    ref = ort_session(gqa_model())
    for feeds in (g.step(2, 1, [5, 3], 6, past_len=5), g.step(1, 4, [3], 4, past_len=0)):
        got = sess.run(None, {k: v for k, v in feeds.items() if k != "total_sequence_length"})
        for j, (gv, wv) in enumerate(zip(got, ref.run(None, feeds))):
            assert_close(gv, wv, RTOL, ATOL, f"output {j}")


def test_gqa_total_from_another_symbol_is_guarded_exactly():
    """total_sequence_length from a mask's length T, a symbol of its own: T = P + S (a growing
    cache) and T <= P (a static one) are valid, P < T != P + S is not. The rule checked that
    for ints only (a symbolic T took max(T, P) unchecked); the guard (T - P - S) * (max(T, P) - P)
    == 0 is exact, so each kind of binding is planned from the symbols, the bad one refused by
    name, and the good ones match onnxruntime fed the same total."""
    model = gqa_with_computed_total(gqa_model(name="gqa_t"), [
        helper.make_node("Shape", ["mask"], ["mshape"], start=1, end=2),
        helper.make_node("Squeeze", ["mshape"], ["t64"]),
        helper.make_node("Cast", ["t64"], ["total"], to=TensorProto.INT32)],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["B", "T"])])
    sess = dynashape.InferenceSession(model)
    ref = ort_session(gqa_model())
    g = GqaFeeds(rng_for(33))
    for feeds in (g.step(2, 1, [5, 3], 6, past_len=5),          # growing: T = P + S
                  g.step(1, 1, [3], 4, past_len=6)):            # static: T <= P, present keeps P
        mine = {k: v for k, v in feeds.items() if k != "total_sequence_length"}
        mine["mask"] = np.ones((feeds["query"].shape[0], int(feeds["total_sequence_length"])), np.float32)
        for j, (gv, wv) in enumerate(zip(sess.run(None, mine), ref.run(None, feeds))):
            assert_close(gv, wv, RTOL, ATOL, f"output {j}")
    bad = {k: v for k, v in g.step(1, 1, [5], 6, past_len=4).items() if k != "total_sequence_length"}
    bad["mask"] = np.ones((1, 6), np.float32)                    # 4 < 6 != 4 + 1
    with pytest.raises(dynashape.ShapeInferenceError, match="gqa_t.*growing cache.*static cache") as info:
        sess.run(None, bad)
    assert info.value.node == "gqa_t"
    assert sess.stats.resolved_plans == 0


@pytest.mark.parametrize("attrs,extra,match", [
    ({"sliding_window_cache": 1, "local_window_size": 4}, {}, "sliding_window_cache"),
    ({"k_quant_type": "PER_TENSOR"}, {}, "k_quant_type"),
    ({"v_quant_type": "PER_CHANNEL"}, {}, "v_quant_type"),
    ({}, {12: ("k_scale", F32, [1])}, "k_scale"),
    ({}, {14: ("q_norm_weight", F32, [GHEAD]), 15: ("k_norm_weight", F32, [GHEAD])}, "q_norm_weight"),
    ({}, {16: ("query_seqlens", I32, ["B"])}, "query_seqlens"),
], ids=["sliding_window_cache", "k_quant_type", "v_quant_type", "k_scale", "qk_norm", "query_seqlens"])
def test_gqa_unsupported_attributes_and_inputs_raise(attrs, extra, match):
    model = gqa_model(attrs=attrs, name="gqa_u")
    node, graph = model.graph.node[0], model.graph
    while len(node.input) < 17 and extra:
        node.input.append("")
    feeds = GqaFeeds(rng_for(31)).step(1, 2, [1], 2, past_len=0)
    for i, (name, dtype, dims) in extra.items():
        node.input[i] = name
        graph.input.append(helper.make_tensor_value_info(name, ELEM[dtype], dims))
        feeds[name] = np.ones([1 if d == "B" else d for d in dims], dtype)
    with pytest.raises(dynashape.UnsupportedOperatorError, match=f"gqa_u.*{match}") as info:
        dynashape.InferenceSession(model).run(None, feeds)
    assert isinstance(info.value, NotImplementedError)


def test_gqa_invalid_attributes_and_inputs_raise_naming_node():
    rng = rng_for(32)
    with pytest.raises(dynashape.ShapeInferenceError, match="gqa_h.*multiple of kv_num_heads"):
        dynashape.InferenceSession(gqa_model(heads=4, kv_heads=3, name="gqa_h")).run(
            None, GqaFeeds(rng, heads=4, kv_heads=3).step(1, 2, [1], 2))
    g = GqaFeeds(rng)
    with pytest.raises(dynashape.ShapeInferenceError, match="local_window_size must be -1 when causal is 0"):
        dynashape.InferenceSession(gqa_model(attrs={"causal": 0, "local_window_size": 2})).run(
            None, g.step(1, 2, [1], 2))
    sess = dynashape.InferenceSession(gqa_model(name="gqa_v"))
    with pytest.raises(dynashape.ShapeInferenceError, match="gqa_v.*growing cache.*static cache") as info:
        sess.run(None, g.step(2, 1, [4, 4], 7, past_len=4))
    assert info.value.node == "gqa_v"
    with pytest.raises(dynashape.ShapeInferenceError, match="batch_size must be 1"):
        sess.run(None, g.step(2, 3, [5, 5], 6, past_len=3))
    with pytest.raises(dynashape.ExecutionError, match=r"gqa_v.*seqlens_k\[0\] = 6 is out of range \[0, 5\)"):
        sess.run(None, g.step(2, 1, [6, 2], 5, past_len=4))
    sess.run(None, g.step(2, 1, [4, 2], 5, past_len=4))          # the session still serves fitting feeds
    with pytest.raises(dynashape.ShapeInferenceError, match="output_qk. needs qk_output"):
        dynashape.InferenceSession(gqa_model(outputs=GQA_OUTS + ("qk",))).run(None, g.step(1, 2, [1], 2))


# ----------------------------------------------------------------------------------------
# RotaryEmbedding
# ----------------------------------------------------------------------------------------

RH, RHEAD, RMAX = 2, 8, 24


def rotary_model(layout="3d", pos="2d", half=RHEAD // 2, attrs=None, dtype=F32, name="rope"):
    x = ("input", dtype, ["B", "S", RH * RHEAD]) if layout == "3d" else ("input", dtype, ["B", RH, "S", RHEAD])
    pos_dims = {"2d": ["B", "S"], "1": [1], "scalar": []}[pos]
    inputs = [x, ("position_ids", I64, pos_dims), ("cos", dtype, [RMAX, half]), ("sin", dtype, [RMAX, half])]
    return one_node("RotaryEmbedding", inputs, ["output"], attrs, name=name)


def rotary_feeds(rng, b, s, layout="3d", pos="2d", half=RHEAD // 2, dtype=F32):
    x = rand(rng, b, s, RH * RHEAD, dtype=dtype) if layout == "3d" else rand(rng, b, RH, s, RHEAD, dtype=dtype)
    if pos == "2d":
        p = rng.integers(0, RMAX, (b, s)).astype(np.int64)
    else:
        p = np.array([int(rng.integers(0, RMAX - s + 1))] if pos == "1" else int(rng.integers(0, RMAX - s + 1)),
                     np.int64)
    angles = rng.uniform(0, 6, (RMAX, half))
    return {"input": x, "position_ids": p, "cos": np.cos(angles).astype(dtype), "sin": np.sin(angles).astype(dtype)}


ROTARY_SHAPES = ((2, 3), (1, 7), (3, 1), (2, 3))


@pytest.mark.parametrize("attrs,half", [({}, 4), ({"num_heads": RH}, 4),
                                        ({"num_heads": RH, "rotary_embedding_dim": 4}, 2),
                                        ({"num_heads": RH, "rotary_embedding_dim": 4}, 4),
                                        ({"scale": 2.0, "is_packed_batching": 1}, 4)],
                         ids=["default", "num_heads", "partial", "partial_head_cache", "scale_packed"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("pos", ["2d", "1", "scalar"])
@pytest.mark.parametrize("layout", ["3d", "4d"])
def test_rotary_embedding_matches_ort(layout, pos, interleaved, attrs, half):
    """partial_head_cache: rotary_embedding_dim < head_size with a (max_seq, head_size / 2)
    cache, which onnxruntime's kernel reads at flat offset position * rotary_embedding_dim / 2."""
    rng = rng_for(40)
    model = rotary_model(layout, pos, half, dict(attrs, interleaved=interleaved))
    feeds = [rotary_feeds(rng, b, s, layout, pos, half) for b, s in ROTARY_SHAPES]
    sess = assert_session_matches_ort(model, feeds)
    assert output_shapes(sess) == [["B", "S", RH * RHEAD] if layout == "3d" else ["B", RH, "S", RHEAD]]


def test_rotary_embedding_float16_matches_ort():
    rng = rng_for(41)
    model = rotary_model("3d", "2d", dtype=F16, attrs={"interleaved": 1})
    feeds = [rotary_feeds(rng, b, s, dtype=F16) for b, s in ROTARY_SHAPES]
    assert_session_matches_ort(model, feeds, rtol=1e-3, atol=1e-3)


@pytest.mark.filterwarnings("ignore:dynashape. dim_param")   # the position_ids of a mismatched length
def test_rotary_embedding_errors_name_the_node():
    rng = rng_for(42)
    sess = dynashape.InferenceSession(rotary_model(name="rope_e"))
    with pytest.raises(dynashape.UnsupportedOperatorError, match="rope_e.*max_sequence_length"):
        sess.run(None, rotary_feeds(rng, 1, RMAX + 1))
    bad = rotary_feeds(rng, 2, 3)
    bad["position_ids"][1, 2] = RMAX
    with pytest.raises(dynashape.ExecutionError, match="rope_e.*position_ids value 24 at index 5 is out of range"):
        sess.run(None, bad)
    sess.run(None, rotary_feeds(rng, 2, 3))                      # the session still serves fitting feeds
    with pytest.raises(dynashape.ShapeInferenceError, match="num_heads must be provided"):
        dynashape.InferenceSession(rotary_model(attrs={"rotary_embedding_dim": 4})).run(None, rotary_feeds(rng, 1, 2))
    with pytest.raises(dynashape.ShapeInferenceError, match="cos_cache dim 1"):
        dynashape.InferenceSession(rotary_model(half=3, attrs={"num_heads": RH, "rotary_embedding_dim": 4})).run(
            None, rotary_feeds(rng, 1, 2, half=3))
    with pytest.raises(dynashape.ShapeInferenceError, match="position_ids dim 1"):
        f = rotary_feeds(rng, 2, 3)
        dynashape.InferenceSession(rotary_model()).run(None, dict(f, position_ids=f["position_ids"][:, :2]))


# ----------------------------------------------------------------------------------------
# check_op: the records against the kernels over random sizes
# ----------------------------------------------------------------------------------------

def test_check_op_multi_head_attention():
    def make(rng, b, s, kv, p):
        mask = rng.integers(0, 2, (b, p + kv)).astype(np.int32)
        mask[:, 0] = 1
        return [rand(rng, b, s, D), rand(rng, b, kv, D), rand(rng, b, kv, 6), rand(rng, 2 * D + 6), mask,
                rand(rng, 1, N, s, p + kv), rand(rng, b, N, p, HEAD), rand(rng, b, N, p, 3)]
    total = "t"       # its own symbol: assumed equal to p + kv
    res = check_op("MultiHeadAttention", make, {"b": (1, 3), "s": (1, 6), "kv": (1, 6), "p": (0, 5)},
                   {"num_heads": N, "unidirectional": 1}, domain=MS, opset=1, n_outputs=4,
                   symbolic_shapes=[("b", "s", D), ("b", "kv", D), ("b", "kv", 6), (2 * D + 6,), ("b", total),
                                    (1, N, "s", total), ("b", N, "p", HEAD), ("b", N, "p", 3)])
    assert res.symbolic_checked == 10


def _make_gqa(rng, b, s, p):
    """A decoding step (s = 1) or a first prompt (past buffer p, total s)."""
    if s > 1:
        total, lens = s, rng.integers(1, s + 1, b)
    else:
        total, lens = p + 1, rng.integers(1, p + 2, b)
    angles = rng.uniform(0, 6, (64, 8))
    return [rand(rng, b, s, GH * GHEAD), rand(rng, b, s, GKV * GHEAD), rand(rng, b, s, GKV * GHEAD),
            rand(rng, b, GKV, p, GHEAD), rand(rng, b, GKV, p, GHEAD), (lens - 1).astype(np.int32),
            np.array(total, np.int32), np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)]


def test_check_op_group_query_attention():
    attrs = {"num_heads": GH, "kv_num_heads": GKV, "do_rotary": 1, "local_window_size": 3, "softcap": 1.0}
    dims = {"b": (1, 3), "s": (1, 1), "p": (0, 9)}
    # the output's shape symbolically (the present length follows total_sequence_length's value)
    res = check_op("GroupQueryAttention", _make_gqa, dims, attrs, domain=MS, opset=1, n_outputs=1,
                   symbolic_shapes=[("b", "s", GH * GHEAD), ("b", "s", GKV * GHEAD), ("b", "s", GKV * GHEAD),
                                    ("b", GKV, "p", GHEAD), ("b", GKV, "p", GHEAD), ("b",), (), (64, 8), (64, 8)])
    assert res.symbolic_checked == 10
    # every output concretely, prompts and decoding steps
    check_op("GroupQueryAttention", _make_gqa, {"b": (1, 3), "s": (1, 6), "p": (0, 0)}, attrs, domain=MS, opset=1,
             n_outputs=3, seed=1)
    check_op("GroupQueryAttention", _make_gqa, dims, dict(attrs, qk_output=2), domain=MS, opset=1, n_outputs=4,
             seed=2)


def test_check_op_rotary_embedding():
    def make(rng, b, s, n):
        return [rand(rng, b, s, n * RHEAD), rng.integers(0, RMAX, (b, s)).astype(np.int64),
                rand(rng, RMAX, 2), rand(rng, RMAX, 2)]
    res = check_op("RotaryEmbedding", make, {"b": (1, 4), "s": (1, RMAX), "n": (1, 3)},
                   {"num_heads": 1, "rotary_embedding_dim": 4, "interleaved": 1}, domain=MS, opset=1,
                   symbolic_shapes=None)
    assert len(res.draws) == 10

    def make4(rng, b, n, s):
        return [rand(rng, b, n, s, RHEAD), np.array([int(rng.integers(0, RMAX - s + 1))], np.int64),
                rand(rng, RMAX, RHEAD // 2), rand(rng, RMAX, RHEAD // 2)]
    res = check_op("RotaryEmbedding", make4, {"b": (1, 4), "n": (1, 3), "s": (1, RMAX)}, {}, domain=MS, opset=1,
                   symbolic_shapes=[("b", "n", "s", RHEAD), (1,), (RMAX, RHEAD // 2), (RMAX, RHEAD // 2)])
    assert res.symbolic_checked == 10
