"""Greedy decoding of the KV-cache decoders of ../shared/zoo/zoo2 (the protocol of its README):
64 steps on one session, every step a new signature; tokens equal to ONNX Runtime's and
logits within rtol 1e-3 / atol 1e-4. optimum's merged decoder runs its whole graph in an If
and declares attention_mask as [batch_size, sequence_length] (a hint it contradicts)."""
from __future__ import annotations

import functools
import importlib.util
import json
import sys
import warnings

import numpy as np
import pytest

import dynashape
from tests.conftest import REPO, SHARED, ort_session, shared_path

STEPS = 64


def _catalog() -> dict:
    path = SHARED / "zoo" / "zoo2" / "zoo2.json"
    if not path.exists():
        return {}
    return {k: v for k, v in json.loads(path.read_text()).items() if "decode" in v}


@functools.lru_cache(maxsize=None)
def _decoding():
    spec = importlib.util.spec_from_file_location("dynashape_bench_decoding", REPO / "benchmarks" / "_decoding.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("key", sorted(_catalog()) or ["gpt2_kv"])
def test_greedy_decoding_matches_onnxruntime(key):
    shared_path("zoo", "zoo2", "zoo2.json")
    entry = _catalog()[key]
    path = shared_path("zoo", "zoo2", entry["file"])
    dec = _decoding()
    ort_sess = ort_session(path)
    want_tokens, _, want_logits = dec.greedy_decode(lambda f: ort_sess.run(None, f),
                                                    dec.decode_info(ort_sess, entry["decode"]), steps=STEPS)
    sess = dynashape.InferenceSession(str(path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokens, _, logits = dec.greedy_decode(lambda f: sess.run(None, f), dec.decode_info(sess, entry["decode"]),
                                              steps=STEPS)
    np.testing.assert_array_equal(tokens, want_tokens)
    for step, (got, want) in enumerate(zip(logits, want_logits)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=f"{key}, step {step + 1}")
    stats = sess.stats
    assert stats.runs == STEPS and stats.failed_runs == 0 and stats.resolved_plans == 0
    hints = [w for w in caught if "declared dim_params are hints" in str(w.message)]
    if key.startswith("optimum/"):
        # warned once, for the one symbol the with-past feeds contradict
        assert len(hints) == 1 and "sequence_length" in str(hints[0].message)
    else:
        assert hints == []
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning) and "overflow" in str(w.message)]


def test_the_merged_decoder_is_an_error_with_strict_dim_params():
    shared_path("zoo", "zoo2", "zoo2.json")
    entry = _catalog()["optimum/gpt2_merged"]
    path = shared_path("zoo", "zoo2", entry["file"])
    dec = _decoding()
    sess = dynashape.InferenceSession(str(path), strict_dim_params=True)
    with pytest.raises(RuntimeError, match=r"decoding step 2 failed: DimParamMismatch: dim_param 'sequence_length' "
                                           r"is bound to 1 by input 'input_ids' axis 1 and to 9 by input "
                                           r"'attention_mask'") as info:
        dec.greedy_decode(lambda f: sess.run(None, f), dec.decode_info(sess, entry["decode"]), steps=2)
    assert isinstance(info.value.__cause__, dynashape.DimParamMismatch)
