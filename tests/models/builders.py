"""Small real-model-like ONNX graphs built with ``onnx.helper``, so the suite covers what the
exported models of ../shared/zoo exercise without needing ../shared.

Each builder writes the patterns exporters (torch.onnx / transformers) write: weights as
initializers, small constants as ``Constant`` nodes, reshape targets computed at run time by
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, decomposed LayerNorm and Gelu, masks built
from shapes. Weights are random but seeded: a builder returns the same model every call.

* :func:`bert_encoder` - a 2-layer BERT-like encoder (input_ids, attention_mask, token_type_ids).
* :func:`conv_net` - a ResNet-like conv net with symbolic batch, height and width.
* :func:`gpt2_decoder` - a 2-layer GPT-2-like decoder with a KV cache (past_key_i / past_value_i).

The ``*_feeds`` helpers make matching inputs for given shapes.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "GraphBuilder",
    "bert_encoder",
    "bert_feeds",
    "conv_net",
    "conv_feeds",
    "gpt2_decoder",
    "gpt2_prefill_feeds",
    "BERT",
    "BERT_POSITION_ADD",
    "CONV",
    "GPT2",
]

#: dimensions of the models (tests read them rather than repeating numbers)
BERT = dict(vocab=50, hidden=32, heads=4, layers=2, ffn=64, max_pos=64, type_vocab=2)
CONV = dict(channels=3, width=8, classes=10)
GPT2 = dict(vocab=64, hidden=32, heads=4, layers=2, ffn=128, max_pos=128)
#: the node of bert_encoder adding the position embeddings (a sequence over max_pos fails there)
BERT_POSITION_ADD = "/embeddings/Add_positions"


class GraphBuilder:
    """Accumulates nodes and initializers of one graph, naming outputs ``/<scope>/<Op>_<n>``.

    Args:
        name: the graph's name.
        seed: seed of the weights' random generator.
    """

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.initializers: list = []
        self.scope = ""
        self._count = 0

    def _out(self, op: str) -> str:
        self._count += 1
        return f"{self.scope}/{op}_{self._count}_output_0"

    def op(self, op: str, inputs: Sequence[str], n_outputs: int = 1, outputs: Optional[Sequence[str]] = None,
           name: Optional[str] = None, **attrs):
        """Add one node (named ``name`` or ``<scope>/<op>_<n>``); returns its output name (a list
        when ``n_outputs`` > 1)."""
        outs = list(outputs) if outputs is not None else [self._out(op) for _ in range(n_outputs)]
        self._count += 1
        name = name or f"{self.scope}/{op}_{self._count}"
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def const(self, value, dtype=None) -> str:
        """A ``Constant`` node holding ``value`` (int -> int64, float -> float32 unless ``dtype``)."""
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(dtype)
        elif arr.dtype.kind == "i":
            arr = arr.astype(np.int64)
        elif arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        return self.op("Constant", [], value=numpy_helper.from_array(arr))

    def weight(self, name: str, shape: Sequence[int], scale: float = 0.1, offset: float = 0.0) -> str:
        """A float32 initializer of normal(offset, scale) values."""
        arr = (offset + scale * self.rng.standard_normal(tuple(shape))).astype(np.float32)
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    # --- exporter idioms --------------------------------------------------------------
    def dim(self, x: str, axis: int) -> str:
        """Scalar int64 ``Shape(x)[axis]`` (Shape -> Gather with a scalar index)."""
        return self.op("Gather", [self.op("Shape", [x]), self.const(axis)], axis=0)

    def unsqueeze0(self, scalar: str) -> str:
        return self.op("Unsqueeze", [scalar, self.const([0])])

    def shape_of(self, parts: Sequence) -> str:
        """A 1-D shape tensor: Concat of unsqueezed scalars (str) and constant ints."""
        return self.op("Concat", [self.const([p]) if isinstance(p, int) else self.unsqueeze0(p) for p in parts],
                       axis=0)

    def linear(self, x: str, prefix: str, n_in: int, n_out: int, scale: float = 0.1) -> str:
        """``MatMul(x, W) + b`` (the transformers' nn.Linear export)."""
        w = self.weight(f"{prefix}.weight", (n_in, n_out), scale)
        b = self.weight(f"{prefix}.bias", (n_out,), 0.02)
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str, prefix: str, n: int, eps: float = 1e-5) -> str:
        """The LayerNormalization op (opset 17)."""
        g = self.weight(f"{prefix}.weight", (n,), 0.1, 1.0)
        b = self.weight(f"{prefix}.bias", (n,), 0.02)
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)

    def layer_norm_decomposed(self, x: str, prefix: str, n: int, eps: float = 1e-12) -> str:
        """LayerNorm as older exporters write it: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add."""
        g = self.weight(f"{prefix}.weight", (n,), 0.1, 1.0)
        b = self.weight(f"{prefix}.bias", (n,), 0.02)
        mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
        centered = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [centered, self.const(2.0)])], axes=[-1], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.const(eps)])])
        return self.op("Add", [self.op("Mul", [self.op("Div", [centered, std]), g]), b])

    def gelu_erf(self, x: str) -> str:
        """BERT's gelu: ``x * 0.5 * (1 + Erf(x / sqrt(2)))``."""
        erf = self.op("Erf", [self.op("Div", [x, self.const(math.sqrt(2.0))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, self.const(1.0)])]), self.const(0.5)])

    def gelu_tanh(self, x: str) -> str:
        """GPT-2's gelu: ``0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))``."""
        cube = self.op("Mul", [self.op("Pow", [x, self.const(3.0)]), self.const(0.044715)])
        inner = self.op("Mul", [self.op("Add", [x, cube]), self.const(math.sqrt(2.0 / math.pi))])
        one_plus = self.op("Add", [self.op("Tanh", [inner]), self.const(1.0)])
        return self.op("Mul", [self.op("Mul", [x, self.const(0.5)]), one_plus])

    def split_heads(self, x: str, heads: int, head_dim: int, perm=(0, 2, 1, 3)) -> str:
        """[b, s, heads*head_dim] -> Reshape [b, s, heads, head_dim] (target from Shape) -> Transpose."""
        target = self.shape_of([self.dim(x, 0), self.dim(x, 1), heads, head_dim])
        return self.op("Transpose", [self.op("Reshape", [x, target])], perm=list(perm))

    def merge_heads(self, x: str, hidden: int) -> str:
        """[b, heads, s, head_dim] -> Transpose [b, s, heads, head_dim] -> Reshape [b, s, hidden]."""
        t = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.shape_of([self.dim(t, 0), self.dim(t, 1), hidden])])

    def model(self, inputs: list, outputs: list, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="dynashape-tests")
        onnx.checker.check_model(model)
        return model


