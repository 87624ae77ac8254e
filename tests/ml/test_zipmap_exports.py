"""Classifiers exported with skl2onnx's defaults (a ZipMap after the probabilities: a list of
{label: probability} dicts per row, as onnxruntime returns it): dynashape equals onnxruntime
and the library's predict / predict_proba at batch 1, 7 and 64 on one session, for integer
and string labels, and gives empty outputs at batch 0 (where onnxruntime refuses some of these
exports)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.ml.common import BATCHES, assert_same_value, data, to_onnx_bytes

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn import ensemble, linear_model, naive_bayes, neighbors, neural_network, svm, tree  # noqa: E402

ESTIMATORS = {
    "LogisticRegression": lambda: linear_model.LogisticRegression(max_iter=500),
    "SGDClassifier": lambda: linear_model.SGDClassifier(loss="log_loss", random_state=0),
    "DecisionTree": lambda: tree.DecisionTreeClassifier(max_depth=4, random_state=0),
    "RandomForest": lambda: ensemble.RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0),
    "ExtraTrees": lambda: ensemble.ExtraTreesClassifier(n_estimators=5, max_depth=4, random_state=0),
    "GradientBoosting": lambda: ensemble.GradientBoostingClassifier(n_estimators=10, random_state=0),
    "AdaBoost": lambda: ensemble.AdaBoostClassifier(n_estimators=5, random_state=0),
    "SVC": lambda: svm.SVC(probability=True, random_state=0),
    "GaussianNB": naive_bayes.GaussianNB,
    "KNeighbors": lambda: neighbors.KNeighborsClassifier(n_neighbors=3),
    "MLP": lambda: neural_network.MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0),
}


def _ort_and_dynashape(onx):
    import dynashape

    from tests.conftest import ort_session
    model = to_onnx_bytes(onx)
    return dynashape.InferenceSession(model), ort_session(model)


@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_zipmap_export_equals_onnxruntime_and_predict_proba(name, labels):
    x, y = data(n=90, classes=3, seed=3)
    if labels == "str":
        y = np.array(["cat", "dog", "emu"])[y]
    est = ESTIMATORS[name]().fit(x, y)
    onx = to_onnx(est, x[:1])
    assert "ZipMap" in [n.op_type for n in onx.graph.node]
    sess, ort = _ort_and_dynashape(onx)
    out = sess.get_outputs()[1]
    key = "int64" if labels == "int" else "string"
    assert (out.type, out.shape) == (f"seq(map({key},tensor(float)))", []) == (ort.get_outputs()[1].type, [])
    for b in BATCHES:
        got = sess.run(None, {"X": x[:b]})
        if b == 0:      # (onnxruntime refuses an empty batch of some exports: ArrayFeatureExtractor of no rows)
            assert len(got[0]) == 0 and got[1] == []
            continue
        want = ort.run(None, {"X": x[:b]})
        assert_same_value(got[0], want[0], f"{name} labels batch {b}")
        assert_same_value(got[1], want[1], f"{name} probabilities batch {b}")
        np.testing.assert_array_equal(np.asarray(got[0]).astype(str), est.predict(x[:b]).astype(str))
        proba = est.predict_proba(x[:b])
        keys = list(got[1][0])
        assert keys == sorted(est.classes_.tolist())
        np.testing.assert_allclose([[row[k] for k in keys] for row in got[1]],
                                   proba[:, [list(est.classes_).index(k) for k in keys]], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_boosters_exported_with_their_zipmap_equal_onnxruntime_and_predict_proba(library):
    """LGBMClassifier (onnxmltools' default ZipMap output) and XGBClassifier (whose converter
    writes no ZipMap) through onnxmltools."""
    lib = pytest.importorskip(library)
    pytest.importorskip("onnxmltools")
    from onnxmltools import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = data(n=120, classes=3, seed=5)
    if library == "lightgbm":
        est = lib.LGBMClassifier(n_estimators=8, num_leaves=7, verbose=-1).fit(x, y)
        onx = convert_lightgbm(est, initial_types=[("X", FloatTensorType([None, x.shape[1]]))])
    else:
        est = lib.XGBClassifier(n_estimators=8, max_depth=3).fit(x, y)
        onx = convert_xgboost(est, initial_types=[("X", FloatTensorType([None, x.shape[1]]))])
    assert ("ZipMap" in [n.op_type for n in onx.graph.node]) == (library == "lightgbm")
    sess, ort = _ort_and_dynashape(onx)
    for b in (1, 7, 64):
        got, want = sess.run(None, {"X": x[:b]}), ort.run(None, {"X": x[:b]})
        assert_same_value(got[0], want[0], f"{library} labels batch {b}")
        assert_same_value(got[1], want[1], f"{library} probabilities batch {b}")
        np.testing.assert_array_equal(got[0], est.predict(x[:b]))
        proba = [[row[k] for k in sorted(row)] for row in got[1]] if isinstance(got[1], list) else got[1]
        np.testing.assert_allclose(proba, est.predict_proba(x[:b]), rtol=1e-4, atol=1e-5)
