"""scikit-learn's encoders and text vectorizers exported with skl2onnx, as their users make
them: a ColumnTransformer of OneHotEncoder (string columns) and SimpleImputer (numeric
columns), alone or before a LinearRegression; TfidfVectorizer and CountVectorizer (word
unigrams and bigrams, with and without lowercase, characters) alone or before a
LinearRegression; a scaler over two inputs (FeatureVectorizer). dynashape equals onnxruntime
and the library at batch 1, 7, 64 and 0 on one session.

onnxruntime refuses an empty batch in StringNormalizer and TfIdfVectorizer and aborts the
process in FeatureVectorizer of several inputs: at batch 0 those models are compared with the
library only (``assert_empty_batch_matches``). The text models need the example plugin
(com.microsoft Tokenizer): they skip without it. CategoryMapper, which skl2onnx does not
write, runs in a hand-built pipeline.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.ml.common import assert_matches, assert_same_value, data, to_onnx_bytes

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from skl2onnx import convert_sklearn  # noqa: E402
from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402

OPSETS = {"": 17, "ai.onnx.ml": 3}
N = 80


def assert_empty_batch_matches(onx, x, library: dict) -> None:
    """Batch 0 (between batches 7 and 1) on one session equals the library's empty output
    (onnxruntime refuses it or aborts); ``x`` and ``library`` as for assert_matches."""
    import dynashape

    sess = dynashape.InferenceSession(to_onnx_bytes(onx))
    for b in (7, 0, 1):
        feeds = {k: v[:b] for k, v in x.items()}
        got = sess.run(None, feeds)
        for k, fn in library.items():
            want = fn({k2: v[:max(b, 1)] for k2, v in x.items()})
            want = np.asarray(want, dtype=got[k].dtype).reshape((-1,) + got[k].shape[1:])[:b]
            assert_same_value(got[k], want, f"batch {b} output {k} vs the library", rtol=1e-4, atol=1e-5)


# OneHotEncoder + SimpleImputer in a ColumnTransformer -----------------------------------

COLORS, SIZES = np.array(["red", "green", "blue", "vert"]), np.array(["S", "M", "L", "XL", "XXL"])


def _table(seed: int = 0) -> tuple:
    """(string columns [N, 2], float columns [N, 2] with NaNs, a real target); the last rows
    hold categories the encoder never saw (handle_unknown="ignore": all-zero rows)."""
    nums, y = data(N, features=2, seed=seed, classes=None)
    nums[::5, 0] = np.nan
    nums[1::7, 1] = np.nan
    rng = np.random.default_rng(seed)
    cats = np.stack([rng.choice(COLORS[:3], N), rng.choice(SIZES[:4], N)], axis=1).astype(object)
    cats[-3:, 0] = COLORS[3]
    cats[-2:, 1] = SIZES[4]
    return cats, nums, y


def _frame(cats, nums) -> np.ndarray:
    """The columns as the library's object table: strings, then floats."""
    return np.concatenate([cats.astype(object), nums.astype(object)], axis=1)


def _column_transformer(regressor: bool):
    cats, nums, y = _table()
    ct = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                            ("num", SimpleImputer(strategy="mean"), [2, 3])], sparse_threshold=0)
    est = Pipeline([("ct", ct), ("lr", LinearRegression())]) if regressor else ct
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # (the unseen categories of the last rows)
        est.fit(_frame(cats[:-3], nums[:-3]), y[:-3])
    return est, cats, nums


