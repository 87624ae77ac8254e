"""Maps in the ai.onnx.ml domain (ops_builtin/ml_maps.py): ZipMap's ``seq(map)`` output as a
list of dicts, DictVectorizer and CastMap on map feeds, the map type in the importer and in
``get_inputs()`` / ``get_outputs()``.

Values are compared with onnxruntime on one session through several batch sizes (both
allocators), and by hand where onnxruntime's Python binding cannot feed the map type
(``map(int64, string)``).
"""
from __future__ import annotations

import dynashape
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

from tests.conftest import ort_session

ML = "ai.onnx.ml"


def _model(op: str, attrs: dict, x_type, y_type, node_input: str = "x") -> bytes:
    nodes = [helper.make_node(op, [node_input], ["y"], domain=ML, **attrs)]
    if node_input != "x":      # a standard op before the ml op (Softmax)
        nodes.insert(0, helper.make_node("Softmax", ["x"], [node_input], axis=-1))
    graph = helper.make_graph(nodes, "g", [helper.make_value_info("x", x_type)], [helper.make_value_info("y", y_type)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
                             ).SerializeToString()


def _seq_map(key) -> object:
    return helper.make_sequence_type_proto(_map(key, T.FLOAT))


def _map(key, value) -> object:
    return helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None))


def _tensor(elem, dims) -> object:
    return helper.make_tensor_type_proto(elem, dims)


def _assert_same_maps(got, want) -> None:
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is dict and list(g) == list(w) and [type(k) for k in g] == [type(k) for k in w]
        assert all(type(v) is float for v in g.values())
        np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=1e-6)   # (Softmax before it)


# ZipMap -----------------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("attrs, key", [({"classlabels_int64s": [5, 3, 9]}, T.INT64),
                                        ({"classlabels_strings": ["b", "a", "c"]}, T.STRING),
                                        ({"classlabels_int64s": [5, 3, 5]}, T.INT64)],
                         ids=["int64", "string", "repeated"])
def test_zipmap_equals_onnxruntime_through_batch_sizes(attrs, key, allocator):
    model = _model("ZipMap", attrs, _tensor(T.FLOAT, ["N", 3]), _seq_map(key), node_input="p")
    sess = dynashape.InferenceSession(model, allocator=allocator)
    ort = ort_session(model)
    for n in (2, 0, 1, 7):
        x = np.random.default_rng(n).normal(size=(n, 3)).astype(np.float32)
        _assert_same_maps(sess.run(None, {"x": x})[0], ort.run(None, {"x": x})[0])


@pytest.mark.parametrize("labels", [{"classlabels_strings": ["it's", 'a "b"', "\\n", "\u00e9", "", "x"]},
                                    {"classlabels_int64s": [2**62, -7, 0, 3, -2**63, 1]},
                                    {"classlabels_int64s": list(range(299, -1, -1))}],
                         ids=["quoted-strings", "extreme-ints", "300-labels"])
def test_zipmap_labels_a_dict_display_cannot_take_literally_or_too_many_equal_onnxruntime(labels):
    """The generated dict display (labels as literals) and the zip fallback (over 256 labels)."""
    key = T.STRING if "classlabels_strings" in labels else T.INT64
    count = len(next(iter(labels.values())))
    model = _model("ZipMap", labels, _tensor(T.FLOAT, ["N", count]), _seq_map(key))
    x = np.random.default_rng(count).normal(size=(5, count)).astype(np.float32)
    got, want = dynashape.InferenceSession(model).run(None, {"x": x})[0], ort_session(model).run(None, {"x": x})[0]
    _assert_same_maps(got, want)
    assert got[0] == dict(sorted(zip(next(iter(labels.values())), x[0].tolist())))     # by hand: labels ascending


def test_zipmap_keys_ascend_a_repeated_label_keeps_its_last_column_values_are_python_floats():
    model = _model("ZipMap", {"classlabels_int64s": [5, 3, 5]}, _tensor(T.FLOAT, ["N", 3]), _seq_map(T.INT64))
    x = np.array([[0.25, 0.5, 0.125], [1.0, 2.0, 4.0]], dtype=np.float32)
    (z,) = dynashape.InferenceSession(model).run(None, {"x": x})
    assert z == [{3: 0.5, 5: 0.125}, {3: 2.0, 5: 4.0}]
    assert [list(d) for d in z] == [[3, 5], [3, 5]]
    x = np.array([[0.1, 0.2, 0.3]], dtype=np.float32)
    (z,) = dynashape.InferenceSession(model).run(None, {"x": x})
    assert z[0][3] == float(np.float32(0.2)) == 0.20000000298023224


def test_zipmap_of_one_row_and_the_output_types_as_onnxruntime_spells_them():
    model = _model("ZipMap", {"classlabels_strings": ["no", "yes"]}, _tensor(T.FLOAT, [2]), _seq_map(T.STRING))
    sess = dynashape.InferenceSession(model)
    (z,) = sess.run(None, {"x": np.array([0.75, 0.25], dtype=np.float32)})
    assert z == [{"no": 0.75, "yes": 0.25}]
    out = sess.get_outputs()[0]
    assert (out.name, out.type, out.shape) == ("y", "seq(map(string,tensor(float)))", [])
    assert [(o.type, o.shape) for o in ort_session(model).get_outputs()] == [(out.type, out.shape)]


