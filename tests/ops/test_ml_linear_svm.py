"""Tests of LinearClassifier (ops_builtin/ml_linear.py), SVMClassifier and SVMRegressor
(ops_builtin/ml_svm.py): one-node models with hand-computed values, and onnxruntime on one
session through batch sizes 3, 1, 0 and 5 (a symbolic N), both allocators; where
onnxruntime departs from the spec (a binary PROBIT, SVMRegressor's post_transform), the
spec's values by hand.
"""
from __future__ import annotations

import dynashape
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.testing import run_node
from onnx import TensorProto, helper

from tests.conftest import assert_runs_match, ort_predates, spec_versions

ML = "ai.onnx.ml"
S, I64, I32, F32, F64 = TensorProto.STRING, TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT, TensorProto.DOUBLE
POSTS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]
NP = {F32: np.float32, F64: np.float64, I64: np.int64, I32: np.int32}
rng = np.random.default_rng(0)


def model(op, attrs, x_type=F32, dims=("N", "C"), label_type=I64, n_outputs=2):
    outs = [("y", label_type), ("z", F32)] if n_outputs == 2 else [("y", F32)]
    graph = helper.make_graph([helper.make_node(op, ["x"], [o for o, _ in outs], domain=ML, **attrs)], "g",
                              [helper.make_tensor_value_info("x", x_type, list(dims))],
                              [helper.make_tensor_value_info(o, t, None) for o, t in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])


def ml(op, x, attrs, n_outputs=2):
    return run_node(op, [x], attrs, opset=1, domain=ML, n_outputs=n_outputs)


def samples(n, c=3, dtype=np.float32, scale=1.5):
    x = rng.standard_normal((n, c)) * scale
    return x.round().astype(dtype) if np.dtype(dtype).kind == "i" else x.astype(dtype)


def batches(c=3, dtype=np.float32, scale=1.5):
    """The same session at batch 3, 1, 0 and 5 (symbolic N)."""
    return [{"x": samples(n, c, dtype, scale)} for n in (3, 1, 0, 5)]


def logistic(s):
    return 1 / (1 + np.exp(-s))


def probit(p):
    """sqrt(2) erfinv(2 p - 1) with Winitzki's erfinv, as the ml ops compute it."""
    x = 2 * p - 1
    with np.errstate(invalid="ignore", divide="ignore"):      # (outside [0, 1]: NaN)
        log = np.log((1 - x) * (1 + x))
        a = 2 / (np.pi * 0.147) + 0.5 * log
        return np.sqrt(2) * np.sign(x) * np.sqrt(np.sqrt(a * a - log / 0.147) - a)


def softmax(s):
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def raises(kind, match, fn, *args):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        fn(*args)
    assert info.value.kind == kind, info.value.kind


@pytest.mark.parametrize("op", ["LinearClassifier", "SVMClassifier", "SVMRegressor"])
def test_every_spec_version_registered(op):
    have = sorted(o.since_version for o in get_registry().schemas(ML, op))
    assert have == spec_versions(op, ML)


# LinearClassifier ---------------------------------------------------------------------------

COEF3 = [-0.23, 0.34, 0.1, 0.68, -0.68, -0.2, 0.04, 0.5, -0.9]       # 3 classes x 3 features
ICPT3 = [-0.4, 0.43, 0.14]


