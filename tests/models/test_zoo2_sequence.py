"""zoo2's ``seq_chunk_pool`` (SplitToSequence, two Loops carrying sequences, SequenceEmpty /
SequenceLength / SequenceAt / SequenceInsert, ConcatFromSequence) against ONNX Runtime at
the four named shapes of its zoo2.json entry, on ONE session per allocator.

Skipped when ../shared (or its zoo2 folder) is absent.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import dynashape
from tests.conftest import load_shared_module, ort_run, shared_path

KEY = "seq_chunk_pool"
#: every named shape, then the first one again (a cached plan after other shapes)
ORDER = ("small", "large", "odd", "one", "small")


@functools.lru_cache(maxsize=None)
def _entry() -> dict:
    return json.loads(shared_path("zoo", "zoo2", "zoo2.json").read_text())[KEY]


def _model_path():
    return shared_path("zoo", "zoo2", _entry()["file"])


@functools.lru_cache(maxsize=None)
def _feeds(shape: str) -> dict:
    make_inputs = load_shared_module("zoo2_make_inputs", "zoo", "zoo2", "make_inputs.py").make_inputs
    return make_inputs(str(_model_path()), shape=shape)


@functools.lru_cache(maxsize=None)
def _expected(shape: str) -> tuple:
    return tuple(ort_run(_model_path(), _feeds(shape)))


def test_catalogue_names_four_shapes():
    assert set(_entry()["shapes"]) == {"small", "large", "odd", "one"}


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_seq_chunk_pool_matches_ort_through_every_shape(allocator):
    sess = dynashape.InferenceSession(str(_model_path()), allocator=allocator)
    names = [o.name for o in sess.get_outputs()]
    assert names == ["chunk_logits", "pooled"]
    for shape in ORDER:
        got = sess.run(None, _feeds(shape))
        want = _expected(shape)
        dims = _entry()["shapes"][shape]
        chunks = -(-dims["sequence"] // 4)      # ceil(sequence / 4), per the catalogue's note
        assert got[0].shape == (dims["batch"], chunks, 16) and got[1].shape == (dims["batch"], 64)
        for name, g, w in zip(names, got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (shape, name, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=f"{shape} {name}")
    stats = sess.stats
    assert stats.runs == len(ORDER) and stats.cache_hits == 1 and stats.failed_runs == 0


def test_seq_chunk_pool_loop_body_is_planned():
    """The first Loop's body reads the SplitToSequence output, whose element rank is known:
    only its SequenceAt is a binding node, the rest of the body runs as planned steps."""
    sess = dynashape.InferenceSession(str(_model_path()))
    sess.run(None, _feeds("small"))
    bodies = {r.graph.name: r.program.describe() for r in sess.program.services._subgraphs.values()}
    assert bodies["sub_graph"]["binding"] == 1 and bodies["sub_graph"]["steps"] == 6
