"""scikit-learn's linear classifiers and support vector machines exported with skl2onnx
(LinearClassifier, SVMClassifier, SVMRegressor): dynashape equals onnxruntime and the library
at every batch size on one session. Classifiers are exported with ``zipmap`` off (their
probabilities a tensor)."""
from __future__ import annotations

import warnings

import dynashape
import numpy as np
import pytest

from tests.ml.common import assert_matches, data

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn import linear_model, svm  # noqa: E402
from sklearn.multiclass import OneVsRestClassifier  # noqa: E402

NO_ZIPMAP = {"zipmap": False}


def _export(estimator, x, options=NO_ZIPMAP):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)     # (scikit-learn 1.9 deprecates SVC's probA_, probB_)
        return to_onnx(estimator, x[:1], options={id(estimator): options} if options else None)


def _fit(estimator, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # (convergence warnings of the small, noisy problems, deprecations)
        return estimator.fit(x, y)


def _matches_but_empty(onx, x, library, scores_shape) -> None:
    """assert_matches at batch 1, 7, 64; at batch 0 (which onnxruntime refuses: its
    ArrayFeatureExtractor, after an ArgMax, wants at least one index) dynashape's outputs are
    empty."""
    assert_matches(onx, x, library, batches=(1, 7, 64))
    label, scores = dynashape.InferenceSession(onx.SerializeToString()).run(None, {"X": x[:0]})
    assert label.shape == (0,) and scores.shape == scores_shape


def _decision(estimator):
    return lambda rows: estimator.decision_function(rows)


@pytest.mark.parametrize("classes", [2, 3, 4])
def test_logistic_regression_multinomial_and_binary(classes):
    x, y = data(classes=classes)
    lr = _fit(linear_model.LogisticRegression(), x, y)
    assert_matches(_export(lr, x), x, {0: lr.predict, 1: lr.predict_proba})


def test_logistic_regression_one_vs_rest():
    # (one binary LinearClassifier per class, LOGISTIC: its two-column probabilities)
    x, y = data(classes=3)
    ovr = _fit(OneVsRestClassifier(linear_model.LogisticRegression()), x, y)
    _matches_but_empty(_export(ovr, x), x, {0: ovr.predict, 1: ovr.predict_proba}, (0, 3))


def test_logistic_regression_string_labels():
    x, y = data(classes=3)
    labels = np.array(["cat", "dog", "emu"])[y]
    lr = _fit(linear_model.LogisticRegression(), x, labels)
    assert_matches(_export(lr, x), x, {0: lr.predict, 1: lr.predict_proba})
    xb, yb = data(classes=2, seed=3)
    lr = _fit(linear_model.LogisticRegression(), xb, np.array(["no", "yes"])[yb])
    assert_matches(_export(lr, xb), xb, {0: lr.predict, 1: lr.predict_proba})


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("estimator", [lambda: linear_model.SGDClassifier(random_state=0),
                                       lambda: linear_model.SGDClassifier(loss="log_loss", random_state=0),
                                       lambda: linear_model.RidgeClassifier(alpha=0.5),
                                       lambda: linear_model.Perceptron(random_state=0)],
                         ids=["SGDClassifier-hinge", "SGDClassifier-log", "RidgeClassifier", "Perceptron"])
def test_linear_classifiers_scores(estimator, classes):
    x, y = data(classes=classes, seed=classes)
    est = _fit(estimator(), x, y)
    onx = _export(est, x)
    library = {0: est.predict}
    if getattr(est, "loss", "") == "log_loss" and classes == 2:
        library[1] = est.predict_proba
    elif getattr(est, "loss", "") != "log_loss" and classes > 2:
        library[1] = _decision(est)
    if isinstance(est, linear_model.RidgeClassifier):      # (a LinearClassifier)
        assert_matches(onx, x, library)
    else:                                                  # (MatMul, ArgMax, ArrayFeatureExtractor)
        _matches_but_empty(onx, x, library, (0, classes))


@pytest.mark.parametrize("classes", [2, 3])
def test_linear_svc(classes):
    x, y = data(classes=classes, seed=5)
    est = _fit(svm.LinearSVC(), x, y)
    onx = _export(est, x, options=None)     # (LinearSVC has no zipmap option: labels and scores)
    assert_matches(onx, x, {0: est.predict} if classes == 2 else {0: est.predict, 1: _decision(est)})


SVC_KERNELS = [dict(kernel="linear"), dict(kernel="rbf"), dict(kernel="rbf", gamma=0.3),
               dict(kernel="poly", degree=3, coef0=1.0), dict(kernel="poly", degree=2, gamma=0.2),
               dict(kernel="sigmoid", gamma=0.05, coef0=0.1)]
KERNEL_IDS = ["linear", "rbf", "rbf-gamma", "poly3", "poly2", "sigmoid"]


@pytest.mark.parametrize("classes", [2, 3, 4])
@pytest.mark.parametrize("kernel", SVC_KERNELS, ids=KERNEL_IDS)
def test_svc_labels_and_decision_values(kernel, classes):
    x, y = data(classes=classes, seed=10 + classes)
    est = _fit(svm.SVC(**kernel), x, y)
    library = {0: est.predict}
    if classes == 2:     # (onnxruntime's [-d, d], d = -decision_function as skl2onnx writes rho and coefficients)
        library[1] = lambda rows: np.stack([est.decision_function(rows), -est.decision_function(rows)], axis=1)
    assert_matches(_export(est, x), x, library)


@pytest.mark.parametrize("classes", [2, 3, 4])
@pytest.mark.parametrize("kernel", SVC_KERNELS, ids=KERNEL_IDS)
def test_svc_probabilities(kernel, classes):
    x, y = data(classes=classes, seed=20 + classes)
    est = _fit(svm.SVC(probability=True, random_state=0, **kernel), x, y)
    # (libsvm's coupling in float64 stops where onnxruntime's float32 one does, to within ~1e-4)
    assert_matches(_export(est, x), x, {0: est.predict, 1: est.predict_proba})


def test_nu_svc_and_string_labels():
    x, y = data(classes=3, seed=7)
    est = _fit(svm.NuSVC(nu=0.3, probability=True, random_state=0), x, np.array(["a", "b", "c"])[y])
    assert_matches(_export(est, x), x, {0: est.predict, 1: est.predict_proba})
    est = _fit(svm.NuSVC(nu=0.3), x, y)
    assert_matches(_export(est, x), x, {0: est.predict})


def test_svc_double_input():
    x, y = data(classes=3, seed=8)
    x = x.astype(np.float64)
    est = _fit(svm.SVC(probability=True, random_state=0), x, y)
    assert_matches(_export(est, x), x, {0: est.predict, 1: est.predict_proba})


@pytest.mark.parametrize("kernel", SVC_KERNELS, ids=KERNEL_IDS)
@pytest.mark.parametrize("estimator", [svm.SVR, svm.NuSVR], ids=["SVR", "NuSVR"])
def test_svm_regressors(estimator, kernel):
    x, y = data(classes=None, seed=30)
    est = _fit(estimator(**kernel), x, y)
    assert_matches(_export(est, x, options=None), x, {0: lambda rows: est.predict(rows).reshape(-1, 1)},
                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel", [dict(kernel="rbf"), dict(kernel="linear"), dict(kernel="poly", degree=2)],
                         ids=["rbf", "linear", "poly"])
def test_one_class_svm(kernel):
    x, _ = data(seed=31)
    est = _fit(svm.OneClassSVM(nu=0.2, **kernel), x, None)
    assert_matches(_export(est, x, options=None), x,
                   {0: est.predict, 1: lambda rows: est.decision_function(rows).reshape(-1, 1)}, rtol=1e-4,
                   atol=1e-4)