def test_linear_classifier_scores_and_labels_by_hand():
    x = samples(6)
    w, b = np.array(COEF3).reshape(3, 3), np.array(ICPT3)
    s = x.astype(np.float64) @ w.T + b
    y, z = ml("LinearClassifier", x, {"coefficients": COEF3, "intercepts": ICPT3, "classlabels_ints": [7, 8, 9]})
    assert y.dtype == np.int64 and y.tolist() == [[7, 8, 9][k] for k in s.argmax(axis=1)]
    assert z.dtype == np.float32 and z.shape == (6, 3)
    np.testing.assert_allclose(z, s, rtol=1e-5, atol=1e-6)
    for post, want in (("SOFTMAX", softmax(s)), ("LOGISTIC", logistic(s))):
        _, z = ml("LinearClassifier", x, {"coefficients": COEF3, "intercepts": ICPT3, "classlabels_ints": [7, 8, 9],
                                          "post_transform": post})
        np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-6)
    y, _ = ml("LinearClassifier", x, {"coefficients": COEF3, "classlabels_strings": ["a", "b", "c"]})
    assert y.dtype == object and y.tolist() == [["a", "b", "c"][k] for k in (x.astype(np.float64) @ w.T).argmax(1)]


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("x_type", [F32, F64, I64, I32])
def test_linear_classifier_matches_ort(post, x_type):
    attrs = {"coefficients": COEF3, "intercepts": ICPT3, "classlabels_ints": [3, 1, 2], "post_transform": post}
    scale = 0.3 if post == "PROBIT" else 1.5      # (probit of scores in (0, 1))
    assert_runs_match(model("LinearClassifier", attrs, x_type), batches(3, NP[x_type], scale))
    attrs = dict(attrs, classlabels_strings=["x", "y", "z"])
    del attrs["classlabels_ints"]
    assert_runs_match(model("LinearClassifier", attrs, x_type, label_type=S), batches(3, NP[x_type], scale))


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [{"classlabels_ints": [0, 5]}, {"classlabels_strings": ["neg", "pos"]}])
def test_linear_classifier_binary_derives_two_scores_as_ort(post, labels):
    attrs = {"coefficients": [0.5, -1.0, 0.25], "intercepts": [0.1], "post_transform": post, **labels}
    m = model("LinearClassifier", attrs, label_type=S if "classlabels_strings" in labels else I64)
    if not (post == "LOGISTIC" and ort_predates((1, 32))):   # (the binary LOGISTIC scores of older onnxruntimes differ)
        assert_runs_match(m, batches())
    x = samples(7)
    s = x.astype(np.float64) @ [0.5, -1.0, 0.25] + 0.1
    y, z = ml("LinearClassifier", x, attrs)
    names = list(labels.values())[0]
    assert y.tolist() == [names[1] if v > 0 else names[0] for v in s]
    want = {"LOGISTIC": np.stack([logistic(-s), logistic(s)], 1)}.get(post, np.stack([1 - s, s], 1))
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-6)


def test_linear_classifier_binary_probit_follows_the_spec():
    # onnxruntime writes the N probits into the first N floats of Z [N, 2] and leaves the rest;
    # dynashape gives each row [-probit(s), probit(s)] (as [1 - s, s] for the other transforms)
    attrs = {"coefficients": [0.1, -0.2, 0.05], "intercepts": [0.5], "classlabels_ints": [0, 1],
             "post_transform": "PROBIT"}
    x = samples(5, scale=0.5)
    s = x.astype(np.float64) @ [0.1, -0.2, 0.05] + 0.5
    y, z = ml("LinearClassifier", x, attrs)
    assert y.tolist() == (s > 0).astype(int).tolist()
    np.testing.assert_allclose(z, np.stack([-probit(s), probit(s)], 1), rtol=1e-4, atol=1e-5)


def test_linear_classifier_one_sample_and_nan():
    attrs = {"coefficients": COEF3, "intercepts": ICPT3, "classlabels_ints": [3, 1, 2]}
    m = model("LinearClassifier", attrs, dims=("C",))
    assert_runs_match(m, [{"x": np.array([0.5, -1.0, 2.0], np.float32)}, {"x": np.array([3.0, 0.0, 1.0], np.float32)}])
    y, z = ml("LinearClassifier", np.array([1.0, 2.0, 3.0], np.float32), attrs)
    assert y.shape == (1,) and z.shape == (1, 3)
    # a NaN score: onnxruntime's loop keeps the first class when it is NaN, skips a later NaN
    x = np.array([[np.nan, 0, 0], [1, 0, 0]], np.float32)
    y, _ = ml("LinearClassifier", x, {"coefficients": [1.0, 0, 0, 0, 0, 0, 0, 0, 0], "intercepts": [0.0, 0.5, -1.0],
                                      "classlabels_ints": [3, 1, 2]})
    assert y.tolist() == [3, 3]
    y, _ = ml("LinearClassifier", x, {"coefficients": [0.0, 0, 0, 1, 0, 0, 0, 0, 0], "intercepts": [0.0, 0.5, -1.0],
                                      "classlabels_ints": [3, 1, 2]})
    assert y.tolist() == [3, 1]


