"""Tests of the text family (ops_builtin/text.py): StringNormalizer, StringConcat, StringSplit,
RegexFullMatch, TfIdfVectorizer.

Values are compared with onnxruntime on one session through changing symbolic shapes (both
allocators), or with hand-computed values where onnxruntime differs from the spec.
"""
from __future__ import annotations

import functools

import dynashape
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import run_node
from onnx import TensorProto, helper

from tests.conftest import assert_runs_match, ort_predates, ort_run, spec_run, spec_versions, symbolic_infer

S, I64, F32 = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT

#: every feed on one session per allocator against onnxruntime (or want(feeds))
runs_match = functools.partial(assert_runs_match, rtol=1e-6, atol=1e-6)


def strings(*items, shape=None):
    a = np.array(list(items), dtype=object)
    return a.reshape(shape) if shape is not None else a


def model(op, inputs, attrs, opset, outs):
    """One node; ``inputs`` (name, type, dims), ``outs`` [(name, type)]."""
    graph = helper.make_graph(
        [helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outs], **attrs)], "g",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(o, t, None) for o, t in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op", ["StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch",
                                "TfIdfVectorizer"])
def test_every_spec_version_registered(op):
    have = sorted(o.since_version for o in get_registry().schemas("", op))
    assert have == spec_versions(op)


# StringNormalizer -------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    {"stopwords": ["mOnday", "x"], "case_change_action": "LOWER"},
    {"stopwords": ["monday"], "is_case_sensitive": 1, "case_change_action": "UPPER"},
    {"case_change_action": "UPPER"},
    {"stopwords": ["a"], "is_case_sensitive": 0},
])
def test_string_normalizer_matches_ort(attrs):
    # the C locale: onnxruntime cannot build en_US here (no language packs)
    m = model("StringNormalizer", [("x", S, ["C"])], dict(attrs, locale="C"), 10, [("y", S)])
    runs_match(m, [{"x": strings("Monday", "monday", "Tue", "A", "a b")}, {"x": strings("x", "X")},
                   {"x": strings("monday", "a")}])
    m = model("StringNormalizer", [("x", S, [1, "C"])], dict(attrs, locale="C"), 10, [("y", S)])
    runs_match(m, [{"x": strings("Monday", "Wed", shape=(1, 2))}, {"x": strings("a", "monday", "B", shape=(1, 3))}])


def test_string_normalizer_all_dropped_and_errors():
    (y,) = run_node("StringNormalizer", [strings("a", "A")], {"stopwords": ["a"]}, opset=10)
    assert y.shape == (1,) and y.tolist() == [""]
    (y,) = run_node("StringNormalizer", [strings("a", shape=(1, 1))], {"stopwords": ["A"]}, opset=10)
    assert y.shape == (1, 1) and y.tolist() == [[""]]
    (y,) = run_node("StringNormalizer", [np.array(["Ab", "cD"])], {"case_change_action": "LOWER"}, opset=10)
    assert y.dtype == object and y.tolist() == ["ab", "cd"]          # numpy U feeds too
    with pytest.raises(dynashape.ShapeInferenceError, match=r"X must be \[C\] or \[1, C\], got \[2, 2\]") as e:
        run_node("StringNormalizer", [strings("a", "b", "c", "d", shape=(2, 2))], {}, opset=10)
    assert e.value.kind == "InvalidRank"
    with pytest.raises(dynashape.ShapeInferenceError, match="case_change_action is 'TITLE'") as e:
        run_node("StringNormalizer", [strings("a")], {"case_change_action": "TITLE"}, opset=10)
    assert e.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="expected a string tensor"):
        run_node("StringNormalizer", [np.zeros(2, np.float32)], {}, opset=10)


def test_string_normalizer_symbolic_batch_checked_per_signature():
    m = model("StringNormalizer", [("x", S, ["N", "C"])], {"case_change_action": "UPPER"}, 10, [("y", S)])
    sess = dynashape.InferenceSession(m)
    assert sess.run(None, {"x": strings("a", "b", shape=(1, 2))})[0].tolist() == [["A", "B"]]
    with pytest.raises(dynashape.ShapeInferenceError, match=r"\[C\] or \[1, C\]"):
        sess.run(None, {"x": strings("a", "b", shape=(2, 1))})


# StringConcat -----------------------------------------------------------------------------

def test_string_concat_symbolic_broadcast_matches_ort():
    m = model("StringConcat", [("x", S, ["A", "B"]), ("y", S, ["B"])], {}, 20, [("z", S)])
    runs_match(m, [{"x": strings("a", "b", "c", "d", shape=(2, 2)), "y": strings("1", "2")},
                   {"x": strings("é", "", "x", shape=(3, 1)), "y": strings("的")},
                   {"x": strings("p", "q", "r", "s", "t", "u", shape=(2, 3)), "y": strings("-", "+", "")}])


