"""Export the real-size models of benchmarks/realsize.py: real architectures at their real sizes,
random weights (torch.manual_seed(0) before each model is built), ONNX opset 17.

Each model is traced by the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``, the
one that handles transformers' models and a KV cache as flat inputs) with dynamic axes on
batch / sequence / past / image dims, then checked: onnxruntime runs the file at the traced
example and at every named shape of the model (benchmarks/_realsize.py), each output against
torch eager as max |onnx - torch| / max |torch| (the output's scale: random weights make some
outputs tiny), <= 1e-4 to pass.

Models (default: all; a model the installed torch / transformers cannot export is skipped with
the reason):
  minilm_l6             BertModel, hidden 384, 6 layers, 12 heads, FFN 1536 (22.7M)
  bert_base             BertModel, BertConfig defaults (109M)
  gpt2_kv               GPT2LMHeadModel, GPT2Config defaults, with KV cache (124M)
  llama_kv              LlamaForCausalLM, SmolLM-135M's config, with KV cache (135M)
  mobilenet_v3_large    torchvision (5.5M)
  resnet50              torchvision (25.6M)
  whisper_base_encoder  the encoder of whisper-base (WhisperConfig d_model 512, 6 layers, 8 heads; 20.6M)
Inputs: encoders input_ids / attention_mask / token_type_ids (batch, sequence); KV decoders
input_ids, attention_mask (batch, total_sequence), position_ids and past_key_values.{i}.{key,value}
(batch, kv_heads, past_sequence, head_dim), outputs logits and present.{i}.{key,value}; CNNs
input (batch, 3, height, width); whisper input_features (batch, 80, 3000).

Writes OUTDIR/<name>.onnx and OUTDIR/realsize.json (per model: file, kind, inputs, named shapes,
the check, versions; entries of other models already there are kept). A model whose file is
already in OUTDIR is not exported again (``--force`` does) but is checked against torch eager
like a new export, so the manifest says whether the file is this exporter's model.

Needs the ``bench`` extra (``pip install -e ".[test,bench]"``: torch, torchvision, transformers;
onnx and onnxruntime come with ``test``). A CPU torch is enough and far smaller than PyPI's CUDA
build: pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu,
then pip install transformers. A few minutes on 2 cores for all seven models.

Run from the repository root:
    python benchmarks/export_realsize.py                           # all, into ~/.cache/dynashape/realsize
    python benchmarks/export_realsize.py llama_kv whisper_base_encoder   # these, same folder
    python benchmarks/export_realsize.py /data/models resnet50 --force   # OUTDIR, re-export
OUTDIR defaults to $DYNASHAPE_REALSIZE_DIR, else ~/.cache/dynashape/realsize; it may be left out
when the first argument is a model name.
"""
from __future__ import annotations

import argparse
import functools
import inspect
import json
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from _realsize import CATALOG, default_dir, kv_shape, load_manifest, scaled_diff, write_manifest

# this script's folder (on sys.path as the script's) also holds benchmarks/kernels.py, which would
# shadow the `kernels` package recent transformers import: off the path once _realsize is imported
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

SEED = 0
OPSET = 17
TOLERANCE = 1e-4
#: the shapes each model is traced at: batch 2 and odd lengths, so that no size 1 or named size is baked in
EXAMPLES = {"encoder": {"batch": 2, "sequence": 12}, "kv": kv_shape(2, 3, 5),
            "cnn": {"batch": 2, "height": 224, "width": 224}, "audio": {"batch": 2}}


@dataclass(frozen=True)
class ExportSpec:
    """How to build, trace and feed one model: ``build()`` returns the torch module (weights from
    seed 0), whose forward takes ``inputs`` in order and returns ``outputs``; ``axes`` are the
    dynamic axes; ``sizes`` what the feeds need (vocab, layers, kv_heads, head_dim); ``config`` the
    non-default config fields, recorded in the manifest."""

    build: Callable
    inputs: tuple
    outputs: tuple
    axes: dict
    sizes: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- torch modules
