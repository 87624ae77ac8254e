"""Compiled kernels never block a run (issue 23): while numba starts in a background thread
the compiled kernels take their numpy path, the loop after; the results agree within the
tolerance the compiled kernels are tested to; ``wait_for_compiled_kernels=True`` waits.
Each case runs in a fresh interpreter (numba not started yet)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")
if not __import__("dynashape.ops_builtin.fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)

_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from onnx import TensorProto, helper
    import dynashape
    from dynashape.ops_builtin.fast import tiering
    from dynashape.ops_builtin.fast import softmax as fast_softmax

    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["n", 64])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["n", 64])
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    wait = sys.argv[1] == "wait"
    s = dynashape.InferenceSession(m, wait_for_compiled_kernels=wait)
    assert s.program.steps[0].kernel.plugin == "fast"
    feed = np.random.default_rng(0).standard_normal((8, 64))
    t0 = time.perf_counter()
    first = s.run(None, {"x": feed})[0]
    first_ms = (time.perf_counter() - t0) * 1e3
    ready_after_first = tiering.NUMBA.is_ready
    assert tiering.wait_until_ready(60)
    calls = []
    real = fast_softmax.loops.sub_row_max
    fast_softmax.loops.sub_row_max = lambda *a: calls.append(1) or real(*a)
    later = s.run(None, {"x": feed})[0]
    e = np.exp(feed - feed.max(axis=-1, keepdims=True))
    expected = e / e.sum(axis=-1, keepdims=True)
    print(json.dumps({"ready_after_first": ready_after_first, "loop_ran_later": bool(calls), "first_ms": first_ms,
                      "first_err": float(np.abs(first - expected).max()),
                      "later_err": float(np.abs(later - expected).max()),
                      "first_vs_later": float(np.abs(first - later).max())}))
""")


def _run(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DYNASHAPE_COMPILED_WAIT"}
    out = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_first_run_takes_the_numpy_path_while_numba_starts_and_the_loop_after():
    r = _run("background")
    assert not r["ready_after_first"]            # the run did not wait for numba
    assert r["loop_ran_later"]                   # numba up: the compiled loop runs
    assert r["first_err"] < 1e-12 and r["later_err"] < 1e-12
    assert r["first_vs_later"] < 1e-12           # the swap stays within the kernels' tolerance


def test_a_session_that_waits_runs_the_compiled_loop_from_the_first_run():
    r = _run("wait")
    assert r["ready_after_first"] and r["loop_ran_later"]
    assert r["first_err"] < 1e-12 and r["first_vs_later"] == 0.0   # one kernel throughout: bit-identical
