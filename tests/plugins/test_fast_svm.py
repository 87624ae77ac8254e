"""The compiled SVMClassifier (``dynashape.ops_builtin.fast.svm``): the class probabilities of libsvm's
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
if not __import__("dynashape.ops_builtin.fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)


@pytest.mark.parametrize("classes", [2, 3, 5])
@pytest.mark.parametrize("kernel", ["rbf", "poly"])
def test_the_compiled_coupling_equals_numpy_and_onnxruntime(classes, kernel, monkeypatch):
    from dynashape.ops_builtin.fast import svm as fast_svm
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


def _spy(monkeypatch, name: str) -> list:
    from dynashape.ops_builtin.fast import svm as fast_svm
    calls, loop = [], getattr(fast_svm.loops, name)
    monkeypatch.setattr(fast_svm.loops, name, lambda x, *args: (calls.append(x.shape[0]), loop(x, *args))[1])
    return calls


@pytest.mark.parametrize("kernel", ["rbf", "poly", "sigmoid", "linear"])
@pytest.mark.parametrize("probability", [False, True])
def test_the_compiled_decisions_and_votes_equal_numpy_and_onnxruntime(kernel, probability, monkeypatch):
    """A small batch's decision values (kernel row and dual coefficients in one compiled pass)
    and every batch's votes; a batch over SMALL_BATCH takes numpy's BLAS decisions."""
    from dynashape.ops_builtin.fast import svm as fast_svm
    decided, voted = _spy(monkeypatch, "decisions"), _spy(monkeypatch, "vote")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(90, 5)).astype(np.float32)
    y = np.digitize(x @ rng.normal(size=5), [-1.0, 0.0, 1.2])
    model = svm.SVC(kernel=kernel, probability=probability, gamma=0.3, coef0=0.5, random_state=0).fit(x, y)
    options = {id(model): {"zipmap": False}} if probability else None
    data = skl2onnx.to_onnx(model, x[:1], options=options).SerializeToString()
    fast, plain = numba_session(data), numba_session(data, compiled_kernels=False)
    big = fast_svm.SMALL_BATCH + 8
    for n in (1, 9, 0, big):
        feeds = {"X": x[:n] + np.float32(0.05)}
        got, want, ort = fast.run(None, feeds), plain.run(None, feeds), ort_run(data, feeds)
        sklearn = model.predict(feeds["X"]).tolist() if n else []
        assert got[0].tolist() == want[0].tolist() == ort[0].tolist() == sklearn
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], ort[1], rtol=1e-4, atol=1e-5)
    assert decided == [1, 9, 0] and voted == [1, 9, 0, big]


@pytest.mark.parametrize("kernel", ["rbf", "poly", "linear"])
def test_the_compiled_regressor_scores_equal_numpy_and_onnxruntime(kernel, monkeypatch):
    from dynashape.ops_builtin.fast import svm as fast_svm
    decided = _spy(monkeypatch, "decisions")
    rng = np.random.default_rng(5)
    x = rng.normal(size=(80, 4)).astype(np.float32)
    model = svm.SVR(kernel=kernel, gamma=0.2).fit(x, x @ rng.normal(size=4) + np.sin(x[:, 0]))
    data = skl2onnx.to_onnx(model, x[:1]).SerializeToString()
    fast, plain = numba_session(data), numba_session(data, compiled_kernels=False)
    big = fast_svm.SMALL_BATCH + 1
    for n in (1, 7, 0, big):
        feeds = {"X": x[:n]}
        got, want, ort = fast.run(None, feeds)[0], plain.run(None, feeds)[0], ort_run(data, feeds)[0]
        assert got.shape == (n, 1)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, ort, rtol=1e-5, atol=1e-5)
        if n:
            np.testing.assert_allclose(got[:, 0], model.predict(feeds["X"]), rtol=1e-4, atol=1e-4)
    assert decided == [1, 7, 0]