@functools.cache
def _wrappers() -> SimpleNamespace:
    """The wrapper modules ``encoder``, ``causal_lm``, ``audio`` (defined on first use: torch is
    imported only when exporting)."""
    import torch

    class EncoderOutputs(torch.nn.Module):
        """BertModel -> (last_hidden_state, pooler_output)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    class CausalLMWithCache(torch.nn.Module):
        """A causal LM with its cache as flat tensors: (input_ids, attention_mask, position_ids,
        past.0.key, past.0.value, ...) -> (logits, present.0.key, present.0.value, ...)."""

        def __init__(self, model, layers: int):
            super().__init__()
            self.model = model
            self.layers = layers
            # transformers renamed past_key_values to cache (the old name warns from 5.2x on)
            params = inspect.signature(model.forward).parameters
            self.cache_argument = "cache" if "cache" in params else "past_key_values"

        def forward(self, input_ids, attention_mask, position_ids, *past):
            from transformers import DynamicCache
            cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.layers)],
                                 config=self.model.config)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=True, **{self.cache_argument: cache})
            cache = getattr(out, "cache", None) or out.past_key_values
            presents = [t for layer in cache.layers for t in (layer.keys, layer.values)]
            return (out.logits, *presents)

    class AudioEncoderOutputs(torch.nn.Module):
        """WhisperEncoder -> last_hidden_state."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_features):
            return self.model(input_features=input_features).last_hidden_state

    return SimpleNamespace(encoder=EncoderOutputs, causal_lm=CausalLMWithCache, audio=AudioEncoderOutputs)


def _hf_model(cls_name: str, config_name: str, module: str = "transformers", **config):
    """A transformers model with random weights (seed 0) and eager attention (plain MatMul / Softmax
    in the graph rather than a fused SDPA)."""
    import importlib

    import torch
    import transformers
    torch.manual_seed(SEED)
    cfg = getattr(transformers, config_name)(**config)
    cfg._attn_implementation = "eager"
    return getattr(importlib.import_module(module), cls_name)(cfg).eval()


def _encoder_spec(**config) -> ExportSpec:
    def build():
        return _wrappers().encoder(_hf_model("BertModel", "BertConfig", **config))
    seq = {0: "batch", 1: "sequence"}
    return ExportSpec(build, ("input_ids", "attention_mask", "token_type_ids"), ("last_hidden_state", "pooler_output"),
                      {"input_ids": seq, "attention_mask": seq, "token_type_ids": seq, "last_hidden_state": seq,
                       "pooler_output": {0: "batch"}},
                      sizes={"vocab": config.get("vocab_size", 30522)}, config=config)


def _kv_spec(cls_name: str, config_name: str, layers: int, kv_heads: int, head_dim: int, vocab: int,
             **config) -> ExportSpec:
    past = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    present = [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"},
            "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"},
            **{p: {0: "batch", 2: "past_sequence"} for p in past},
            **{p: {0: "batch", 2: "total_sequence"} for p in present}}

    def build():
        return _wrappers().causal_lm(_hf_model(cls_name, config_name, **config), layers)
    return ExportSpec(build, ("input_ids", "attention_mask", "position_ids", *past), ("logits", *present), axes,
                      sizes={"vocab": vocab, "layers": layers, "kv_heads": kv_heads, "head_dim": head_dim},
                      config=config)


def _cnn_spec(fn: str) -> ExportSpec:
    def build():
        import torch
        import torchvision
        torch.manual_seed(SEED)
        return getattr(torchvision.models, fn)(weights=None).eval()
    return ExportSpec(build, ("input",), ("logits",),
                      {"input": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}})


def _whisper_encoder_spec(**config) -> ExportSpec:
    def build():
        encoder = _hf_model("WhisperEncoder", "WhisperConfig", "transformers.models.whisper.modeling_whisper",
                            **config)
        return _wrappers().audio(encoder)
    return ExportSpec(build, ("input_features",), ("last_hidden_state",),
                      {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}}, config=config)


