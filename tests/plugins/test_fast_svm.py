"""The compiled SVMClassifier (``dynashape.ops_fast.svm``): the class probabilities of libsvm's
coupling, one sample at a time in a compiled loop, equal the numpy kernel's (which couples all
the samples at once) and onnxruntime's on scikit-learn's SVC(probability=True) exports of 2, 3
and 5 classes, at batch 1, 9 and 0 on one session. Skipped where numba, scikit-learn or
skl2onnx is missing, or the compiled kernels are off.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import numba_session, ort_run

pytest.importorskip("numba")
svm = pytest.importorskip("sklearn.svm")
skl2onnx = pytest.importorskip("skl2onnx")
if not __import__("dynashape.ops_fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)


@pytest.mark.parametrize("classes", [2, 3, 5])
@pytest.mark.parametrize("kernel", ["rbf", "poly"])
def test_the_compiled_coupling_equals_numpy_and_onnxruntime(classes, kernel, monkeypatch):
    from dynashape.ops_fast import svm as fast_svm
    coupled = []
    loop = fast_svm.loops.couple
    monkeypatch.setattr(fast_svm.loops, "couple", lambda d, *args: (coupled.append(d.shape[0]), loop(d, *args)))
    rng = np.random.default_rng(classes)
    x = rng.normal(size=(60, 4)).astype(np.float32)
    score = x @ rng.normal(size=4)
    y = np.searchsorted(np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]), score)
    model = svm.SVC(kernel=kernel, probability=True, random_state=0).fit(x, y)
    data = skl2onnx.to_onnx(model, x[:1], options={id(model): {"zipmap": False}}).SerializeToString()
    fast = numba_session(data)
    plain = numba_session(data, compiled_kernels=False)
    assert "SVMClassifier" in {st.node.node.op_type for st in fast.program.steps if st.kernel.plugin == "fast"}
    for n in (1, 9, 0):
        feeds = {"X": x[:n] + np.float32(0.1)}
        got, want, ort = fast.run(None, feeds), plain.run(None, feeds), ort_run(data, feeds)
        assert got[0].tolist() == want[0].tolist() == ort[0].tolist()
        assert got[1].shape == (n, classes)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=2e-7)
        np.testing.assert_allclose(got[1], ort[1], rtol=1e-5, atol=1e-6)
        if n:
            np.testing.assert_allclose(got[1].sum(axis=1), 1, rtol=1e-5)
    assert coupled == [1, 9, 0]                          # the compiled loop coupled every batch
