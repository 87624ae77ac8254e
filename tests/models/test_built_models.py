"""Real-model behaviour without ../shared: the BERT-like encoder, conv net and GPT-2-like KV-cache
decoder of tests/models/builders.py, each run through changing shapes (repeats included) on ONE
session per allocator and compared with ONNX Runtime (single thread); plan-cache counters and
the symbolic output shapes the session reports are asserted too; the decoder is also run as a
greedy decoding loop, step by step against ONNX Runtime running the same loop."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import dynashape
from dynashape.symbolic import evaluate, free_symbols
from tests.conftest import assert_broadcast_mismatch, assert_runs_match_ort, ort_session
from tests.models import builders
from tests.models.builders import BERT, BERT_POSITION_ADD, CONV, GPT2, bert_feeds, conv_feeds, gpt2_prefill_feeds

ALLOCATORS = ["pool", "naive"]
RTOL, ATOL = 1e-4, 1e-5

#: (batch, sequence): 6 distinct signatures (within the default plan cache of 8), 3 repeats
BERT_SHAPES = [(1, 5), (3, 12), (2, 7), (1, 5), (4, 1), (3, 12), (2, 33), (1, 64), (2, 7)]
#: (batch, height, width): odd and even sizes, non-square, one repeat of the first
CONV_SHAPES = [(1, 32, 32), (2, 17, 23), (3, 9, 40), (1, 32, 32), (2, 64, 48), (1, 5, 7), (2, 17, 23)]


@functools.lru_cache(maxsize=None)
def bert():
    return builders.bert_encoder()


@functools.lru_cache(maxsize=None)
def conv():
    return builders.conv_net()


@functools.lru_cache(maxsize=None)
def gpt2():
    return builders.gpt2_decoder()


@functools.lru_cache(maxsize=None)
def ort(name: str):
    return ort_session({"bert": bert, "conv": conv, "gpt2": gpt2}[name]())


def assert_close(got: list, want: list, what: str) -> None:
    """Same number of outputs, dtypes, shapes; values within RTOL / ATOL."""
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, f"{what}, output {i}: dtype {g.dtype} != ORT {w.dtype}"
        assert g.shape == w.shape, f"{what}, output {i}: shape {g.shape} != ORT {w.shape}"
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{what}, output {i}")


def run_sequence(sess, ort_name: str, feeds_list: list, label) -> None:
    """Run every feed dict on ``sess`` first, then compare each run's outputs with ORT's (a
    later run must not overwrite what an earlier one returned)."""
    results = [sess.run(None, feeds) for feeds in feeds_list]
    for k, (feeds, got) in enumerate(zip(feeds_list, results)):
        assert_close(got, ort(ort_name).run(None, feeds), f"run {k} ({label(feeds)})")


def assert_cache_counts(sess, n_runs: int, n_signatures: int) -> None:
    stats = sess.stats
    assert stats.runs == n_runs and stats.failed_runs == 0
    assert stats.cache_misses == n_signatures, stats
    assert stats.cache_hits == n_runs - n_signatures, stats
    assert stats.symbolic_plans == n_signatures and stats.resolved_plans == 0, stats


def output_dim(sess, output: int, axis: int):
    """The symbolic dim (an int or an Expr) inferred for an output axis."""
    return sess.symbolic.shapes[sess.graph.slot[sess.get_inferred_outputs()[output].name]][axis]


# --- BERT ---------------------------------------------------------------------------------
@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_bert_encoder_matches_ort_through_changing_shapes(allocator):
    sess = dynashape.InferenceSession(bert(), allocator=allocator)
    feeds_list = [bert_feeds(b, s) for b, s in BERT_SHAPES]
    run_sequence(sess, "bert", feeds_list, lambda f: f"batch, seq = {f['input_ids'].shape}")
    assert_cache_counts(sess, len(BERT_SHAPES), len(set(BERT_SHAPES)))
    assert (sess.arena_bytes > 0) == (allocator == "pool")


def test_bert_encoder_repeated_signature_is_a_cache_hit_with_new_values():
    sess = dynashape.InferenceSession(bert())
    first = sess.run(None, bert_feeds(2, 9, seed=1))
    again = bert_feeds(2, 9, seed=2)          # same signature, other token ids
    second = sess.run(None, again)
    assert sess.stats.cache_misses == 1 and sess.stats.cache_hits == 1
    assert_close(second, ort("bert").run(None, again), "second run")
    assert not np.allclose(first[0], second[0])
    assert_close(first, ort("bert").run(None, bert_feeds(2, 9, seed=1)), "first run, after the second")


def test_bert_encoder_longer_than_max_positions_is_a_broadcast_error_and_the_session_goes_on():
    """ORT fails too (its Add cannot broadcast 65 by 64); the run raises, the next one works."""
    sess = dynashape.InferenceSession(bert())
    sess.run(None, bert_feeds(2, 8))
    assert_broadcast_mismatch(sess, bert_feeds(1, BERT["max_pos"] + 1), BERT_POSITION_ADD)
    feeds = bert_feeds(2, 8, seed=3)
    assert_close(sess.run(None, feeds), ort("bert").run(None, feeds), "after the failed run")
    stats = sess.stats
    assert (stats.runs, stats.failed_runs, stats.cache_hits) == (2, 1, 1)


def test_bert_encoder_reports_symbolic_output_shapes():
    sess = dynashape.InferenceSession(bert())
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == [
        (n, ["batch", "sequence"], "tensor(int64)") for n in ("input_ids", "attention_mask", "token_type_ids")]
    hidden, pooled = sess.get_outputs()
    assert (pooled.name, pooled.shape, pooled.type) == ("pooler_output", ["batch", BERT["hidden"]], "tensor(float)")
    assert hidden.name == "last_hidden_state" and hidden.type == "tensor(float)"
    assert hidden.shape[0] == "batch" and hidden.shape[2] == BERT["hidden"]
    # the sequence axis comes through the position-id Slice of a max_pos constant: the session
    # reports it as broadcast(sequence, min(sequence, max_pos)), which is sequence up to max_pos
    seq_dim = output_dim(sess, 0, 1)
    assert isinstance(hidden.shape[1], str) and free_symbols(seq_dim) == {"sequence"}
    for s in (1, 7, BERT["max_pos"]):
        assert evaluate(seq_dim, {"sequence": s, "batch": 3}) == s


# --- conv net -----------------------------------------------------------------------------
@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_conv_net_matches_ort_through_changing_shapes(allocator):
    sess = dynashape.InferenceSession(conv(), allocator=allocator)
    feeds_list = [conv_feeds(*shape) for shape in CONV_SHAPES]
    run_sequence(sess, "conv", feeds_list, lambda f: f"pixel_values {f['pixel_values'].shape}")
    assert_cache_counts(sess, len(CONV_SHAPES), len(set(CONV_SHAPES)))


def test_conv_net_on_the_conftest_helper():
    """The same model through assert_runs_match_ort (each run compared at once, tight tolerances)."""
    sess = assert_runs_match_ort(conv(), [conv_feeds(b, h, w) for b, h, w in [(2, 12, 12), (1, 13, 21), (2, 12, 12)]],
                                 allocator="naive")
    assert sess.stats.cache_hits == 1


def test_conv_net_reports_symbolic_output_shapes():
    sess = dynashape.InferenceSession(conv())
    logits, features = sess.get_outputs()
    assert (logits.name, logits.shape) == ("logits", ["batch", CONV["classes"]])
    assert features.name == "features" and features.shape[:2] == ["batch", CONV["width"]]
    assert all(isinstance(d, str) for d in features.shape[2:])
    h_dim, w_dim = output_dim(sess, 1, 2), output_dim(sess, 1, 3)
    assert free_symbols(h_dim) == {"height"} and free_symbols(w_dim) == {"width"}
    for b, h, w in CONV_SHAPES:
        got = sess.run(["features"], conv_feeds(b, h, w))[0].shape
        env = {"batch": b, "height": h, "width": w}
        assert got == (b, CONV["width"], evaluate(h_dim, env), evaluate(w_dim, env))
        assert got[2:] == (-((-h // 2) // 2), -((-w // 2) // 2))   # ceil(ceil(x / 2) / 2)


# --- GPT-2 decoder ------------------------------------------------------------------------
def _decoder_label(f):
    return f"input_ids {f['input_ids'].shape}, past {f['past_key_0'].shape[2]}"


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_gpt2_decoder_prefill_and_cached_steps_match_ort(allocator):
    """Prefill (empty cache) at two prompt lengths and batches, left padding, steps with a
    cache, repeats."""
    sess = dynashape.InferenceSession(gpt2(), allocator=allocator)
    shapes = [(1, 6, 0, False), (3, 4, 0, True), (2, 1, 5, True), (1, 6, 0, False), (3, 3, 4, False),
              (2, 1, 5, True)]
    feeds_list = [gpt2_prefill_feeds(b, s, past, pad=pad) for b, s, past, pad in shapes]
    run_sequence(sess, "gpt2", feeds_list, _decoder_label)
    assert_cache_counts(sess, len(shapes), len({s[:3] for s in shapes}))


def test_gpt2_decoder_reports_symbolic_output_shapes():
    sess = dynashape.InferenceSession(gpt2())
    outputs = sess.get_inferred_outputs()
    heads, head_dim = GPT2["heads"], GPT2["hidden"] // GPT2["heads"]
    assert outputs[0].name == "logits" and outputs[0].shape == ["batch", "sequence", GPT2["vocab"]]
    # presents are Concat(past, new): past_sequence + sequence (not the attention mask's symbol)
    for out in outputs[1:]:
        assert out.shape == ["batch", heads, "past_sequence + sequence", head_dim], out
    assert [o.name for o in outputs[1:]] == [f"present_{kv}_{i}" for i in range(GPT2["layers"])
                                             for kv in ("key", "value")]
    # get_outputs() reports the declared dims, as onnxruntime; symbolic_shapes the inferred ones
    declared = sess.get_outputs()
    assert [o.shape for o in declared[1:]] == [["batch", heads, "total_sequence", head_dim]] * (2 * GPT2["layers"])
    assert sess.symbolic_shapes["present_key_0"] == ["batch", heads, "past_sequence + sequence", head_dim]
    assert sess.symbolic_shapes["input_ids"] == ["batch", "sequence"]


def greedy_decode(run, prompt: np.ndarray, mask: np.ndarray, steps: int):
    """Greedy decoding with the KV cache: step 1 feeds the prompt with empty pasts, every later
    step the argmax of the previous last logits, the presents as pasts and a mask one longer.
    Returns (tokens [batch, steps], logits per step)."""
    batch = prompt.shape[0]
    heads, head_dim = GPT2["heads"], GPT2["hidden"] // GPT2["heads"]
    empty = np.zeros((batch, heads, 0, head_dim), np.float32)
    feeds = {"input_ids": prompt, "attention_mask": mask}
    for layer in range(GPT2["layers"]):
        feeds[f"past_key_{layer}"] = feeds[f"past_value_{layer}"] = empty
    tokens, all_logits = [], []
    for _ in range(steps):
        logits, *presents = run(feeds)
        all_logits.append(logits)
        token = logits[:, -1].argmax(-1)
        tokens.append(token)
        feeds = {"input_ids": token[:, None].astype(np.int64),
                 "attention_mask": np.concatenate([feeds["attention_mask"], np.ones((batch, 1), np.int64)], 1)}
        for layer in range(GPT2["layers"]):
            feeds[f"past_key_{layer}"], feeds[f"past_value_{layer}"] = presents[2 * layer], presents[2 * layer + 1]
    return np.stack(tokens, 1), all_logits


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_gpt2_greedy_decoding_matches_ort_step_by_step(allocator):
    steps = 8
    # seed 2: both rows decode varied tokens, the top-2 logits at least 0.3 apart at every step
    prompt = np.random.default_rng(2).integers(0, GPT2["vocab"], (2, 5), dtype=np.int64)
    mask = np.ones((2, 5), np.int64)
    mask[1, :2] = 0                                  # row 1 is left-padded
    ort_sess = ort("gpt2")
    want_tokens, want_logits = greedy_decode(lambda f: ort_sess.run(None, f), prompt, mask, steps)
    sess = dynashape.InferenceSession(gpt2(), allocator=allocator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # no dim_param hint warnings, no overflow
        tokens, logits = greedy_decode(lambda f: sess.run(None, f), prompt, mask, steps)
    np.testing.assert_array_equal(tokens, want_tokens)
    for step, (got, want) in enumerate(zip(logits, want_logits)):
        assert got.shape == want.shape == (2, 5 if step == 0 else 1, GPT2["vocab"])
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"step {step + 1}")
    assert all(len(set(row)) > 4 for row in tokens.tolist())   # the loop is not stuck on one token
    assert_cache_counts(sess, steps, steps)          # every step a new past length

    # the same loop again on the same session: every signature is now a cache hit
    again, again_logits = greedy_decode(lambda f: sess.run(None, f), prompt, mask, steps)
    np.testing.assert_array_equal(again, tokens)
    np.testing.assert_array_equal(again_logits[-1], logits[-1])
    assert_cache_counts(sess, 2 * steps, steps)
