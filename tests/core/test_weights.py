"""Weights held once (dynashape.weights, dynashape.model.load_model): initializers read from a
path or bytes are views of the model's bytes (at any offset; a program makes the aligned copy of
an unaligned one where a kernel first needs it) or copies (small tensors), bit-equal to
onnx.numpy_helper.to_array for every element type, read-only; the ModelProto kept holds no
initializer data; a session drops the weights no node reads after folding."""
from __future__ import annotations

import gc
import json
import mmap
import os
import weakref

import ml_dtypes
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

import dynashape as ds
from dynashape.cli import main
from dynashape.inspect import inspect_rewrites, inspect_session
from dynashape.model import load_model
from dynashape import weights
from dynashape.weights import plain_dtype, scan_model
from tests.conftest import ort_run


@pytest.fixture(autouse=True)
def _views_of_small_tensors(monkeypatch, request):
    """The tests here build small tensors; where they check which tensors are views, views
    start at 0 bytes (by default a tensor under weights.VIEW_MIN_BYTES is copied)."""
    if "default_view_threshold" not in request.keywords:
        monkeypatch.setattr(weights, "VIEW_MIN_BYTES", 0)

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)

#: every numpy dtype onnx writes as raw_data, with its element type
RAW_DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "bool": np.bool_, "complex64": np.complex64, "complex128": np.complex128,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8_e5m2": ml_dtypes.float8_e5m2, "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
}
if hasattr(ml_dtypes, "float8_e8m0fnu") and hasattr(TensorProto, "FLOAT8E8M0"):
    RAW_DTYPES["float8_e8m0fnu"] = ml_dtypes.float8_e8m0fnu