def test_linear_classifier_softmax_zero_as_ort():
    attrs = {"coefficients": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], "intercepts": [0.0, 0.0], "classlabels_ints": [0, 1],
             "post_transform": "SOFTMAX_ZERO"}
    m = model("LinearClassifier", attrs, dims=("N", 3))
    x = np.array([[0.3, 0.6, 9.0], [0.0, 0.0, 1.0], [0.0, -2.0, 1.0]], np.float32)
    assert_runs_match(m, [{"x": x}, {"x": x[2:]}])
    _, z = ml("LinearClassifier", x, attrs)
    np.testing.assert_allclose(z[0], softmax(np.array([[0.3, 0.6]]))[0], rtol=1e-6)
    assert np.isnan(z[1]).all() and z[2].tolist() == [0.0, 1.0]    # a row of zeros: 0/0, as onnxruntime


def test_linear_classifier_without_intercepts_has_one_row_per_label():
    # (intercepts are optional in the spec: zeros, a row per label; onnxruntime requires them)
    x = samples(4)
    _, z = ml("LinearClassifier", x, {"coefficients": COEF3, "classlabels_ints": [1, 2, 3]})
    np.testing.assert_allclose(z, x @ np.array(COEF3, np.float32).reshape(3, 3).T, rtol=1e-6)


def test_linear_classifier_errors():
    x = samples(2)
    base = {"coefficients": COEF3, "intercepts": ICPT3, "classlabels_ints": [1, 2, 3]}
    lc = lambda attrs, x=x: ml("LinearClassifier", x, attrs)  # noqa: E731
    raises("MissingAttribute", "exactly one of classlabels_ints and classlabels_strings must be given.*neither",
           lc, {"coefficients": COEF3, "intercepts": ICPT3})
    raises("InvalidAttribute", "got classlabels_ints, classlabels_strings", lc,
           dict(base, classlabels_strings=["a", "b", "c"]))
    raises("MissingAttribute", "'coefficients' is required", lc, {"intercepts": ICPT3, "classlabels_ints": [1, 2, 3]})
    raises("InvalidAttribute", "4 class labels for 3 coefficient rows", lc, dict(base, classlabels_ints=[1, 2, 3, 4]))
    raises("InvalidAttribute", "1 class labels for 1 coefficient rows", lc,
           {"coefficients": [1.0, 2.0, 3.0], "intercepts": [0.0], "classlabels_ints": [1]})
    raises("InvalidAttribute", "coefficients has 8 values: expected classes", lc, dict(base, coefficients=COEF3[:8]))
    raises("FeatureCountMismatch", "coefficients has 9 values, X has 4 features", lc, base, samples(2, 4))
    raises("InvalidAttribute", "post_transform 'SIGMOID' is not one of", lc, dict(base, post_transform="SIGMOID"))
    raises("InvalidRank", "must be \\[N, C\\] or \\[C\\]", lc, base, np.zeros((1, 2, 3), np.float32))
    raises("InvalidDtype", "X has dtype bool", lc, base, np.zeros((1, 3), bool))
    sess = dynashape.InferenceSession(model("LinearClassifier", base))         # a symbolic C: guarded
    assert sess.run(None, {"x": samples(2)})[1].shape == (2, 3)
    with pytest.raises(dynashape.ShapeInferenceError, match="X has 4 features") as info:
        sess.run(None, {"x": samples(2, 4)})
    assert info.value.kind == "FeatureCountMismatch"


