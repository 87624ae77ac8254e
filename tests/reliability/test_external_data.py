"""External data (dynashape.external_data): every reference — dense, sparse, a Constant's
attribute, a subgraph's — is read from inside the model's directory (or external_data_dir for
bytes); absolute paths, '..' and symlinks leaving it are rejected; a file of the same name in
the working directory is never read instead."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape as ds

F = TensorProto.FLOAT
W = np.array([1.0, 2.0, 3.0], np.float32)


def _vi(name, dims=None, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def _external(tensor: TensorProto, location: str, offset: int = 0, length=None) -> TensorProto:
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.ClearField("int64_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for k, v in [("location", location), ("offset", str(offset))] + ([("length", str(length))] if length else []):
        e = tensor.external_data.add()
        e.key, e.value = k, v
    return tensor


def _add_w_model(w_tensor=None, *, sparse=None, constant=None, subgraph=None) -> onnx.ModelProto:
    """y = x + w, where w is a dense initializer, a sparse initializer, a Constant node's
    attribute or a Constant inside an If branch."""
    nodes, inits, sparse_inits = [], [], []
    if w_tensor is not None:
        inits.append(w_tensor)
    if sparse is not None:
        sparse_inits.append(sparse)
    if constant is not None:
        nodes.append(helper.make_node("Constant", [], ["w"], value=constant))
    inputs = [_vi("x", [3])]
    if subgraph is not None:
        then = helper.make_graph([helper.make_node("Constant", [], ["wt"], value=subgraph)], "then", [], [_vi("wt")])
        other = helper.make_graph([helper.make_node("Constant", [], ["we"], value=numpy_helper.from_array(W * 0))],
                                  "else", [], [_vi("we")])
        nodes.append(helper.make_node("If", ["c"], ["w"], then_branch=then, else_branch=other))
        inputs.append(_vi("c", [], TensorProto.BOOL))
    nodes.append(helper.make_node("Add", ["x", "w"], ["y"]))
    g = helper.make_graph(nodes, "g", inputs, [_vi("y")], inits, sparse_initializer=sparse_inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _sparse(location: str) -> onnx.SparseTensorProto:
    values = _external(numpy_helper.from_array(W, "w"), location)
    indices = numpy_helper.from_array(np.array([0, 1, 2], np.int64), "w_indices")
    return helper.make_sparse_tensor(values, indices, [3])


KINDS = {
    "dense": lambda loc: _add_w_model(_external(numpy_helper.from_array(W, "w"), loc)),
    "sparse": lambda loc: _add_w_model(sparse=_sparse(loc)),
    "constant attribute": lambda loc: _add_w_model(constant=_external(numpy_helper.from_array(W, "w_value"), loc)),
    "subgraph": lambda loc: _add_w_model(subgraph=_external(numpy_helper.from_array(W, "wt_value"), loc)),
}


def _feeds(kind: str) -> dict:
    feeds = {"x": np.zeros(3, np.float32)}
    if kind == "subgraph":
        feeds["c"] = np.array(True)
    return feeds


@pytest.fixture
def model_dir(tmp_path, monkeypatch):
    """tmp/model/ holds data.bin with W; tmp/ (the working directory) holds another data.bin."""
    d = tmp_path / "model"
    d.mkdir()
    (d / "data.bin").write_bytes(W.tobytes())
    (tmp_path / "data.bin").write_bytes((W * 100).tobytes())
    monkeypatch.chdir(tmp_path)
    return d


def _save(model: onnx.ModelProto, d) -> str:
    path = str(d / "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_reads_from_the_models_directory_not_the_working_directory(model_dir, kind):
    s = ds.InferenceSession(_save(KINDS[kind]("data.bin"), model_dir))
    np.testing.assert_array_equal(s.run(None, _feeds(kind))[0], W)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_bytes_need_an_explicit_directory(model_dir, kind):
    data = KINDS[kind]("data.bin").SerializeToString()
    with pytest.raises(ds.ExternalDataError, match="external_data_dir"):
        ds.InferenceSession(data)
    s = ds.InferenceSession(data, external_data_dir=str(model_dir))
    np.testing.assert_array_equal(s.run(None, _feeds(kind))[0], W)


def test_a_model_proto_given_is_not_modified(model_dir):
    proto = KINDS["dense"]("data.bin")
    before = proto.SerializeToString()
    s = ds.InferenceSession(proto, external_data_dir=model_dir)
    np.testing.assert_array_equal(s.run(None, _feeds("dense"))[0], W)
    assert proto.SerializeToString() == before


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("location,words", [
    ("../data.bin", "'..' is not allowed"),
    ("sub/../../data.bin", "'..' is not allowed"),
    ("ABSOLUTE", "absolute path is not allowed"),
    ("missing.bin", "no such file"),
    ("", "location is empty"),
])
def test_unsafe_or_missing_locations_are_rejected(model_dir, kind, location, words):
    if location == "ABSOLUTE":
        location = str(model_dir / "data.bin")
    with pytest.raises(ds.ExternalDataError, match=words) as info:
        ds.InferenceSession(_save(KINDS[kind](location), model_dir))
    assert isinstance(info.value, ds.ModelLoadError)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_symlink_leaving_the_directory_is_rejected(model_dir, kind):
    os.symlink(model_dir.parent / "data.bin", model_dir / "link.bin")
    with pytest.raises(ds.ExternalDataError, match="symlink"):
        ds.InferenceSession(_save(KINDS[kind]("link.bin"), model_dir))


def test_a_symlink_inside_the_directory_is_followed(model_dir):
    (model_dir / "weights").mkdir()
    os.symlink(model_dir / "data.bin", model_dir / "weights" / "w.bin")
    s = ds.InferenceSession(_save(KINDS["dense"]("weights/w.bin"), model_dir))
    np.testing.assert_array_equal(s.run(None, _feeds("dense"))[0], W)


def test_offset_and_length_are_honoured_and_bounds_checked(model_dir):
    (model_dir / "packed.bin").write_bytes(b"\0" * 8 + W.tobytes())
    t = _external(numpy_helper.from_array(W, "w"), "packed.bin", offset=8, length=12)
    s = ds.InferenceSession(_save(_add_w_model(t), model_dir))
    np.testing.assert_array_equal(s.run(None, _feeds("dense"))[0], W)
    t = _external(numpy_helper.from_array(W, "w"), "packed.bin", offset=12, length=12)
    with pytest.raises(ds.ExternalDataError, match="past the end"):
        ds.InferenceSession(_save(_add_w_model(t), model_dir))


def test_onnx_save_with_external_data_round_trips(tmp_path):
    """A model written by onnx.save(..., save_as_external_data=True) loads from its path."""
    model = _add_w_model(numpy_helper.from_array(np.arange(300, dtype=np.float32)[:3] + W, "w"))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.data", size_threshold=0)
    assert (tmp_path / "weights.data").exists()
    s = ds.InferenceSession(str(tmp_path / "m.onnx"))
    np.testing.assert_array_equal(s.run(None, _feeds("dense"))[0], [1.0, 3.0, 5.0])


def test_no_pickle_and_no_model_driven_imports():
    """The engine never unpickles and never imports code a model names (plugins come only from
    installed entry points): no module of the package imports a pickle-like module, loads numpy
    files with pickles allowed, or imports a module by a computed name except the registry's
    entry-point loader, the lazy imports of its own subpackages and the modules a registered
    plugin's lazy libraries name (records.LazyLibrary.load, libindex.describe). The one marshal
    reader, the generated code's bytecode cache (codegen.py), reads only the files it wrote in the
    user cache, checked against the source it compiles, as Python reads ``__pycache__``."""
    import pathlib
    import re
    root = pathlib.Path(ds.__file__).parent
    sources = list(root.rglob("*.py")) + list((root.parent / "ops_builtin").rglob("*.py"))
    assert sources
    for path in sources:
        text = path.read_text()
        unpicklers = "c?pickle|dill|shelve" if path.name == "codegen.py" else "c?pickle|dill|marshal|shelve"
        assert not re.search(rf"^\s*(import|from)\s+({unpicklers})\b", text, re.M), path
        assert "pickle.load" not in text and "allow_pickle=True" not in text, path
        for call in re.findall(r"(?:import_module|__import__)\((.*?)\)", text):
            plugin_named = (path.name, call) in {("records.py", "self.module"), ("libindex.py", "module"),
                                             ("registry.py", "entry_point_module")}
            assert plugin_named or call.startswith(('f"{__name__}.', "f'{__name__}.", '"dynashape')), (path, call)
