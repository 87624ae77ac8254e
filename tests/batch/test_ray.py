"""dynashape.batch on a local Ray instance (2 CPUs, skipped without ray[data]): 1,000 token rows
through bert_tiny on two actors, with and without bucketing, each row equal to a single-session run
of that row; the documented ``map_batches(Predictor, ...)`` call with kept columns; a worker's
error surfacing as the dynashape error; ``dynashape batch --ray``."""
from __future__ import annotations

import functools
import logging

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from dynashape.batch import Predictor, read_columns, run_ray, write_columns
from dynashape.errors import InvalidFeedError
from tests.batch.helpers import assert_rows_match, single_row_outputs, token_rows
from tests.conftest import shared_path
from tests.models.builders import BERT, bert_encoder

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

NAMES = ["last_hidden_state", "pooler_output"]


@pytest.fixture(scope="module")
def ray_instance():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    if started:
        ray.shutdown()


@functools.lru_cache(maxsize=None)
def _bert_tiny_corpus() -> tuple[str, list, list]:
    path = str(shared_path("zoo", "bert_tiny.onnx"))
    rows = token_rows(1000, 100, 1000, seed=5)
    return path, rows, single_row_outputs(path, rows)


@pytest.mark.parametrize("buckets", ["pow2", None], ids=["bucketed", "unbucketed"])
def test_1000_token_rows_through_bert_tiny_on_two_actors_equal_single_session_runs(ray_instance, buckets):
    path, rows, reference = _bert_tiny_corpus()
    result = run_ray(path, {"input_ids": rows}, concurrency=2, buckets=buckets, batch_size=32)
    assert_rows_match(result.outputs, NAMES, reference, f"ray {buckets}")
    assert 1 <= len(result.workers) <= 2 and sum(w.rows for w in result.workers) == 1000
    t = result.total
    assert t.real_cells == sum(len(r) for r in rows) and t.padding_overhead > 0
    if buckets == "pow2":                       # lengths 1-100: 8 length buckets x 6 batch buckets per worker
        assert all(w.signatures <= 8 * 6 and w.cache_misses == w.signatures for w in result.workers)


def test_map_batches_with_the_predictor_keeps_other_columns_and_row_order(ray_instance):
    rows = token_rows(200, BERT["max_pos"], BERT["vocab"], seed=8)
    reference = single_row_outputs(bert_encoder(), rows)
    model = ray_instance.put(bert_encoder().SerializeToString())
    assert Predictor(model).output_names == NAMES                      # an ObjectRef is fetched once
    ds = ray_instance.data.from_items([{"input_ids": r, "id": i} for i, r in enumerate(rows)])
    out = ds.map_batches(Predictor, fn_constructor_kwargs={"model": model, "batch_size": 16}, batch_size=64,
                         batch_format="numpy", compute=ray_instance.data.ActorPoolStrategy(size=2))
    got = {name: [None] * len(rows) for name in NAMES}
    for row in out.iter_rows():
        for name in NAMES:
            got[name][row["id"]] = np.asarray(row[name])
    assert_rows_match(got, NAMES, reference, "map_batches")


def test_a_workers_row_error_is_raised_as_the_dynashape_error(ray_instance):
    rows = [np.zeros(4, np.int64), np.zeros(40, np.int64)]
    with pytest.raises(InvalidFeedError, match="row 1: sequence 40 exceeds the largest bucket 16"):
        run_ray(bert_encoder(), {"input_ids": rows}, buckets=[8, 16])


def test_the_batch_command_on_ray_writes_what_the_local_run_writes(ray_instance, tmp_path):
    pytest.importorskip("pyarrow")
    rows = token_rows(120, BERT["max_pos"], BERT["vocab"], seed=9)
    onnx.save(bert_encoder(), tmp_path / "m.onnx")
    write_columns(tmp_path / "in.parquet", {"input_ids": rows})
    from dynashape.cli import main

    result = CliRunner().invoke(main, ["batch", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "in.parquet"),
                                       "--output", str(tmp_path / "out.parquet"), "--ray", "local",
                                       "--concurrency", "2", "--batch-size", "8"])
    assert result.exit_code == 0, result.output
    assert "rows:             120" in result.output
    assert_rows_match(read_columns(tmp_path / "out.parquet"), NAMES, single_row_outputs(bert_encoder(), rows))


def test_run_ray_reads_a_parquet_path_with_rays_own_tasks_in_file_order(ray_instance, tmp_path):
    pytest.importorskip("pyarrow")
    rows = token_rows(150, BERT["max_pos"], BERT["vocab"], seed=10)
    write_columns(tmp_path / "in.parquet", {"input_ids": rows})
    result = run_ray(bert_encoder(), str(tmp_path / "in.parquet"), ["pooler_output"], concurrency=1, batch_size=8)
    assert_rows_match(result.outputs, ["pooler_output"], [[r[1]] for r in single_row_outputs(bert_encoder(), rows)])
