"""The compiled LinearClassifier and Normalizer (``dynashape.ops_builtin.fast.ml_linear``): labels equal
the numpy kernel's and onnxruntime's exactly, the scores within float32 rounding (the compiled
dot products sum in the features' order, numpy's BLAS in its own), for every post_transform
the loop computes, binary and multiclass, NaN rows, batch 1, 7 and 0 on one session; string
labels and PROBIT stay with the numpy kernel. Normalizer's rows are bit-identical to the numpy
kernel's (same summation order), zero and NaN rows included. Skipped where numba is missing or
the compiled kernels are off.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.conftest import numba_session, ort_predates, ort_run

pytest.importorskip("numba")
if not __import__("dynashape.ops_builtin.fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)

ML = helper.make_operatorsetid("ai.onnx.ml", 1)


def _model(node, x_dim: int, outputs) -> bytes:
    graph = helper.make_graph(
        [node], "ml_linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", x_dim])], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17), ML])
    model.ir_version = 8
    return model.SerializeToString()


def _classifier(classes: int, features: int, post: str, labels, rng) -> bytes:
    rows = 1 if classes == 2 else classes
    label_attr = ({"classlabels_ints": list(labels)} if isinstance(labels[0], int)
                  else {"classlabels_strings": list(labels)})
    node = helper.make_node(
        "LinearClassifier", ["X"], ["Y", "Z"], domain="ai.onnx.ml", post_transform=post,
        coefficients=rng.normal(size=rows * features).astype(np.float32).tolist(),
        intercepts=rng.normal(size=rows).astype(np.float32).tolist(), **label_attr)
    label_type = TensorProto.INT64 if isinstance(labels[0], int) else TensorProto.STRING
    return _model(node, features, [helper.make_tensor_value_info("Y", label_type, ["N"]),
                                   helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", classes])])


def _spy(monkeypatch, module, name: str) -> list:
    """Record the batch size of every call of the loop ``name``."""
    calls, loop = [], getattr(module.loops, name)
    monkeypatch.setattr(module.loops, name, lambda x, *args: (calls.append(x.shape[0]), loop(x, *args))[1])
    return calls


def _feeds(features: int, rng):
    x = rng.normal(size=(7, features)).astype(np.float32)
    x[3] = np.nan                                        # a NaN row: NaN scores, the first label
    return [x[:1], x, x[:0]]


@pytest.mark.parametrize("classes", [2, 3, 6])
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_linear_classifier_loop_equals_numpy_and_onnxruntime(classes, post, monkeypatch):
    from dynashape.ops_builtin.fast import ml_linear as fast
    served = classes == 2 or post != "SOFTMAX_ZERO"
    calls = _spy(monkeypatch, fast, "classify_binary" if classes == 2 else "classify")
    rng = np.random.default_rng(classes)
    data = _classifier(classes, 5, post, [10 * k + 3 for k in range(classes)], rng)
    compiled, plain = numba_session(data), numba_session(data, compiled_kernels=False)
    for feeds in ({"X": x} for x in _feeds(5, rng)):
        got, want, ort = compiled.run(None, feeds), plain.run(None, feeds), ort_run(data, feeds)
        assert got[0].dtype == np.int64 and got[0].tolist() == want[0].tolist() == ort[0].tolist()
        assert got[1].shape == (feeds["X"].shape[0], classes)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=2e-7)
        if not (classes == 2 and post == "LOGISTIC" and ort_predates((1, 32))):   # (older: other binary scores)
            np.testing.assert_allclose(got[1], ort[1], rtol=1e-5, atol=1e-6)
    assert calls == ([1, 7, 0] if served else [])


def test_linear_classifier_hand_computed_binary_logistic():
    """Score s = 2*x0 - x1 + 0.5; label 1 where s > 0; Z = [1 - p, p] with p = 1 / (1 + e^-s)."""
    node = helper.make_node("LinearClassifier", ["X"], ["Y", "Z"], domain="ai.onnx.ml",
                            coefficients=[2.0, -1.0], intercepts=[0.5], classlabels_ints=[0, 1],
                            post_transform="LOGISTIC")
    data = _model(node, 2, [helper.make_tensor_value_info("Y", TensorProto.INT64, ["N"]),
                            helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 2])])
    x = np.array([[1.0, 0.0], [0.0, 3.0], [0.25, 1.0]], np.float32)
    y, z = numba_session(data).run(None, {"X": x})
    s = np.array([2.5, -2.5, 0.0])
    p = 1 / (1 + np.exp(-s))
    assert y.tolist() == [1, 0, 0]
    np.testing.assert_allclose(z, np.stack([1 - p, p], axis=1), rtol=1e-6)


def test_string_labels_and_probit_run_the_numpy_kernel(monkeypatch):
    from dynashape.ops_builtin.fast import ml_linear as fast
    calls = _spy(monkeypatch, fast, "classify")
    rng = np.random.default_rng(1)
    strings = _classifier(3, 4, "SOFTMAX", ["a", "bb", "c"], rng)
    probit = _classifier(3, 4, "PROBIT", [0, 1, 2], rng)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    got, ort = numba_session(strings).run(None, {"X": x}), ort_run(strings, {"X": x})
    assert got[0].tolist() == ort[0].tolist()
    np.testing.assert_allclose(got[1], ort[1], rtol=1e-5, atol=1e-6)
    got = numba_session(probit).run(None, {"X": x})
    want = numba_session(probit, compiled_kernels=False).run(None, {"X": x})
    assert got[0].tolist() == want[0].tolist()
    np.testing.assert_array_equal(got[1], want[1])
    assert calls == []


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_loop_is_bit_identical_to_numpy_and_equals_onnxruntime(norm, monkeypatch):
    from dynashape.ops_builtin.fast import ml_linear as fast
    calls = _spy(monkeypatch, fast, "normalize")
    node = helper.make_node("Normalizer", ["X"], ["Y"], domain="ai.onnx.ml", norm=norm)
    data = _model(node, 6, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 6])])
    rng = np.random.default_rng(6)
    x = rng.normal(size=(9, 6)).astype(np.float32)
    x[2] = 0                                             # a zero norm: the row is copied
    x[5, 4] = np.nan
    compiled, plain = numba_session(data), numba_session(data, compiled_kernels=False)
    for rows in (x[:1], x, x[:0]):
        got, want = compiled.run(None, {"X": rows})[0], plain.run(None, {"X": rows})[0]
        np.testing.assert_array_equal(got, want)
        finite = ~np.isnan(rows).any(axis=1)
        np.testing.assert_allclose(got[finite], ort_run(data, {"X": rows})[0][finite], rtol=1e-6, atol=1e-7)
    assert calls == [1, 9, 0]
    # MAX divides by the largest value (not the largest magnitude), as onnxruntime does
    np.testing.assert_array_equal(compiled.run(None, {"X": np.array([[3, -4, 0, 0, 0, 0]], np.float32)})[0],
                                  np.array([[1, -4 / 3, 0, 0, 0, 0]] if norm == "MAX" else
                                           [[3 / 7, -4 / 7, 0, 0, 0, 0]] if norm == "L1" else
                                           [[0.6, -0.8, 0, 0, 0, 0]], np.float32))


def test_scikit_learn_linear_models_use_the_loop(monkeypatch):
    linear_model = pytest.importorskip("sklearn.linear_model")
    svm = pytest.importorskip("sklearn.svm")
    skl2onnx = pytest.importorskip("skl2onnx")
    from dynashape.ops_builtin.fast import ml_linear as fast
    calls = _spy(monkeypatch, fast, "classify")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4)).astype(np.float32)
    for classes in (2, 4):
        score = x @ rng.normal(size=4)
        y = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
        for model in (linear_model.LogisticRegression(max_iter=500), svm.LinearSVC()):
            model.fit(x, y)
            options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
            data = skl2onnx.to_onnx(model, x[:1], options=options).SerializeToString()
            feeds = {"X": x[:13]}
            got, ort = numba_session(data).run(None, feeds), ort_run(data, feeds)
            assert got[0].tolist() == ort[0].tolist() == model.predict(x[:13]).tolist()
            np.testing.assert_allclose(got[1], ort[1], rtol=1e-5, atol=1e-6)
    assert calls == [13] * 4       # skl2onnx writes both rows of a binary model: the multiclass loop
