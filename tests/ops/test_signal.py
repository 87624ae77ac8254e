"""Tests of the signal family (ops_builtin/signal.py): DFT, STFT, windows, MelWeightMatrix.

Values are compared with onnxruntime (one session through changing symbolic shapes, both
allocators) where it implements the op as the spec does, else with onnx.reference or
numpy.fft directly; symbolic shape rules through the registered OpDefs.
"""
from __future__ import annotations

import functools

import dynashape
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import infer_node, run_node
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import assert_runs_match, ort_predates, spec_run, spec_versions, symbolic_infer

rng = np.random.default_rng(0)
F32 = TensorProto.FLOAT

#: every feed on one session per allocator against onnxruntime (or want(feeds))
runs_match = functools.partial(assert_runs_match, rtol=1e-4, atol=1e-4)


def model(op, inputs, attrs, opset, *, consts=None, n_outputs=1, out_type=F32):
    """A one-node model: ``inputs`` are (name, elem type, dims) graph inputs or names of
    ``consts`` (initializers); an empty name is an absent optional input."""
    consts = consts or {}
    names = [i if isinstance(i, str) else i[0] for i in inputs]
    outs = [f"out{k}" for k in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)], "g",
        [helper.make_tensor_value_info(*i) for i in inputs if not isinstance(i, str)],
        [helper.make_tensor_value_info(o, out_type, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


#: the registered OpDef's infer_shape on symbolic shapes: (shapes, opdef, ctx)
sym_infer = functools.partial(symbolic_infer, opset=20)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# registration -----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"])
def test_every_spec_version_registered(op):
    have = sorted(o.since_version for o in get_registry().schemas("", op))
    assert have == spec_versions(op)


# DFT --------------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs,last", [({}, 1), ({}, 2), ({"inverse": 1}, 2), ({"inverse": 1}, 1),
                                        ({"onesided": 1}, 1)])
def test_dft20_symbolic_shapes_match_ort(attrs, last):
    m = model("DFT", [("x", F32, ["B", "N", "M", last]), "", "axis"], attrs, 20, consts={"axis": np.int64(-3)})
    runs_match(m, [{"x": f32(2, 8, 3, last)}, {"x": f32(1, 5, 4, last)}, {"x": f32(3, 8, 3, last)}])


def test_dft17_axis_attr_and_dft_length_match_ort():
    for n in (4, 11):   # truncate and zero-pad
        m = model("DFT", [("x", F32, ["B", "N", 2]), "n"], {"axis": 1}, 17, consts={"n": np.int64(n)})
        runs_match(m, [{"x": f32(2, 7, 2)}, {"x": f32(3, 9, 2)}])
    m = model("DFT", [("x", F32, ["B", "N", 1]), "n"], {"axis": 1, "onesided": 1}, 17, consts={"n": np.int32(6)})
    runs_match(m, [{"x": f32(2, 7, 1)}, {"x": f32(1, 3, 1)}])


def test_dft_irfft_matches_reference_and_numpy():
    # onnxruntime reads a dft_length shorter than the spectrum differently; the spec's
    # reference (numpy.fft.irfft) is the oracle here
    m = model("DFT", [("x", F32, ["B", "K", "C", 2]), "n"], {"axis": 1, "onesided": 1, "inverse": 1}, 17,
              consts={"n": np.int64(7)})
    runs_match(m, [{"x": f32(2, 5, 3, 2)}, {"x": f32(1, 3, 2, 2)}], want=functools.partial(spec_run, m))
    x = f32(2, 6, 2)
    (y,) = run_node("DFT", [x, None, np.int64(1)], {"onesided": 1, "inverse": 1}, opset=20)
    want = np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=10, axis=1)
    assert y.shape == (2, 10, 1)
    np.testing.assert_allclose(y[..., 0], want, rtol=1e-5, atol=1e-5)


def test_dft_dtypes():
    x = rng.standard_normal((2, 8, 1))
    (y,) = run_node("DFT", [x], {}, opset=20)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y[..., 0] + 1j * y[..., 1], np.fft.fft(x[..., 0], axis=1), rtol=1e-12, atol=1e-12)
    (y,) = run_node("DFT", [x.astype(np.float16)], {}, opset=20)
    assert y.dtype == np.float16 and y.shape == (2, 8, 2)