def _ids(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, dims)


def _floats(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


# --- BERT ---------------------------------------------------------------------------------
def bert_encoder(seed: int = 0) -> onnx.ModelProto:
    """A 2-layer BERT-like encoder (hidden 32, 4 heads, opset 17), as transformers exports it.

    Inputs ``input_ids``, ``attention_mask``, ``token_type_ids``: int64 ``[batch, sequence]``.
    Outputs ``last_hidden_state`` float ``[batch, sequence, 32]`` and ``pooler_output``
    float ``[batch, 32]``.

    * embeddings: word / token-type Gathers; position ids a Slice of a constant
      ``arange(max_pos)[None]`` up to ``Shape(input_ids)[1]``; summed, then the decomposed
      LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div);
    * extended attention mask ``(1 - Cast(Unsqueeze(mask, [1, 2]))) * -10000``;
    * per layer: Q/K/V MatMul+Add, head reshapes with targets from Shape -> Gather -> Unsqueeze
      -> Concat, K transposed to [b, h, d, s], scores Div by sqrt(head_dim), + mask, Softmax,
      context merged back by Transpose + Reshape, output projection, residual +
      LayerNormalization; feed-forward with the Erf form of Gelu, residual + LayerNormalization;
    * pooler: Gather of sequence index 0 (axis 1), Gemm (transB) and Tanh.
    """
    c = BERT
    hidden, heads = c["hidden"], c["heads"]
    head_dim = hidden // heads
    g = GraphBuilder("bert_encoder", seed)
    g.scope = "/embeddings"
    words = g.op("Gather", [g.weight("embeddings.word_embeddings.weight", (c["vocab"], hidden), 0.5), "input_ids"])
    types = g.op("Gather", [g.weight("embeddings.token_type_embeddings.weight", (c["type_vocab"], hidden), 0.5),
                            "token_type_ids"])
    position_buffer = g.const(np.arange(c["max_pos"])[None, :])
    seq = g.dim("input_ids", 1)
    position_ids = g.op("Slice", [position_buffer, g.const([0]), g.unsqueeze0(seq), g.const([1]), g.const([1])])
    positions = g.op("Gather", [g.weight("embeddings.position_embeddings.weight", (c["max_pos"], hidden), 0.5),
                                position_ids])
    x = g.op("Add", [g.op("Add", [words, types]), positions], name=BERT_POSITION_ADD)
    x = g.layer_norm_decomposed(x, "embeddings.LayerNorm", hidden)

    g.scope = "/extended_mask"
    mask = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.const([1, 2])])], to=TensorProto.FLOAT)
    ext_mask = g.op("Mul", [g.op("Sub", [g.const(1.0), mask]), g.const(-10000.0)])

    for layer in range(c["layers"]):
        p = f"encoder.layer.{layer}"
        g.scope = f"/encoder/layer.{layer}/attention"
        q = g.split_heads(g.linear(x, f"{p}.attention.self.query", hidden, hidden), heads, head_dim)
        k = g.split_heads(g.linear(x, f"{p}.attention.self.key", hidden, hidden), heads, head_dim, perm=(0, 2, 3, 1))
        v = g.split_heads(g.linear(x, f"{p}.attention.self.value", hidden, hidden), heads, head_dim)
        scores = g.op("Div", [g.op("MatMul", [q, k]), g.const(math.sqrt(head_dim))])
        probs = g.op("Softmax", [g.op("Add", [scores, ext_mask])], axis=-1)
        context = g.merge_heads(g.op("MatMul", [probs, v]), hidden)
        attn = g.linear(context, f"{p}.attention.output.dense", hidden, hidden)
        x = g.layer_norm(g.op("Add", [attn, x]), f"{p}.attention.output.LayerNorm", hidden, eps=1e-12)
        g.scope = f"/encoder/layer.{layer}/ffn"
        inter = g.gelu_erf(g.linear(x, f"{p}.intermediate.dense", hidden, c["ffn"]))
        out = g.linear(inter, f"{p}.output.dense", c["ffn"], hidden)
        x = g.layer_norm(g.op("Add", [out, x]), f"{p}.output.LayerNorm", hidden, eps=1e-12)

    g.scope = "/pooler"
    g.op("Identity", [x], outputs=["last_hidden_state"])
    first = g.op("Gather", [x, g.const(0)], axis=1)
    dense = g.op("Gemm", [first, g.weight("pooler.dense.weight", (hidden, hidden), 0.2),
                          g.weight("pooler.dense.bias", (hidden,), 0.02)], alpha=1.0, beta=1.0, transB=1)
    g.op("Tanh", [dense], outputs=["pooler_output"])
    dims = ["batch", "sequence"]
    return g.model([_ids("input_ids", dims), _ids("attention_mask", dims), _ids("token_type_ids", dims)],
                   [_floats("last_hidden_state", ["batch", "sequence", hidden]),
                    _floats("pooler_output", ["batch", hidden])])


