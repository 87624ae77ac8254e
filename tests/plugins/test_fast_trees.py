"""The compiled tree ensembles (``dynashape.ops_builtin.fast.trees``): TreeEnsembleClassifier and
TreeEnsembleRegressor with the walk and the weights in one compiled pass equal the numpy
kernel (labels exactly; scores within float32 rounding, rtol 1e-6 and atol 2e-7: the same
sums in the same order, the post transforms' exp / log LLVM's instead of numpy's, an ulp apart,
which onnxruntime's ``1 - logistic`` turns into an absolute error of one), serial and threaded,
and onnxruntime,
on random forests of every mode, aggregate and post transform through one session (N
changing, 0 included). Skipped where numba is not installed or DYNASHAPE_FAST=0.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import dynashape
from tests.conftest import numba_session, ort_predates, ort_run

pytest.importorskip("numba")
if not __import__("dynashape.ops_builtin.fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)

from dynashape.ops_builtin.fast import trees as fast_trees  # noqa: E402  (after the skips: needs numba)

ML = "ai.onnx.ml"
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int64: TensorProto.INT64}


def forest(rng, n_trees: int, features: int, depth: int = 4, modes=MODES, missing_rate: float = 0.3) -> tuple:
    """(nodes_* attributes, leaves as (tree, node)) of random trees: thresholds and features
    drawn from small sets so that EQ / NEQ and NaN (missing) branches are taken; each branch's
    mode drawn from ``modes``, NaN sent true at a ``missing_rate`` of the nodes."""
    cols = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                            "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    leaves = []
    for t in range(n_trees):
        todo, next_id = [(0, 0)], 1
        while todo:
            nid, level = todo.pop(0)
            split = level < depth and rng.random() < 0.8
            cols["nodes_treeids"].append(t)
            cols["nodes_nodeids"].append(nid)
            cols["nodes_featureids"].append(int(rng.integers(0, features)) if split else 0)
            cols["nodes_modes"].append(str(rng.choice(modes)) if split else "LEAF")
            # (EQ thresholds off 1, 2, ...: onnxruntime turns those into bit sets, test_ml_trees.py)
            mode = cols["nodes_modes"][-1]
            cols["nodes_values"].append(float(rng.choice([-1.0, 0.0, 0.5] if mode == "BRANCH_EQ" else
                                                         [-1.0, 0.0, 0.5, 1.0, 2.0])) if split else 0.0)
            cols["nodes_truenodeids"].append(next_id if split else 0)
            cols["nodes_falsenodeids"].append(next_id + 1 if split else 0)
            cols["nodes_missing_value_tracks_true"].append(int(rng.random() < missing_rate))
            if split:
                todo += [(next_id, level + 1), (next_id + 1, level + 1)]
                next_id += 2
            else:
                leaves.append((t, nid))
    return cols, leaves


def weights(rng, prefix: str, leaves, outputs: int, one_column: bool = False) -> dict:
    pairs = [(t, n, 0 if one_column else int(rng.integers(0, outputs)), float(np.float32(rng.normal())))
             for t, n in leaves for _ in range(int(rng.choice([0, 1, 1, 2])) or 1)]
    return {f"{prefix}_treeids": [p[0] for p in pairs], f"{prefix}_nodeids": [p[1] for p in pairs],
            f"{prefix}_ids": [p[2] for p in pairs], f"{prefix}_weights": [p[3] for p in pairs]}


def model(op: str, attrs: dict, dtype=np.float32, features: int = 4):
    label = TensorProto.STRING if "classlabels_strings" in attrs else TensorProto.INT64
    outs = [("y", TensorProto.FLOAT)] if op == "TreeEnsembleRegressor" else [("label", label), ("z", TensorProto.FLOAT)]
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], [o for o, _ in outs], domain=ML, **attrs)], "g",
        [helper.make_tensor_value_info("x", ELEM[dtype], ["N", features])],
        [helper.make_tensor_value_info(o, t, None) for o, t in outs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    m.ir_version = 8
    return m.SerializeToString()


def inputs(rng, n: int, dtype=np.float32, features: int = 4) -> np.ndarray:
    x = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, np.nan], (n, features))
    return np.nan_to_num(x, nan=1).astype(dtype) if dtype == np.int64 else x.astype(dtype)


def _kernel_plugins(sess) -> set:
    """The plugins whose kernels run the session's tree ensembles."""
    return {st.kernel.plugin for st in sess.program.steps if st.kernel.op_type.startswith("TreeEnsemble")}


