"""The real-size models of benchmarks/realsize.py and benchmarks/export_realsize.py: their names,
kinds and named shapes, where they live, the manifest, and the scaled difference both scripts use.

Plain numpy and json: importing this module sets no environment variable (the exporter runs torch
with its own thread count; realsize.py imports ``_env`` first, as every benchmark does).

Models folder: ``$DYNASHAPE_REALSIZE_DIR``, else ``~/.cache/dynashape/realsize`` (outside the
repository: the files are 20-650 MB each). The exporter writes ``<name>.onnx`` there and the
manifest ``realsize.json``: per model ``{"file", "kind", "architecture", "inputs": {name: {"dtype",
"dims"}}, "outputs", "shapes": {shape: {dim_param: size}}, "middle", "check", "versions",
"exported" (when this exporter wrote the file; null for a file it found there), "checked", ...}``.
A named shape binds every dim_param of the model's inputs, so the feeds follow from it
(``dynashape.feeds.random_feeds``; position ids: see ``realsize.py``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["CATALOG", "KINDS", "MANIFEST", "ModelEntry", "default_dir", "kv_shape", "load_manifest",
           "scaled_diff", "write_manifest"]

MANIFEST = "realsize.json"
ENV_DIR = "DYNASHAPE_REALSIZE_DIR"
#: kind -> what the model is fed
KINDS = {
    "encoder": "input_ids / attention_mask / token_type_ids int64 (batch, sequence)",
    "kv": "input_ids / position_ids (batch, sequence), attention_mask (batch, total_sequence), "
          "past_key_values.{i}.{key,value} float32 (batch, kv_heads, past_sequence, head_dim)",
    "cnn": "input float32 (batch, 3, height, width)",
    "audio": "input_features float32 (batch, 80, 3000): 30 s of log-mel frames",
}


def kv_shape(batch: int, new: int, past: int) -> dict:
    """The dims of a KV-cache decoder's step: ``new`` tokens on a cache of ``past`` (tokens)."""
    return {"batch": batch, "sequence": new, "past_sequence": past, "total_sequence": past + new}


def _encoder(batch: int, sequence: int) -> dict:
    return {"batch": batch, "sequence": sequence}


def _image(batch: int, height: int, width: int) -> dict:
    return {"batch": batch, "height": height, "width": width}


@dataclass(frozen=True)
class ModelEntry:
    """One model of the catalog: its kind (a key of KINDS), what it is, and its named shapes
    (``{shape name: {dim_param: size}}``, in the order they are measured; the second one is the
    "middle" shape of the peak-RSS processes and of the per-op breakdown)."""

    name: str
    kind: str
    architecture: str
    shapes: dict = field(default_factory=dict)

    @property
    def middle(self) -> str:
        """The name of the middle shape (the second, or the only one)."""
        names = list(self.shapes)
        return names[1] if len(names) > 1 else names[0]


_ENCODER_SHAPES = {"b1s16": _encoder(1, 16), "b1s128": _encoder(1, 128), "b8s128": _encoder(8, 128)}
_KV_SHAPES = {"prompt8": kv_shape(1, 8, 0), "decode64": kv_shape(1, 1, 64), "b8past120new8": kv_shape(8, 8, 120)}
_CNN_SHAPES = {"b1_224": _image(1, 224, 224), "b8_224": _image(8, 224, 224), "b1_320x480": _image(1, 320, 480)}
_AUDIO_SHAPES = {"b1": {"batch": 1}, "b2": {"batch": 2}, "b4": {"batch": 4}}

#: every model the exporter knows, in the order the benchmark measures them
CATALOG = {e.name: e for e in (
    ModelEntry("minilm_l6", "encoder", "BERT, hidden 384, 6 layers, 12 heads, FFN 1536 (all-MiniLM-L6-v2's shape)",
               _ENCODER_SHAPES),
    ModelEntry("bert_base", "encoder", "BERT base (BertConfig defaults: hidden 768, 12 layers, 12 heads)",
               _ENCODER_SHAPES),
    ModelEntry("gpt2_kv", "kv", "GPT-2 small (GPT2Config defaults) with KV cache", _KV_SHAPES),
    ModelEntry("llama_kv", "kv", "Llama, SmolLM-135M's shape (hidden 576, 30 layers, 9 heads, 3 KV heads) "
               "with KV cache", _KV_SHAPES),
    ModelEntry("mobilenet_v3_large", "cnn", "torchvision mobilenet_v3_large", _CNN_SHAPES),
    ModelEntry("resnet50", "cnn", "torchvision resnet50", _CNN_SHAPES),
    ModelEntry("whisper_base_encoder", "audio", "Whisper base encoder (d_model 512, 6 layers, 8 heads)",
               _AUDIO_SHAPES),
)}


def default_dir() -> Path:
    """The models folder: ``$DYNASHAPE_REALSIZE_DIR``, else ``~/.cache/dynashape/realsize``."""
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".cache" / "dynashape" / "realsize").expanduser()


def load_manifest(folder: Path) -> dict:
    """``{name: entry}`` of ``folder/realsize.json``; empty when there is none."""
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def write_manifest(folder: Path, manifest: dict) -> Path:
    """Write ``folder/realsize.json`` (models in catalog order, then any others); returns its path."""
    order = [n for n in CATALOG if n in manifest] + sorted(n for n in manifest if n not in CATALOG)
    path = Path(folder) / MANIFEST
    path.write_text(json.dumps({n: manifest[n] for n in order}, indent=1) + "\n")
    return path


def scaled_diff(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (dimensionless): the difference relative to the output's scale,
    since outputs of randomly initialised models can be tiny (mobilenet's logits are ~1e-9) and an
    absolute tolerance then passes anything. The absolute difference when ``ref`` is all zeros;
    inf on a shape mismatch, 0 for empty outputs, nan if either holds NaN."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    if got.dtype.kind not in "fc" and ref.dtype.kind not in "fc":
        return float(np.count_nonzero(got != ref))   # integer / bool outputs: the number that differ
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    diff = float(np.max(np.abs(got64 - ref64)))
    scale = float(np.max(np.abs(ref64)))
    return diff / scale if scale > 0 else diff