@pytest.mark.parametrize("regressor", [False, True], ids=["transformer", "LinearRegression"])
@pytest.mark.parametrize("inputs", ["per-column", "per-dtype"])
def test_column_transformer_of_one_hot_encoder_and_imputer(inputs, regressor):
    est, cats, nums = _column_transformer(regressor)
    if inputs == "per-column":          # as skl2onnx declares a data frame: one [None, 1] input a column
        types = [("color", StringTensorType([None, 1])), ("size", StringTensorType([None, 1])),
                 ("w", FloatTensorType([None, 1])), ("h", FloatTensorType([None, 1]))]
        x = {"color": cats[:, :1], "size": cats[:, 1:], "w": nums[:, :1], "h": nums[:, 1:]}

        def table(rows):
            return _frame(np.concatenate([rows["color"], rows["size"]], axis=1),
                          np.concatenate([rows["w"], rows["h"]], axis=1))
    else:                               # one input per dtype
        types = [("cats", StringTensorType([None, 2])), ("nums", FloatTensorType([None, 2]))]
        x = {"cats": cats, "nums": nums}

        def table(rows):
            return _frame(rows["cats"], rows["nums"])
    onx = convert_sklearn(est, initial_types=types, target_opset=OPSETS)
    ops = {n.op_type for n in onx.graph.node}
    assert {"OneHotEncoder", "Imputer"} <= ops, ops

    def library(rows):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = table(rows)
            return est.predict(t).reshape(-1, 1) if regressor else est.transform(t)
    assert_matches(onx, x, {0: library}, rtol=1e-4, atol=1e-4)


def test_one_hot_encoder_of_int64_columns():
    x = np.random.default_rng(1).integers(-2, 5, (N, 3))
    enc = OneHotEncoder(handle_unknown="ignore").fit(x[:40])
    onx = convert_sklearn(enc, initial_types=[("x", Int64TensorType([None, 3]))], target_opset=OPSETS)
    assert "OneHotEncoder" in {n.op_type for n in onx.graph.node}

    def library(rows):
        return enc.transform(rows).toarray()
    assert_matches(onx, x, {0: library})


# FeatureVectorizer: a transformer over several inputs -------------------------------------

@pytest.mark.parametrize("transformer", [StandardScaler(), SimpleImputer(strategy="median")],
                         ids=["StandardScaler", "SimpleImputer"])
def test_transformer_over_two_inputs_joins_them_with_a_feature_vectorizer(transformer):
    x, _ = data(N, features=3)
    x[::4, 2] = np.nan if isinstance(transformer, SimpleImputer) else x[::4, 2]
    transformer.fit(x)
    onx = convert_sklearn(transformer, initial_types=[("a", FloatTensorType([None, 1])),
                                                      ("b", FloatTensorType([None, 2]))], target_opset=OPSETS)
    assert [n.op_type for n in onx.graph.node][0] == "FeatureVectorizer"
    feeds = {"a": x[:, :1], "b": x[:, 1:]}

    def library(rows):
        return transformer.transform(np.concatenate([rows["a"], rows["b"]], axis=1))
    assert_matches(onx, feeds, {0: library}, batches=(1, 7, 64))     # (onnxruntime aborts on batch 0)
    assert_empty_batch_matches(onx, feeds, {0: library})