def _values(dtype, shape) -> np.ndarray:
    """Random bit patterns of ``dtype`` (bools 0/1, float8/bfloat16 from their own bits)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt == np.bool_:
        return RNG.integers(0, 2, n).astype(bool).reshape(shape)
    return RNG.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)


def _model(initializers, nodes=None, inputs=None, outputs=None, opset=18) -> onnx.ModelProto:
    """x -> Identity -> y, with ``initializers`` (not read unless ``nodes`` read them)."""
    nodes = nodes or [helper.make_node("Identity", ["x"], ["y"])]
    inputs = inputs or [helper.make_tensor_value_info("x", F, ["n"])]
    outputs = outputs or [helper.make_tensor_value_info("y", F, None)]
    g = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _prefixed(tensor: TensorProto, shift: int) -> onnx.ModelProto:
    """A model whose first initializer is ``shift`` bytes of uint8, so ``tensor``'s raw_data
    starts ``shift`` bytes later in the file."""
    prefix = numpy_helper.from_array(np.zeros(shift, np.uint8), "prefix")
    return _model([prefix, tensor])


def _loaded(model: onnx.ModelProto, tmp_path) -> dict:
    """name -> initializer arrays, per source: a path, bytes, the ModelProto."""
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return {"path": load_model(str(path)).graph.initializers,
            "bytes": load_model(model.SerializeToString()).graph.initializers,
            "proto": load_model(model).graph.initializers}


def _assert_bit_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("name", sorted(RAW_DTYPES))
def test_raw_data_initializers_are_bit_equal_to_onnx_at_every_offset(name, tmp_path):
    """Eight prefix lengths put the raw_data at every offset modulo 8: each array equals
    to_array's bit for bit from a path, bytes and the ModelProto; from a path every offset
    gives a view (an unaligned one flagged so: the program copies it where a kernel needs it),
    a copy is aligned; all are read-only."""
    dtype = np.dtype(RAW_DTYPES[name])
    aligned = unaligned = 0
    for shift in range(8):
        tensor = numpy_helper.from_array(_values(dtype, (3, 5)), "w")
        assert tensor.HasField("raw_data")
        want = numpy_helper.to_array(tensor)
        for source, arrays in _loaded(_prefixed(tensor, shift), tmp_path).items():
            got = arrays["w"]
            _assert_bit_equal(got, want)
            assert not got.flags.writeable, (source, shift)
            if got.flags.owndata:
                assert got.flags.aligned, (source, shift)
            if source == "path":
                assert not got.flags.owndata, shift
                aligned += got.flags.aligned
                unaligned += not got.flags.aligned
    assert aligned >= 8 // dtype.alignment and aligned + unaligned == 8
    if dtype.alignment > 1:
        assert unaligned > 0


@pytest.mark.parametrize("shape", [(), (0,), (4, 0, 3), (1,)], ids=["scalar", "empty", "empty-3d", "one"])
@pytest.mark.parametrize("name", ["float32", "int64", "bool", "float16"])
def test_scalar_and_empty_tensors_keep_their_shapes(name, shape, tmp_path):
    tensor = numpy_helper.from_array(_values(RAW_DTYPES[name], shape), "w")
    want = numpy_helper.to_array(tensor)
    for arrays in _loaded(_prefixed(tensor, 3), tmp_path).values():
        _assert_bit_equal(arrays["w"], want)
        assert not arrays["w"].flags.writeable


@pytest.mark.parametrize("tensor", [
    helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.5, -2.0, 3.25, 0.0]),
    helper.make_tensor("w", TensorProto.INT64, [3], [1, -(2 ** 40), 7]),
    helper.make_tensor("w", TensorProto.INT32, [2], [-5, 2 ** 30]),
    helper.make_tensor("w", TensorProto.DOUBLE, [2], [1e300, -0.5]),
    helper.make_tensor("w", TensorProto.FLOAT16, [3], np.array([1.0, -2.5, 65504.0], np.float16)),
    helper.make_tensor("w", TensorProto.STRING, [2], [b"ab", "\u00e9".encode()]),
    helper.make_tensor("w", TensorProto.INT4, [5], [1, -8, 7, 0, 3]),
    helper.make_tensor("w", TensorProto.UINT4, [3], [1, 15, 7], raw=False),
], ids=["float_data", "int64_data", "int32_data", "double_data", "float16 in int32_data", "string", "int4",
        "uint4 in int32_data"])
def test_typed_fields_strings_and_packed_types_equal_onnx(tensor, tmp_path):
    want = numpy_helper.to_array(tensor)
    for arrays in _loaded(_prefixed(tensor, 1), tmp_path).values():
        got = arrays["w"]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tolist() == want.tolist()
        assert not got.flags.writeable


def test_the_proto_kept_has_no_initializer_data(tmp_path):
    w = _values(np.float32, (64, 64))
    model = _model([numpy_helper.from_array(w, "w"), helper.make_tensor("k", TensorProto.INT64, [2], [4, 5])])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    for source in (str(path), model.SerializeToString(), model):
        loaded = load_model(source)
        kept = {t.name: t for t in loaded.proto.graph.initializer}
        assert list(kept["w"].dims) == [64, 64] and kept["w"].data_type == F
        assert not kept["w"].raw_data and not kept["k"].int64_data
        assert loaded.proto.ByteSize() < 1000
        np.testing.assert_array_equal(loaded.graph.initializers["w"], w)
    assert model.graph.initializer[0].raw_data == w.tobytes()        # the caller's proto is untouched
    assert load_model(str(path)).path == str(path)


def test_a_bytearray_or_memoryview_is_copied_so_later_changes_do_not_reach_the_arrays():
    w = _values(np.float32, (8, 8))
    data = bytearray(_prefixed(numpy_helper.from_array(w, "w"), 4).SerializeToString())
    for source in (data, memoryview(data)):
        arr = load_model(source).graph.initializers["w"]
        assert arr.flags.owndata and not arr.flags.writeable
        data[:] = bytes(len(data))          # the caller reuses the buffer
        np.testing.assert_array_equal(arr, w)
        data[:] = _prefixed(numpy_helper.from_array(w, "w"), 4).SerializeToString()


def test_bytes_are_viewed_at_any_offset(tmp_path):
    """From ``bytes``, raw_data is viewed at every offset (flagged unaligned where it is); a
    session on such a model runs on aligned copies the program makes (the values unchanged)."""
    big = _values(np.float32, (256, 256))
    for shift in range(4):
        data = _prefixed(numpy_helper.from_array(big, "w"), shift).SerializeToString()
        offset, _ = scan_model(data).regions[1]
        arr = load_model(data).graph.initializers["w"]
        assert not arr.flags.owndata and arr.flags.aligned == (offset % 4 == 0), shift
        np.testing.assert_array_equal(arr, big)


@pytest.mark.default_view_threshold
def test_views_that_would_keep_a_mostly_copied_buffer_are_copied(tmp_path):
    """From ``bytes``, views keep the whole buffer alive: where they would cover less than half
    of it (the rest small tensors, copied), they are copied too. From a path the same large
    tensor stays a view (the map's other pages are released)."""
    smalls = [numpy_helper.from_array(_values(np.float32, (192, 1024)), f"s{i}") for i in range(4)]   # 0.75 MiB
    large = _values(np.float32, (1 << 18) + 1)                                                          # > 1 MiB
    data = _model(smalls + [numpy_helper.from_array(large, "w")]).SerializeToString()
    inits = load_model(data).graph.initializers
    assert all(a.flags.owndata and a.flags.aligned for a in inits.values())
    np.testing.assert_array_equal(inits["w"], large)
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    assert not load_model(str(path)).graph.initializers["w"].flags.owndata


def _mapped_rss_kb(path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields[0]) > 8 and ":" not in fields[0]:
                inside = len(fields) > 5 and fields[-1] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED") or not os.path.exists("/proc/self/smaps"),
                    reason="needs madvise and /proc/self/smaps")