def test_string_concat_numpy_text_feeds_and_errors():
    (z,) = run_node("StringConcat", [np.array(["ab", "c"]), np.array([b"x", b"yz"], dtype=object)], {}, opset=20)
    assert z.dtype == object and z.tolist() == ["abx", "cyz"]
    with pytest.raises(dynashape.ShapeInferenceError, match="cannot be broadcast") as e:
        run_node("StringConcat", [strings("a", "b"), strings("a", "b", "c")], {}, opset=20)
    assert e.value.kind == "BroadcastMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="Y has dtype int64, expected a string tensor"):
        run_node("StringConcat", [strings("a"), np.array([1])], {}, opset=20)


# StringSplit ------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [{}, {"delimiter": "-"}, {"delimiter": "ab", "maxsplit": 1}, {"maxsplit": 2},
                                   {"delimiter": ""}])
def test_string_split_matches_ort(attrs):
    m = model("StringSplit", [("x", S, ["A", "B"])], attrs, 20, [("y", S), ("z", I64)])
    runs_match(m, [
        {"x": strings("a b  c", " lead trail ", "x-y--z-", "", shape=(2, 2))},
        {"x": strings("oneabtwoabthree", "-", "ab", shape=(3, 1))},
        {"x": strings("  a  b  c  d ", "q r", shape=(1, 2))},
    ])


def test_string_split_empty_and_symbolic_inference():
    y, z = run_node("StringSplit", [np.zeros((2, 0), dtype=object)], {}, opset=20, n_outputs=2)
    assert y.shape == (2, 0, 0) and z.shape == (2, 0) and z.dtype == np.int64
    shapes, _, _ = symbolic_infer("StringSplit", [(sym("n"),)], [object], opset=20, n_outputs=2)
    assert shapes[1] == (sym("n"),) and shapes[0][0] == sym("n") and str(shapes[0][1]).startswith("unk__")
    with pytest.raises(dynashape.ShapeInferenceError, match="maxsplit is -1, expected >= 0"):
        run_node("StringSplit", [strings("a")], {"maxsplit": -1}, opset=20, n_outputs=2)


# RegexFullMatch ---------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", [r"www\.[\w.-]+\.\bcom\b", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
                                     r"\d+", r"(?i)ABC\s*", r"[[:alpha:]]+[[:digit:]]?", r"a.c\z", r"\Qa.b\E+",
                                     r"(?P<x>a)(?<y>b)", r"[]a]+", r"[^]a]", r"x{2,3}", r"\x{7684}\x{4E2D}?",
                                     r"[\x{e9}a]\d"])
def test_regex_full_match_matches_ort(pattern):
    m = model("RegexFullMatch", [("x", S, ["A", "B"])], {"pattern": pattern}, 20, [("y", TensorProto.BOOL)])
    texts = ["www.google.com", "a@gmail.com", "123", "١٢", "abc  ", "AbC", "ab7", "abc", "a.c\n", "a.ba.b",
             "a.bb", "ab", "]a]", "b", "]", "xx", "xxxx", "", "é1", "的中"]
    runs_match(m, [{"x": np.array(texts, dtype=object).reshape(4, 5)}, {"x": np.array(texts[:6], dtype=object)
                                                                         .reshape(2, 3)}])


@pytest.mark.parametrize("pattern,what", [("a(?=b)", "lookahead"), ("(?<!a)b", "negative lookbehind"),
                                          (r"(a)\1", "backreference"), ("a*+", "possessive"),
                                          (r"\pL+", "Unicode class"), ("(?>ab)", "atomic group"),
                                          ("[a", "missing ]"), ("a(", "not a valid RE2")])
def test_regex_rejects_non_re2(pattern, what):
    with pytest.raises(dynashape.ShapeInferenceError, match=what) as e:
        run_node("RegexFullMatch", [strings("ab")], {"pattern": pattern}, opset=20)
    assert e.value.kind == "InvalidPattern"


def test_regex_missing_pattern_and_empty_input():
    with pytest.raises(dynashape.ShapeInferenceError, match="'pattern' is required") as e:
        run_node("RegexFullMatch", [strings("ab")], {}, opset=20)
    assert e.value.kind == "MissingAttribute"
    (y,) = run_node("RegexFullMatch", [np.zeros((2, 0), dtype=object)], {"pattern": "a"}, opset=20)
    assert y.shape == (2, 0) and y.dtype == np.bool_


# TfIdfVectorizer --------------------------------------------------------------------------

#: 3 unigrams, 3 bigrams, 2 trigrams; output columns permuted (column 6 is the first unigram)
TFIDF_INT = {"min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 2, "ngram_counts": [0, 3, 9],
             "ngram_indexes": [6, 0, 1, 2, 3, 4, 5, 7],
             "pool_int64s": [2, 3, 5, 2, 3, 3, 5, 7, 8, 2, 3, 5, 5, 5, 5]}


@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", None), ("TFIDF", None),
                                          ("IDF", [.1, .2, .3, .4, .5, .6, .7, .8]),
                                          ("TFIDF", [.1, .2, .3, .4, .5, .6, .7, .8])])