def test_dft_axis_input_runtime_value():
    m = model("DFT", [("x", F32, ["A", "B", 1]), "", ("axis", TensorProto.INT64, [])], {"onesided": 1}, 20)
    sess = dynashape.InferenceSession(m)
    x = f32(4, 6, 1)
    for axis in (0, 1, -2, -3):
        (y,) = sess.run(None, {"x": x, "axis": np.int64(axis)})
        a = axis % 3
        want = np.fft.rfft(x[..., 0], axis=a)
        np.testing.assert_allclose(y[..., 0] + 1j * y[..., 1], want, rtol=1e-4, atol=1e-4)


def test_dft_symbolic_inference():
    n, b = sym("n"), sym("b")
    (shape,), _, _ = sym_infer("DFT", [(b, n, 1), None, ()], [np.float32, None, np.int64],
                               [None, None, np.array(1)], {"onesided": 1})
    assert shape == (b, n // 2 + 1, 2)
    (shape,), _, ctx = sym_infer("DFT", [(sym("b"), n, 2)], [np.float32], None, {"onesided": 1, "inverse": 1})
    assert shape == (sym("b"), 2 * (n - 1), 1)
    assert ctx.guards                      # dft length >= 1 and the last axis 2 are checked per signature
    (shape,), _, _ = sym_infer("DFT", [(sym("b"), n, 1), ()], [np.float32, np.int64],
                               [None, np.array(sym("k"), dtype=object)], {})
    assert shape == (sym("b"), sym("k"), 2)
    (shape,), _, _ = sym_infer("DFT", [(sym("b"), n, 1), None, ()], [np.float32, None, np.int64], None, {})
    assert shape == (sym("b"), n, 2)       # unknown axis, full DFT: every dim kept
    (shape,), _, _ = sym_infer("DFT", [(sym("b"), n, 1), None, ()], [np.float32, None, np.int64], None, {"onesided": 1})
    assert len(shape) == 3 and shape[2] == 2 and all(str(d).startswith("unk__") for d in shape[:2])


def test_dft_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="last axis of the input is 3") as e:
        run_node("DFT", [f32(2, 4, 3)], {}, opset=20)
    assert e.value.kind == "InvalidComplexAxis"
    with pytest.raises(dynashape.ShapeInferenceError, match=r"axis 2 is out of range.*\[-3, -2\] or \[0, 1\]") as e:
        run_node("DFT", [f32(2, 4, 1), None, np.int64(2)], {}, opset=20)
    assert e.value.kind == "AxisOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError, match="IRFFT.*is 1, expected 2"):
        run_node("DFT", [f32(2, 4, 1)], {"onesided": 1, "inverse": 1}, opset=20)
    with pytest.raises(dynashape.ShapeInferenceError, match=r"\(RFFT\) takes a real input") as e:
        run_node("DFT", [f32(2, 4, 2)], {"onesided": 1}, opset=17)
    assert e.value.kind == "DFTOnesidedInput"
    with pytest.raises(dynashape.ShapeInferenceError, match="dft_length is 0, expected >= 1") as e:
        run_node("DFT", [f32(2, 4, 1), np.int64(0)], {}, opset=20)
    assert e.value.kind == "InvalidValue"
    with pytest.raises(dynashape.ShapeInferenceError, match="rank >= 2"):
        run_node("DFT", [f32(4)], {}, opset=20)


def test_dft_symbolic_last_axis_checked_per_signature():
    m = model("DFT", [("x", F32, ["B", "N", "C"])], {}, 20)
    sess = dynashape.InferenceSession(m)
    sess.run(None, {"x": f32(2, 4, 2)})
    with pytest.raises(dynashape.ShapeInferenceError, match="last axis of the input is 3") as e:
        sess.run(None, {"x": f32(2, 4, 3)})
    assert e.value.kind == "InvalidComplexAxis"


# STFT -------------------------------------------------------------------------------------

