"""What every test of tests/ml/ does: fit a small model on generated data, export it with the
real converter (skl2onnx, onnxmltools) as its users do, and compare dynashape with onnxruntime
and with the library's own predictions at several batch sizes on ONE session.

The converters are the ``[ml]`` extra (scikit-learn, skl2onnx, onnxmltools, lightgbm,
xgboost); a test module calls ``pytest.importorskip`` for what it needs, so the suite skips
cleanly without them.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import pytest

from tests.conftest import ort_session

#: the batch sizes each exported model runs at, on one session (0: an empty batch)
BATCHES = (1, 7, 64, 0)
RTOL, ATOL = 1e-5, 1e-6


def data(n: int = 80, features: int = 5, seed: int = 0, classes: Optional[int] = 3) -> tuple:
    """(X float32 [n, features], y): y class ids 0..classes-1 from a linear rule with noise,
    or (classes None) a real target."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    score = x @ rng.normal(size=features) + 0.3 * rng.normal(size=n)
    if classes is None:
        return x, score.astype(np.float64)
    edges = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
    return x, np.searchsorted(edges, score).astype(np.int64)


def to_onnx_bytes(onx) -> bytes:
    return onx.SerializeToString() if hasattr(onx, "SerializeToString") else bytes(onx)


def assert_same_value(got, want, where: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    """``got`` (dynashape) equals ``want`` (onnxruntime, or the library): arrays by shape,
    dtype and value (integers and strings exactly); lists of dicts (ZipMap's ``seq(map)``)
    by length, keys and their types, and values."""
    if isinstance(want, list):
        assert isinstance(got, list), (where, type(got))
        assert len(got) == len(want), (where, len(got), len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            assert isinstance(g, dict), (where, k, type(g))
            assert list(g) == list(w), (where, k, list(g), list(w))
            assert [type(x) for x in g] == [type(x) for x in w], (where, k)
            np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=rtol, atol=atol,
                                       err_msg=f"{where} row {k}")
        return
    want = np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, (where, got.shape, want.shape)
    if want.dtype == object or want.dtype.kind in "US":
        assert got.tolist() == want.tolist(), (where, got.tolist()[:5], want.tolist()[:5])
    elif want.dtype.kind in "iub":
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)


def assert_matches(onx, x, library: Optional[Mapping[int, Callable]] = None, batches: Sequence[int] = BATCHES,
                   input_name: Optional[str] = None, rtol: float = RTOL, atol: float = ATOL,
                   allocator: str = "pool") -> None:
    """One dynashape session and one onnxruntime session of ``onx`` (a ModelProto or bytes)
    run ``x[:b]`` for each batch ``b``; every output must equal onnxruntime's, and where
    ``library`` maps an output index to the library's own function of ``x[:b]`` (``predict``,
    ``predict_proba``, ``transform``), that too (batches > 0: the libraries refuse 0 rows).
    ``x`` is one array (the model's single input) or a dict of arrays by input name."""
    import dynashape

    model = to_onnx_bytes(onx)
    sess = dynashape.InferenceSession(model, allocator=allocator)
    ort = ort_session(model)
    names = [i.name for i in ort.get_inputs()]
    for b in batches:
        if isinstance(x, Mapping):
            feeds = {k: v[:b] for k, v in x.items()}
        else:
            feeds = {input_name or names[0]: x[:b]}
        want = ort.run(None, feeds)
        got = sess.run(None, feeds)
        assert len(got) == len(want), (b, len(got), len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same_value(g, w, f"batch {b} output {k} vs onnxruntime", rtol, atol)
        if library and b > 0:
            rows = feeds if isinstance(x, Mapping) else feeds[input_name or names[0]]
            for k, fn in library.items():
                assert_same_value(got[k], _library_value(fn(rows), got[k]), f"batch {b} output {k} vs the library",
                                  rtol=max(rtol, 1e-4), atol=max(atol, 1e-5))


def _library_value(value, like):
    """The library's result in the exported output's type (float32 probabilities, int64 or
    string labels)."""
    value = np.asarray(value)
    if isinstance(like, list):
        return like   # (seq(map) is checked against onnxruntime)
    like = np.asarray(like)
    if like.dtype == object:
        return value.astype(str).astype(object)
    return value.astype(like.dtype).reshape(like.shape)


def skip_unless(*modules: str) -> None:
    """Skip the calling module unless every converter/library module imports."""
    for m in modules:
        pytest.importorskip(m)