def test_mapped_pages_of_a_copied_tensor_are_released(tmp_path, monkeypatch):
    """A tensor read from a path and copied (one under VIEW_MIN_BYTES), and the aligned copy
    of an unaligned view (``weights.aligned_copy``, in chunks): the pages of the map it
    covered leave the process, the mapping stays resident only around the other (viewed)
    tensors. (Whether a view's pages are resident is the kernel's business: fault-around and
    large page-cache folios map them early.)"""
    w = _values(np.float32, (512, 512))         # 1 MiB, 256 pages
    path = tmp_path / "m.onnx"
    monkeypatch.setattr(weights, "VIEW_MIN_BYTES", 2 << 20)
    path.write_bytes(_prefixed(numpy_helper.from_array(w, "w"), 64).SerializeToString())
    model = load_model(str(path))
    arr = model.graph.initializers["w"]
    assert arr.flags.owndata and arr.flags.aligned
    np.testing.assert_array_equal(arr, w)
    assert _mapped_rss_kb(path) < 64, _mapped_rss_kb(path)
    monkeypatch.setattr(weights, "VIEW_MIN_BYTES", 0)
    monkeypatch.setattr(weights, "COPY_CHUNK_BYTES", 64 << 10)      # (16 chunks)
    for shift in range(4):
        path = tmp_path / f"v{shift}.onnx"
        path.write_bytes(_prefixed(numpy_helper.from_array(w, "w"), shift).SerializeToString())
        viewed = load_model(str(path)).graph.initializers["w"]
        if not viewed.flags.aligned:
            break
    assert not viewed.flags.owndata and not viewed.flags.aligned and viewed.tobytes() == w.tobytes()
    assert _mapped_rss_kb(path) >= 1000               # (the view read: its pages mapped)
    copy = weights.aligned_copy(viewed)
    assert copy.flags.owndata and copy.flags.aligned and not copy.flags.writeable
    np.testing.assert_array_equal(copy, w)
    assert _mapped_rss_kb(path) < 64, _mapped_rss_kb(path)