SPECS = {
    "minilm_l6": lambda: _encoder_spec(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                       intermediate_size=1536),
    "bert_base": lambda: _encoder_spec(),
    "gpt2_kv": lambda: _kv_spec("GPT2LMHeadModel", "GPT2Config", layers=12, kv_heads=12, head_dim=64, vocab=50257),
    # SmolLM-135M's config (HuggingFaceTB/SmolLM-135M); head_dim 576 / 9 = 64
    "llama_kv": lambda: _kv_spec("LlamaForCausalLM", "LlamaConfig", layers=30, kv_heads=3, head_dim=64, vocab=49152,
                                 vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                 num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                                 rms_norm_eps=1e-5, tie_word_embeddings=True),
    "mobilenet_v3_large": lambda: _cnn_spec("mobilenet_v3_large"),
    "resnet50": lambda: _cnn_spec("resnet50"),
    # openai/whisper-base's encoder: 80 mel bins, 3000 frames -> 1500 positions
    "whisper_base_encoder": lambda: _whisper_encoder_spec(d_model=512, encoder_layers=6, encoder_attention_heads=8,
                                                          encoder_ffn_dim=2048, decoder_layers=6,
                                                          decoder_attention_heads=8, decoder_ffn_dim=2048,
                                                          num_mel_bins=80, max_source_positions=1500,
                                                          vocab_size=51865),
}


# --------------------------------------------------------------------------- feeds
def make_feeds(kind: str, spec: ExportSpec, dims: dict, seed: int = SEED) -> dict:
    """Feeds ``{input name: np.ndarray}`` at ``dims`` (a named shape): token ids uniform in
    [0, vocab), masks ones, token types zeros, position ids past..past+new-1, floats N(0, 1)."""
    rng = np.random.default_rng(seed)
    if kind == "cnn":
        return {"input": rng.standard_normal((dims["batch"], 3, dims["height"], dims["width"])).astype(np.float32)}
    if kind == "audio":
        return {"input_features": rng.standard_normal((dims["batch"], 80, 3000)).astype(np.float32)}
    batch, new = dims["batch"], dims["sequence"]
    feeds = {"input_ids": rng.integers(0, spec.sizes["vocab"], (batch, new)).astype(np.int64)}
    if kind == "encoder":
        feeds.update(attention_mask=np.ones((batch, new), np.int64), token_type_ids=np.zeros((batch, new), np.int64))
        return feeds
    past = dims["past_sequence"]
    feeds["attention_mask"] = np.ones((batch, past + new), np.int64)
    feeds["position_ids"] = np.broadcast_to(np.arange(past, past + new, dtype=np.int64), (batch, new)).copy()
    cache = (batch, spec.sizes["kv_heads"], past, spec.sizes["head_dim"])
    for name in spec.inputs[3:]:
        feeds[name] = rng.standard_normal(cache).astype(np.float32)
    return feeds


# --------------------------------------------------------------------------- export and check
def export(model, spec: ExportSpec, feeds: dict, path: Path) -> None:
    """Trace ``model`` at ``feeds`` into ``path`` (TorchScript exporter, opset 17, constant folding)."""
    import torch
    args = tuple(torch.from_numpy(feeds[k]) for k in spec.inputs)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # TracerWarnings on transformers' shape checks
        torch.onnx.export(model, args, str(path), input_names=list(spec.inputs), output_names=list(spec.outputs),
                          dynamic_axes=spec.axes, opset_version=OPSET, dynamo=False, do_constant_folding=True)


def check(model, spec: ExportSpec, kind: str, path: Path, shapes: dict) -> dict:
    """Run ``path`` with onnxruntime at each of ``shapes`` ({name: dims}) and compare every output
    with torch eager. Returns {"tolerance", "shapes": {name: worst scaled diff}, "worst", "ok"}."""
    import onnxruntime as ort
    import torch
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    diffs = {}
    for name, dims in shapes.items():
        feeds = make_feeds(kind, spec, dims)
        with torch.no_grad():
            ref = model(*(torch.from_numpy(feeds[k]) for k in spec.inputs))
        ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
        got = sess.run(list(spec.outputs), feeds)
        diffs[name] = max(scaled_diff(g, r.numpy()) for g, r in zip(got, ref))
    worst = max(diffs.values())
    return {"tolerance": TOLERANCE, "against": "torch eager, outputs via onnxruntime", "shapes": diffs,
            "worst": worst, "ok": bool(worst <= TOLERANCE)}


def onnx_signature(path: Path) -> tuple[dict, list]:
    """({input: {"dtype", "dims"}}, [output names]) as declared in the file (dim_params by name)."""
    import onnx
    graph = onnx.load(str(path), load_external_data=False).graph

    def dims(vi):
        return [d.dim_param or (d.dim_value if d.HasField("dim_value") else None)
                for d in vi.type.tensor_type.shape.dim]
    inputs = {vi.name: {"dtype": onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name,
                        "dims": dims(vi)} for vi in graph.input}
    return inputs, [vi.name for vi in graph.output]


