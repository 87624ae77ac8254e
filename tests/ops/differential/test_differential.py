"""The differential property test of every op (issue 24, item 2).

For each registered op that has a recipe (recipes.py) and each of its registered versions,
hypothesis draws nodes (attributes, ranks, dims with 0, 1, primes and sizes that do not
divide, out-of-range axes and other invalid inputs) and :func:`dynashape.differential.compare_op`
runs each three ways: a session over the node with a ``dim_param`` on every axis (the symbolic
rule bound to the feeds), per node on the concrete sizes (the rule, then the kernel), and ONNX
Runtime where it implements the op at that opset. All must accept the same inputs with equal
shapes and values, and dynashape must refuse with the op's named error.

Profiles: CI draws :data:`CI_EXAMPLES` per op version, derandomized (the same draws every
run). A long run by hand::

    DYNASHAPE_DIFFERENTIAL_EXAMPLES=200 DYNASHAPE_DIFFERENTIAL_SEED=1 \\
        python -m pytest -q -n 2 tests/ops/differential -p no:randomly

(``DYNASHAPE_DIFFERENTIAL_EXAMPLES`` per op version; the seed is printed in the warnings
summary when not given). Where ONNX Runtime departs from the spec, :data:`DEVIATIONS` names
the departure (docs/CONFORMANCE.md lists them; dynashape keeps to the spec).
"""
from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import dynashape
import numpy as np
import pytest
from dynashape.differential import Outcome, compare_op, named_error
from dynashape.registry import get_registry
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.conftest import ort_predates
from tests.ops.differential.recipes import RECIPES, not_drawn_reason

ort = pytest.importorskip("onnxruntime")

#: the deviations below are reviewed against onnxruntime >= 1.32; with an older one (tox -e
#: lowest) the session and the per-node run are still compared with each other
REFERENCE = None if ort_predates((1, 32)) else "onnxruntime"

CI_EXAMPLES = 6
_N_ENV = os.environ.get("DYNASHAPE_DIFFERENTIAL_EXAMPLES")
_SEED_ENV = os.environ.get("DYNASHAPE_DIFFERENTIAL_SEED")
SEED: Optional[int] = int(_SEED_ENV) if _SEED_ENV else (random.SystemRandom().randrange(2**32) if _N_ENV else None)
_COMMON = dict(deadline=None, database=None, print_blob=False,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                      HealthCheck.large_base_example])
PROFILE = settings(max_examples=int(_N_ENV) if _N_ENV else CI_EXAMPLES, derandomize=SEED is None, **_COMMON)
if SEED is not None:
    warnings.warn(f"dynashape differential: DYNASHAPE_DIFFERENTIAL_SEED={SEED} "
                  f"DYNASHAPE_DIFFERENTIAL_EXAMPLES={PROFILE.max_examples}", UserWarning, stacklevel=1)

def _has_empty(ex) -> bool:
    return any(x is not None and 0 in np.shape(x) for x in ex.inputs)


def _constant_slice(ex) -> bool:
    """MeanVarianceNormalization over a slice whose variance is 0."""
    x = np.asarray(ex.inputs[0], np.float64)
    axes = tuple(a % x.ndim for a in ex.attrs.get("axes", [0, 2, 3]))
    return x.size > 0 and bool((x.var(axis=axes) == 0).any())


