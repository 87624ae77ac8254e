"""Acceptance runs of issue 2: mlp_dynamic and seed_demo through batches 1, 3, 64, 2, 1 (both allocators)."""
from __future__ import annotations

import numpy as np
import pytest

import dynashape
from tests.conftest import ort_run, shared_path


@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("model,tail", [("mlp_dynamic.onnx", (2, 3, 4)), ("seed_demo.onnx", (2, 3))])
def test_batches_on_one_session_match_ort(model, tail, allocator):
    path = shared_path("zoo", model)
    sess = dynashape.InferenceSession(str(path), allocator=allocator)
    runs = []
    for batch in (1, 3, 64, 2, 1):
        x = np.random.default_rng(batch).standard_normal((batch, *tail)).astype(np.float32)
        runs.append((x, sess.run(None, {"x": x})))
    for x, outs in runs:
        expected = ort_run(path, {"x": x})
        for got, exp in zip(outs, expected):
            assert got.shape == exp.shape
            np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)


def test_seed_stub_sequence_and_errors():
    from dynashape.compat import OnnxStub

    path = shared_path("zoo", "seed_demo.onnx")
    for naive in (False, True):
        stub = OnnxStub(str(path), None, use_naive_allocator=naive)
        for batch in (1, 2, 8, 3, 1):
            x = np.random.default_rng(batch).standard_normal((batch, 2, 3)).astype(np.float32)
            stub.set_input([list(x.shape)])
            stub.inputs["x"].copyin_numpy(x)
            stub.run()
            assert stub.getShape("y") == [batch, 6]
            (exp,) = ort_run(path, {"x": x})
            np.testing.assert_allclose(stub.outputs["y"].copyout_float(), exp.reshape(-1), rtol=1e-4, atol=1e-5)
