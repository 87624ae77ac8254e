"""scikit-learn's linear regressors and preprocessing exported with skl2onnx (Scaler,
Normalizer, Imputer, LinearRegressor): dynashape equals onnxruntime and the library at every
batch size on one session."""
from __future__ import annotations

import numpy as np
import pytest

from tests.ml.common import assert_matches, data

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from skl2onnx import to_onnx  # noqa: E402
from sklearn import linear_model, preprocessing  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402


@pytest.mark.parametrize("estimator", [linear_model.LinearRegression(), linear_model.Ridge(alpha=0.5),
                                       linear_model.SGDRegressor(random_state=0)],
                         ids=["LinearRegression", "Ridge", "SGDRegressor"])
def test_regressors(estimator):
    x, y = data(classes=None)
    estimator.fit(x, y)
    onx = to_onnx(estimator, x[:1])
    assert_matches(onx, x, {0: lambda rows: estimator.predict(rows).reshape(-1, 1)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transformer", [preprocessing.StandardScaler(), preprocessing.MinMaxScaler(),
                                         preprocessing.Normalizer(norm="l2"), preprocessing.Normalizer(norm="l1"),
                                         preprocessing.Normalizer(norm="max")],
                         ids=["StandardScaler", "MinMaxScaler", "Normalizer-l2", "Normalizer-l1", "Normalizer-max"])
def test_transformers(transformer):
    x, _ = data()
    if getattr(transformer, "norm", None) == "max":
        # (scikit-learn divides by the largest absolute value, ai.onnx.ml's MAX (and onnxruntime)
        # by the largest value: skl2onnx's export agrees with the library on non-negative rows)
        x = np.abs(x)
    transformer.fit(x)
    onx = to_onnx(transformer, x[:1])
    assert_matches(onx, x, {0: transformer.transform})


def test_simple_imputer_replaces_nan_by_the_column_mean():
    x, _ = data()
    x[::3, 1] = np.nan
    x[::4, 3] = np.nan
    imputer = SimpleImputer(strategy="mean").fit(x)
    onx = to_onnx(imputer, x[:1])
    assert_matches(onx, x, {0: imputer.transform})