def _window_in_padding(ex) -> bool:
    """A pool (explicit pads) with a window none of whose taps falls on the input."""
    x, kernel = np.shape(ex.inputs[0]), ex.attrs["kernel_shape"]
    n = len(kernel)
    pads = ex.attrs.get("pads", [0] * 2 * n)
    strides, dil = ex.attrs.get("strides", [1] * n), ex.attrs.get("dilations", [1] * n)
    for i in range(n):
        size, span = x[2 + i], x[2 + i] + pads[i] + pads[n + i] - (kernel[i] - 1) * dil[i] - 1
        for w in range(max(0, span // strides[i] + 1)):
            taps = [w * strides[i] - pads[i] + t * dil[i] for t in range(kernel[i])]
            if not any(0 <= t < size for t in taps):
                return True
    return False


def _short_window_axis(ex) -> bool:
    """A Conv or pool (explicit pads) with an axis where the padded input is shorter than
    the kernel's extent: there the spec's floor((span) / stride) + 1 and onnxruntime's
    1 + trunc(span / stride) count differently."""
    x = np.shape(ex.inputs[0])
    kernel = ex.attrs.get("kernel_shape") or list(np.shape(ex.inputs[1])[2:])
    n = len(kernel)
    pads = ex.attrs.get("pads", [0] * 2 * n)
    dil = ex.attrs.get("dilations", [1] * n)
    if ex.attrs.get("auto_pad", "NOTSET") == "VALID":
        pads = [0] * 2 * n
    return ex.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and any(
        x[2 + i] + pads[i] + pads[n + i] < (kernel[i] - 1) * dil[i] + 1 for i in range(n))


@dataclass(frozen=True)
class Deviation:
    """Where onnxruntime departs from the ONNX spec (its text and its schemas' shape
    inference) and dynashape follows the spec: ``matches(example, problem)`` picks the
    problems it explains (docs/OPERATORS.md, "Where dynashape and onnxruntime differ")."""

    key: str
    ops: frozenset
    matches: Callable
    why: str


DEVIATIONS = [
    Deviation("concat-empty-input", frozenset({"Concat"}),
              lambda ex, p: _has_empty(ex) and "inputs must be equal on every axis" in p,
              "onnxruntime skips an empty input's dims; the spec wants every axis but the concat one equal"),
    Deviation("axis-unchecked-on-empty", frozenset({"CumSum", "CumProd", "Softmax", "LogSoftmax", "Hardmax"}),
              lambda ex, p: _has_empty(ex) and "is out of range" in p,
              "onnxruntime returns an empty input without checking the axis; the spec's axis range holds"),
    Deviation("prelu-slope-unidirectional", frozenset({"PRelu"}),
              lambda ex, p: "slope has rank" in p or "slope must be unidirectionally broadcastable" in p,
              "onnxruntime broadcasts the slope and X both ways; the spec: slope unidirectionally to X"),
    Deviation("window-count-truncated", frozenset({"Conv", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool",
                                                   "LpPool"}),  # (explicit pads, or VALID: ceil((in - k + 1) / s))
              lambda ex, p: _short_window_axis(ex),
              "where the padded input is shorter than the kernel extent, the spec counts floor(span / stride) "
              "+ 1 windows (onnx.reference too) and onnxruntime 1 + trunc(span / stride): one window more "
              "(past the input's end), or a count of 0 where the spec's is negative (refused)"),
    Deviation("same-pad-with-dilation", frozenset({"MaxPool", "AveragePool", "LpPool", "Conv", "ConvInteger",
                                                   "QLinearConv"}),
              lambda ex, p: (ex.attrs.get("auto_pad", "").startswith("SAME")
                             and max(ex.attrs.get("dilations", [1])) > 1),
              "SAME_UPPER/LOWER with dilations: the spec's output is ceil(in / stride); onnxruntime's pools pad "
              "as if undilated (one window fewer) and its Conv refuses the combination"),
    Deviation("same-negative-pad", frozenset({"MaxPool", "AveragePool"}),
              lambda ex, p: "padding values must be non-negative" in p,
              "onnxruntime's older pool kernels (MaxPool-8, AveragePool-10/11) refuse the negative total pad SAME "
              "gives a kernel smaller than the stride; the spec's output is ceil(in / stride), no padding needed"),
    Deviation("pad-duplicate-axes", frozenset({"Pad"}), lambda ex, p: "contain duplicates" in p,
              "Pad-18's axes: 'behavior is undefined if an axis is repeated'; dynashape refuses, onnxruntime "
              "takes them"),
    Deviation("reshape-allowzero-minus-one", frozenset({"Reshape"}), lambda ex, p: "contains both 0 and -1" in p,
              "Reshape-14: with allowzero=1 a shape holding both 0 and -1 is invalid (the -1 has no unique value); "
              "onnxruntime accepts it on an empty input"),
    Deviation("resize-length-resized-unrounded", frozenset({"Resize"}),
              lambda ex, p: ex.attrs.get("coordinate_transformation_mode") in ("align_corners", "pytorch_half_pixel")
              and "values differ" in p and len(ex.inputs) > 2 and ex.inputs[2] is not None,
              "align_corners / pytorch_half_pixel with scales: the spec's length_resized is length * scale "
              "(onnx.reference too); onnxruntime uses the rounded output length"),
    Deviation("maxpool-window-in-padding", frozenset({"MaxPool"}),
              lambda ex, p: "values differ" in p and _window_in_padding(ex),
              "a window wholly in the padding (its taps skip the input): the max of nothing is -inf here; "
              "onnxruntime gives the lowest float, onnx.reference NaN (the spec does not say)"),
    Deviation("slice-neg-step-int64max-end", frozenset({"Slice"}),
              lambda ex, p: " shape (" in p and len(ex.inputs) > 4 and bool((np.asarray(ex.inputs[4]) < 0).any())
              and int(np.iinfo(np.int64).max) in np.asarray(ex.inputs[2]).tolist(),
              "a negative step with end INT64_MAX: the spec clamps end to dim - 1 (an empty axis); onnxruntime "
              "takes it as 'to the beginning' (microsoft/onnxruntime#11107; the graph fuzzer's key too)"),
    Deviation("mvn-zero-variance", frozenset({"MeanVarianceNormalization"}),
              lambda ex, p: "values differ" in p and _constant_slice(ex),
              "a constant slice: the op's function divides by sqrt(variance) + 1e-9, giving 0 (onnx.reference too); "
              "onnxruntime gives NaN"),
    Deviation("convtranspose-empty-output", frozenset({"ConvTranspose"}),
              lambda ex, p: "Computed output dimension is <= 0" in p,
              "an output dim of 0 by the spec's formula: onnxruntime refuses it, dynashape returns the empty output"),
    Deviation("pad-crop-to-empty", frozenset({"Pad"}), lambda ex, p: "zero effective input extent" in p,
              "reflect/edge/wrap where negative pads crop an axis to nothing and nothing is added: onnxruntime "
              "refuses, dynashape returns the empty output (no value to reflect is needed)"),
    Deviation("conv-empty-output", frozenset({"Conv", "ConvInteger", "QLinearConv"}),
              lambda ex, p: "Invalid input shape" in p,
              "onnxruntime's Conv refuses an input shorter than the kernel (or empty); ONNX's shape inference "
              "counts 1 + trunc(span / stride) windows there: an empty output"),
    Deviation("lrn-rank", frozenset({"LRN"}), lambda ex, p: ex.inputs[0].ndim != 4 and "lrn.cc" in p,
              "onnxruntime's LRN takes 4-D input only; the spec (N x C x D1 ... Dk) any rank >= 2"),
    Deviation("window-size-0", frozenset({"HannWindow", "HammingWindow", "BlackmanWindow"}),
              lambda ex, p: "size input must be greater than 0" in p,
              "a constant size 0 is refused by ONNX's shape inference when onnxruntime loads the model, a fed one "
              "gives an empty window there too; dynashape gives the empty window both ways"),
    Deviation("pool-pad-not-below-kernel", frozenset({"MaxPool", "AveragePool", "LpPool"}),
              lambda ex, p: "pool_attributes.h:88" in p,
              "onnxruntime refuses a pad at least the kernel's size; the spec and ONNX's shape inference "
              "allow it (windows in the padding: -inf for MaxPool, 0 or the count_include_pad mean)"),
    Deviation("index-checked-on-empty-output", frozenset({"GatherND", "Pad"}),
              lambda ex, p: "onnxruntime" in p.split(" accepts ")[0] and (
                  "is out of range for data dims" in p or "needs pads smaller than the dim" in p),
              "an index or reflect pad out of range where the output has no elements: onnxruntime returns the "
              "empty output without the check it makes otherwise, dynashape checks"),
    Deviation("mvn-default-axes-rank", frozenset({"MeanVarianceNormalization"}),
              lambda ex, p: "axes" not in ex.attrs and "is out of range" in p,
              "the default axes [0, 2, 3] on an input of rank < 4: the op's function (ReduceMean over those "
              "axes) is invalid there and dynashape refuses; onnxruntime normalises over the axes it has"),
    Deviation("gathernd-batch-dims-differ", frozenset({"GatherND"}), lambda ex, p: "batch dim" in p and "differs" in p,
              "the spec wants the first batch_dims dims of data and indices equal; onnxruntime accepts "
              "indices whose batch dims differ"),
    Deviation("affinegrid-size-1-align-corners", frozenset({"AffineGrid"}),
              lambda ex, p: ex.attrs.get("align_corners") == 1 and 1 in np.asarray(ex.inputs[1]).tolist()[2:]
              and "values differ" in p,
              "align_corners=1 on an axis of size 1: the grid's one point is -1 by the spec's function "
              "(onnx.reference, torch.linspace); onnxruntime's gives +1 (Eigen's LinSpaced of one point is its end)"),
    Deviation("integer-matmul-empty-k", frozenset({"QLinearMatMul", "MatMulInteger"}),
              lambda ex, p: np.shape(ex.inputs[0])[-1] == 0 and "values differ" in p,
              "a product over K = 0 is 0 (QLinearMatMul: requantized to y_zero_point); onnxruntime leaves the "
              "output unwritten (0 or whatever its buffer held)"),
    Deviation("compress-condition-too-long", frozenset({"Compress"}),
              lambda ex, p: "entries past the axis may only be false" in p,
              "a condition longer than the axis with a true entry past it: the spec lets the condition be "
              "shorter only, onnx.reference refuses the true entry; onnxruntime ignores entries past the axis"),
    Deviation("reduce-duplicate-axes", frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                                  "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                                  "ReduceSumSquare"}),
              lambda ex, p: "contain duplicates" in p,
              "a repeated axis is undefined by the spec; onnx.reference raises, onnxruntime reduces the axis once; "
              "dynashape raises (the graph fuzzer's key too)"),
    Deviation("pad-wrap-empty-input", frozenset({"Pad"}), lambda ex, p: "Unexpected mode of 3" in p,
              "wrap on an empty input with nothing to add: the empty result here; onnxruntime's kernel has no "
              "path for it"),
    Deviation("scaler-attribute-lengths", frozenset({"Scaler"}), lambda ex, p: "scale_.size() == offset_.size()" in p,
              "offset and scale are each one value or one per feature (the spec); onnxruntime wants them the "
              "same length"),
    Deviation("ml-attribute-counts", frozenset({"Imputer", "LinearRegressor", "LinearClassifier"}),
              lambda ex, p: ("X has" in p or "coefficients has" in p) and "accepts what dynashape" in p,
              "imputed values (one, or one per feature) and coefficients (targets x features) must match X's "
              "features; onnxruntime's Imputer takes any count, its LinearRegressor more coefficients (the rest "
              "ignored), and neither checks a 1-D or an empty X"),
    Deviation("regressor-one-target-transform", frozenset({"LinearRegressor"}),
              lambda ex, p: ex.attrs.get("targets", 1) == 1 and ex.attrs.get("post_transform", "NONE") != "NONE"
              and "values differ" in p,
              "post_transform with one target: applied (the spec); onnxruntime returns the raw scores"),
    Deviation("linear-classifier-intercepts-optional", frozenset({"LinearClassifier"}),
              lambda ex, p: "intercepts" not in ex.attrs and "intercepts must not be empty" in p,
              "intercepts are optional (the spec): zeros, one coefficient row per label; onnxruntime refuses a "
              "model without them"),
    Deviation("binary-classifier-probit", frozenset({"LinearClassifier", "SVMClassifier"}),
              lambda ex, p: ex.attrs.get("post_transform") == "PROBIT" and "values differ" in p and (
                  len(ex.attrs.get("intercepts", [0, 0])) == 1
                  or ("vectors_per_class" in ex.attrs and len(ex.attrs["vectors_per_class"]) == 2
                      and "prob_a" not in ex.attrs)),
              "PROBIT where one score gives a binary classifier's two columns: onnxruntime writes the N probits "
              "into the first N floats of Z [N, 2] (LinearClassifier) or the first column (SVMClassifier) and "
              "leaves the rest unwritten; dynashape writes [-probit(s), probit(s)] and [probit(d), -probit(d)]"),
    Deviation("svm-kernel-params-optional", frozenset({"SVMClassifier", "SVMRegressor"}),
              lambda ex, p: "kernel_params" not in ex.attrs and "accepts what" in p,
              "kernel_params is optional (the spec): zeros; onnxruntime refuses a model without it"),
    Deviation("svm-regressor-transform", frozenset({"SVMRegressor"}),
              lambda ex, p: ex.attrs.get("post_transform", "NONE") != "NONE" and not ex.attrs.get("one_class")
              and "values differ" in p,
              "post_transform: applied to the score (the spec); onnxruntime's SVMRegressor applies none"),
    Deviation("squeeze-duplicate-axes", frozenset({"Squeeze"}), lambda ex, p: "contain duplicates" in p,
              "the spec is silent on a repeated axis; dynashape refuses it as for Unsqueeze and the reductions "
              "(onnx.reference does from Squeeze-13), onnxruntime squeezes the axis once"),
    Deviation("deprecated-op-version", frozenset({"Scatter", "Upsample"}),
              lambda ex, p: "This is an invalid model" in p,
              "Scatter-11 and Upsample-10 are deprecated versions the ONNX checker and onnxruntime refuse; "
              "dynashape runs them (as ScatterElements and Resize) so that old exports load"),
    Deviation("tokenizer-empty-input", frozenset({"Tokenizer"}), lambda ex, p: _has_empty(ex) and " shape (" in p,
              "com.microsoft Tokenizer of an input with no element: [C, 0] / [N, C, 0] here, the rank of every "
              "other input's output; onnxruntime (and its contrib docs) drop the token axis: [0] / [N, 0] (not "
              "drawn: tested in plugins_example/tests/test_tokenizer.py)"),
    Deviation("reduce-mean-empty", frozenset({"ReduceMean"}), lambda ex, p: _has_empty(ex) and "values differ" in p,
              "ReduceMean over an empty set is undefined (ReduceMean-18); onnxruntime gives 0, dynashape NaN"),
    Deviation("pad-negative-on-empty-axis", frozenset({"Pad"}),
              lambda ex, p: "cannot pad the empty axis" in p and bool((np.asarray(ex.inputs[1]) < 0).any()),
              "reflect/edge/wrap with a positive and a negative pad on an empty axis: onnxruntime returns the "
              "empty result, dynashape refuses (nothing to reflect, as onnxruntime itself says without the "
              "negative pad)"),
]


def _versions() -> list:
    registry = get_registry()
    out = []
    for domain, op in registry.op_types():
        rec = RECIPES.get((domain, op))
        if rec is None:
            continue
        for opdef in registry._kept(registry._store.op_versions((domain, op))):
            if opdef.since_version >= rec.min_opset or _covers(registry, domain, op, opdef, rec):
                out.append(pytest.param(domain, op, max(opdef.since_version, rec.min_opset),
                                        id=f"{domain or 'ai.onnx'}-{op}-{opdef.since_version}"))
    return out


def _covers(registry, domain, op, opdef, rec) -> bool:
    """An old version whose range reaches the recipe's oldest opset (drawn at that opset)."""
    later = [o.since_version for o in registry._kept(registry._store.op_versions((domain, op)))
             if o.since_version > opdef.since_version]
    return opdef.since_version < rec.min_opset and (not later or later[0] > rec.min_opset)


def _documented(op: str, ex, problem: str) -> bool:
    return any(op in dev.ops and dev.matches(ex, problem) for dev in DEVIATIONS)


def test_every_deviation_is_in_the_conformance_doc():
    doc = Path(__file__).resolve().parents[3] / "docs" / "CONFORMANCE.md"
    if not doc.is_file():
        pytest.skip("a source checkout is needed")
    keys = {line.split("|")[1].strip() for line in doc.read_text().splitlines() if line.startswith("| ")}
    assert sorted(dev.key for dev in DEVIATIONS if dev.key not in keys) == []
    assert len({dev.key for dev in DEVIATIONS}) == len(DEVIATIONS)


def test_every_registered_op_has_a_recipe_or_a_reason():
    missing = [f"{d or 'ai.onnx'}::{op}" for d, op in get_registry().op_types()
               if (d, op) not in RECIPES and not not_drawn_reason(d, op)]
    assert not missing, f"ops with neither a recipe nor a reason in NOT_DRAWN: {missing}"


@pytest.mark.parametrize("domain,op,opset", _versions())
def test_the_engines_agree_on_every_drawn_node(domain, op, opset):
    rec = RECIPES[(domain, op)]

    @PROFILE
    @given(st.data())
    def check(data):
        ex = rec.draw(data, opset)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = compare_op(op, ex.inputs, ex.attrs, opset=opset, domain=domain, n_outputs=ex.n_outputs,
                                constant=ex.constant, reference=REFERENCE, values=rec.values, rtol=rec.rtol,
                                atol=rec.atol)
        problems = [p for p in result.problems if not _documented(op, ex, p)]
        assert not problems, result.describe()

    if SEED is not None:
        check = seed(SEED)(check)
    check()


def test_compare_op_finds_where_the_engines_differ():
    """The comparison itself: a Split whose 'split' does not sum to the axis is refused by
    every engine (dynashape with its named error); a good one agrees on values; a reference
    that returns other shapes, or accepts what dynashape refuses, is reported."""
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    bad = compare_op("Split", [x, np.array([2, 2])], {"axis": 1}, opset=13, n_outputs=2, reference=REFERENCE)
    assert bad.agree, bad.describe()
    assert bad.session.error.kind == "SplitSumMismatch"
    good = compare_op("Split", [x, np.array([2, 3])], {"axis": 1}, opset=13, n_outputs=2, constant=(1,))
    assert good.agree and good.session.shapes == [(2, 2), (2, 3)]
    np.testing.assert_array_equal(good.session.outputs[1], [[2, 3, 4], [7, 8, 9]])

    def other_shapes(model, feeds):
        return Outcome("fake", [np.zeros((2, 5), np.float32), np.zeros((2, 0), np.float32)])
    differs = compare_op("Split", [x, np.array([2, 3])], {"axis": 1}, opset=13, n_outputs=2, reference=other_shapes)
    assert differs.problems == ("output 0: dynashape session (symbolic dims) shape (2, 2), fake shape (2, 5)",
                                "output 1: dynashape session (symbolic dims) shape (2, 3), fake shape (2, 0)")

    def accepts(model, feeds):
        return Outcome("fake", [np.zeros((2, 2), np.float32)] * 2)
    lenient = compare_op("Split", [x, np.array([2, 2])], {"axis": 1}, opset=13, n_outputs=2, reference=accepts)
    assert len(lenient.problems) == 1 and lenient.problems[0].startswith("fake accepts what dynashape session")


def test_a_kernels_own_failure_is_not_a_named_error():
    assert named_error(dynashape.ShapeInferenceError("x", kind="AxisOutOfRange"))
    assert named_error(dynashape.InvalidAttributeError("x"))
    assert not named_error(dynashape.ExecutionError("Celu node failed: TypeError"))
    assert not named_error(ValueError("numpy"))
