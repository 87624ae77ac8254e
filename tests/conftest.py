"""Shared fixtures: paths to ../shared (skipped cleanly when absent) and an ORT runner."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DYNASHAPE_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test when it is not there."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is not available")
    return p


def ort_run(model, feeds: dict, output_names=None) -> list[np.ndarray]:
    """ONNX Runtime (single thread, CPU) on a path, bytes or ModelProto."""
    ort = pytest.importorskip("onnxruntime")
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif not isinstance(model, (bytes, bytearray)):
        model = Path(model).read_bytes()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return sess.run(output_names, feeds)
