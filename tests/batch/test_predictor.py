"""Predictor and run_local in one process: every row equals that row run alone on one session, in
every bucketing mode; plan-cache and padding counters; the column forms a batch may take; errors."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import dynashape
from dynashape.batch import Predictor, run_local
from dynashape.batch.buckets import Buckets
from tests.batch.helpers import (assert_rows_match, doubled_length_model, row_sum_model, scaled_model,
                                 single_row_outputs, token_rows)
from tests.conftest import ort_session
from tests.models.builders import BERT, bert_encoder

NAMES = ["last_hidden_state", "pooler_output"]


@functools.lru_cache(maxsize=None)
def bert() -> bytes:
    return bert_encoder().SerializeToString()


@functools.lru_cache(maxsize=None)
def corpus() -> tuple[list, list]:
    """300 rows of 1-60 tokens and their single-session outputs."""
    rows = token_rows(300, BERT["max_pos"] - 4, BERT["vocab"], seed=3)
    return rows, single_row_outputs(bert(), rows)


@pytest.mark.parametrize("buckets", ["pow2", [8, 16, 32, 64], "exact", None])
def test_every_row_equals_a_single_session_run_of_that_row(buckets):
    rows, reference = corpus()
    result = run_local(bert(), {"input_ids": rows}, buckets=buckets, batch_size=16, rows_per_call=100)
    assert_rows_match(result.outputs, NAMES, reference, str(buckets))
    assert result.rows == 300 and result.total.rows == 300 and result.total.calls == 3


def test_the_single_session_reference_matches_onnxruntime_on_a_few_rows():
    rows, reference = corpus()
    ort = ort_session(bert_encoder())
    for ids, ref in list(zip(rows, reference))[:5]:
        n = len(ids)
        want = ort.run(None, {"input_ids": ids[None], "attention_mask": np.ones((1, n), np.int64),
                              "token_type_ids": np.zeros((1, n), np.int64)})
        for got, w in zip(ref, want):
            np.testing.assert_allclose(got, w[0], rtol=1e-4, atol=1e-5)


def test_pow2_buckets_bound_the_signatures_and_every_later_run_is_a_plan_cache_hit():
    rows, _ = corpus()
    result = run_local(bert(), {"input_ids": rows}, buckets="pow2", batch_size=8, rows_per_call=100)
    t = result.total
    lengths = {1 << max(0, (len(r) - 1).bit_length()) for r in rows}
    assert t.signatures <= len(lengths) * 4          # batch buckets 1, 2, 4, 8
    assert t.cache_misses == t.signatures and t.cache_hits == t.runs - t.signatures
    exact = run_local(bert(), {"input_ids": rows}, buckets="exact", batch_size=8, rows_per_call=100).total
    assert exact.cache_misses > 2 * t.cache_misses and exact.padded_cells < t.padded_cells


def test_padding_overhead_counts_the_cells_computed_beyond_the_real_ones():
    rows, _ = corpus()
    real = sum(len(r) for r in rows)
    t = run_local(bert(), {"input_ids": rows}, buckets="pow2", batch_size=8, pad_batch=False).total
    assert t.real_cells == real
    assert t.padded_cells == sum(1 << max(0, (len(r) - 1).bit_length()) for r in rows)
    assert t.padding_overhead == pytest.approx(100 * (t.padded_cells - real) / real)
    t = run_local(bert(), {"input_ids": rows}, buckets=None, batch_size=8, rows_per_call=100).total
    chunks = [rows[s:min(s + 8, c + 100)] for c in range(0, 300, 100) for s in range(c, c + 100, 8)]
    assert t.padded_cells == sum(len(c) * max(len(r) for r in c) for c in chunks)
    assert t.runs == len(chunks)


def test_a_batch_takes_object_arrays_lists_and_stacked_columns_and_keeps_other_columns():
    rows, reference = corpus()
    p = Predictor(bert(), buckets="pow2", batch_size=4)
    obj = np.empty(6, dtype=object)
    obj[:] = [r.astype(np.int32) for r in rows[:6]]           # int32 rows: cast to the input's int64
    out = p({"input_ids": obj, "id": np.arange(6)})
    assert sorted(out) == ["id", *NAMES] and out["last_hidden_state"].dtype == object
    assert out["pooler_output"].shape == (6, BERT["hidden"])
    assert_rows_match({k: list(v) for k, v in out.items()}, NAMES, reference[:6])
    np.testing.assert_array_equal(out["id"], np.arange(6))
    out = p({"input_ids": list(rows[:3]), "attention_mask": [np.ones(len(r), np.int64) for r in rows[:3]]})
    assert_rows_match({k: list(v) for k, v in out.items()}, NAMES, reference[:3])
    same = np.stack([rows[0][:5]] * 3)                        # one length: a stacked 2-D column
    out = p({"input_ids": same})
    want = single_row_outputs(bert(), [same[0]])[0]
    for row in out["last_hidden_state"]:
        np.testing.assert_allclose(row, want[0], rtol=1e-4, atol=1e-5)


def test_run_local_takes_an_iterator_of_batches_as_they_come():
    rows, reference = corpus()
    batches = ({"input_ids": rows[s:s + 50]} for s in range(0, 100, 50))
    result = run_local(bert(), batches, ["pooler_output"])
    assert list(result.outputs) == ["pooler_output"]
    assert_rows_match(result.outputs, ["pooler_output"], [[r[1]] for r in reference[:100]])


def test_a_prebuilt_predictor_runs_as_it_is():
    rows, reference = corpus()
    p = Predictor(bert(), ["pooler_output"], buckets=[64])
    result = run_local(p, {"input_ids": rows[:20]})
    assert result.workers == [p.stats] and p.stats.runs == 1
    assert p.stats.padded_cells == 32 * 64             # 20 rows: one run, batch padded to batch_size 32
    assert_rows_match(result.outputs, ["pooler_output"], [[r[1]] for r in reference[:20]])
    with pytest.raises(dynashape.InvalidArgumentError, match="takes no output_names"):
        run_local(p, {"input_ids": rows[:2]}, ["pooler_output"])


def test_pad_values_fill_the_padded_positions_of_non_mask_inputs():
    rows = [np.arange(1, n + 1, dtype=np.float32) for n in (1, 3, 5)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)                # no mask input: warned, pinned in test_axes
        got = run_local(row_sum_model(), {"x": rows}, buckets=[8], pad_values=-1.0).outputs["s"]
        exact = run_local(row_sum_model(), {"x": rows}, buckets="exact").outputs["s"]
    np.testing.assert_allclose(np.array(got), [r.sum() - (8 - len(r)) for r in rows])
    np.testing.assert_allclose(np.array(exact), [r.sum() for r in rows])


def test_rows_with_a_fixed_trailing_axis_are_padded_on_the_length_only():
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal((n, 3)).astype(np.float32) for n in (2, 9, 4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = run_local(scaled_model(), {"x": rows}, buckets="pow2").outputs["y"]
    for r, y in zip(rows, out):
        np.testing.assert_array_equal(y, 2 * r)


def test_exact_mode_returns_outputs_that_vary_with_the_length_whole():
    rows = [np.arange(n, dtype=np.float32) for n in (1, 4, 4, 2)]
    out = run_local(doubled_length_model(), {"x": rows}, buckets="exact").outputs["y"]
    for r, y in zip(rows, out):
        np.testing.assert_array_equal(y, np.concatenate([r, r]))


def test_rows_whose_inputs_disagree_on_a_length_are_an_invalid_feed_error():
    p = Predictor(bert())
    with pytest.raises(dynashape.InvalidFeedError, match="row 1: 'sequence' is 4 in input 'input_ids' axis 1 and 3"):
        p({"input_ids": [np.zeros(2, np.int64), np.zeros(4, np.int64)],
           "attention_mask": [np.ones(2, np.int64), np.ones(3, np.int64)]})


@pytest.mark.parametrize("batch, error, match", [
    ({"attention_mask": [np.ones(2, np.int64)]}, dynashape.InputNameError, "no column for input 'input_ids'"),
    ({"input_ids": [np.zeros((2, 2), np.int64)]}, dynashape.InputRankMismatch, "row 0: expected 1 axes per row"),
    ({"input_ids": [np.zeros(2, np.float32)]}, dynashape.InputDtypeMismatch, "row 0: expected numpy int64"),
    ({"input_ids": [np.zeros(70, np.int64)]}, dynashape.InvalidFeedError, "row 0: sequence 70 exceeds the largest"),
    ({"input_ids": [np.zeros(2, np.int64)], "attention_mask": [np.ones(2, np.int64)] * 2},
     dynashape.InvalidFeedError, "different numbers of rows"),
    ({"input_ids": [np.zeros(2, np.int64)], "pooler_output": [1]}, dynashape.InvalidArgumentError,
     "column 'pooler_output' has the name of an output"),
])
def test_batches_that_do_not_fit_the_model_are_typed_errors(batch, error, match):
    with pytest.raises(error, match=match):
        Predictor(bert(), buckets=[16, 64])(batch)


def test_buckets_are_reported_as_given():
    assert str(Predictor(bert(), buckets="16,64").buckets) == "16,64"
    assert Predictor(bert(), buckets=None).buckets == Buckets("none")


def test_a_failing_run_raises_the_sessions_error_saying_which_run_failed():
    p = Predictor(bert(), buckets="pow2")              # 70 tokens run at 128, past the 64 positions
    with pytest.raises(dynashape.ShapeInferenceError, match=r"in a run of 1 row\(s\) padded to sequence 128 "
                                                          r"\(batch 1\): .*cannot be broadcast"):
        p({"input_ids": [np.zeros(70, np.int64)]})
    assert p({"input_ids": [np.zeros(3, np.int64)]})["pooler_output"].shape == (1, BERT["hidden"])


def test_run_local_errors_say_which_input_rows_the_failing_batch_held():
    rows = [np.zeros(3, np.int64)] * 5 + [np.zeros(20, np.int64)]
    with pytest.raises(dynashape.InvalidFeedError, match="in the batch of input rows 4-5: row 1: sequence 20 exceeds"):
        run_local(bert(), {"input_ids": rows}, buckets=[16], rows_per_call=2)
