"""Tree ensembles exported by their real converters (TreeEnsembleClassifier / TreeEnsembleRegressor
of ai.onnx.ml-1 and -3): scikit-learn through skl2onnx, LightGBM and XGBoost through
onnxmltools. dynashape equals onnxruntime (labels exactly, scores to rtol 1e-5) and the library
at batch 1, 7, 64 and 0 on one session. Classifiers are exported without ZipMap."""
from __future__ import annotations

import dynashape
import numpy as np
import pytest

from tests.ml.common import assert_matches, data

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn import ensemble, tree  # noqa: E402

SMALL = dict(random_state=0)


def _export(model, x, **kw):
    return to_onnx(model, x[:1], options={id(model): {"zipmap": False}} if hasattr(model, "classes_") else None,
                   **kw)


def _tree_ops(onx) -> set:
    return {(n.domain, n.op_type) for n in onx.graph.node if n.op_type.startswith("TreeEnsemble")}


def _classifier_matches(model, x, onx=None):
    onx = onx if onx is not None else _export(model, x)
    assert _tree_ops(onx) == {("ai.onnx.ml", "TreeEnsembleClassifier")}
    assert_matches(onx, x, {0: model.predict, 1: model.predict_proba})


def _regressor_matches(model, x, onx=None, rtol=1e-5, atol=1e-6):
    onx = onx if onx is not None else _export(model, x)
    assert _tree_ops(onx) == {("ai.onnx.ml", "TreeEnsembleRegressor")}
    assert_matches(onx, x, {0: lambda rows: model.predict(rows).reshape(-1, 1)}, rtol=rtol, atol=atol)


# scikit-learn -------------------------------------------------------------------------------

@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("make", [
    lambda: tree.DecisionTreeClassifier(max_depth=3, **SMALL),
    lambda: ensemble.RandomForestClassifier(n_estimators=4, max_depth=3, **SMALL),
    lambda: ensemble.ExtraTreesClassifier(n_estimators=4, max_depth=3, **SMALL),
    lambda: ensemble.GradientBoostingClassifier(n_estimators=4, max_depth=2, **SMALL),
], ids=["DecisionTree", "RandomForest", "ExtraTrees", "GradientBoosting"])
def test_sklearn_classifiers(make, classes):
    x, y = data(n=120, classes=classes)
    _classifier_matches(make().fit(x, y), x)


@pytest.mark.parametrize("classes", [2, 3])
def test_sklearn_classifier_with_string_labels(classes):
    x, y = data(n=120, classes=classes)
    names = np.array(["cat", "dog", "emu"])[y]
    model = ensemble.RandomForestClassifier(n_estimators=3, max_depth=3, **SMALL).fit(x, names)
    _classifier_matches(model, x)


@pytest.mark.parametrize("make", [
    lambda: tree.DecisionTreeRegressor(max_depth=3, **SMALL),
    lambda: ensemble.RandomForestRegressor(n_estimators=4, max_depth=3, **SMALL),
    lambda: ensemble.ExtraTreesRegressor(n_estimators=4, max_depth=3, **SMALL),
    lambda: ensemble.GradientBoostingRegressor(n_estimators=4, max_depth=2, **SMALL),
], ids=["DecisionTree", "RandomForest", "ExtraTrees", "GradientBoosting"])
def test_sklearn_regressors(make):
    x, y = data(n=120, classes=None)
    _regressor_matches(make().fit(x, y), x)


@pytest.mark.filterwarnings("ignore:dynashape. output 'variable', axis 1. declared 1, inferred 2")
def test_sklearn_multi_output_regressor():
    # (skl2onnx declares Y [N, 1]; the node makes [N, 2], as onnxruntime's does)
    x, y = data(n=120, classes=None)
    y2 = np.stack([y, -2 * y + 1], axis=1)
    model = ensemble.RandomForestRegressor(n_estimators=3, max_depth=3, **SMALL).fit(x, y2)
    assert_matches(_export(model, x), x, {0: model.predict})