def test_category_mapper_and_feature_vectorizer_in_a_hand_built_pipeline():
    """string label -> CategoryMapper -> OneHotEncoder, joined with two numeric inputs of
    another width by FeatureVectorizer (padded and cut), then a LinearRegressor: the
    pipeline of a Core ML / Spark ML export."""
    cats, nums, _ = _table(seed=3)
    names = ["red", "green", "blue"]
    ml = "ai.onnx.ml"
    nodes = [
        helper.make_node("CategoryMapper", ["color"], ["code"], domain=ml, cats_strings=names,
                         cats_int64s=[10, 20, 30], default_int64=-1),
        helper.make_node("OneHotEncoder", ["code"], ["onehot3"], domain=ml, cats_int64s=[10, 20, 30, -1]),
        helper.make_node("Flatten", ["onehot3"], ["onehot"], axis=1),
        helper.make_node("FeatureVectorizer", ["onehot", "w", "h"], ["features"], domain=ml,
                         inputdimensions=[4, 3, 1]),
        helper.make_node("LinearRegressor", ["features"], ["y"], domain=ml,
                         coefficients=[0.5, -1.0, 2.0, 0.25, 1.5, -0.5, 3.0, 0.75], intercepts=[0.1]),
        helper.make_node("CategoryMapper", ["code"], ["name"], domain=ml, cats_strings=names,
                         cats_int64s=[10, 20, 30], default_string="other"),
    ]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "pipeline", [
        helper.make_tensor_value_info("color", TensorProto.STRING, ["N", 1]),
        helper.make_tensor_value_info("w", f32, ["N", 2]), helper.make_tensor_value_info("h", f32, ["N", 2])],
        [helper.make_tensor_value_info("y", f32, ["N", 1]), helper.make_tensor_value_info("name", TensorProto.STRING,
                                                                                         ["N", 1])])
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ml, 1)])
    x = {"color": cats[:, :1], "w": np.nan_to_num(nums), "h": nums[::-1].copy() * 2}

    def regression(rows):
        code = np.array([[names.index(c) if c in names else 3 for c in rows["color"][:, 0]]]).T
        onehot = (code == np.arange(4)).astype(np.float32)
        features = np.concatenate([onehot, rows["w"], np.zeros((len(code), 1), np.float32), rows["h"][:, :1]], axis=1)
        return features @ np.array([0.5, -1.0, 2.0, 0.25, 1.5, -0.5, 3.0, 0.75], np.float32)[:, None] + 0.1

    def name(rows):
        return np.where(np.isin(rows["color"], names), rows["color"], "other")
    library = {0: regression, 1: name}
    assert_matches(onx, x, library, batches=(1, 7, 64))              # (onnxruntime aborts on batch 0)
    assert_empty_batch_matches(onx, x, library)


# TfidfVectorizer and CountVectorizer (com.microsoft Tokenizer of the example plugin) -----

def _needs_tokenizer() -> None:
    from dynashape import UnsupportedOperatorError
    from dynashape.registry import get_registry
    try:
        get_registry().resolve_op("com.microsoft", "Tokenizer", 1)
    except UnsupportedOperatorError:
        pytest.skip("the example plugin (com.microsoft Tokenizer) is not installed or not loaded")


WORDS = ("the quick brown fox jumps over lazy dog The Quick Red cat sat on mat an and of to in is it "
         "ONNX runs_fast 42 x86").split()
ENDINGS = ("", ".", "!", "?", ", ok", " (yes)", "; no:")


def _docs(n: int = N, seed: int = 0) -> np.ndarray:
    """Short sentences (some empty) of words of two letters or more: scikit-learn's word
    pattern drops one-letter words, skl2onnx's tokenizer keeps them."""
    rng = np.random.default_rng(seed)
    return np.array([" ".join(rng.choice(WORDS, rng.integers(0, 9))) + rng.choice(ENDINGS) for _ in range(n)],
                    dtype=object)


@functools.lru_cache(maxsize=1)
def _locale() -> str:
    """The locale onnxruntime's StringNormalizer can make here: skl2onnx's default
    (en_US.UTF-8) needs that locale installed; C.UTF-8 lowers the same ASCII words."""
    from tests.conftest import ort_session
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER", locale="en_US.UTF-8")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    try:
        ort_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
        return "en_US.UTF-8"
    except Exception:  # noqa: BLE001 - the locale is not installed
        return "C.UTF-8"


VECTORIZERS = {
    "tfidf-words": lambda: TfidfVectorizer(),
    "tfidf-bigrams-cased": lambda: TfidfVectorizer(ngram_range=(1, 2), lowercase=False),
    "count-bigrams": lambda: CountVectorizer(ngram_range=(1, 2)),
    "count-only-bigrams-cased": lambda: CountVectorizer(ngram_range=(2, 2), lowercase=False),
    "count-chars": lambda: CountVectorizer(analyzer="char", ngram_range=(1, 2)),
    "tfidf-chars-cased": lambda: TfidfVectorizer(analyzer="char", lowercase=False),
}


