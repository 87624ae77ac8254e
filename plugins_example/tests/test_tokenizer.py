"""dynashape_example's com.microsoft Tokenizer (dynashape_example/tokenizer.py) against
onnxruntime's CPU contrib kernel.

Each one-node model runs on ONE dynashape session through several input shapes ([N, C] and
[C] with symbolic dims; the token axis is data-dependent) and every run is compared with
onnxruntime on the same feeds, string for string: token expressions (leftmost-longest
matches of alternations, anchors, word boundaries, matches shorter than ``mincharnum``),
regular-expression separators applied one after the other (a separator matching the empty
string included), character tokenization, ``mark``, ``pad_value``, non-ASCII text. The op
also goes through ``dynashape.differential.compare_op`` on random sizes. An empty input keeps the token axis
here (onnxruntime drops it); every error kind is raised once. Only dynashape's public API,
numpy, onnx, onnxruntime and pytest are used (this is the plugin's own test suite).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dynashape_example")
ort = pytest.importorskip("onnxruntime")

import dynashape  # noqa: E402
from dynashape.differential import compare_op  # noqa: E402
from dynashape.testing import run_node  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

MS = "com.microsoft"
BASE = {"mark": 0, "pad_value": "#", "mincharnum": 1}
TEXTS = ["The quick brown fox, jumps!", "", "a  b\tc", "ab abc abcd abab", "héllo wörld 日本語 x86_64",
         "cbc c", "...", "x1 22 333 4444", "aB\nb", "ÉTÉ été\vkelvin K"]


def tokenizer_model(attrs, dims, name="tok"):
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain=MS, name=name, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    return helper.make_model(graph, ir_version=8,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def strings(items, shape=None):
    a = np.array(list(items), dtype=object)
    return a.reshape(shape) if shape is not None else a


def ort_outputs(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_matches_ort(attrs, feeds_list, dims=("N", "C")):
    """Every input on ONE dynashape session, each run equal to onnxruntime's (shape, strings)."""
    model = tokenizer_model(attrs, list(dims))
    sess = dynashape.InferenceSession(model)
    for k, x in enumerate(feeds_list):
        (got,) = sess.run(None, {"x": x})
        (want,) = ort_outputs(model, {"x": x})
        assert got.dtype == object and got.shape == want.shape, (k, got.shape, want.shape)
        assert got.tolist() == want.tolist(), (k, got.tolist(), want.tolist())


def shapes_of(texts):
    """[N, C] inputs of changing sizes (a repeated signature last)."""
    t = list(texts) + [""] * (-len(texts) % 3)
    return [strings(t, (-1, 3)), strings(t[:2], (1, 2)), strings(t[::-1], (-1, 1)), strings(t, (-1, 3))]


@pytest.mark.parametrize("tokenexp", ["[a-zA-Z0-9_]+", "\\w+", "a|ab|abc", "(a|ab)(c|bcd)", "[a-z]{2,3}", "b*",
                                      "c\\b", "\\bc", "^[A-Z]", "[a-z]+$", "(?i)[a-c]+", "[[:alpha:]]+", "x*",
                                      "[^ ,!]+", "(?i)[é]+t?", "(?i:k)+", "\\S+", "[\\w.]+"])
@pytest.mark.parametrize("mincharnum", [1, 3])
def test_token_expression_matches_ort(tokenexp, mincharnum):
    assert_matches_ort(dict(BASE, tokenexp=tokenexp, mincharnum=mincharnum), shapes_of(TEXTS))


@pytest.mark.parametrize("separators", [[" "], [" ", "[.,!]"], ["\\s+"], ["a|ab"], ["^a", "d$"], ["\\b"], ["x*"],
                                        ["[[:space:]]", "o"], ["", " "]])
@pytest.mark.parametrize("mincharnum", [1, 2])
def test_separators_match_ort(separators, mincharnum):
    assert_matches_ort(dict(BASE, separators=separators, mincharnum=mincharnum), shapes_of(TEXTS))


@pytest.mark.parametrize("attrs", [{"separators": [""]}, {"tokenexp": "."}], ids=["separators", "tokenexp"])
@pytest.mark.parametrize("mark", [0, 1])
def test_characters_match_ort(attrs, mark):
    assert_matches_ort(dict(BASE, mark=mark, pad_value="<pad>", **attrs), shapes_of(TEXTS))


@pytest.mark.parametrize("attrs", [{"tokenexp": "[a-z]+"}, {"separators": [" ", "[.]"]}])
def test_mark_and_pad_value_match_ort(attrs):
    assert_matches_ort(dict(BASE, mark=1, pad_value="", **attrs), shapes_of(TEXTS))
    (y,) = run_node("Tokenizer", [strings(["ab cd", "e"])], dict(BASE, mark=1, pad_value="_", **attrs), opset=1,
                    domain=MS)
    assert y.tolist() == [["\x02", "ab", "cd", "\x03"], ["\x02", "e", "\x03", "_"]]   # padding after the end mark


