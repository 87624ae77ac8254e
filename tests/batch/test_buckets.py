"""Bucket choice, run planning, padding and cutting back (dynashape.batch.buckets), on plain numbers."""
from __future__ import annotations

import numpy as np
import pytest

import dynashape
from dynashape.batch.axes import BatchAxisError, ModelLayout, OutputLayout
from dynashape.batch.buckets import Buckets, Run, batch_bucket, cut_rows, pad_rows, parse_buckets, plan_runs


@pytest.mark.parametrize("spec, mode, lengths", [
    ("pow2", "pow2", ()), ("exact", "exact", ()), (None, "none", ()), ("none", "none", ()),
    ([64, 16, 32, 16], "explicit", (16, 32, 64)), ("16, 32,64", "explicit", (16, 32, 64)), ((8,), "explicit", (8,)),
])
def test_parse_buckets_accepts_the_modes_and_sorts_explicit_lengths(spec, mode, lengths):
    assert parse_buckets(spec) == Buckets(mode, lengths)


@pytest.mark.parametrize("spec", ["", "pow3", [0, 16], [-4], [1.5], "16,x", [], 7, [True]])
def test_parse_buckets_refuses_anything_else_with_invalid_argument_error(spec):
    with pytest.raises(dynashape.InvalidArgumentError, match="buckets must be"):
        parse_buckets(spec)


def test_pow2_fits_the_smallest_power_of_two_that_holds_the_length():
    b = Buckets("pow2")
    assert [b.fit(n) for n in (0, 1, 2, 3, 4, 5, 63, 64, 65, 100)] == [1, 1, 2, 4, 4, 8, 64, 64, 128, 128]


def test_explicit_buckets_fit_the_smallest_listed_length_and_refuse_longer_rows():
    b = parse_buckets([16, 32, 64])
    assert [b.fit(n) for n in (1, 16, 17, 33, 64)] == [16, 16, 32, 64, 64]
    with pytest.raises(dynashape.InvalidFeedError, match="row 3: sequence 65 exceeds the largest bucket 64"):
        b.fit(65, "row 3: sequence")


def test_batch_bucket_rounds_up_to_a_power_of_two_capped_at_the_batch_size():
    assert [batch_bucket(n, 32) for n in (1, 2, 3, 5, 17, 32)] == [1, 2, 4, 8, 32, 32]
    assert [batch_bucket(n, 24) for n in (9, 17, 24)] == [16, 24, 24]


def test_plan_runs_groups_by_bucket_in_order_of_first_row_and_pads_the_batch():
    lengths = [(3,), (30,), (4,), (2,), (31,), (1,)]
    runs = plan_runs(lengths, Buckets("pow2"), batch_size=2)
    assert runs == [Run((0, 2), 2, (4,)), Run((1, 4), 2, (32,)), Run((3,), 1, (2,)), Run((5,), 1, (1,))]
    runs = plan_runs([(5,)] * 5, Buckets("pow2"), batch_size=4)
    assert runs == [Run((0, 1, 2, 3), 4, (8,)), Run((4,), 1, (8,))]
    assert plan_runs([(5,)] * 3, Buckets("pow2"), batch_size=4) == [Run((0, 1, 2), 4, (8,))]
    assert plan_runs([(5,)] * 3, Buckets("pow2"), batch_size=4, pad_batch=False) == [Run((0, 1, 2), 3, (8,))]


def test_plan_runs_without_bucketing_pads_each_chunk_to_its_longest_row_in_input_order():
    runs = plan_runs([(3,), (30,), (4,), (2,), (5,)], Buckets("none"), batch_size=2)
    assert runs == [Run((0, 1), 2, (30,)), Run((2, 3), 2, (4,)), Run((4,), 1, (5,))]


def test_plan_runs_exact_groups_equal_lengths_only_and_names_the_row_past_the_last_bucket():
    assert plan_runs([(3, 1), (3, 2), (3, 1)], Buckets("exact"), 8, pad_batch=False) == \
        [Run((0, 2), 2, (3, 1)), Run((1,), 1, (3, 2))]
    with pytest.raises(dynashape.InvalidFeedError, match="row 1: tokens 9 exceeds"):
        plan_runs([(3,), (9,)], parse_buckets([4, 8]), 8, labels=["tokens"])


def test_pad_rows_fills_the_tail_and_repeats_the_first_row_in_the_extra_batch_slots():
    rows = [np.array([1, 2, 3]), np.array([4])]
    out = pad_rows(rows, (4,), -1, np.dtype(np.int64), batch=3)
    np.testing.assert_array_equal(out, [[1, 2, 3, -1], [4, -1, -1, -1], [1, 2, 3, -1]])
    assert out.dtype == np.int64
    same = pad_rows([np.ones((2, 2), np.float32)] * 2, (2, 2), 0, np.dtype(np.float32), batch=2)
    assert same.shape == (2, 2, 2) and same.dtype == np.float32


def _layout(follows, batch_axis=0, rank=3) -> tuple[ModelLayout, OutputLayout]:
    out = OutputLayout("y", rank, batch_axis, follows, ())
    return ModelLayout("batch", ("sequence",), {"sequence": "sequence"}, (), (out,)), out


def test_cut_rows_slices_each_row_on_its_batch_axis_and_cuts_following_axes_to_its_length():
    model, out = _layout(((1, "sequence"),), batch_axis=0)          # [batch, sequence, 2]
    y = np.arange(3 * 4 * 2).reshape(3, 4, 2)
    rows = cut_rows(y, out, model, Run((5, 7), 3, (4,)), {5: (2,), 7: (4,)})
    np.testing.assert_array_equal(rows[0], y[0, :2])
    np.testing.assert_array_equal(rows[1], y[1, :4])
    assert not np.shares_memory(rows[0], y)
    model, out = _layout(((2, "sequence"),), batch_axis=1)          # [4, batch, sequence]
    y = np.arange(4 * 2 * 8).reshape(4, 2, 8)
    rows = cut_rows(y, out, model, Run((0, 1), 2, (8,)), [(3,), (8,)])
    np.testing.assert_array_equal(rows[0], y[:, 0, :3])
    np.testing.assert_array_equal(rows[1], y[:, 1, :8])


def test_cut_rows_refuses_an_output_whose_shape_contradicts_the_run():
    model, out = _layout(((1, "sequence"),))
    with pytest.raises(BatchAxisError, match="axis 1 is 5 long for a padded 'sequence' of 4"):
        cut_rows(np.zeros((2, 5, 1)), out, model, Run((0, 1), 2, (4,)), [(1,), (2,)])
    with pytest.raises(BatchAxisError, match="for a run of 3 rows"):
        cut_rows(np.zeros((2, 4, 1)), out, model, Run((0, 1), 3, (4,)), [(1,), (2,)])
