"""scikit-learn estimators whose skl2onnx exports are standard ONNX ops (naive Bayes, MLPs,
KMeans, PCA, TruncatedSVD, nearest neighbours): dynashape equals onnxruntime and the library
at every batch size on one session. Classifiers are exported with ``zipmap`` off.

The classifiers' and the neighbours' exports pick labels (or neighbours' targets) with an
ArrayFeatureExtractor whose indices come from the batch; onnxruntime refuses it on an empty
batch ("num_indices = 0"), so there the empty batch is checked on dynashape alone."""
from __future__ import annotations

import warnings

import dynashape
import numpy as np
import pytest

from tests.ml.common import assert_matches, data

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn import cluster, decomposition, naive_bayes, neighbors, neural_network  # noqa: E402


def _fit(estimator, x, y=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # (convergence warnings of the small problems)
        return estimator.fit(x, y) if y is not None else estimator.fit(x)


def _export(estimator, x, options=None):
    return to_onnx(estimator, x[:1], options={id(estimator): options} if options else None)


def _matches_but_empty(onx, x, library, shapes, rtol=1e-5, atol=1e-6) -> None:
    """assert_matches at batch 1, 7, 64; at batch 0 dynashape's outputs have ``shapes``."""
    assert_matches(onx, x, library, batches=(1, 7, 64), rtol=rtol, atol=atol)
    got = dynashape.InferenceSession(onx.SerializeToString()).run(None, {"X": x[:0]})
    assert [g.shape for g in got] == shapes


def _counts(x: np.ndarray) -> np.ndarray:
    """Non-negative count-like features (MultinomialNB)."""
    return np.round(np.abs(x) * 3).astype(np.float32)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("make,features", [(naive_bayes.GaussianNB, None), (naive_bayes.MultinomialNB, _counts),
                                           (naive_bayes.BernoulliNB, None)],
                         ids=["GaussianNB", "MultinomialNB", "BernoulliNB"])
def test_naive_bayes(make, features, classes):
    x, y = data(classes=classes, seed=40 + classes)
    if features is not None:
        x = features(x)
    est = _fit(make(), x, y)
    _matches_but_empty(_export(est, x, {"zipmap": False}), x, {0: est.predict, 1: est.predict_proba},
                       [(0,), (0, classes)])


@pytest.mark.parametrize("classes", [2, 3])
def test_mlp_classifier(classes):
    x, y = data(classes=classes, seed=50 + classes)
    est = _fit(neural_network.MLPClassifier(hidden_layer_sizes=(8, 6), max_iter=300, random_state=0), x, y)
    _matches_but_empty(_export(est, x, {"zipmap": False}), x, {0: est.predict, 1: est.predict_proba},
                       [(0,), (0, classes)])


@pytest.mark.parametrize("activation", ["relu", "tanh", "logistic", "identity"])
def test_mlp_regressor(activation):
    x, y = data(classes=None, seed=52)
    est = _fit(neural_network.MLPRegressor(hidden_layer_sizes=(8,), activation=activation, max_iter=300,
                                           random_state=0), x, y)
    assert_matches(_export(est, x), x, {0: lambda rows: est.predict(rows).reshape(-1, 1)}, rtol=1e-4, atol=1e-4)


def test_kmeans_predict_and_transform():
    x, _ = data(seed=60)
    est = _fit(cluster.KMeans(n_clusters=4, n_init=3, random_state=0), x)
    assert_matches(_export(est, x), x, {0: est.predict, 1: est.transform}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", [lambda: decomposition.PCA(n_components=3),
                                  lambda: decomposition.PCA(n_components=3, whiten=True),
                                  lambda: decomposition.TruncatedSVD(n_components=3, random_state=0)],
                         ids=["PCA", "PCA-whiten", "TruncatedSVD"])
def test_decompositions(make):
    x, _ = data(seed=61)
    est = _fit(make(), x)
    assert_matches(_export(est, x), x, {0: est.transform}, rtol=1e-4, atol=1e-5)


# weights="distance": skl2onnx 1.20 negates the (non-negative) distances TopK returns before
# Max(d, 1e-6), so every weight is 1e6 and its export predicts as "uniform" does; dynashape
# equals onnxruntime there, not the library

@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_k_neighbors_classifier(weights):
    x, y = data(classes=3, seed=62)
    est = _fit(neighbors.KNeighborsClassifier(n_neighbors=5, weights=weights), x, y)
    library = {0: est.predict, 1: est.predict_proba} if weights == "uniform" else {}
    _matches_but_empty(_export(est, x, {"zipmap": False}), x, library, [(0,), (0, 3)])


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_k_neighbors_regressor(weights):
    x, y = data(classes=None, seed=63)
    est = _fit(neighbors.KNeighborsRegressor(n_neighbors=4, weights=weights), x, y)
    library = {0: lambda rows: est.predict(rows).reshape(-1, 1)} if weights == "uniform" else {}
    _matches_but_empty(_export(est, x), x, library, [(0, 1)], rtol=1e-4, atol=1e-4)