def test_linear_classifier_more_coefficients_than_features_reads_the_first_as_ort():
    """9 coefficients, 3 classes, X of 2 features: the first 6 are the [3, 2] weights (onnxruntime
    reads them so; its example logreg_iris.onnx relies on it), with a RuntimeWarning."""
    base = {"coefficients": COEF3, "intercepts": ICPT3, "classlabels_ints": [1, 2, 3]}
    x = samples(4, 2)
    with pytest.warns(RuntimeWarning, match="coefficients has 9 values for 3 class.es. of 2 features; the first 6"):
        y, z = ml("LinearClassifier", x, base)
    scores = x @ np.asarray(COEF3[:6], np.float32).reshape(3, 2).T + np.asarray(ICPT3, np.float32)
    np.testing.assert_allclose(z, scores, rtol=1e-6, atol=1e-6)
    assert y.tolist() == (scores.argmax(axis=1) + 1).tolist()
    with pytest.warns(RuntimeWarning):                  # onnxruntime on a fixed C, batches 4, 1 and 0
        assert_runs_match(model("LinearClassifier", base, dims=("N", 2)), [{"x": x}, {"x": x[:1]}, {"x": x[:0]}])


# SVMClassifier ------------------------------------------------------------------------------

def svc_attrs(k=3, c=3, kernel="RBF", params=(0.3, 0.5, 2.0), proba=False, seed=1, labels=None, post="NONE"):
    """A libsvm-mode SVMClassifier of k classes (1 to 3 support vectors each)."""
    g = np.random.default_rng(seed)
    per_class = g.integers(1, 4, k).tolist()
    v, pairs = sum(per_class), k * (k - 1) // 2
    attrs = {"kernel_type": kernel, "kernel_params": list(params), "vectors_per_class": per_class,
             "support_vectors": g.standard_normal(v * c).round(3).tolist(),
             "coefficients": g.standard_normal((k - 1) * v).round(3).tolist(),
             "rho": g.standard_normal(pairs).round(3).tolist(), "post_transform": post}
    attrs.update(labels or {"classlabels_ints": list(range(10, 10 + k))})
    if proba:
        attrs.update(prob_a=(-g.uniform(0.5, 3, pairs)).round(3).tolist(),
                     prob_b=g.standard_normal(pairs).round(3).tolist())
    return attrs


def kernel_by_hand(x, sv, kernel, gamma, coef0, degree):
    if kernel == "RBF":
        return np.exp(-gamma * ((x[:, None, :] - sv[None]) ** 2).sum(-1))
    dot = x @ sv.T
    return {"LINEAR": dot, "POLY": (gamma * dot + coef0) ** degree, "SIGMOID": np.tanh(gamma * dot + coef0)}[kernel]