def _bool_free_make_node(monkeypatch):
    """skl2onnx 1.20 writes HistGradientBoosting's nodes_missing_value_tracks_true with Python
    bools, which onnx >= 1.17 refuses in an INTS attribute: the converter's node factory gets
    the lists as ints (the values it meant)."""
    from skl2onnx.common import _container

    make_node = _container.make_node

    def ints_not_bools(*args, **attrs):
        fixed = {k: [int(v) for v in val] if isinstance(val, list) and val and
                 any(isinstance(v, (bool, np.bool_, np.integer)) for v in val) else val
                 for k, val in attrs.items()}
        return make_node(*args, **fixed)

    monkeypatch.setattr(_container, "make_node", ints_not_bools)


@pytest.mark.parametrize("classes", [2, 3])
def test_hist_gradient_boosting_classifier(monkeypatch, classes):
    _bool_free_make_node(monkeypatch)
    x, y = data(n=120, classes=classes)
    x[::9, 1] = np.nan                                     # (the trees learn where a NaN goes)
    model = ensemble.HistGradientBoostingClassifier(max_iter=4, max_leaf_nodes=6, **SMALL).fit(x, y)
    _classifier_matches(model, x)


def test_hist_gradient_boosting_regressor(monkeypatch):
    _bool_free_make_node(monkeypatch)
    x, y = data(n=120, classes=None)
    x[::7, 2] = np.nan
    model = ensemble.HistGradientBoostingRegressor(max_iter=4, max_leaf_nodes=6, **SMALL).fit(x, y)
    _regressor_matches(model, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("classes", [2, 3])
def test_adaboost_classifier(classes):
    x, y = data(n=120, classes=classes)
    model = ensemble.AdaBoostClassifier(n_estimators=3, **SMALL).fit(x, y)
    onx = _export(model, x)
    assert ("ai.onnx.ml", "TreeEnsembleClassifier") in _tree_ops(onx)
    # (no batch 0: onnxruntime's ArrayFeatureExtractor after the trees refuses 0 indices)
    assert_matches(onx, x, {0: model.predict, 1: model.predict_proba}, batches=(1, 7, 64))
    # of three classes, the estimators' classifiers are walked as one regressor (sibling_forests)
    fired = dynashape.InferenceSession(onx.SerializeToString(), optimize=True).rewrites.counts()
    assert fired.get("sibling_forests") == (1 if classes == 3 else None)


# LightGBM, XGBoost (onnxmltools) -----------------------------------------------------------------

def _mltools_input(features: int):
    from onnxmltools.convert.common.data_types import FloatTensorType

    return [("x", FloatTensorType([None, features]))]


@pytest.mark.parametrize("classes", [2, 3])
def test_lightgbm_classifier(classes):
    lgb = pytest.importorskip("lightgbm")
    onnxmltools = pytest.importorskip("onnxmltools")
    x, y = data(n=120, classes=classes)
    model = lgb.LGBMClassifier(n_estimators=5, num_leaves=6, min_child_samples=5, verbose=-1, **SMALL).fit(x, y)
    onx = onnxmltools.convert_lightgbm(model, initial_types=_mltools_input(5), zipmap=False)
    _classifier_matches(model, x, onx)


def test_lightgbm_regressor():
    lgb = pytest.importorskip("lightgbm")
    onnxmltools = pytest.importorskip("onnxmltools")
    x, y = data(n=120, classes=None)
    model = lgb.LGBMRegressor(n_estimators=5, num_leaves=6, min_child_samples=5, verbose=-1, **SMALL).fit(x, y)
    onx = onnxmltools.convert_lightgbm(model, initial_types=_mltools_input(5))
    _regressor_matches(model, x, onx, atol=1e-5)


@pytest.mark.parametrize("classes", [2, 3])
def test_xgboost_classifier(classes):
    xgb = pytest.importorskip("xgboost")
    onnxmltools = pytest.importorskip("onnxmltools")
    x, y = data(n=120, classes=classes)
    model = xgb.XGBClassifier(n_estimators=5, max_depth=3, **SMALL).fit(x, y)
    onx = onnxmltools.convert_xgboost(model, initial_types=_mltools_input(5))
    _classifier_matches(model, x, onx)


def test_xgboost_regressor():
    xgb = pytest.importorskip("xgboost")
    onnxmltools = pytest.importorskip("onnxmltools")
    x, y = data(n=120, classes=None)
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3, **SMALL).fit(x, y)
    onx = onnxmltools.convert_xgboost(model, initial_types=_mltools_input(5))
    _regressor_matches(model, x, onx, atol=1e-5)