def test_one_dimensional_input_matches_ort():
    assert_matches_ort(dict(BASE, tokenexp="[a-z]+"), [strings(TEXTS), strings(TEXTS[:1]), strings(TEXTS[3:5])],
                       dims=["C"])


def test_separators_win_over_tokenexp_as_in_ort():
    assert_matches_ort(dict(BASE, separators=[" "], tokenexp="[a]"), shapes_of(TEXTS))


def test_no_token_in_any_string_gives_an_empty_token_axis():
    assert_matches_ort(dict(BASE, tokenexp="[0-9]+", mark=1), [strings(["ab", "", "c"], (1, 3)),
                                                               strings(["7 a"], (1, 1))])


def test_empty_input_keeps_the_token_axis():
    """onnxruntime gives [0] for [0] and [N, 0] for [N, C] with no element (its docs say so):
    the output rank would change with the data. Here it is [0, 0] and [N, C, 0], the rank
    every other input gives; both hold no string."""
    model = tokenizer_model(dict(BASE, tokenexp="[a-z]+"), ["N", "C"])
    sess = dynashape.InferenceSession(model)
    for shape in ((0, 3), (2, 0)):
        (got,) = sess.run(None, {"x": strings([], shape)})
        (want,) = ort_outputs(model, {"x": strings([], shape)})
        assert got.shape == shape + (0,) and want.shape == (shape[0], 0)
    assert sess.run(None, {"x": strings(["ab c"], (1, 1))})[0].tolist() == [[["ab", "c"]]]
    (y,) = run_node("Tokenizer", [strings([])], dict(BASE, separators=[" "]), opset=1, domain=MS)
    assert y.shape == (0, 0)


def test_random_sizes_agree_three_ways():
    """dynashape.differential.compare_op (check_op's comparison, which takes a data-dependent
    dim): a session over symbolic dims, the per-node run and onnxruntime, on random sizes."""
    words = np.array(["ab", "c", "dé", "fgh", "", "i j", "k.l", "m  n.o"], dtype=object)
    rng = np.random.default_rng(0)
    for attrs in (dict(BASE, separators=[" ", "[.]"]), dict(BASE, tokenexp="[a-z]+", mark=1, mincharnum=2)):
        for _ in range(6):
            x = words[rng.integers(0, words.size, tuple(rng.integers(1, 5, rng.integers(1, 3))))]
            result = compare_op("Tokenizer", [x], attrs, opset=1, domain=MS, reference="onnxruntime")
            assert result.agree, result.describe()


def test_errors():
    x = strings(["ab"])
    cases = [
        ({"pad_value": "#", "mincharnum": 1, "tokenexp": "a"}, "MissingAttribute", "attribute 'mark' is required"),
        (BASE, "MissingAttribute", "one of the attributes separators and tokenexp is required"),
        (dict(BASE, mincharnum=0, tokenexp="a"), "InvalidAttribute", "mincharnum is 0, expected >= 1"),
        (dict(BASE, tokenexp=""), "InvalidAttribute", "tokenexp is empty"),
        (dict(BASE, mincharnum=2, separators=[""]), "InvalidAttribute", "mincharnum 2 is too big for character"),
        (dict(BASE, tokenexp="(?=a)"), "InvalidPattern", "lookahead"),
        (dict(BASE, separators=[" ", "("]), "InvalidPattern", "separator '\\(' is not a supported RE2"),
        (dict(BASE, tokenexp="\\pL+"), "InvalidPattern", "Unicode classes"),
        (dict(BASE, tokenexp="a(?i)b"), "InvalidPattern", "at the start of a pattern only"),
    ]
    for attrs, kind, match in cases:
        with pytest.raises(dynashape.ShapeInferenceError, match=match) as e:
            run_node("Tokenizer", [x], attrs, opset=1, domain=MS)
        assert e.value.kind == kind, (attrs, str(e.value))
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain=MS, **BASE)
    node.attribute.append(helper.make_attribute("separators", [], attr_type=2 + 6))     # STRINGS, empty
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, ["C"])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    with pytest.raises(dynashape.ShapeInferenceError, match="separators is empty") as e:
        dynashape.InferenceSession(m).run(None, {"x": x})
    assert e.value.kind == "InvalidAttribute"
    for bad, kind, match in ((np.array([1, 2]), "InvalidDtype", "expected a string tensor"),
                             (strings(["a"], (1, 1, 1)), "InvalidRank", "got rank 3"),
                             (strings(["a"], ()), "InvalidRank", "got rank 0"),
                             (np.array([b"\xff\xfe"], dtype=object), "InvalidUtf8", "not valid UTF-8")):
        with pytest.raises(dynashape.ShapeInferenceError, match=match) as e:
            run_node("Tokenizer", [bad], dict(BASE, tokenexp="a"), opset=1, domain=MS)
        assert e.value.kind == kind
