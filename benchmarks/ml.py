"""Classic machine learning: scikit-learn, LightGBM and XGBoost models exported as their users
export them, dynashape against ONNX Runtime at batch 1 and 1000.

What is measured, per model (fitted on generated data, seed 0: 400 rows of 8 features, 3 classes
for classifiers; exported with skl2onnx / onnxmltools, classifiers with ``zipmap=False`` so both
engines return tensors; one row of ZipMap'ed LogisticRegression shows the list-of-dicts output):
  * dyn ms / ORT ms: the median of a run on one session per engine at that batch (one intra-op
    thread; after one warm-up run; benchmarks/_common.median_ms). The steady state: before the
    first measurement one run of a session made with ``wait_for_compiled_kernels=True`` waits
    for numba's start in the process (~1 s, in the background otherwise, the numpy kernels
    serving meanwhile: issue 23's cold start, ``benchmarks/coldstart.py``);
  * dyn/ORT: their ratio, and the target of issue 25 for the model's kind:
      - tree ensembles (trees, forests, boosting, LightGBM, XGBoost): <= 2x at batch 1, <= 1.5x at 1000;
      - k-nearest neighbours: <= 2x at batch 1;
      - every other model: <= 2x at batch 1, <= 1.2x at batch 1000;
  * same: every output equal to onnxruntime's (labels exactly, scores within rtol 1e-4).
A model whose converter or library is missing, or that an engine cannot load, is one line with
the reason and "-" for its numbers. Timings are printed, not asserted.

Needs the ``ml`` extra (``pip install -e ".[ml]"``). Run from the repository root:
    python benchmarks/ml.py                    # ~1-2 minutes
    python benchmarks/ml.py --models tree,knn  # names containing any of these substrings
    python benchmarks/ml.py --quick            # fewer runs per measurement
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import warnings
from typing import Callable, NamedTuple

import numpy as np
from _common import dynashape_session, fmt_ms, header, median_ms, ort_session, print_table, short_error, verdict

BATCHES = (1, 1000)
ROWS, FEATURES, CLASSES = 400, 8, 3
TARGETS = {"tree": (2.0, 1.5), "knn": (2.0, None), "other": (2.0, 1.2)}


class Case(NamedTuple):
    name: str
    kind: str                        # a key of TARGETS
    build: Callable[[], tuple]       # () -> (ModelProto or bytes, feeds maker: batch -> dict)


def _data(classes=CLASSES, positive=False):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    if positive:
        x = np.abs(x)
    score = x @ rng.normal(size=FEATURES) + 0.3 * rng.normal(size=ROWS)
    if classes is None:
        return x, score
    return x, np.searchsorted(np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]), score)


def _rows(x: np.ndarray, name: str = "X") -> Callable[[int], dict]:
    """Feeds of ``batch`` rows drawn (with repetition) from ``x``."""
    def feeds(batch: int) -> dict:
        return {name: x[np.arange(batch) % len(x)]}
    return feeds


def _sklearn(estimator_fn, classes=CLASSES, positive=False, zipmap=False):
    def build():
        from skl2onnx import to_onnx
        from skl2onnx.common import _container
        x, y = _data(classes, positive)
        est = estimator_fn().fit(x, y)
        options = {id(est): {"zipmap": zipmap}} if classes is not None and hasattr(est, "predict_proba") else None
        make_node = _container.make_node
        _container.make_node = _ints_not_bools(make_node)
        try:
            onx = to_onnx(est, x[:1], options=options)
        finally:
            _container.make_node = make_node
        return onx, _rows(x, onx.graph.input[0].name)
    return build


def _ints_not_bools(make_node):
    """skl2onnx's node factory with bool lists given as ints: skl2onnx 1.20 writes
    HistGradientBoosting's nodes_missing_value_tracks_true as Python bools, which onnx >= 1.17
    refuses in an INTS attribute (tests/ml/test_trees.py does the same)."""
    def make(*args, **attrs):
        fixed = {k: [int(v) for v in val] if isinstance(val, list) and val and
                 any(isinstance(v, (bool, np.bool_)) for v in val) else val for k, val in attrs.items()}
        return make_node(*args, **fixed)
    return make


def _lightgbm(regressor: bool):
    def build():
        import lightgbm
        from onnxmltools import convert_lightgbm
        from onnxmltools.convert.common.data_types import FloatTensorType
        x, y = _data(None if regressor else CLASSES)
        cls = lightgbm.LGBMRegressor if regressor else lightgbm.LGBMClassifier
        est = cls(n_estimators=50, num_leaves=15, verbose=-1).fit(x, y)
        onx = convert_lightgbm(est, initial_types=[("X", FloatTensorType([None, FEATURES]))], zipmap=False)
        return onx, _rows(x)
    return build


def _xgboost(regressor: bool):
    def build():
        import xgboost
        from onnxmltools import convert_xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType
        x, y = _data(None if regressor else CLASSES)
        cls = xgboost.XGBRegressor if regressor else xgboost.XGBClassifier
        est = cls(n_estimators=50, max_depth=4).fit(x, y)
        onx = convert_xgboost(est, initial_types=[("X", FloatTensorType([None, FEATURES]))])
        return onx, _rows(x)
    return build


def _cases() -> list:
    from sklearn import cluster, decomposition, ensemble, linear_model, naive_bayes, neighbors, neural_network
    from sklearn import preprocessing, svm, tree
    return [
        Case("LogisticRegression binary", "other", _sklearn(linear_model.LogisticRegression, classes=2)),
        Case("LogisticRegression multiclass", "other", _sklearn(linear_model.LogisticRegression)),
        Case("LogisticRegression zipmap", "other", _sklearn(linear_model.LogisticRegression, zipmap=True)),
        Case("LinearRegression", "other", _sklearn(linear_model.LinearRegression, classes=None)),
        Case("Ridge", "other", _sklearn(linear_model.Ridge, classes=None)),
        Case("SGDClassifier", "other", _sklearn(lambda: linear_model.SGDClassifier(random_state=0))),
        Case("LinearSVC", "other", _sklearn(svm.LinearSVC)),
        Case("SVC rbf probability", "other", _sklearn(lambda: svm.SVC(probability=True, random_state=0))),
        Case("SVR", "other", _sklearn(svm.SVR, classes=None)),
        Case("KNeighborsClassifier", "knn", _sklearn(neighbors.KNeighborsClassifier)),
        Case("KNeighborsRegressor", "knn", _sklearn(neighbors.KNeighborsRegressor, classes=None)),
        Case("DecisionTreeClassifier", "tree", _sklearn(lambda: tree.DecisionTreeClassifier(max_depth=8))),
        Case("RandomForestClassifier", "tree",
             _sklearn(lambda: ensemble.RandomForestClassifier(n_estimators=50, max_depth=8, random_state=0))),
        Case("RandomForestRegressor", "tree",
             _sklearn(lambda: ensemble.RandomForestRegressor(n_estimators=50, max_depth=8, random_state=0),
                      classes=None)),
        Case("ExtraTreesClassifier", "tree",
             _sklearn(lambda: ensemble.ExtraTreesClassifier(n_estimators=50, max_depth=8, random_state=0))),
        Case("GradientBoostingClassifier", "tree",
             _sklearn(lambda: ensemble.GradientBoostingClassifier(n_estimators=50, random_state=0))),
        Case("HistGradientBoostingRegressor", "tree",
             _sklearn(lambda: ensemble.HistGradientBoostingRegressor(max_iter=50), classes=None)),
        Case("AdaBoostClassifier", "tree", _sklearn(lambda: ensemble.AdaBoostClassifier(n_estimators=30))),
        Case("LGBMClassifier", "tree", _lightgbm(regressor=False)),
        Case("LGBMRegressor", "tree", _lightgbm(regressor=True)),
        Case("XGBClassifier", "tree", _xgboost(regressor=False)),
        Case("XGBRegressor", "tree", _xgboost(regressor=True)),
        Case("GaussianNB", "other", _sklearn(naive_bayes.GaussianNB)),
        Case("MultinomialNB", "other", _sklearn(naive_bayes.MultinomialNB, positive=True)),
        Case("MLPClassifier", "other",
             _sklearn(lambda: neural_network.MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=0))),
        Case("KMeans", "other", _sklearn(lambda: cluster.KMeans(n_clusters=4, n_init=2, random_state=0), classes=None)),
        Case("PCA", "other", _sklearn(lambda: decomposition.PCA(n_components=4), classes=None)),
        Case("StandardScaler", "other", _sklearn(preprocessing.StandardScaler, classes=None)),
        Case("Normalizer", "other", _sklearn(preprocessing.Normalizer, classes=None)),
    ]


def _same(got: list, want: list) -> bool:
    for g, w in zip(got, want):
        if isinstance(w, list):
            if g != w and not all(np.allclose(list(a.values()), list(b.values()), rtol=1e-4) and list(a) == list(b)
                                  for a, b in zip(g, w)):
                return False
            continue
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return False
        if w.dtype.kind in "fc":
            if not np.allclose(g, w, rtol=1e-4, atol=1e-5):
                return False
        elif g.tolist() != w.tolist():
            return False
    return len(got) == len(want)


def _measure(case: Case, runs: dict) -> list:
    """The table row of one case."""
    try:
        onx, feeds_of = case.build()
    except ImportError as exc:
        return [case.name, case.kind] + ["-"] * 6 + [f"not installed: {exc.name}"]
    except Exception as exc:  # noqa: BLE001 - a converter failure is reported, the others go on
        return [case.name, case.kind] + ["-"] * 6 + ["export: " + short_error(exc, 60)]
    model = onx.SerializeToString() if hasattr(onx, "SerializeToString") else onx
    try:
        ort = ort_session(model)
    except Exception as exc:  # noqa: BLE001
        return [case.name, case.kind] + ["-"] * 6 + ["onnxruntime: " + short_error(exc, 60)]
    try:
        dyn = dynashape_session(model)
    except Exception as exc:  # noqa: BLE001
        return [case.name, case.kind] + ["-"] * 6 + ["dynashape: " + short_error(exc, 60)]
    _compiled_kernels_up(model, feeds_of(1))
    row, notes, same = [case.name, case.kind], [], True
    for batch, limit in zip(BATCHES, TARGETS[case.kind]):
        feeds = feeds_of(batch)
        try:
            same &= _same(dyn.run(None, feeds), ort.run(None, feeds))
            d, _ = median_ms(lambda f=feeds: dyn.run(None, f), **runs)
            o, _ = median_ms(lambda f=feeds: ort.run(None, f), **runs)
        except Exception as exc:  # noqa: BLE001
            row += ["-", "-", "-"]
            notes.append(f"batch {batch}: " + short_error(exc, 50))
            continue
        ratio = d / o
        row += [fmt_ms(d), fmt_ms(o), f"{ratio:.2f}" + ("" if limit is None else f" {verdict(ratio <= limit)}")]
    return row + [("yes" if same else "NO") + ("; " + "; ".join(notes) if notes else "")]


def _compiled_kernels_up(model: bytes, feeds: dict) -> None:
    """One run of a session that waits for the compiled kernels: numba started, and the
    model's loops loaded from numba's cache (or compiled), for the default sessions measured."""
    import dynashape
    dynashape.InferenceSession(model, wait_for_compiled_kernels=True).run(None, feeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated substrings of model names to keep")
    parser.add_argument("--quick", action="store_true", help="fewer runs per measurement")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of both engines (benchmarks/_env.py)")
    args = parser.parse_args()
    header("classic ML models: dynashape vs ONNX Runtime (issue 25)")
    runs = dict(warmup=1, min_runs=3, max_runs=20, target_s=0.1) if args.quick else \
        dict(warmup=2, min_runs=5, max_runs=200, target_s=0.3)
    keep = [k.strip().lower() for k in args.models.split(",") if k.strip()]
    try:
        cases = _cases()
    except ImportError as exc:
        print(f"scikit-learn is not installed ({exc}): pip install -e '.[ml]'")
        return
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            if keep and not any(k in case.name.lower() or k == case.kind for k in keep):
                continue
            rows.append(_measure(case, runs))
            print(f"  {case.name}: measured", flush=True)
    print()
    heads = ["model", "kind"] + [f"{h} b{b}" for b in BATCHES for h in ("dyn ms", "ORT ms", "dyn/ORT")] + \
        ["same as ORT"]
    print_table(heads, rows, align="ll" + "r" * 6 + "l")
    print("targets (dyn/ORT): " + "; ".join(f"{k}: b1 <= {a}" + (f", b1000 <= {b}" if b else "")
                                            for k, (a, b) in TARGETS.items()))


if __name__ == "__main__":
    main()