def _load_error(model: bytes, match: str):
    """The ShapeInferenceError InferenceSession(model) raises (a rule broken by its
    attributes or a rank fails when the session is made)."""
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        dynashape.InferenceSession(model)
    return info.value


def _first_run_error(model: bytes, feeds: dict, match: str):
    """The ShapeInferenceError of the first run (the session is made: a map input's type is
    known only from its feed)."""
    sess = dynashape.InferenceSession(model)
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        sess.run(None, feeds)
    return info.value


@pytest.mark.parametrize("attrs", [{}, {"classlabels_int64s": [1, 2], "classlabels_strings": ["a", "b"]}],
                         ids=["neither", "both"])
def test_zipmap_needs_exactly_one_label_list(attrs):
    model = _model("ZipMap", attrs, _tensor(T.FLOAT, ["N", 2]), _seq_map(T.INT64))
    error = _load_error(model, "exactly one of classlabels_strings")
    assert error.kind == "InvalidAttribute" and error.node == "ZipMap_0"


def test_zipmap_refuses_a_column_count_other_than_the_labels_at_run_time_and_stays_usable():
    model = _model("ZipMap", {"classlabels_int64s": [0, 1]}, _tensor(T.FLOAT, ["N", "C"]), _seq_map(T.INT64))
    sess = dynashape.InferenceSession(model)
    with pytest.raises(dynashape.ShapeInferenceError, match="3 columns, the labels are 2") as info:
        sess.run(None, {"x": np.zeros((4, 3), np.float32)})
    assert info.value.kind == "FeatureCountMismatch" and info.value.node == "ZipMap_0"
    (z,) = sess.run(None, {"x": np.ones((1, 2), np.float32)})
    assert z == [{0: 1.0, 1: 1.0}]


def test_zipmap_refuses_other_dtypes_and_ranks():
    double = _model("ZipMap", {"classlabels_int64s": [0, 1]}, _tensor(T.DOUBLE, ["N", 2]), _seq_map(T.INT64))
    with pytest.raises(dynashape.TypeConstraintError, match="ZipMap takes tensor.float."):
        dynashape.InferenceSession(double)
    rank3 = _model("ZipMap", {"classlabels_int64s": [0, 1]}, _tensor(T.FLOAT, ["N", 2, 1]), _seq_map(T.INT64))
    error = _load_error(rank3, "must be .N, C. or .C., got rank 3")
    assert error.kind == "InvalidRank"


def test_returned_maps_are_the_callers():
    model = _model("ZipMap", {"classlabels_int64s": [0, 1]}, _tensor(T.FLOAT, ["N", 2]), _seq_map(T.INT64))
    sess = dynashape.InferenceSession(model)
    (z,) = sess.run(None, {"x": np.ones((1, 2), np.float32)})
    z[0][0] = -5.0
    (again,) = sess.run(None, {"x": np.ones((1, 2), np.float32)})
    assert again == [{0: 1.0, 1: 1.0}]


# DictVectorizer ---------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_dict_vectorizer_equals_onnxruntime(allocator):
    model = _model("DictVectorizer", {"string_vocabulary": ["a", "b", "c"]}, _map(T.STRING, T.FLOAT),
                   _tensor(T.FLOAT, [1, 3]))
    sess = dynashape.InferenceSession(model, allocator=allocator)
    ort = ort_session(model)
    for feed in ({"b": 2.5, "z": 1.0, "a": -1}, {"c": np.float32(0.5)}):   # (onnxruntime refuses {})
        got, want = sess.run(None, {"x": feed})[0], ort.run(None, {"x": feed})[0]
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    assert sess.get_inputs()[0].type == "map(string,tensor(float))" == ort.get_inputs()[0].type
    np.testing.assert_array_equal(sess.run(None, {"x": {}})[0], [[0, 0, 0]])


def test_dict_vectorizer_int64_keys_to_strings_by_hand():
    # (onnxruntime's Python binding cannot feed a map(int64, string))
    model = _model("DictVectorizer", {"int64_vocabulary": [7, 3]}, _map(T.INT64, T.STRING), _tensor(T.STRING, [1, 2]))
    (y,) = dynashape.InferenceSession(model).run(None, {"x": {3: "x", 9: "q"}})
    assert y.dtype == object and y.tolist() == [["", "x"]]