def test_tfidf_int_symbolic_batch_matches_ort(mode, weights):
    attrs = dict(TFIDF_INT, mode=mode)
    if weights is not None:
        attrs["weights"] = weights
    m = model("TfIdfVectorizer", [("x", I64, ["N", "C"])], attrs, 9, [("y", F32)])
    r = np.random.default_rng(1)
    # onnxruntime < 1.29 (and onnx.reference) give weights[i] to column i, not to the i-th pool
    # n-gram's column ngram_indexes[i], compared with the spec by hand there:
    # https://github.com/microsoft/onnxruntime/pull/31700
    want = weighted_tfidf(attrs) if weights is not None and ort_predates((1, 29)) else None
    runs_match(m, [{"x": r.integers(1, 9, (3, 12))}, {"x": r.integers(1, 9, (1, 5))}, {"x": r.integers(2, 6, (4, 30))},
                   {"x": np.array([[2, 3, 5, 5, 5, 5]])}], want=want)


def weighted_tfidf(attrs):
    """``feeds -> [y]`` of an IDF or TFIDF TfIdfVectorizer with weights: onnx.reference's TF
    counts times the weight of each column's pool n-gram (IDF: counts > 0)."""
    tf = model("TfIdfVectorizer", [("x", I64, ["N", "C"])],
               {k: v for k, v in attrs.items() if k != "weights"} | {"mode": "TF"}, 9, [("y", F32)])
    by_column = np.zeros(max(attrs["ngram_indexes"]) + 1, np.float32)
    by_column[attrs["ngram_indexes"]] = attrs["weights"]

    def want(feeds):
        (counts,) = spec_run(tf, feeds)
        return [(counts if attrs["mode"] == "TFIDF" else counts > 0) * by_column]
    return want


def test_tfidf_strings_and_1d_match_ort():
    attrs = {"mode": "TF", "min_gram_length": 2, "max_gram_length": 2, "max_skip_count": 1, "ngram_counts": [0, 2],
             "ngram_indexes": [0, 1, 2, 3, 4], "pool_strings": ["a", "b", "a", "b", "b", "c", "c", "a"]}
    m = model("TfIdfVectorizer", [("x", S, ["C"])], attrs, 9, [("y", F32)])
    runs_match(m, [{"x": strings("a", "b", "c", "a", "x", "b")}, {"x": strings("c", "a", "b")}])
    attrs = dict(TFIDF_INT, mode="TF")
    m = model("TfIdfVectorizer", [("x", TensorProto.INT32, ["C"])], attrs, 9, [("y", F32)])
    runs_match(m, [{"x": np.array([2, 3, 5, 7, 8, 2, 3, 5], np.int32)}, {"x": np.array([5], np.int32)}])


def test_tfidf_errors():
    base = dict(TFIDF_INT, mode="TF")
    x = np.array([[1, 2]], dtype=np.int64)
    cases = [({"mode": "BM25"}, "mode is 'BM25'"),
             ({"ngram_indexes": [0, 1]}, "ngram_indexes has 2 entries, the pool holds 8"),
             ({"pool_strings": ["a"]}, "exactly one of pool_int64s and pool_strings"),
             ({"weights": [1.0]}, "weights has 1 entries, expected 8"),
             ({"ngram_counts": [0, 4, 9]}, "must hold whole n-grams"),
             ({"min_gram_length": 3, "max_gram_length": 2}, "1 <= min_gram_length <= max_gram_length")]
    for change, message in cases:
        with pytest.raises(dynashape.ShapeInferenceError, match=message) as e:
            run_node("TfIdfVectorizer", [x], dict(base, **change), opset=9)
        assert e.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="needs an int32 or int64 input, got float32"):
        run_node("TfIdfVectorizer", [x.astype(np.float32)], base, opset=9)
    with pytest.raises(dynashape.ShapeInferenceError, match=r"X must be \[C\] or \[N, C\], got rank 3"):
        run_node("TfIdfVectorizer", [x.reshape(1, 1, 2)], base, opset=9)


def test_tfidf_empty_input():
    (y,) = run_node("TfIdfVectorizer", [np.zeros((2, 0), np.int64)], dict(TFIDF_INT, mode="TF"), opset=9)
    assert y.shape == (2, 8) and not y.any()


def test_regex_full_match_folds_unicode_case_and_dollar_is_the_end_of_the_text():
    """The RE2 translation shared with the Tokenizer (dynashape.re2): ``(?i)`` folds all of
    Unicode and ``$`` does not match before a final newline, as RE2 (onnxruntime) does."""
    for pattern, texts, want in (("(?i)é+", ["ÉÉ", "é", "e"], [True, True, False]),
                                 ("ab$", ["ab", "ab\n"], [True, False])):
        graph = helper.make_graph([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.STRING, ["n"])],
                                  [helper.make_tensor_value_info("y", TensorProto.BOOL, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
        x = np.array(texts, dtype=object)
        (got,) = dynashape.InferenceSession(model).run(None, {"x": x})
        assert got.tolist() == want
        assert ort_run(model, {"x": x})[0].tolist() == want