def test_a_session_copies_unaligned_weights_where_its_kernels_read_them(tmp_path):
    """A model read from a path with its weights at unaligned offsets: they load as views;
    the session's program holds aligned copies of what its kernels read (a Gather's table, a
    MatMul's weight, or the packed form that replaces it) and its outputs equal onnxruntime's."""
    table, weight = (RNG.standard_normal(shape).astype(np.float32) for shape in ((300, 64), (64, 96)))
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("MatMul", ["e", "w"], ["y"])]
    for shift in range(4):
        model = _model([numpy_helper.from_array(np.zeros(shift, np.uint8), "prefix"),
                        numpy_helper.from_array(table, "table"), numpy_helper.from_array(weight, "w")], nodes,
                       [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])])
        path = tmp_path / f"m{shift}.onnx"
        path.write_bytes(model.SerializeToString())
        inits = load_model(str(path)).graph.initializers
        if not inits["table"].flags.aligned and not inits["w"].flags.aligned:
            break
    else:
        pytest.fail("no prefix length puts both weights at unaligned offsets")
    sess = ds.InferenceSession(str(path))
    constants = [v for v in sess.program.template if isinstance(v, np.ndarray) and v.size > 1]
    assert constants and all(v.flags.aligned for v in constants)
    ids = np.array([0, 299, 7, 7], np.int64)
    np.testing.assert_allclose(sess.run(None, {"ids": ids})[0], ort_run(model, {"ids": ids})[0], rtol=1e-5, atol=1e-5)


def test_plain_dtypes_exclude_strings_and_packed_types():
    assert plain_dtype(TensorProto.FLOAT) == np.float32
    assert plain_dtype(TensorProto.BFLOAT16) == ml_dtypes.bfloat16
    for t in (TensorProto.STRING, TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1,
              TensorProto.UNDEFINED, 999):
        assert plain_dtype(t) is None


# --- errors --------------------------------------------------------------------------------


def _error(source) -> str:
    with pytest.raises(ds.ModelLoadError) as info:
        load_model(source)
    assert type(info.value).__module__ == "dynashape.errors"
    return str(info.value)


@pytest.mark.parametrize("nbytes", [8, 7, 16, 0])
def test_raw_data_that_does_not_fit_dims_gives_the_same_error_from_every_source(nbytes, tmp_path):
    """The path and bytes sources check the scanned length as to_array checks the proto's."""
    model = _prefixed(TensorProto(name="w", data_type=F, dims=[3], raw_data=b"\1" * nbytes), 1)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    want = _error(model)            # the ModelProto's path: numpy_helper.to_array
    assert "initializer 'w' (FLOAT, dims [3]) cannot be read" in want
    assert _error(str(path)) == want
    assert _error(model.SerializeToString()) == want


@pytest.mark.parametrize("cut", [1, 100, 399])
def test_a_file_cut_inside_a_weight_names_the_weight(cut, tmp_path):
    w = _values(np.float32, (100,))
    data = _model([numpy_helper.from_array(w, "weight_a")]).SerializeToString()
    start = data.index(w.tobytes())
    truncated = data[:start + cut]
    path = tmp_path / "m.onnx"
    path.write_bytes(truncated)
    for source in (truncated, str(path)):
        msg = _error(source)
        assert msg.startswith("could not parse the ONNX model: initializer 'weight_a' is cut off")
        assert f"runs past the end of the file ({len(truncated)} bytes)" in msg
    with pytest.raises(DecodeError):
        onnx.load_from_string(truncated)    # protobuf rejects it too


def test_raw_data_longer_than_its_tensor_names_the_tensor():
    w = np.arange(3, dtype=np.float32)
    model = _model([numpy_helper.from_array(w, "w")])
    model.graph.doc_string = "d" * 500       # serialized after the initializers
    data = model.SerializeToString()
    at = data.index(b"\x4a\x0c" + w.tobytes())   # raw_data: field 9, 12 bytes
    corrupt = data[:at + 1] + b"\x7f" + data[at + 2:]
    assert "its raw_data of 127 bytes" in _error(corrupt) and "the end of its TensorProto" in _error(corrupt)