def versions() -> dict:
    import onnx
    import onnxruntime
    import torch
    import transformers
    try:
        import torchvision
    except ImportError:   # the transformers models need no torchvision
        torchvision = None
    return {"torch": torch.__version__, "torchvision": getattr(torchvision, "__version__", None),
            "transformers": transformers.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
            "numpy": np.__version__}


def export_one(name: str, folder: Path, force: bool, previous: dict) -> dict:
    """Export (unless the file is there and not ``force``) and check one model; its manifest entry.
    ``previous``: the model's entry in the manifest already there ({} if none): when the file is
    kept, its export date carries over if the file has the size that entry records.

    Raises:
        whatever torch / transformers raise for a model they cannot build or export.
    """
    entry, spec = CATALOG[name], SPECS[name]()
    t0 = time.perf_counter()
    model = spec.build().eval()
    path = folder / f"{name}.onnx"
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    if force or not path.exists():
        export(model, spec, make_feeds(entry.kind, spec, EXAMPLES[entry.kind]), path)
        model.eval()   # the exporter restores the modules' modes afterwards: keep dropout off in the check
        exported = now
    else:
        carried = previous.get("exported")
        exported = carried if isinstance(carried, str) and previous.get("bytes") == path.stat().st_size else None
    result = check(model, spec, entry.kind, path, {"export example": EXAMPLES[entry.kind], **entry.shapes})
    inputs, outputs = onnx_signature(path)
    return {"file": path.name, "kind": entry.kind, "architecture": entry.architecture, "inputs": inputs,
            "outputs": outputs, "shapes": entry.shapes, "middle": entry.middle,
            "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 2), "bytes": path.stat().st_size,
            "config": spec.config, "sizes": spec.sizes, "seed": SEED, "opset": OPSET, "exporter": "torchscript",
            "exported": exported, "checked": now,
            "seconds": round(time.perf_counter() - t0, 1), "check": result, "versions": versions()}


# --------------------------------------------------------------------------- command line
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("args", nargs="*", metavar="[OUTDIR] [name ...]",
                    help=f"output folder (default {default_dir()}), then model names (default: all)")
    ap.add_argument("--force", action="store_true", help="export again models whose file is already there")
    args = ap.parse_args(argv)
    rest = list(args.args)
    args.outdir = Path(rest.pop(0)).expanduser() if rest and rest[0] not in SPECS else default_dir()
    unknown = [n for n in rest if n not in SPECS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; the models are {', '.join(SPECS)}")
    args.names = rest or list(SPECS)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"cannot export: {exc}; install the bench extra: pip install -e '.[bench]' (see the docstring)")
        return 1
    args.outdir.mkdir(parents=True, exist_ok=True)
    print(f"exporting {', '.join(args.names)} into {args.outdir}; versions {json.dumps(versions())}")
    manifest, failed = load_manifest(args.outdir), []
    for name in args.names:
        written = args.force or not (args.outdir / f"{name}.onnx").exists()
        try:
            entry = export_one(name, args.outdir, args.force, manifest.get(name, {}))
        except Exception as exc:  # noqa: BLE001 - skip a model this torch / transformers cannot export
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            print(f"{name}: skipped: the installed torch/transformers cannot export it: {message}", flush=True)
            failed.append(name)
            continue
        manifest[name] = entry
        write_manifest(args.outdir, manifest)
        c = entry["check"]
        kept = f"exported {entry['exported']}" if entry["exported"] else "not written by this exporter"
        print(f"{name}: {'exported' if written else f'kept the existing file ({kept})'} {entry['file']} "
              f"({entry['params_M']}M params, {entry['bytes'] / 1e6:.1f} MB, {entry['seconds']} s); check vs torch "
              f"eager, worst max|diff|/max|ref| {c['worst']:.1e} over {len(c['shapes'])} shapes: "
              f"{'ok' if c['ok'] else 'NOT ok'} (<= {TOLERANCE:g})", flush=True)
    not_ok = [n for n in manifest if not manifest[n].get("check", {}).get("ok")]
    print(f"manifest: {args.outdir / 'realsize.json'} ({len(manifest)} models)"
          + (f"; not verified: {', '.join(not_ok)}" if not_ok else ""))
    return 1 if failed or not_ok else 0


if __name__ == "__main__":
    sys.exit(main())