def test_stft_symbolic_signal_length_matches_ort():
    m = model("STFT", [("x", F32, ["B", "L", 1]), "step", ("w", F32, ["W"])], {}, 17,
              consts={"step": np.int64(3)})
    runs_match(m, [{"x": f32(2, 32, 1), "w": f32(8)}, {"x": f32(1, 20, 1), "w": f32(8)},
                   {"x": f32(2, 17, 1), "w": f32(5)}])


def test_stft_frame_length_and_complex_match_ort():
    m = model("STFT", [("x", F32, ["B", "L", 2]), "step", "", "fl"], {"onesided": 0}, 17,
              consts={"step": np.int64(4), "fl": np.int64(6)})
    # onnxruntime < 1.28 steps a complex signal's frames by twice frame_step, compared with the
    # ONNX spec (onnx.reference) there: https://github.com/microsoft/onnxruntime/pull/28961
    runs_match(m, [{"x": f32(2, 30, 2)}, {"x": f32(1, 6, 2)}],
               want=functools.partial(spec_run, m) if ort_predates((1, 28)) else None)
    m = model("STFT", [("x", F32, ["B", "L", 1]), "step", ("w", F32, ["W"]), "fl"], {"onesided": 1}, 17,
              consts={"step": np.int64(2), "fl": np.int64(8)})
    runs_match(m, [{"x": f32(1, 16, 1), "w": f32(8)}])


def test_stft_default_frame_is_whole_signal():
    x = f32(2, 10, 1)
    (y,) = run_node("STFT", [x, np.int64(1)], {"onesided": 0}, opset=17)
    assert y.shape == (2, 1, 10, 2)
    np.testing.assert_allclose(y[:, 0, :, 0] + 1j * y[:, 0, :, 1], np.fft.fft(x[..., 0], axis=1), rtol=1e-4, atol=1e-4)


def test_stft_symbolic_inference():
    n = sym("L")
    (shape,), _, ctx = sym_infer("STFT", [(sym("B"), n, 1), (), (16,)], [np.float32, np.int64, np.float32],
                                 [None, np.array(4), None], {}, opset=17)
    assert shape == (sym("B"), (n - 16) // 4 + 1, 9, 2)
    assert (n, ">=", 16) in ctx.guards     # a shorter signal is reported when a signature breaks it


def test_stft_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="frame_length 8 is longer than the signal") as e:
        run_node("STFT", [f32(1, 6, 1), np.int64(1), None, np.int64(8)], {}, opset=17)
    assert e.value.kind == "STFTFrameTooLong"
    with pytest.raises(dynashape.ShapeInferenceError, match="window length must equal frame_length") as e:
        run_node("STFT", [f32(1, 16, 1), np.int64(1), f32(5), np.int64(8)], {}, opset=17)
    assert e.value.kind == "DimMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="frame_step is 0, expected >= 1"):
        run_node("STFT", [f32(1, 16, 1), np.int64(0), f32(4)], {}, opset=17)
    with pytest.raises(dynashape.ShapeInferenceError, match="rank 3"):
        run_node("STFT", [f32(16, 1), np.int64(2), f32(4)], {}, opset=17)
    with pytest.raises(dynashape.ShapeInferenceError, match="frame_step must be a scalar"):
        run_node("STFT", [f32(1, 16, 1), np.array([2, 2]), f32(4)], {}, opset=17)


def test_stft_symbolic_frame_too_long_reported_on_run():
    m = model("STFT", [("x", F32, ["B", "L", 1]), "step", "", "fl"], {}, 17,
              consts={"step": np.int64(2), "fl": np.int64(8)})
    sess = dynashape.InferenceSession(m)
    assert sess.run(None, {"x": f32(1, 12, 1)})[0].shape == (1, 3, 5, 2)
    with pytest.raises(dynashape.ShapeInferenceError, match="longer than the signal"):
        sess.run(None, {"x": f32(1, 5, 1)})


# windows ------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("out_type", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_windows_match_ort(op, periodic, out_type):
    m = model(op, [("n", TensorProto.INT64, [])], {"periodic": periodic, "output_datatype": out_type}, 17,
              out_type=out_type)
    runs_match(m, [{"n": np.int64(10)}, {"n": np.int64(3)}, {"n": np.int64(0)}], rtol=1e-3, atol=1e-3)