def test_a_map_feed_of_the_wrong_kind_names_the_input():
    model = _model("DictVectorizer", {"string_vocabulary": ["a"]}, _map(T.STRING, T.FLOAT), _tensor(T.FLOAT, [1, 1]))
    sess = dynashape.InferenceSession(model)
    with pytest.raises(dynashape.InvalidFeedError, match=r"'x': expected map\(string,tensor\(float\)\) \(a dict\)"):
        sess.run(None, {"x": [1.0]})
    with pytest.raises(dynashape.InputDtypeMismatch, match="input 'x': a map key must be tensor.string., got int 3") \
            as info:
        sess.run(None, {"x": {3: 1.0}})
    # (onnxruntime's binding raises a RuntimeError with this text: scripts catch both)
    assert isinstance(info.value, RuntimeError)
    assert "Unexpected key type  <class 'int'>, it cannot be linked to C type std::string" in str(info.value)
    with pytest.raises(dynashape.InputDtypeMismatch, match="a map value must be tensor.float., got str"):
        sess.run(None, {"x": {"a": "1.0"}})
    np.testing.assert_array_equal(sess.run(None, {"x": {"a": 4}})[0], [[4.0]])


def test_dict_vectorizer_refuses_keys_of_another_type_than_its_vocabulary():
    model = _model("DictVectorizer", {"int64_vocabulary": [1]}, _map(T.STRING, T.FLOAT), _tensor(T.FLOAT, [1, 1]))
    error = _first_run_error(model, {"x": {"a": 1.0}}, "the vocabulary is tensor.int64., X's keys")
    assert error.kind == "TypeMismatch"


# CastMap ----------------------------------------------------------------------------------

CAST_CASES = [
    ({"cast_to": "TO_FLOAT"}, T.FLOAT, {5: 1.5, 2: -3.25}, [[-3.25, 1.5]]),
    ({"cast_to": "TO_STRING"}, T.STRING, {5: 1.5, 2: -3.25}, [["-3.250000", "1.500000"]]),
    ({"cast_to": "TO_INT64"}, T.INT64, {5: 1.5, 2: -3.75}, [[-3, 1]]),
    ({"cast_to": "TO_FLOAT", "map_form": "SPARSE", "max_map": 4}, T.FLOAT, {5: 1.5, 2: -3.25, 0: 7},
     [[7, 0, -3.25, 0]]),
    ({"cast_to": "TO_STRING", "map_form": "SPARSE", "max_map": 2}, T.STRING, {1: 2.0}, [["0.f", "2.000000"]]),
]


@pytest.mark.parametrize("attrs, out, feed, want", CAST_CASES,
                         ids=["float", "string", "int64", "sparse-float", "sparse-string"])
def test_cast_map_of_float_values_by_hand_and_as_onnxruntime(attrs, out, feed, want):
    model = _model("CastMap", attrs, _map(T.INT64, T.FLOAT), _tensor(out, [1, None]))
    sess = dynashape.InferenceSession(model)
    for _ in range(2):
        (y,) = sess.run(None, {"x": feed})
        assert y.tolist() == want
    (ref,) = ort_session(model).run(None, {"x": feed})
    assert y.dtype == ref.dtype and y.tolist() == ref.tolist()


def test_cast_map_of_string_values_by_hand():
    model = _model("CastMap", {"cast_to": "TO_INT64", "map_form": "SPARSE", "max_map": 3}, _map(T.INT64, T.STRING),
                   _tensor(T.INT64, [1, 3]))
    (y,) = dynashape.InferenceSession(model).run(None, {"x": {1: "12", 7: "3"}})
    assert y.dtype == np.int64 and y.tolist() == [[0, 12, 0]]


def test_cast_map_refuses_an_unknown_cast_to_and_a_sparse_negative_key():
    bad = _model("CastMap", {"cast_to": "TO_DOUBLE"}, _map(T.INT64, T.FLOAT), _tensor(T.FLOAT, [1, None]))
    assert _load_error(bad, "cast_to 'TO_DOUBLE'").kind == "InvalidAttribute"
    sparse = _model("CastMap", {"map_form": "SPARSE", "max_map": 2}, _map(T.INT64, T.FLOAT), _tensor(T.FLOAT, [1, 2]))
    sess = dynashape.InferenceSession(sparse)
    with pytest.raises(dynashape.ExecutionError, match="keys >= 0, got -1"):
        sess.run(None, {"x": {-1: 1.0}})
    assert sess.run(None, {"x": {1: 1.0}})[0].tolist() == [[0.0, 1.0]]


@pytest.mark.parametrize("value, want_dtype", [(T.FLOAT, np.float32), (T.DOUBLE, np.float64)])
def test_dict_vectorizer_of_int64_keys_to_numbers_equals_onnxruntime(value, want_dtype):
    model = _model("DictVectorizer", {"int64_vocabulary": [7, 3, 5]}, _map(T.INT64, value), _tensor(value, [1, 3]))
    feed = {3: 1.5, 9: 2.0, 7: -1.0}
    (got,) = dynashape.InferenceSession(model).run(None, {"x": feed})
    assert got.dtype == want_dtype and got.tolist() == [[-1.0, 1.5, 0.0]]
    if value == T.FLOAT:    # (onnxruntime's Python binding makes a dict of floats a map of float32 only)
        (want,) = ort_session(model).run(None, {"x": feed})
        assert want.dtype == got.dtype and want.tolist() == got.tolist()
