"""Batch and length axes decided from the symbolic shapes (dynashape.batch.axes), and the models refused."""
from __future__ import annotations

import pytest

import dynashape
from dynashape.batch import BatchAxisError, Predictor
from dynashape.batch.axes import follows_symbol, model_layout
from dynashape.symbolic import dim_broadcast, dim_min, sym
from tests.batch.helpers import batch_sum_model, doubled_length_model, fixed_batch_model
from tests.conftest import shared_path
from tests.models.builders import BERT, bert_encoder


def test_follows_symbol_holds_for_the_symbol_and_for_bert_exports_clamped_form():
    s = sym("sequence")
    assert follows_symbol(s, "sequence")
    assert follows_symbol(dim_broadcast(s, dim_min(s, 512)), "sequence")   # undefined past 512: skipped
    assert not follows_symbol(s * 2, "sequence")
    assert not follows_symbol(s // 4, "sequence")
    assert not follows_symbol(s + 1, "sequence")
    assert not follows_symbol(dim_min(s, 16), "sequence")
    assert not follows_symbol(s * sym("other"), "sequence")


def test_bert_encoder_layout_has_one_length_that_the_hidden_states_follow():
    layout = model_layout(dynashape.InferenceSession(bert_encoder()))
    assert layout.batch_symbol == "batch" and layout.lengths == ("sequence",)
    assert [(i.name, i.row_dims) for i in layout.inputs] == [
        ("input_ids", ("sequence",)), ("attention_mask", ("sequence",)), ("token_type_ids", ("sequence",))]
    hidden, pooled = layout.outputs
    assert (hidden.name, hidden.batch_axis, hidden.follows, hidden.varies) == \
        ("last_hidden_state", 0, ((1, "sequence"),), ())
    assert (pooled.name, pooled.batch_axis, pooled.follows, pooled.ragged) == ("pooler_output", 0, (), False)
    assert BERT["hidden"] == 32


def test_the_zoo_bert_exports_clamped_sequence_axis_is_cut_back():
    layout = model_layout(dynashape.InferenceSession(str(shared_path("zoo", "bert_tiny.onnx"))))
    assert layout.outputs[0].follows == ((1, "sequence"),)


def test_an_output_twice_as_long_as_the_input_refuses_padding_but_runs_exact():
    with pytest.raises(BatchAxisError, match=r"output 'y' axis 1 is 'sequence\*2'.*buckets='exact'"):
        Predictor(doubled_length_model(), buckets="pow2")
    p = Predictor(doubled_length_model(), buckets="exact")
    assert p.layout.outputs[0].varies and p.layout.outputs[0].ragged


def test_a_fixed_batch_dim_is_refused_naming_the_input():
    with pytest.raises(BatchAxisError, match="input 'x' has a fixed batch dim 1"):
        Predictor(fixed_batch_model())


def test_an_output_without_a_batch_axis_is_refused_unless_left_out():
    with pytest.raises(BatchAxisError, match="output 'total': no axis is the batch dim.*output_names"):
        Predictor(batch_sum_model(), buckets="exact")
    assert Predictor(batch_sum_model(), ["y"], buckets="exact").output_names == ["y"]


def test_padding_a_model_without_a_mask_input_warns_that_padded_positions_are_visible():
    with pytest.warns(UserWarning, match=r"no \*mask\* input; padded positions are visible"):
        Predictor(batch_sum_model(), ["y"])


def test_an_unknown_output_name_is_an_input_name_error():
    with pytest.raises(dynashape.InputNameError, match="unknown output name 'nope'"):
        Predictor(bert_encoder(), ["nope"])


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size must be an int >= 1"),
    (dict(pad_values={"input": 1}), r"pad_values names \['input'\]"),
    (dict(pad_values="x"), "must be a number"),
    (dict(buckets=[0]), "buckets must be"),
])
def test_bad_predictor_options_are_invalid_argument_errors(kwargs, match):
    with pytest.raises(dynashape.InvalidArgumentError, match=match):
        Predictor(bert_encoder(), **kwargs)
