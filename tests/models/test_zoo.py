"""Real models of ../shared/zoo on ONE session through small -> large -> odd -> small, both
allocators, against ONNX Runtime (single thread) within rtol 1e-3 / atol 1e-4.

Large shapes are marked ``slow``; the default CI run includes them.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import dynashape
from tests.conftest import SHARED, load_shared_module, ort_run, shared_path

SEQUENCE = ("small", "large", "odd", "small")


def _catalog() -> dict:
    path = SHARED / "zoo" / "zoo.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def zoo_entry(key: str) -> dict:
    """The catalogue entry of a zoo model, or skip the test when ../shared/zoo is absent."""
    shared_path("zoo", "zoo.json")
    return _catalog()[key]


@functools.lru_cache(maxsize=None)
def _make_inputs_module():
    return load_shared_module("zoo_make_inputs", "zoo", "make_inputs.py")


@functools.lru_cache(maxsize=None)
def zoo_feeds(key: str, shape: str) -> dict:
    entry = zoo_entry(key)
    return _make_inputs_module().make_inputs(str(SHARED / "zoo" / entry["file"]), shape=shape)


@functools.lru_cache(maxsize=None)
def zoo_expected(key: str, shape: str) -> tuple:
    entry = zoo_entry(key)
    return tuple(ort_run(SHARED / "zoo" / entry["file"], zoo_feeds(key, shape)))


def zoo_sequence(key: str) -> list[str]:
    shapes = zoo_entry(key)["shapes"]
    return [s for s in SEQUENCE if s in shapes]


def _params():
    out = []
    for key in sorted(_catalog()):
        for allocator in ("pool", "naive"):
            marks = [pytest.mark.slow] if "large" in _catalog()[key]["shapes"] else []
            out.append(pytest.param(key, allocator, id=f"{key}-{allocator}", marks=marks))
    return out


@pytest.mark.parametrize("key,allocator", _params())
def test_zoo_model_matches_ort_through_changing_shapes(key, allocator, record_property):
    entry = zoo_entry(key)
    sess = dynashape.InferenceSession(str(shared_path("zoo", entry["file"])), allocator=allocator)
    results = []
    for shape in zoo_sequence(key):
        results.append((shape, sess.run(None, zoo_feeds(key, shape))))
    worst = 0.0
    for shape, outs in results:  # compared after the whole sequence: no output may be overwritten
        expected = zoo_expected(key, shape)
        assert len(outs) == len(expected)
        for got, exp in zip(outs, expected):
            assert got.shape == exp.shape, f"{key} {shape}: shape {got.shape} != ORT {exp.shape}"
            assert got.dtype == exp.dtype, f"{key} {shape}: dtype {got.dtype} != ORT {exp.dtype}"
            if got.size and got.dtype.kind in "fc":
                np.testing.assert_allclose(got, exp, rtol=1e-3, atol=1e-4, err_msg=f"{key} at {shape}")
                worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - exp))))
            else:
                np.testing.assert_array_equal(got, exp)
    record_property("max_abs_diff", worst)
    assert sess.stats.cache_misses == len(set(zoo_sequence(key)))
