"""The detector of ../shared/zoo/zoo2 (``detection/retinanet_tiny``: torchvision RetinaNet,
opset 17) on ONE session through every named shape of its catalogue entry (small -> large
-> odd -> tall -> small), both allocators, against ONNX Runtime (single thread).

Its outputs are data-dependent: score threshold (NonZero), TopK(min(100, candidates)),
class-wise NonMaxSuppression inside an ``If``, TopK to 20. So the box counts, the labels
and their order must equal ORT's exactly; boxes and scores agree within rtol 1e-4 /
atol 1e-4 (the convolutions sum in another order than MLAS).
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import dynashape
from tests.conftest import load_shared_module, ort_session, shared_path

KEY = "detection/retinanet_tiny"
SEQUENCE = ("small", "large", "odd", "tall", "small")
OUTPUTS = ("boxes", "labels", "scores")


@functools.lru_cache(maxsize=None)
def _entry() -> dict:
    return json.loads(shared_path("zoo", "zoo2", "zoo2.json").read_text())[KEY]


def _path() -> str:
    return str(shared_path("zoo", "zoo2", _entry()["file"]))


@functools.lru_cache(maxsize=None)
def _feeds(shape: str) -> dict:
    module = load_shared_module("zoo2_make_inputs", "zoo", "zoo2", "make_inputs.py")
    return module.make_inputs(_path(), shape=shape)


@functools.lru_cache(maxsize=None)
def _expected(shape: str) -> tuple:
    return tuple(ort_session(_path()).run(list(OUTPUTS), _feeds(shape)))


def test_sequence_covers_every_named_shape():
    assert set(SEQUENCE) == set(_entry()["shapes"])


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_retinanet_matches_ort_through_changing_shapes(allocator):
    sess = dynashape.InferenceSession(_path(), allocator=allocator)
    results = [(shape, sess.run(list(OUTPUTS), _feeds(shape))) for shape in SEQUENCE]
    counts = set()
    for shape, outs in results:  # compared after the whole sequence: no output may be overwritten
        boxes, labels, scores = outs
        want_boxes, want_labels, want_scores = _expected(shape)
        assert boxes.shape == want_boxes.shape and labels.shape == want_labels.shape \
            and scores.shape == want_scores.shape, f"{shape}: counts {len(labels)} != ORT {len(want_labels)}"
        assert boxes.dtype == want_boxes.dtype and labels.dtype == want_labels.dtype \
            and scores.dtype == want_scores.dtype
        np.testing.assert_array_equal(labels, want_labels, err_msg=f"labels at {shape}")
        np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-4, err_msg=f"scores at {shape}")
        np.testing.assert_allclose(boxes, want_boxes, rtol=1e-4, atol=1e-4, err_msg=f"boxes at {shape}")
        counts.add(len(labels))
    assert len(counts) > 1, "the named shapes should give different detection counts"
    assert sess.stats.cache_misses == len(set(SEQUENCE))