def bert_feeds(batch: int, seq: int, seed: int = 0) -> dict:
    """Feeds of :func:`bert_encoder`: random ids, right padding (row r keeps ``seq - r % seq``
    tokens, at least 1), token types 0 then 1 from the middle."""
    rng = np.random.default_rng(1000 * batch + seq + seed)
    ids = rng.integers(0, BERT["vocab"], (batch, seq), dtype=np.int64)
    keep = np.maximum(seq - np.arange(batch) % seq, 1)
    mask = (np.arange(seq)[None, :] < keep[:, None]).astype(np.int64)
    types = np.broadcast_to((np.arange(seq) >= seq // 2).astype(np.int64), (batch, seq)).copy()
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


# --- conv net -----------------------------------------------------------------------------
def conv_net(seed: int = 0) -> onnx.ModelProto:
    """A ResNet-like conv net (opset 17) with symbolic batch, height and width.

    Input ``pixel_values`` float ``[batch, 3, height, width]``; outputs ``logits`` float
    ``[batch, 10]`` and ``features`` float ``[batch, 8, h', w']`` (h' = ceil(ceil(height/2)/2)).

    * stem: Conv 3->8 (3x3, stride 2, pads 1, bias), BatchNormalization, Relu, MaxPool (3x3,
      stride 2, pads 1);
    * a residual block: Conv 3x3 + BatchNormalization + Relu, then a grouped, dilated Conv
      (group 2, dilations 2, pads 2, bias), Add of the block input, Relu;
    * an upsample path: Resize x2 (nearest, scales) -> Conv 1x1 stride 2 -> Add back;
    * head: GlobalAveragePool, Flatten, Gemm (transB) to 10 classes.
    """
    c = CONV
    ch = c["width"]
    g = GraphBuilder("conv_net", seed)

    def conv(x, name, c_in, c_out, k, bias=True, **attrs):
        groups = attrs.get("group", 1)
        w = g.weight(f"{name}.weight", (c_out, c_in // groups, k, k), 1.0 / math.sqrt(c_in * k * k / groups))
        ins = [x, w] + ([g.weight(f"{name}.bias", (c_out,), 0.05)] if bias else [])
        return g.op("Conv", ins, kernel_shape=[k, k], **attrs)

    def batch_norm(x, name, n):
        scale = g.weight(f"{name}.weight", (n,), 0.1, 1.0)
        bias = g.weight(f"{name}.bias", (n,), 0.05)
        mean = g.weight(f"{name}.running_mean", (n,), 0.05)
        var = np.abs(g.rng.standard_normal(n) * 0.2 + 1.0).astype(np.float32)
        g.initializers.append(numpy_helper.from_array(var, f"{name}.running_var"))
        return g.op("BatchNormalization", [x, scale, bias, mean, f"{name}.running_var"], epsilon=1e-5)

    g.scope = "/stem"
    x = g.op("Relu", [batch_norm(conv("pixel_values", "stem.conv", c["channels"], ch, 3, pads=[1, 1, 1, 1],
                                      strides=[2, 2]), "stem.bn", ch)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    g.scope = "/block"
    y = g.op("Relu", [batch_norm(conv(x, "block.conv1", ch, ch, 3, bias=False, pads=[1, 1, 1, 1]), "block.bn1", ch)])
    y = conv(y, "block.conv2", ch, ch, 3, pads=[2, 2, 2, 2], dilations=[2, 2], group=2)
    x = g.op("Relu", [g.op("Add", [y, x])])
    g.scope = "/upsample"
    up = g.op("Resize", [x, "", g.const([1.0, 1.0, 2.0, 2.0])], mode="nearest")
    down = conv(up, "upsample.conv", ch, ch, 1, strides=[2, 2])
    g.op("Add", [x, down], outputs=["features"])
    g.scope = "/head"
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", ["features"])], axis=1)
    g.op("Gemm", [pooled, g.weight("head.weight", (c["classes"], ch), 0.5), g.weight("head.bias", (c["classes"],))],
         outputs=["logits"], transB=1)
    return g.model([_floats("pixel_values", ["batch", c["channels"], "height", "width"])],
                   [_floats("logits", ["batch", c["classes"]]),
                    _floats("features", ["batch", ch, "feature_height", "feature_width"])])


def conv_feeds(batch: int, height: int, width: int, seed: int = 0) -> dict:
    """Feeds of :func:`conv_net`: standard normal pixels."""
    rng = np.random.default_rng(10000 * batch + 100 * height + width + seed)
    return {"pixel_values": rng.standard_normal((batch, CONV["channels"], height, width)).astype(np.float32)}


# --- GPT-2 --------------------------------------------------------------------------------
def gpt2_decoder(seed: int = 0) -> onnx.ModelProto:
    """A 2-layer GPT-2-like decoder with a KV cache (hidden 32, 4 heads of 8, vocab 64, opset 17).

    Inputs: ``input_ids`` int64 ``[batch, sequence]``; ``attention_mask`` int64
    ``[batch, total_sequence]`` (past + new, 0 = padding); per layer i ``past_key_i`` and
    ``past_value_i`` float ``[batch, 4, past_sequence, 8]`` (past_sequence may be 0).
    Outputs: ``logits`` float ``[batch, sequence, 64]`` and ``present_key_i`` /
    ``present_value_i`` float ``[batch, 4, total_sequence, 8]``.

    * position ids ``Range(past, past + seq, 1)`` from Shape(past_key_0)[2] and
      Shape(input_ids)[1]; wte / wpe Gathers;
    * causal + padding bias built from shapes: ``Less(Unsqueeze(Range(past, past+seq)), Range(0,
      total))`` (a future key), Or ``Equal(attention_mask, 0)`` (a padding key), Where -> -1e9 / 0;
    * per layer: LayerNormalization, c_attn as Gemm on a [-1, hidden] Reshape (target from
      Shape -> Slice -> Squeeze -> Unsqueeze -> Concat) reshaped back to [b, s, 3*hidden], Split
      into q/k/v, head reshapes, ``present = Concat(past, new, axis=-2)``, scores MatMul
      (Transpose of present_key) * 1/sqrt(head_dim) + bias, Softmax, MatMul present_value,
      merge heads, projection, residual; MLP with the tanh form of Gelu (Pow), residual;
    * final LayerNormalization and an lm_head MatMul.
    """
    c = GPT2
    hidden, heads = c["hidden"], c["heads"]
    head_dim = hidden // heads
    g = GraphBuilder("gpt2_decoder", seed)
    g.scope = "/transformer"
    seq = g.dim("input_ids", 1)
    past = g.dim("past_key_0", 2)
    total = g.op("Add", [past, seq])
    query_pos = g.op("Range", [past, total, g.const(1)])                       # [seq]
    x = g.op("Add", [g.op("Gather", [g.weight("wte.weight", (c["vocab"], hidden), 0.5), "input_ids"]),
                     g.op("Gather", [g.weight("wpe.weight", (c["max_pos"], hidden), 0.3),
                                     g.op("Unsqueeze", [query_pos, g.const([0])])])])
    g.scope = "/transformer/mask"
    key_pos = g.op("Range", [g.const(0), total, g.const(1)])                   # [total]
    future = g.op("Less", [g.op("Unsqueeze", [query_pos, g.const([1])]), key_pos])  # [seq, total]
    padding = g.op("Unsqueeze", [g.op("Equal", ["attention_mask", g.const(0)]), g.const([1, 2])])  # [b,1,1,total]
    masked = g.op("Or", [g.op("Unsqueeze", [future, g.const([0, 1])]), padding])  # [b, 1, seq, total]
    bias = g.op("Where", [masked, g.const(-1e9), g.const(0.0)])

    inputs = [_ids("input_ids", ["batch", "sequence"]), _ids("attention_mask", ["batch", "total_sequence"])]
    outputs = [_floats("logits", ["batch", "sequence", c["vocab"]])]
    cache = ["batch", heads, "past_sequence", head_dim]
    present = ["batch", heads, "total_sequence", head_dim]
    for layer in range(c["layers"]):
        p = f"h.{layer}"
        inputs += [_floats(f"past_key_{layer}", cache), _floats(f"past_value_{layer}", cache)]
        outputs += [_floats(f"present_key_{layer}", present), _floats(f"present_value_{layer}", present)]
        g.scope = f"/transformer/h.{layer}/attn"
        h = g.layer_norm(x, f"{p}.ln_1", hidden)
        b, s = g.dim(h, 0), g.dim(h, 1)
        last = g.op("Squeeze", [g.op("Slice", [g.op("Shape", [h]), g.const([-1]), g.const([2 ** 63 - 1]),
                                               g.const([0])]), g.const([0])])
        flat = g.op("Reshape", [h, g.shape_of([-1, last])])
        qkv = g.op("Gemm", [flat, g.weight(f"{p}.attn.c_attn.weight", (hidden, 3 * hidden), 0.2),
                            g.weight(f"{p}.attn.c_attn.bias", (3 * hidden,), 0.02)], alpha=1.0, beta=1.0)
        qkv = g.op("Reshape", [qkv, g.shape_of([b, s, 3 * hidden])])
        q, k, v = g.op("Split", [qkv, g.const([hidden] * 3)], n_outputs=3, axis=2)
        q, k, v = (g.split_heads(t, heads, head_dim) for t in (q, k, v))
        key = g.op("Concat", [f"past_key_{layer}", k], outputs=[f"present_key_{layer}"], axis=-2)
        value = g.op("Concat", [f"past_value_{layer}", v], outputs=[f"present_value_{layer}"], axis=-2)
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [key], perm=[0, 1, 3, 2])]),
                              g.const(1.0 / math.sqrt(head_dim))])
        probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
        context = g.merge_heads(g.op("MatMul", [probs, value]), hidden)
        x = g.op("Add", [x, g.linear(context, f"{p}.attn.c_proj", hidden, hidden)])
        g.scope = f"/transformer/h.{layer}/mlp"
        h = g.layer_norm(x, f"{p}.ln_2", hidden)
        h = g.linear(g.gelu_tanh(g.linear(h, f"{p}.mlp.c_fc", hidden, c["ffn"])), f"{p}.mlp.c_proj", c["ffn"], hidden)
        x = g.op("Add", [x, h])
    g.scope = "/lm_head"
    h = g.layer_norm(x, "ln_f", hidden)
    g.op("MatMul", [h, g.weight("lm_head.weight", (hidden, c["vocab"]), 1.0)], outputs=["logits"])
    return g.model(inputs, outputs)


def gpt2_prefill_feeds(batch: int, seq: int, past: int = 0, seed: int = 0, pad: bool = False) -> dict:
    """Feeds of :func:`gpt2_decoder`: random ids and pasts; with ``pad`` row r > 0 has its first
    ``r`` positions (of past + seq, fewer than the total) masked out (left padding)."""
    rng = np.random.default_rng(1000 * batch + 10 * seq + past + seed)
    c = GPT2
    total = past + seq
    mask = np.ones((batch, total), dtype=np.int64)
    if pad:
        for r in range(batch):
            mask[r, :min(r, total - 1)] = 0
    feeds = {"input_ids": rng.integers(0, c["vocab"], (batch, seq), dtype=np.int64), "attention_mask": mask}
    shape = (batch, c["heads"], past, c["hidden"] // c["heads"])
    for layer in range(c["layers"]):
        feeds[f"past_key_{layer}"] = rng.standard_normal(shape).astype(np.float32)
        feeds[f"past_value_{layer}"] = rng.standard_normal(shape).astype(np.float32)
    return feeds