def _text_model(vectorizer, regressor: bool, options: dict | None = None):
    docs = _docs()
    _, y = data(N, seed=1, classes=None)
    est = Pipeline([("vec", vectorizer), ("lr", LinearRegression())]) if regressor else vectorizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # (skl2onnx warns that char analyzers "may not work")
        est.fit(docs[:60], y[:60])
        opts = {"locale": _locale(), **(options or {})}
        onx = convert_sklearn(est, initial_types=[("text", StringTensorType([None, 1]))], target_opset=OPSETS,
                              options={id(vectorizer): opts})
    assert "Tokenizer" in {n.op_type for n in onx.graph.node}
    x = {"text": docs.reshape(-1, 1)}

    def library(rows):
        texts = rows["text"][:, 0]
        return est.predict(texts).reshape(-1, 1) if regressor else est.transform(texts).toarray()
    return onx, x, {0: library}


@pytest.mark.parametrize("regressor", [False, True], ids=["alone", "LinearRegression"])
@pytest.mark.parametrize("name", list(VECTORIZERS))
def test_text_vectorizer(name, regressor):
    _needs_tokenizer()
    onx, x, library = _text_model(VECTORIZERS[name](), regressor)
    assert_matches(onx, x, library, batches=(1, 7, 64), rtol=1e-4, atol=1e-4)   # (onnxruntime refuses batch 0)
    assert_empty_batch_matches(onx, x, library)


@pytest.mark.parametrize("options", [
    {"separators": [" ", "[.]", "\\?", ",", ";", ":", "!", "\\(", "\\)"]},
    {"tokenexp": "[a-zA-Z]+|[0-9]+"},
], ids=["separators", "tokenexp-alternation"])
def test_text_vectorizer_with_the_converter_tokenizer_options(options):
    """skl2onnx's options put regular-expression separators or a token expression of an
    alternation (leftmost-longest in onnxruntime's RE2) in the Tokenizer: the tokens may
    differ from the library's, so onnxruntime is the reference."""
    _needs_tokenizer()
    onx, x, _ = _text_model(CountVectorizer(ngram_range=(1, 2)), False, options)
    assert_matches(onx, x, batches=(1, 7, 64))


def test_dict_vectorizer_pipeline_takes_a_dict_per_run():
    """scikit-learn's DictVectorizer + LinearRegression as skl2onnx exports it: the input is one
    map(string, float) (a dict), equal to onnxruntime and to the pipeline's predict, unknown
    keys ignored."""
    from skl2onnx.common.data_types import DictionaryType
    from sklearn.feature_extraction import DictVectorizer

    import dynashape
    from tests.conftest import ort_session
    rows = [{"a": 1.0, "b": 2.0}, {"b": 3.5, "c": -1.0}, {"a": 0.5, "c": 2.0}, {"a": -2.0, "b": 0.25, "c": 1.0}]
    pipe = Pipeline([("dv", DictVectorizer(sparse=False)), ("lr", LinearRegression())]).fit(
        rows, np.array([1.0, 2.0, 3.0, -1.0]))
    onx = convert_sklearn(pipe, initial_types=[("input", DictionaryType(StringTensorType([1]), FloatTensorType([1])))])
    model = to_onnx_bytes(onx)
    sess, ort = dynashape.InferenceSession(model), ort_session(model)
    assert sess.get_inputs()[0].type == "map(string,tensor(float))" == ort.get_inputs()[0].type
    for row in rows + [{"z": 3.0}, {"a": 1.0, "unknown": 9.0}]:
        (got,) = sess.run(None, {"input": row})
        assert_same_value(got, ort.run(None, {"input": row})[0], f"row {row}")
        np.testing.assert_allclose(got.reshape(-1), pipe.predict([row]), rtol=1e-5, atol=1e-5)