@pytest.mark.parametrize("content,words", [
    (b"\x00\xffthis is not an ONNX model", "could not parse the ONNX model"),
    (b"", "graph"),
    (b"\x3a\x05\x2a\x80", "could not parse the ONNX model"),      # a graph cut inside an initializer's tag
])
def test_garbage_or_empty_files_give_the_errors_onnx_parsing_gave(content, words, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(content)
    assert words in _error(str(path))
    assert words in _error(content)


# --- external data -------------------------------------------------------------------------


def test_external_data_is_mapped_views_at_any_offset(tmp_path):
    a, b = _values(np.float32, (16, 16)), _values(np.int64, (7,))
    (tmp_path / "data.bin").write_bytes(a.tobytes() + b"\0" * 3 + b.tobytes())
    tensors = []
    for name, arr, offset in (("a", a, 0), ("b", b, a.nbytes + 3)):
        t = numpy_helper.from_array(arr, name)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "data.bin"), ("offset", str(offset)), ("length", str(arr.nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        tensors.append(t)
    model = _model(tensors)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    for source in (str(path), model.SerializeToString(), model):
        inits = load_model(source, external_data_dir=None if isinstance(source, str) else tmp_path).graph.initializers
        _assert_bit_equal(inits["a"], a)
        _assert_bit_equal(inits["b"], b)
        assert not inits["a"].flags.owndata and not inits["b"].flags.owndata      # offsets 0 and 1027 viewed
        assert not inits["a"].flags.writeable and not inits["b"].flags.writeable
        assert inits["a"].flags.aligned and not inits["b"].flags.aligned
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL       # the caller's proto untouched


def test_onnx_saved_external_data_runs_like_onnxruntime(tmp_path):
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    model = _model([numpy_helper.from_array(w, "w")], nodes=[helper.make_node("MatMul", ["x", "w"], ["y"])],
                   inputs=[helper.make_tensor_value_info("x", F, ["n", 6])])
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.data", size_threshold=0)
    sess = ds.InferenceSession(str(tmp_path / "m.onnx"))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(sess.model.graph.initializers["w"], w)


# --- sessions ------------------------------------------------------------------------------


def _mlp(shift: int) -> onnx.ModelProto:
    """y = relu(x @ w1 + b1) @ w2 + b2 with a prefix tensor shifting every weight's offset."""
    inits = [numpy_helper.from_array(np.arange(shift, dtype=np.uint8), "prefix"),
             numpy_helper.from_array(RNG.standard_normal((8, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array(RNG.standard_normal(16).astype(np.float32), "b1"),
             numpy_helper.from_array(RNG.standard_normal((16, 4)).astype(np.float64).astype(np.float32), "w2"),
             numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
             helper.make_node("Add", ["h3", "b2"], ["y"])]
    return _model(inits, nodes, [helper.make_tensor_value_info("x", F, ["batch", 8])])


@pytest.mark.parametrize("shift", [0, 1, 2, 3])
def test_a_model_from_its_path_runs_like_onnxruntime(shift, tmp_path):
    model = _mlp(shift)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    x = RNG.standard_normal((5, 8)).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    for source in (str(path), model.SerializeToString(), model):
        for allocator in ("pool", "naive"):
            got = ds.InferenceSession(source, allocator=allocator).run(None, {"x": x})[0]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _transposed_weight_model(overridable: bool = False) -> onnx.ModelProto:
    """y = x @ Transpose(w) + b: w (3, 5) is read only by a Transpose, which folds."""
    w = np.arange(15, dtype=np.float32).reshape(3, 5) * 0.25 + 0.125
    b = np.array([1.0, -1.0, 0.5], np.float32)
    inputs = [helper.make_tensor_value_info("x", F, ["n", 5])]
    if overridable:
        inputs.append(helper.make_tensor_value_info("b", F, [3]))
    return _model([numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
                  [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["xw"]),
                   helper.make_node("Add", ["xw", "b"], ["y"])], inputs)


def test_a_weight_only_a_folded_transpose_read_is_released(tmp_path):
    """After folding, nothing reachable from the session holds w's array (a weak reference to
    it dies), while its name, shape and dtype stay for introspection."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_transposed_weight_model().SerializeToString())
    model = load_model(str(path))
    w_ref = weakref.ref(model.graph.initializers["w"])
    b_ref = weakref.ref(model.graph.initializers["b"])
    sess = ds.InferenceSession(model)
    del model
    gc.collect()
    assert w_ref() is None
    assert b_ref() is not None                        # still read by the Add
    assert "w" not in sess.model.graph.initializers
    assert sess.model.graph.released["w"] == ((3, 5), np.dtype(np.float32))
    assert sess.graph.slot["w"] not in sess.graph.constants
    assert sess.graph.constant_type(sess.graph.slot["w"]) == ((3, 5), np.dtype(np.float32))
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort_run(_transposed_weight_model(), {"x": x})[0],
                               rtol=1e-6)
    by_name = {t["name"]: t for t in inspect_session(sess)["tensors"]}
    assert by_name["wt"]["shape"] == [5, 3] and by_name["wt"]["dtype"] == "float32"


def test_no_array_the_session_holds_equals_the_released_weight(tmp_path):
    """The same from a path: walk everything the session references (not modules, types or
    functions) and find no array with w's shape and values."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_transposed_weight_model().SerializeToString())
    sess = ds.InferenceSession(str(path))
    w = numpy_helper.to_array(_transposed_weight_model().graph.initializer[0])
    seen, stack, arrays = set(), [sess], []
    skip = (type, type(gc), type(len), type(_model), type(_model.__code__))
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            arrays.append(obj)
        stack.extend(gc.get_referents(obj))
    assert any(a.shape == (5, 3) for a in arrays)      # the folded transpose is there
    assert not [a for a in arrays if a.shape == w.shape and a.dtype == w.dtype and np.array_equal(a, w)]


def test_overriding_still_compiles_from_the_weights_it_needs():
    """b is overridable; w is released from the model's graph, and a run that feeds b still
    gets x @ w.T + b (the graph before folding what b reaches keeps what it reads)."""
    model = _transposed_weight_model(overridable=True)
    sess = ds.InferenceSession(model.SerializeToString())
    assert [a.name for a in sess.get_overridable_initializers()] == ["b"]
    assert "w" in sess.model.graph.released
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    b = np.array([10.0, 20.0, 30.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-6)
    np.testing.assert_allclose(sess.run(None, {"x": x, "b": b})[0], ort_run(model, {"x": x, "b": b})[0],
                               rtol=1e-6)


def test_a_folded_chain_through_an_overridable_weight_is_recomputed_when_fed():
    """c = Transpose(w) * s, s overridable: the default folds all of c; a run that feeds s
    recomputes c from the transposed w, which the session kept for it."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([2.0, 3.0], np.float32)
    model = _model([numpy_helper.from_array(w, "w"), numpy_helper.from_array(s, "s")],
                   [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("Mul", ["wt", "s"], ["c"]),
                    helper.make_node("MatMul", ["x", "c"], ["y"])],
                   [helper.make_tensor_value_info("x", F, ["n", 3]), helper.make_tensor_value_info("s", F, [2])])
    sess = ds.InferenceSession(model)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    for feeds in ({"x": x}, {"x": x, "s": np.array([-1.0, 0.5], np.float32)}, {"x": x}):
        np.testing.assert_allclose(sess.run(None, feeds)[0], ort_run(model, feeds)[0], rtol=1e-6)


def test_get_modelmeta_reads_the_proto_without_weights(tmp_path):
    model = _mlp(1)
    model.producer_name, model.doc_string, model.model_version = "exporter", "a model", 7
    onnx.helper.set_model_props(model, {"author": "me"})
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    for source in (str(path), model.SerializeToString(), model):
        meta = ds.InferenceSession(source).get_modelmeta()
        assert (meta.producer_name, meta.description, meta.version, meta.graph_name) == ("exporter", "a model", 7, "g")
        assert meta.custom_metadata_map == {"author": "me"}


def _bias_model() -> onnx.ModelProto:
    """y = x @ w + b, which the matmul_bias rewrite fuses."""
    return _model([numpy_helper.from_array(RNG.standard_normal((4, 3)).astype(np.float32), "w"),
                   numpy_helper.from_array(RNG.standard_normal(3).astype(np.float32), "b")],
                  [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
                  [helper.make_tensor_value_info("x", F, ["batch", "seq", 4])])


def test_inspect_rewrites_compiles_the_unoptimized_model_from_its_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNASHAPE_OPTIMIZE", "1")   # (CI runs the suite once with the rewrites off)
    path = tmp_path / "m.onnx"
    path.write_bytes(_bias_model().SerializeToString())
    result = CliRunner().invoke(main, ["inspect", str(path), "--rewrites", "--format", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["counts"] and report["steps_before"] == 2 and report["steps_after"] == 1
    sess = ds.InferenceSession(_bias_model().SerializeToString())
    if sess.rewrites.fired:
        with pytest.raises(ds.InvalidArgumentError, match="model="):
            inspect_rewrites(sess)
        assert inspect_rewrites(sess, _bias_model())["steps_before"] == 2


def test_a_functions_subgraph_external_tensor_is_read_and_the_main_graphs_mapped(tmp_path):
    """Function bodies are walked before the main graph: the main graph's external
    initializer is still the one mapped, the one inside a function's If branch is read."""
    w = np.arange(4, dtype=np.float32)
    (tmp_path / "data.bin").write_bytes(w.tobytes() + (w * 10).tobytes())

    def external(name, offset):
        t = numpy_helper.from_array(w, name)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "data.bin"), ("offset", str(offset)), ("length", "16")):
            e = t.external_data.add()
            e.key, e.value = k, v
        return t
    branch = helper.make_graph([helper.make_node("Identity", ["wt"], ["o"])], "then", [],
                               [helper.make_tensor_value_info("o", F, [4])], [external("wt", 16)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", F, None)])
    fn = helper.make_function("local", "f", ["c", "x"], ["y"],
                              [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
                              [helper.make_opsetid("", 18)])
    model = _model([external("w", 0)])
    model.functions.append(fn)
    model.opset_import.append(helper.make_opsetid("local", 1))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    loaded = load_model(str(path))
    np.testing.assert_array_equal(loaded.graph.initializers["w"], w)
    then = next(a.g for a in loaded.proto.functions[0].node[0].attribute if a.name == "then_branch")
    read = then.initializer[0]
    assert read.raw_data == (w * 10).tobytes() and read.data_location == TensorProto.DEFAULT


@pytest.mark.default_view_threshold
def test_a_small_tensor_is_copied_and_a_large_aligned_one_viewed(tmp_path):
    """A read of a view maps the page-cache folio around it (2 MB on a file system with huge
    folios), so tensors under VIEW_MIN_BYTES are copies; a large aligned one stays a view."""
    small = np.arange(64, dtype=np.float32)
    large = np.arange(weights.VIEW_MIN_BYTES // 4, dtype=np.float32)
    for prefix in range(4):   # some offset puts the large tensor at an aligned place
        g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.zeros(prefix, np.uint8), "p"),
                               numpy_helper.from_array(small, "a"), numpy_helper.from_array(large, "b")])
        path = tmp_path / f"m{prefix}.onnx"
        onnx.save(helper.make_model(g), path)
        inits = load_model(str(path)).graph.initializers
        np.testing.assert_array_equal(inits["a"], small)
        np.testing.assert_array_equal(inits["b"], large)
        assert inits["a"].flags.owndata
        if not inits["b"].flags.owndata:
            return
    raise AssertionError("no offset gave a view of the large tensor")
