"""Batch inference over datasets: rows of variable length padded to a few length buckets, so
every worker re-uses a handful of cached plans; locally or on Ray Data.

    from dynashape.batch import Predictor, run_local, run_ray

    ds.map_batches(Predictor, fn_constructor_kwargs={"model": ray.put(model_bytes)},
                   compute=ray.data.ActorPoolStrategy(size=4), batch_size=256, batch_format="numpy")
    result = run_local("model.onnx", {"input_ids": rows})          # one process, no Ray
    result = run_ray("model.onnx", "corpus.parquet", concurrency=4)  # pip install ".[ray]" (in the checkout)

Modules, in the order data flows: :mod:`~dynashape.batch.axes` (batch and length axes from
the symbolic shapes), :mod:`~dynashape.batch.buckets` (bucket choice, padding, cutting
back), :mod:`~dynashape.batch.columns` (batch columns <-> rows),
:mod:`~dynashape.batch.predictor`, :mod:`~dynashape.batch.stats`,
:mod:`~dynashape.batch.local_runner`, :mod:`~dynashape.batch.ray_runner`,
:mod:`~dynashape.batch.io` (Parquet / NPZ / .npy). Importing this package imports none of
them (nor the session, Ray or pyarrow) until a name is used. docs/SCALE.md has the guide.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Predictor", "BatchAxisError", "BatchStats", "BatchResult", "Buckets", "parse_buckets", "run_local",
           "run_ray", "read_columns", "write_columns", "summary_lines"]

_HOMES = {
    "Predictor": "predictor",
    "BatchAxisError": "axes",
    "BatchStats": "stats",
    "BatchResult": "stats",
    "summary_lines": "stats",
    "Buckets": "buckets",
    "parse_buckets": "buckets",
    "run_local": "local_runner",
    "run_ray": "ray_runner",
    "read_columns": "io",
    "write_columns": "io",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dynashape.batch' has no attribute '{name}'")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