def test_window_int_output_and_int32_size():
    (y,) = run_node("BlackmanWindow", [np.int32(5)], {"output_datatype": TensorProto.INT32}, opset=17)
    assert y.dtype == np.int32 and y.tolist() == [0, 0, 0, 0, 0]
    (y,) = run_node("HannWindow", [np.int64(4)], {}, opset=17)
    np.testing.assert_allclose(y, [0.0, 0.5, 1.0, 0.5], atol=1e-7)


def test_window_size_from_shape_stays_symbolic():
    n = sym("n")
    (shape,), _, _ = sym_infer("HannWindow", [()], [np.int64], [np.array(n, dtype=object)], opset=17)
    assert shape == (n,)
    # Shape -> Gather -> HannWindow through a session: the window follows the input's length
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["len"]),
             helper.make_node("HammingWindow", ["len"], ["w"]), helper.make_node("Mul", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["N"])],
                          [helper.make_tensor_value_info("y", F32, None)],
                          [numpy_helper.from_array(np.int64(0), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    runs_match(m, [{"x": f32(7)}, {"x": f32(12)}])


def test_window_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="size is -1, expected >= 0"):
        run_node("HannWindow", [np.int64(-1)], {}, opset=17)
    with pytest.raises(dynashape.ShapeInferenceError, match="output_datatype 9 \\(bool\\) is not allowed") as e:
        run_node("HannWindow", [np.int64(3)], {"output_datatype": TensorProto.BOOL}, opset=17)
    assert e.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="size has dtype float32, expected one of int32, int64"):
        run_node("HannWindow", [np.float32(3)], {}, opset=17)


# MelWeightMatrix --------------------------------------------------------------------------

@pytest.mark.parametrize("params", [(8, 16, 8192, 0.0, 4096.0), (5, 64, 16000, 100.0, 7000.0),
                                    (20, 512, 22050, 20.0, 11025.0), (3, 7, 100, 0.0, 40.0)])
def test_mel_weight_matrix_matches_ort(params):
    bins, length, rate, low, high = params
    m = model("MelWeightMatrix", [("a", TensorProto.INT64, []), ("b", TensorProto.INT64, []),
                                  ("c", TensorProto.INT64, []), ("d", F32, []), ("e", F32, [])], {}, 17)
    feeds = {"a": np.int64(bins), "b": np.int64(length), "c": np.int64(rate), "d": np.float32(low),
             "e": np.float32(high)}
    runs_match(m, [feeds], atol=1e-6)


def test_mel_weight_matrix_dtype_and_errors():
    (y,) = run_node("MelWeightMatrix", [np.int32(4), np.int32(32), np.int32(8000), np.float32(0), np.float32(4000)],
                    {"output_datatype": TensorProto.DOUBLE}, opset=17)
    assert y.dtype == np.float64 and y.shape == (17, 4)
    with pytest.raises(dynashape.ShapeInferenceError, match="num_mel_bins is 0, expected >= 1"):
        run_node("MelWeightMatrix", [np.int32(0), np.int32(32), np.int32(8000), np.float32(0), np.float32(4000)],
                 {}, opset=17)
    with pytest.raises(dynashape.ShapeInferenceError, match="lower_edge_hertz must be a scalar"):
        run_node("MelWeightMatrix", [np.int32(2), np.int32(32), np.int32(8000), np.zeros(2, np.float32),
                                     np.float32(4000)], {}, opset=17)
    with pytest.raises(dynashape.ShapeInferenceError, match="outside the 4 bins of dft_length 7") as e:
        run_node("MelWeightMatrix", [np.int64(3), np.int64(7), np.int64(100), np.float32(0), np.float32(50)], {},
                 opset=17)
    assert e.value.kind == "MelEdgesOutOfRange"
    shapes, dtypes = infer_node("MelWeightMatrix", [np.int64(3), np.int64(9), np.int64(8000), np.float32(0),
                                                    np.float32(10)], {}, opset=17)
    assert shapes == [(5, 3)] and dtypes == [np.float32]
