"""Dataset files (dynashape.batch.io): NPZ and .npy folders always, Parquet when pyarrow is installed;
ragged and stacked columns come back row for row."""
from __future__ import annotations

import numpy as np
import pytest

import dynashape
from dynashape.batch import read_columns, write_columns


def _columns():
    rng = np.random.default_rng(0)
    return {
        "ragged": [rng.standard_normal((n, 3)).astype(np.float32) for n in (2, 0, 5, 1)],
        "tokens": [rng.integers(0, 9, n) for n in (3, 1, 4, 2)],
        "pooled": [rng.standard_normal(4).astype(np.float32) for _ in range(4)],
        "score": [np.float64(x) for x in (0.5, 1.5, -2.0, 3.0)],
    }


def _assert_same(got: dict, want: dict):
    assert list(got) == list(want)
    for name in want:
        assert len(got[name]) == len(want[name]), name
        for i, (g, w) in enumerate(zip(got[name], want[name])):
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape and g.dtype == w.dtype, (name, i, g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_array_equal(g, w)


def test_npz_round_trips_ragged_and_stacked_columns(tmp_path):
    path = tmp_path / "out.npz"
    write_columns(path, _columns())
    with np.load(path) as z:
        assert z["pooled"].shape == (4, 4) and z["ragged__shape"].tolist() == [[2, 3], [0, 3], [5, 3], [1, 3]]
        assert z["ragged"].shape == (8 * 3,)
    _assert_same(read_columns(path), _columns())


def test_parquet_round_trips_ragged_nested_and_plain_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "out.parquet"
    write_columns(path, _columns())
    schema = pq.read_schema(path)
    assert schema.field("ragged").type == pa.list_(pa.list_(pa.float32()))
    assert schema.field("score").type == pa.float64()
    _assert_same(read_columns(path), _columns())


def test_parquet_list_columns_written_by_pyarrow_are_ragged_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"input_ids": pa.array([[1, 2, 3], [4], [5, 6]], pa.list_(pa.int32())),
                      "fixed": pa.array([[1.0, 2.0]] * 3, pa.list_(pa.float64(), 2))})
    pq.write_table(table.slice(1), tmp_path / "in.parquet")          # a slice: offsets not from 0
    cols = read_columns(tmp_path / "in.parquet")
    assert [r.tolist() for r in cols["input_ids"]] == [[4], [5, 6]]
    assert [r.tolist() for r in cols["fixed"]] == [[1.0, 2.0]] * 2


def test_a_folder_of_npy_files_is_one_row_per_file_in_name_order(tmp_path):
    for i, n in enumerate((3, 1, 2)):
        np.save(tmp_path / f"clip_{i:03d}.npy", np.full(n, i, np.float32))
    cols = read_columns(tmp_path, ["audio"])
    assert [r.tolist() for r in cols["audio"]] == [[0, 0, 0], [1], [2, 2]]
    with pytest.raises(dynashape.InvalidFeedError, match="one input, the model has 2"):
        read_columns(tmp_path, ["a", "b"])
    (tmp_path / "a").mkdir()
    np.save(tmp_path / "a" / "0.npy", np.ones(2))
    assert list(read_columns(tmp_path, ["a", "b"])) == ["a"]


def test_unknown_formats_and_missing_files_are_typed_errors(tmp_path):
    with pytest.raises(dynashape.InvalidArgumentError, match="must end in .parquet or .npz"):
        write_columns(tmp_path / "out.csv", _columns())
    with pytest.raises(dynashape.InvalidArgumentError, match="expected a .parquet or .npz file"):
        (tmp_path / "x.csv").write_text("1")
        read_columns(tmp_path / "x.csv")
    with pytest.raises(dynashape.InvalidFeedError, match="does not exist"):
        read_columns(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(dynashape.InvalidFeedError, match="cannot read"):
        read_columns(tmp_path / "bad.npz")