def assert_same_as_numpy(data: bytes, feeds: list, ort_check: bool = True) -> None:
    """Compiled (serial, and threaded with validation on) == numpy (labels exactly, scores
    within float32 rounding, NaN where numpy has NaN); == onnxruntime."""
    fast = numba_session(data)
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 2
    threaded = numba_session(data, so, validate_memory=True)
    plain = numba_session(data, compiled_kernels=False)
    assert _kernel_plugins(fast) == {"fast"} and "fast" not in _kernel_plugins(plain)
    for f in feeds:
        want = plain.run(None, f)
        for sess in (fast, threaded):
            got = sess.run(None, f)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                if w.dtype == object or w.dtype.kind in "iu":
                    assert g.tolist() == w.tolist()
                else:
                    np.testing.assert_allclose(g, w, rtol=1e-6, atol=2e-7)
        if ort_check:
            for g, w in zip(want, ort_run(data, f)):
                if w.dtype.kind in "OUi":
                    assert g.tolist() == w.tolist()
                else:   # (a two-class score onnxruntime leaves unwritten is NaN here)
                    w = np.where(np.isnan(g), np.nan, w) if g.shape[1:] == (2,) else w
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_regressor_equals_numpy_and_ort(aggregate, targets, dtype):
    rng = np.random.default_rng(targets * 7 + len(aggregate))
    cols, leaves = forest(rng, 12, 4)
    attrs = dict(cols, **weights(rng, "target", leaves, targets), n_targets=targets, aggregate_function=aggregate,
                 base_values=[0.5, -1.0, 2.0][:targets], post_transform="NONE" if targets == 1 else "LOGISTIC")
    assert_same_as_numpy(model("TreeEnsembleRegressor", attrs, dtype),
                         [{"x": inputs(rng, n, dtype)} for n in (9, 1, 0, 40)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN"])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_mode_summed_ensemble_takes_the_plain_walk(mode, aggregate, targets, dtype, monkeypatch):
    """The exporters' case (SUM or AVERAGE, one mode; NaN sent true at some nodes, as
    LightGBM's and HistGradientBoosting's) walks in loops.forest_sums, one target or several:
    equal to the numpy kernel and onnxruntime, threaded too; MIN takes the general pass."""
    rng = np.random.default_rng(len(mode) + len(aggregate) + targets)
    cols, leaves = forest(rng, 12, 4, modes=[mode])
    attrs = dict(cols, **weights(rng, "target", leaves, targets, one_column=targets == 1), n_targets=targets,
                 aggregate_function=aggregate, base_values=[0.5, -1.0, 2.0][:targets])
    calls = {"sums": 0, "scores": 0}
    for name, key in (("forest_sums", "sums"), ("forest_scores", "scores")):
        loop = getattr(fast_trees.loops, name)
        monkeypatch.setattr(loop, "run", lambda *a, _run=loop.run, _key=key: calls.__setitem__(_key, calls[_key] + 1)
                            or _run(*a))
    assert_same_as_numpy(model("TreeEnsembleRegressor", attrs, dtype),
                         [{"x": inputs(rng, n, dtype)} for n in (9, 1, 0, 40, 6000)])
    summed = aggregate != "MIN"
    assert (calls["sums"] > 0, calls["scores"] > 0) == (summed, not summed)
    if summed:
        assert fast_trees.loops.forest_sums.most_parts > 1               # (6000 samples x 12 trees, 2 threads)


@pytest.mark.parametrize("case", ["binary", "binary-positive", "multiclass", "strings"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_classifier_equals_numpy_and_ort(case, dtype):
    if case == "binary-positive" and ort_predates((1, 26)):
        pytest.skip("onnxruntime < 1.26 computes the all-positive binary LOGISTIC scores another way "
                    "(tests/ops/test_ml_trees.py states them)")
    rng = np.random.default_rng(len(case))
    cols, leaves = forest(rng, 10, 4)
    classes = 2 if case.startswith("binary") else 3
    w = weights(rng, "class", leaves, classes, one_column=case.startswith("binary"))
    if case == "binary-positive":
        w["class_weights"] = [abs(v) / 10 for v in w["class_weights"]]
    labels = ({"classlabels_strings": ["a", "b", "c"]} if case == "strings"
              else {"classlabels_int64s": [3, 5, 8][:classes]})
    attrs = dict(cols, **w, **labels, post_transform="LOGISTIC" if case.startswith("binary") else "SOFTMAX",
                 **({"base_values": [0.1, 0.2, 0.3]} if case == "multiclass" else {}))
    assert_same_as_numpy(model("TreeEnsembleClassifier", attrs, dtype),
                         [{"x": inputs(rng, n, dtype)} for n in (9, 1, 0, 40)])


def test_threaded_pass_over_many_samples():
    """Enough (sample, tree) walks for the threaded pass: the pass cut over two threads runs and agrees."""
    rng = np.random.default_rng(3)
    cols, leaves = forest(rng, 40, 4, depth=6)
    attrs = dict(cols, **weights(rng, "class", leaves, 4), classlabels_int64s=[0, 1, 2, 3])
    data = model("TreeEnsembleClassifier", attrs)
    x = inputs(rng, 2000)
    assert x.shape[0] * 40 >= fast_trees._THREADED_WALKS
    assert_same_as_numpy(data, [{"x": x}, {"x": x[:3]}])
    assert fast_trees.loops.forest_scores.most_parts > 1


def test_sklearn_forest_equals_numpy():
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.ensemble import GradientBoostingClassifier

    from tests.ml.common import data

    x, y = data(n=200, classes=3)
    m = GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(x, y)
    onx = to_onnx(m, x[:1], options={id(m): {"zipmap": False}}).SerializeToString()
    assert_same_as_numpy(onx, [{"X": x}, {"X": x[:5]}, {"X": x[:0]}])
    np.testing.assert_array_equal(numba_session(onx).run(None, {"X": x})[0], m.predict(x))