def decisions_by_hand(x, attrs):
    """Each pair's decision value, libsvm's sum, one pair at a time."""
    per_class = attrs["vectors_per_class"]
    k, v = len(per_class), sum(per_class)
    sv = np.array(attrs["support_vectors"]).reshape(v, -1)
    coef = np.array(attrs["coefficients"]).reshape(k - 1, v)
    kern = kernel_by_hand(x.astype(np.float64), sv, attrs["kernel_type"], *attrs["kernel_params"])
    start = np.concatenate([[0], np.cumsum(per_class)])
    out, p = [], 0
    for i in range(k):
        for j in range(i + 1, k):
            a, b = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
            out.append(kern[:, a] @ coef[j - 1, a] + kern[:, b] @ coef[i, b] + attrs["rho"][p])
            p += 1
    return np.stack(out, 1)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_classifier_decision_values_and_votes_by_hand(kernel):
    attrs = svc_attrs(k=4, kernel=kernel)
    x = samples(9)
    d = decisions_by_hand(x, attrs)
    y, z = ml("SVMClassifier", x, attrs)
    assert z.shape == (9, 6) and z.dtype == np.float32
    np.testing.assert_allclose(z, d, rtol=1e-5, atol=1e-5)
    votes = np.zeros((9, 4), int)
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    for p, (first, second) in enumerate(pairs):
        votes[np.arange(9), np.where(d[:, p] > 0, first, second)] += 1
    assert y.tolist() == (10 + votes.argmax(1)).tolist()


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("proba", [False, True])
def test_svm_classifier_matches_ort(kernel, k, proba):
    attrs = svc_attrs(k=k, kernel=kernel, proba=proba, seed=k)
    assert_runs_match(model("SVMClassifier", attrs), batches(), rtol=1e-4, atol=1e-5)
    strings = svc_attrs(k=k, kernel=kernel, proba=proba, seed=k, labels={"classlabels_strings": list("pqrs"[:k])})
    assert_runs_match(model("SVMClassifier", strings, x_type=F64, label_type=S), batches(dtype=np.float64),
                      rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("proba", [False, True])
def test_svm_classifier_post_transforms_match_ort(post, k, proba):
    if post == "LOGISTIC" and k == 2 and not proba and ort_predates((1, 32)):
        pytest.skip("the binary LOGISTIC scores of onnxruntime < 1.32 differ (the case is checked by hand below)")
    attrs = svc_attrs(k=k, proba=proba, post=post, seed=7)
    assert_runs_match(model("SVMClassifier", attrs, x_type=I64), batches(dtype=np.int64), rtol=1e-4, atol=1e-5)


def test_svm_classifier_binary_scores():
    attrs = svc_attrs(k=2, seed=3)
    x = samples(6)
    d = decisions_by_hand(x, attrs)[:, 0]
    for post, want in (("NONE", [-d, d]), ("LOGISTIC", [logistic(-d), logistic(d)]), ("SOFTMAX", [1 - d, d]),
                       ("PROBIT", [probit(d), -probit(d)])):     # (PROBIT: onnxruntime writes the first only)
        y, z = ml("SVMClassifier", x, dict(attrs, post_transform=post))
        assert y.tolist() == np.where(d > 0, 10, 11).tolist()
        np.testing.assert_allclose(z, np.stack(want, 1), rtol=1e-4, atol=1e-5)


def test_svm_classifier_probabilities_by_hand():
    # two classes: the coupling of one pair gives Platt's probability itself
    attrs = svc_attrs(k=2, seed=4, proba=True)
    x = samples(5)
    d = decisions_by_hand(x, attrs)[:, 0]
    p = np.clip(1 - logistic(d * attrs["prob_a"][0] + attrs["prob_b"][0]), 1e-7, 1 - 1e-7)
    y, z = ml("SVMClassifier", x, attrs)
    np.testing.assert_allclose(z, np.stack([p, 1 - p], 1), rtol=1e-3, atol=1e-3)   # (to the coupling's eps)
    assert y.tolist() == np.where(d > 0, 10, 11).tolist()                          # labels: the votes
    _, z = ml("SVMClassifier", x, svc_attrs(k=4, seed=4, proba=True))
    np.testing.assert_allclose(z.sum(1), 1, rtol=1e-5)


@pytest.mark.parametrize("k,positive,proba", [(3, False, False), (2, False, False), (2, True, False),
                                              (2, False, True), (1, False, False)])
def test_svm_classifier_linear_mode_matches_ort(k, positive, proba):
    coef = rng.standard_normal(k * 3).round(3)
    attrs = {"coefficients": (np.abs(coef) if positive else coef).tolist(), "rho": [0.25],
             "kernel_params": [0.0, 0.0, 0.0], "classlabels_ints": list(range(5, 5 + k))}
    if proba:
        attrs.update(prob_a=[1.0], prob_b=[0.0])
    for post in ("NONE", "LOGISTIC", "SOFTMAX"):
        assert_runs_match(model("SVMClassifier", dict(attrs, post_transform=post)), batches(), rtol=1e-5, atol=1e-6)
    x = samples(6)
    s = x.astype(np.float64) @ np.array(attrs["coefficients"]).reshape(k, 3).T + 0.25
    _, z = ml("SVMClassifier", x, attrs)
    np.testing.assert_allclose(z, s, rtol=1e-5, atol=1e-6)


def test_svm_classifier_errors():
    x = samples(2)
    base = svc_attrs(k=3)
    svc = lambda attrs, x=x: ml("SVMClassifier", x, attrs)  # noqa: E731
    raises("MissingAttribute", "neither", svc, {k: v for k, v in base.items() if k != "classlabels_ints"})
    raises("MissingAttribute", "'coefficients' is required", svc, dict(base, coefficients=[]))
    raises("InvalidAttribute", "kernel_type 'CUBIC' is not one of", svc, dict(base, kernel_type="CUBIC"))
    raises("InvalidAttribute", "kernel_params has 2 values, expected 3", svc, dict(base, kernel_params=[0.1, 0.0]))
    raises("InvalidAttribute", "post_transform 'X' is not one of", svc, dict(base, post_transform="X"))
    raises("InvalidAttribute", "vectors_per_class has 2 counts for 3 classes", svc,
           dict(base, vectors_per_class=base["vectors_per_class"][:2]))
    raises("InvalidAttribute", "negative count", svc, dict(base, vectors_per_class=[1, -1, 2]))
    raises("InvalidAttribute", "coefficients has .* values, expected \\(classes - 1\\) x support vectors", svc,
           dict(base, coefficients=base["coefficients"][1:]))
    raises("InvalidAttribute", "rho has 2 values, expected 3", svc, dict(base, rho=[0.0, 0.0]))
    raises("InvalidAttribute", "prob_a has 3 values and prob_b 2", svc, dict(base, prob_a=[1.0] * 3, prob_b=[1.0] * 2))
    raises("InvalidAttribute", "expected one per pair of classes \\(3\\)", svc, dict(base, prob_a=[1.0], prob_b=[1.0]))
    raises("InvalidAttribute", "support_vectors has .* values: expected", svc,
           dict(base, support_vectors=base["support_vectors"][1:]))
    raises("FeatureCountMismatch", "X has 2 features", svc, base, samples(2, 2))
    raises("InvalidAttribute", "at least 2 classes", svc,
           {"vectors_per_class": [2], "support_vectors": [0.0] * 6, "coefficients": [1.0, 1.0],
            "classlabels_ints": [1]})
    linear = {"coefficients": [1.0] * 6, "classlabels_ints": [1, 2]}
    raises("InvalidAttribute", "coefficients has 5 values: expected classes \\(2\\) x features", svc,
           dict(linear, coefficients=[1.0] * 5))
    raises("InvalidAttribute", "but no support vector is counted", svc, dict(linear, support_vectors=[1.0]))
    raises("InvalidAttribute", "rho has 2 values, expected 1", svc, dict(linear, rho=[1.0, 2.0]))
    raises("InvalidRank", "must be \\[N, C\\] or \\[C\\]", svc, base, np.zeros((1, 1, 3), np.float32))
    sess = dynashape.InferenceSession(model("SVMClassifier", base))         # a symbolic C: guarded
    assert sess.run(None, {"x": samples(2)})[1].shape == (2, 3)
    with pytest.raises(dynashape.ShapeInferenceError, match="X has 4 features") as info:
        sess.run(None, {"x": samples(2, 4)})
    assert info.value.kind == "FeatureCountMismatch"


# SVMRegressor -------------------------------------------------------------------------------

def svr_attrs(v=4, c=3, kernel="RBF", params=(0.3, 0.5, 2.0), seed=2, one_class=0):
    g = np.random.default_rng(seed)
    attrs = {"kernel_type": kernel, "kernel_params": list(params), "n_supports": v, "rho": [0.3],
             "coefficients": g.standard_normal(v if v else c).round(3).tolist(), "one_class": one_class}
    if v:
        attrs["support_vectors"] = g.standard_normal(v * c).round(3).tolist()
    return attrs


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_regressor_by_hand_and_ort(kernel):
    attrs = svr_attrs(kernel=kernel)
    x = samples(7)
    sv = np.array(attrs["support_vectors"]).reshape(4, 3)
    want = kernel_by_hand(x.astype(np.float64), sv, kernel, *attrs["kernel_params"]) @ attrs["coefficients"] + 0.3
    (y,) = ml("SVMRegressor", x, attrs, 1)
    assert y.shape == (7, 1) and y.dtype == np.float32
    np.testing.assert_allclose(y[:, 0], want, rtol=1e-5, atol=1e-5)
    assert_runs_match(model("SVMRegressor", attrs, n_outputs=1), batches(), rtol=1e-5, atol=1e-5)
    one = dict(attrs, one_class=1)
    assert_runs_match(model("SVMRegressor", one, n_outputs=1), batches())
    assert ml("SVMRegressor", x, one, 1)[0][:, 0].tolist() == np.where(want > 0, 1, -1).tolist()


def test_svm_regressor_linear_mode_and_other_input_types():
    attrs = svr_attrs(v=0)
    assert_runs_match(model("SVMRegressor", attrs, n_outputs=1), batches())
    x = samples(5, dtype=np.int64)
    (y,) = ml("SVMRegressor", x, attrs, 1)     # (onnxruntime's SVMRegressor takes float only)
    np.testing.assert_allclose(y[:, 0], x @ attrs["coefficients"] + 0.3, rtol=1e-5)
    (y,) = ml("SVMRegressor", x[0].astype(np.float64), attrs, 1)
    assert y.shape == (1, 1)


def test_svm_regressor_post_transform_follows_the_spec():
    # onnxruntime applies no post_transform; the spec: the score's transform
    attrs = svr_attrs()
    x = samples(6)
    (raw,) = ml("SVMRegressor", x, attrs, 1)
    (y,) = ml("SVMRegressor", x, dict(attrs, post_transform="LOGISTIC"), 1)
    np.testing.assert_allclose(y, logistic(raw.astype(np.float64)), rtol=1e-6)
    (y,) = ml("SVMRegressor", x, dict(attrs, post_transform="SOFTMAX"), 1)
    assert y.tolist() == [[1.0]] * 6


def test_svm_regressor_errors():
    x = samples(2)
    base = svr_attrs()
    svr = lambda attrs, x=x: ml("SVMRegressor", x, attrs, 1)  # noqa: E731
    raises("MissingAttribute", "'coefficients' is required", svr, dict(base, coefficients=[]))
    raises("InvalidAttribute", "n_supports -1 must be >= 0", svr, dict(base, n_supports=-1))
    raises("InvalidAttribute", "coefficients has 3 values, expected one per support vector \\(4\\)", svr,
           dict(base, coefficients=base["coefficients"][:3]))
    raises("InvalidAttribute", "support_vectors has 11 values: expected 4 support vectors", svr,
           dict(base, support_vectors=base["support_vectors"][:11]))
    raises("FeatureCountMismatch", "X has 2 features and there are 4 support vectors", svr, base, samples(2, 2))
    raises("FeatureCountMismatch", "coefficients has 3 values, X has 2 features", svr, svr_attrs(v=0), samples(2, 2))
    raises("InvalidAttribute", "rho has 2 values, expected 1", svr, dict(base, rho=[0.0, 1.0]))
    raises("InvalidAttribute", "kernel_type 'rbf' is not one of", svr, dict(base, kernel_type="rbf"))
    raises("InvalidAttribute", "post_transform 'NOPE'", svr, dict(base, post_transform="NOPE"))
    sess = dynashape.InferenceSession(model("SVMRegressor", base, n_outputs=1))
    with pytest.raises(dynashape.ShapeInferenceError, match="X has 5 features") as info:
        sess.run(None, {"x": samples(2, 5)})
    assert info.value.kind == "FeatureCountMismatch"
