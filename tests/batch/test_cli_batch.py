"""``dynashape batch``: a Parquet file of 1,000 rows through a model the test builds, the output file
checked row by row against single-session runs; NPZ in and out; option and data errors."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from dynashape.batch import read_columns, write_columns
from dynashape.cli import main
from tests.batch.helpers import assert_rows_match, fixed_batch_model, single_row_outputs, token_rows
from tests.models.builders import BERT, bert_encoder

NAMES = ["last_hidden_state", "pooler_output"]


def _invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


@functools.lru_cache(maxsize=None)
def _corpus():
    rows = token_rows(1000, BERT["max_pos"], BERT["vocab"], seed=11)
    return rows, single_row_outputs(bert_encoder(), rows)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "bert.onnx"
    onnx.save(bert_encoder(), path)
    return path


def test_batch_on_a_parquet_file_of_1000_rows_writes_every_row_cut_to_its_length(model, tmp_path):
    pytest.importorskip("pyarrow")
    rows, reference = _corpus()
    write_columns(tmp_path / "in.parquet", {"input_ids": rows, "id": [np.int64(i) for i in range(1000)]})
    code, out = _invoke("batch", model, "--input", tmp_path / "in.parquet", "--output", tmp_path / "out.parquet",
                        "--buckets", "16,32,64", "--batch-size", "16")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("rows:             1000  in ")
    assert "buckets 16,32,64" in lines[1]
    assert any(line.startswith("  worker ") and "1000 rows" in line for line in lines)
    assert "output last_hidden_state: float32 [*, 32]" in out and "output pooler_output: float32 [32]" in out
    assert lines[-1] == f"wrote {tmp_path / 'out.parquet'} (with the input's id column(s))"
    overhead = float(next(line for line in lines if line.startswith("padding overhead:")).split()[2])
    real = sum(len(r) for r in rows)
    assert 0 < overhead < 100 * (64 * 1000 - real) / real        # below padding everything to 64
    got = read_columns(tmp_path / "out.parquet")
    assert list(got) == ["id"] + NAMES
    np.testing.assert_array_equal(np.asarray(got["id"]), np.arange(1000))     # (the ids stay with their rows)
    assert_rows_match(got, NAMES, reference, "cli parquet")


def test_batch_reads_and_writes_npz_and_selects_outputs(model, tmp_path):
    rows, reference = _corpus()
    write_columns(tmp_path / "in.npz", {"input_ids": rows[:200]})
    code, out = _invoke("batch", model, "--input", tmp_path / "in.npz", "--output", tmp_path / "out.npz",
                        "--outputs", "pooler_output", "--buckets", "none")
    assert code == 0, out
    with np.load(tmp_path / "out.npz") as z:
        assert list(z.files) == ["pooler_output"] and z["pooler_output"].shape == (200, BERT["hidden"])
    assert_rows_match(read_columns(tmp_path / "out.npz"), ["pooler_output"], [[r[1]] for r in reference[:200]])


@pytest.mark.parametrize("extra, code, message", [
    (["--output", "{tmp}/out.csv"], 2, "the output must end in .parquet or .npz"),   # the last --output wins
    (["--concurrency", "2"], 2, "--concurrency needs --ray"),
    (["--buckets", "16,x"], 2, "buckets must be"),
    (["--pad", "attention=1"], 2, "'attention' is not an input of the model"),
    (["--pad", "x"], 2, "'x' is not a number"),
    (["--buckets", "8"], 1, "Error: in the batch of input rows 0-0: row 0: sequence 9 exceeds the largest bucket 8"),
    (["--outputs", "nope"], 1, "Error: unknown output name 'nope'"),
])
def test_batch_option_and_data_errors_are_one_line(model, tmp_path, extra, code, message):
    write_columns(tmp_path / "in.npz", {"input_ids": [np.zeros(9, np.int64)]})
    got, out = _invoke("batch", model, "--input", tmp_path / "in.npz", "--output", tmp_path / "out.npz",
                       *(a.format(tmp=tmp_path) for a in extra))
    assert got == code, out
    assert message in out and "Traceback" not in out


def test_batch_refuses_a_model_that_cannot_be_batched(tmp_path):
    onnx.save(fixed_batch_model(), tmp_path / "m.onnx")
    write_columns(tmp_path / "in.npz", {"x": [np.zeros(3, np.float32)]})
    code, out = _invoke("batch", tmp_path / "m.onnx", "--input", tmp_path / "in.npz", "--output", tmp_path / "o.npz")
    assert code == 1 and out.startswith("Error: input 'x' has a fixed batch dim 1"), out


def test_a_folder_of_npy_rows_feeds_the_one_input_without_a_default(model, tmp_path):
    """bert_encoder has input_ids, attention_mask and token_type_ids: bare .npy rows are the
    input_ids (the mask and type ids are filled in, as from NPZ and Parquet)."""
    rows, reference = _corpus()
    folder = tmp_path / "rows"
    folder.mkdir()
    for i, r in enumerate(rows[:20]):
        np.save(folder / f"{i:04d}.npy", r)
    code, out = _invoke("batch", model, "--input", folder, "--output", tmp_path / "out.npz", "--threads", "1")
    assert code == 0, out
    assert_rows_match(read_columns(tmp_path / "out.npz"), NAMES, reference[:20], "npy folder")


def test_an_object_array_npz_is_refused_with_the_ragged_layout(model, tmp_path):
    np.savez(tmp_path / "in.npz", input_ids=np.array([np.zeros(3, np.int64), np.zeros(5, np.int64)], dtype=object))
    code, out = _invoke("batch", model, "--input", tmp_path / "in.npz", "--output", tmp_path / "out.npz")
    assert code == 1 and "Traceback" not in out
    assert "'input_ids' is an object array (rows of different lengths?)" in out
    assert "'input_ids__shape' (int64 [rows, row ndim]: each row's shape)" in out


def test_fewer_busy_workers_than_asked_for_are_explained(capsys):
    from types import SimpleNamespace

    from dynashape.cli.batch import _idle_workers_note
    result = SimpleNamespace(rows=500, workers=[SimpleNamespace(rows=500), SimpleNamespace(rows=0)])
    _idle_workers_note(result, 2, 256)
    assert capsys.readouterr().out.strip() == (
        "note: 1 of 2 workers got rows: 500 rows make 2 call(s) of up to 256 rows (--rows-per-call) and a call goes "
        "to one worker; a smaller --rows-per-call spreads them")
    _idle_workers_note(SimpleNamespace(rows=500, workers=[SimpleNamespace(rows=250)] * 2), 2, 256)
    assert capsys.readouterr().out == ""
