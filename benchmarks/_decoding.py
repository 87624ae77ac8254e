"""Greedy decoding of KV-cache decoders (the protocol of ../shared/zoo/zoo2/README.md) and the
extraction of one branch of a merged decoder's top-level ``If`` as a standalone model.

Plain functions of numpy and onnx, for benchmarks/decode.py and for tests: importing this module
has no side effects (it sets no environment variable and reads no file), and nothing here depends
on timings (greedy_decode measures each step, but its tokens and logits do not depend on that).

The protocol, batch 1 by default (what optimum's ORTModel does):
  * step 1 feeds a prompt (default: 8 token ids from ``default_prompt``) with an empty cache: past
    tensors of shape (batch, heads, 0, head_dim), heads and head_dim read from the declared past
    inputs; an all-ones attention mask of the prompt's length; position ids 0..L-1; merged decoders
    get ``use_cache_branch=[False]``;
  * every later step feeds the argmax token of the previous step's last logits, the previous step's
    presents as pasts (``present.{i}.key`` -> ``past_key_values.{i}.key``, names from the model's
    ``decode`` block in zoo2.json), an all-ones attention mask of length past+1, position ids
    ``[[past]]`` (only if the model has a position_ids input) and ``use_cache_branch=[True]``.
Dtypes are the declared ones (int64 ids and masks, bool use_cache_branch, float pasts).

Example (any engine whose ``run(None, feeds)`` returns the outputs in the model's order)::

    info = decode_info(sess, catalog["gpt2_kv"]["decode"])       # sess: dynashape or onnxruntime
    tokens, times, logits = greedy_decode(lambda f: sess.run(None, f), info, steps=64)
    branch = extract_branch(onnx.load(merged_path), use_cache=True)  # a ModelProto
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DecodeInfo",
    "PastSlot",
    "decode_info",
    "default_prompt",
    "extract_branch",
    "find_if",
    "first_step_feeds",
    "greedy_decode",
    "next_step_feeds",
    "outer_scope_names",
]

# ONNX type strings of NodeArg.type -> numpy dtypes
_TYPE_STR = {
    "float": np.float32, "double": np.float64, "float16": np.float16, "int64": np.int64, "int32": np.int32,
    "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
    "uint64": np.uint64, "bool": np.bool_,
}
INPUT_IDS, ATTENTION_MASK, POSITION_IDS = "input_ids", "attention_mask", "position_ids"


@dataclass(frozen=True)
class PastSlot:
    """One cache tensor: the input it is fed to, the output it comes from, its fixed dims."""

    past: str        # e.g. "past_key_values.0.key"
    present: str     # e.g. "present.0.key"
    heads: int       # declared dim 1 of the past input
    head_dim: int    # declared dim 3 of the past input
    dtype: np.dtype


@dataclass(frozen=True)
class DecodeInfo:
    """What greedy_decode needs to know about one decoder (see ``decode_info``)."""

    inputs: dict              # declared input name -> numpy dtype, in the model's order
    outputs: tuple            # output names in the model's order
    logits: str               # the logits output, [batch, sequence, vocab]
    pasts: tuple              # PastSlot per cache tensor (layers x key/value)
    use_cache_branch: str | None = None   # input name of a merged decoder's flag, else None
    position_ids: str | None = None       # POSITION_IDS when the model has that input
    vocab: int | None = None


# --------------------------------------------------------------------------- model description
def _declared(model: Any) -> tuple[list, list]:
    """([(name, numpy dtype, dims)], [output names]) of a session (get_inputs/get_outputs: dynashape
    or onnxruntime NodeArgs) or of a model (path, bytes or onnx.ModelProto: its declared inputs,
    initializers excluded). dims: int, str (dim_param) or None per axis; None for an unknown rank."""
    if hasattr(model, "get_inputs") and hasattr(model, "get_outputs"):
        ins = []
        for a in model.get_inputs():
            t = a.type[len("tensor("):-1] if a.type.startswith("tensor(") else a.type
            if t not in _TYPE_STR:
                raise ValueError(f"input '{a.name}': unsupported type {a.type}")
            ins.append((a.name, np.dtype(_TYPE_STR[t]), None if a.shape is None else list(a.shape)))
        return ins, [o.name for o in model.get_outputs()]
    import onnx
    from onnx import helper
    if isinstance(model, (str, Path)):
        model = onnx.load(str(model), load_external_data=False)
    elif isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    inits = {i.name for i in model.graph.initializer}
    ins = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = None
        if tt.HasField("shape"):
            dims = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        ins.append((vi.name, np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims))
    return ins, [o.name for o in model.graph.output]


def decode_info(model: Any, decode: Mapping) -> DecodeInfo:
    """The DecodeInfo of a decoder from its declared inputs/outputs and its ``decode`` block of
    zoo2.json: {"layers": 2, "past": "past_key_values.{}", "present": "present.{}", "logits": "logits",
    "use_cache_branch": "use_cache_branch" (merged decoders only), "vocab": 1000}.

    model: an InferenceSession (dynashape or onnxruntime: get_inputs()/get_outputs()) or a path,
    bytes or onnx.ModelProto. A ``use_cache_branch`` named in the block is used only if the model
    has that input (so the block of a merged decoder also describes its extracted branch).
    Raises ValueError when an input of the protocol is missing, a past has no fixed head dims, or
    the model has an input the protocol does not feed."""
    ins, outs = _declared(model)
    dtypes = {name: dt for name, dt, _ in ins}
    dims = {name: d for name, _, d in ins}
    problems = []
    for name in (INPUT_IDS, ATTENTION_MASK):
        if name not in dtypes:
            problems.append(f"no input '{name}'")
    logits = decode.get("logits", "logits")
    if logits not in outs:
        problems.append(f"no output '{logits}'")
    pasts = []
    for i in range(int(decode["layers"])):
        for kv in ("key", "value"):
            past, present = f"{decode['past'].format(i)}.{kv}", f"{decode['present'].format(i)}.{kv}"
            if past not in dtypes:
                problems.append(f"no input '{past}'")
                continue
            if present not in outs:
                problems.append(f"no output '{present}'")
                continue
            d = dims[past]
            if d is None or len(d) != 4 or not all(isinstance(x, int) for x in (d[1], d[3])):
                problems.append(f"input '{past}' is declared {d}: need [batch, heads, past, head_dim] "
                                "with fixed heads and head_dim")
                continue
            pasts.append(PastSlot(past, present, int(d[1]), int(d[3]), dtypes[past]))
    flag = decode.get("use_cache_branch")
    flag = flag if flag in dtypes else None
    known = {INPUT_IDS, ATTENTION_MASK, POSITION_IDS, flag} | {p.past for p in pasts}
    extra = [n for n in dtypes if n not in known]
    if extra:
        problems.append(f"inputs the protocol does not feed: {extra}")
    if problems:
        raise ValueError("not a decoder for the greedy protocol: " + "; ".join(problems))
    return DecodeInfo(inputs=dtypes, outputs=tuple(outs), logits=logits, pasts=tuple(pasts),
                      use_cache_branch=flag, position_ids=POSITION_IDS if POSITION_IDS in dtypes else None,
                      vocab=decode.get("vocab"))


# --------------------------------------------------------------------------- feeds
def default_prompt(vocab: int, length: int = 8, batch: int = 1, seed: int = 0) -> np.ndarray:
    """Deterministic prompt token ids in [0, vocab), shape (batch, length), int64."""
    return np.random.default_rng(seed).integers(0, vocab, size=(batch, length)).astype(np.int64)


def _ordered(info: DecodeInfo, feeds: dict) -> dict:
    return {name: feeds[name] for name in info.inputs}


def first_step_feeds(info: DecodeInfo, prompt: np.ndarray) -> dict:
    """Step 1: the prompt (batch, L) with an empty cache (pasts of shape (batch, heads, 0, head_dim)),
    mask of ones (batch, L), position ids 0..L-1, use_cache_branch=[False]."""
    prompt = np.asarray(prompt)
    if prompt.ndim != 2:
        raise ValueError(f"prompt must be (batch, length), got shape {prompt.shape}")
    b, n = prompt.shape
    feeds = {INPUT_IDS: prompt.astype(info.inputs[INPUT_IDS]),
             ATTENTION_MASK: np.ones((b, n), info.inputs[ATTENTION_MASK])}
    if info.position_ids:
        feeds[info.position_ids] = np.broadcast_to(np.arange(n), (b, n)).astype(info.inputs[info.position_ids])
    for p in info.pasts:
        feeds[p.past] = np.zeros((b, p.heads, 0, p.head_dim), p.dtype)
    if info.use_cache_branch:
        feeds[info.use_cache_branch] = np.array([False], info.inputs[info.use_cache_branch])
    return _ordered(info, feeds)


def next_step_feeds(info: DecodeInfo, tokens: np.ndarray, presents: Mapping[str, np.ndarray]) -> dict:
    """A later step: tokens (batch,) = the previous argmax, presents = the previous step's outputs
    by name (their length on axis 2 is the past length), mask of ones (batch, past+1), position ids
    [[past]], use_cache_branch=[True]."""
    tokens = np.asarray(tokens).reshape(-1)
    b = tokens.shape[0]
    past = int(presents[info.pasts[0].present].shape[2]) if info.pasts else 0
    feeds = {INPUT_IDS: tokens.reshape(b, 1).astype(info.inputs[INPUT_IDS]),
             ATTENTION_MASK: np.ones((b, past + 1), info.inputs[ATTENTION_MASK])}
    if info.position_ids:
        feeds[info.position_ids] = np.full((b, 1), past, info.inputs[info.position_ids])
    for p in info.pasts:
        feeds[p.past] = presents[p.present]
    if info.use_cache_branch:
        feeds[info.use_cache_branch] = np.array([True], info.inputs[info.use_cache_branch])
    return _ordered(info, feeds)


def _by_name(info: DecodeInfo, outs) -> dict:
    if isinstance(outs, Mapping):
        return dict(outs)
    outs = list(outs)
    if len(outs) != len(info.outputs):
        raise ValueError(f"run returned {len(outs)} outputs, the model has {len(info.outputs)}: {info.outputs}")
    return dict(zip(info.outputs, outs))


def greedy_decode(run: Callable[[dict], Any], info: DecodeInfo, steps: int = 64,
                  prompt: np.ndarray | None = None,
                  on_step: Callable[[int, dict, dict], None] | None = None,
                  clock: Callable[[], float] = time.perf_counter) -> tuple[np.ndarray, list, list]:
    """Greedy decoding for ``steps`` steps (step 1 = the prompt into an empty cache).

    run(feeds) -> the outputs of one run: a list in the model's output order (what
    ``sess.run(None, feeds)`` returns) or a dict {name: array}.
    prompt: (batch, L) token ids; default ``default_prompt(info.vocab or 1000)`` (batch 1, L=8).
    on_step(step, feeds, outputs_by_name): called after each step, outside the timed call (e.g. to
    run the same feeds again); step counts from 1.

    Returns (tokens, per_step_times, logits):
      tokens: int64 array (batch, steps), the argmax of each step's last logits (the token fed to
              the next step; the last one is generated but not fed);
      per_step_times: seconds of each run(feeds) call (clock() before and after), len == steps;
      logits: each step's logits output (a copy), (batch, L, vocab) on step 1, (batch, 1, vocab) later.
    Exceptions of run propagate, with the failing step added to the message of a new RuntimeError
    (raised from the original)."""
    if prompt is None:
        prompt = default_prompt(info.vocab or 1000)
    feeds = first_step_feeds(info, prompt)
    tokens, times, logits_out = [], [], []
    for step in range(1, steps + 1):
        t0 = clock()
        try:
            outs = run(feeds)
        except Exception as exc:
            raise RuntimeError(f"decoding step {step} failed: {type(exc).__name__}: {exc}") from exc
        times.append(clock() - t0)
        outs = _by_name(info, outs)
        if on_step is not None:
            on_step(step, feeds, outs)
        logits = np.asarray(outs[info.logits])
        logits_out.append(np.array(logits, copy=True))
        tok = np.argmax(logits[:, -1, :], axis=-1).astype(np.int64)
        tokens.append(tok)
        if step < steps:
            feeds = next_step_feeds(info, tok, outs)
    return np.stack(tokens, axis=1), times, logits_out


# --------------------------------------------------------------------------- branch extraction
def _subgraphs(node) -> list:
    from onnx import AttributeProto
    out = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def outer_scope_names(graph, bound: frozenset = frozenset()) -> list[str]:
    """Names a (sub)graph reads from the scopes around it, in first-use order: node inputs (also
    those of nested subgraphs) and graph outputs that neither the graph's inputs, initializers
    and nodes nor ``bound`` define."""
    local = set(bound) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    local |= {s.values.name for s in graph.sparse_initializer}
    refs: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                refs[name] = None
        for sg in _subgraphs(node):
            for name in outer_scope_names(sg, frozenset(local)):
                if name not in local:
                    refs[name] = None
        local.update(o for o in node.output if o)
    for o in graph.output:
        if o.name not in local:
            refs[o.name] = None
    return list(refs)


def find_if(model, condition: str | None = None):
    """The top-level If node of a model (the one whose condition is the graph input
    ``condition`` when given). Raises ValueError when there is none or more than one."""
    ifs = [n for n in model.graph.node if n.op_type == "If" and n.domain in ("", "ai.onnx")
           and (condition is None or n.input[0] == condition)]
    if len(ifs) != 1:
        raise ValueError(f"expected one top-level If{f' on {condition!r}' if condition else ''}, found {len(ifs)}")
    return ifs[0]


def extract_branch(model, use_cache: bool = True, condition: str | None = "use_cache_branch"):
    """One branch of a merged decoder's top-level If as a standalone onnx.ModelProto.

    model: onnx.ModelProto or a path. use_cache=True takes the If's then_branch (the branch ONNX
    runs when the condition, ``use_cache_branch``, is True: for optimum's merged decoders the one
    that Concats past and new keys/values), False the else_branch. condition: the If's condition
    input (None: the only top-level If).

    The branch's nodes run as the graph's nodes; the names it reads from outside become graph
    inputs with the parent's declared types (parent graph inputs), initializers (the parent's
    initializers it uses) or, when parent nodes compute them, those nodes and what they need;
    its outputs are the If's outputs, under the If's output names (an Identity renames a branch
    output whose name differs), typed as the parent declares them (else as the branch does).
    Opset imports, ir_version and local functions are the parent's. The condition input is not
    an input of the result (unless a node of the branch reads it)."""
    import onnx
    from onnx import helper
    if isinstance(model, (str, Path)):
        model = onnx.load(str(model))
    g = model.graph
    node = find_if(model, condition)
    branch = next((a.g for a in node.attribute if a.name == ("then_branch" if use_cache else "else_branch")), None)
    if branch is None:
        raise ValueError(f"the If has no {'then' if use_cache else 'else'}_branch")
    p_inputs = {vi.name: vi for vi in g.input}
    p_inits = {t.name: t for t in g.initializer}
    p_sparse = {s.values.name: s for s in g.sparse_initializer}
    producer = {o: n for n in g.node if n is not node for o in n.output if o}

    # which parent nodes the branch needs (transitively), and the inputs/initializers of all of it
    needed_nodes: list = []
    seen_nodes: set = set()
    inputs, inits, sparse = {}, {}, {}

    def need(name: str) -> None:
        if name in inits or name in sparse or name in inputs:
            return
        if name in p_inits:
            inits[name] = p_inits[name]
        elif name in p_sparse:
            sparse[name] = p_sparse[name]
        elif name in p_inputs:
            inputs[name] = p_inputs[name]
        elif name in producer:
            n = producer[name]
            if id(n) in seen_nodes:
                return
            seen_nodes.add(id(n))
            for sub in list(n.input) + [x for sg in _subgraphs(n) for x in outer_scope_names(sg)]:
                if sub:
                    need(sub)
            needed_nodes.append(n)
        else:
            raise ValueError(f"branch reads '{name}', which the parent graph does not define")

    for name in outer_scope_names(branch):
        need(name)
    order = {id(n): i for i, n in enumerate(g.node)}
    nodes = [_copy(n) for n in sorted(needed_nodes, key=lambda n: order[id(n)])]
    nodes += [_copy(n) for n in branch.node]

    defined = {o for n in nodes for o in n.output} | set(inputs) | set(inits) | set(sparse)
    p_outputs = {vi.name: vi for vi in g.output}
    outputs = []
    for if_out, b_out in zip(node.output, branch.output):
        if not if_out:
            continue
        if if_out != b_out.name:
            if if_out in defined:
                raise ValueError(f"If output '{if_out}' is also a name inside the branch: cannot rename "
                                 f"'{b_out.name}' to it")
            nodes.append(helper.make_node("Identity", [b_out.name], [if_out], name=f"extract_branch/{if_out}"))
            defined.add(if_out)
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(p_outputs.get(if_out, b_out))
        vi.name = if_out
        outputs.append(vi)

    value_info = [vi for vi in list(g.value_info) + list(branch.value_info)
                  if vi.name in defined and vi.name not in p_outputs]
    graph = helper.make_graph(nodes, f"{g.name}_{branch.name or ('then' if use_cache else 'else')}",
                              [_copy(v) for n, v in p_inputs.items() if n in inputs],  # parent's order
                              outputs, initializer=[_copy(t) for t in inits.values()],
                              value_info=[_copy(v) for v in value_info],
                              sparse_initializer=[_copy(s) for s in sparse.values()])
    out = helper.make_model(graph, opset_imports=[_copy(o) for o in model.opset_import],
                            ir_version=model.ir_version, producer_name="dynashape extract_branch",
                            functions=[_copy(f) for f in model.functions])
    return out


def _copy(proto):
    new = type(proto)()
    new.CopyFrom(proto)
    return new

