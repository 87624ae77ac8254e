"""``dynashape ops`` (and docs/OPERATORS.md), ``bench`` and ``profile``: real values, and
bad arguments answered by one ``Error:`` line, never a traceback."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.cli import main
from dynashape.cli.bench import bumped_feeds, spread
from dynashape.cli.profile import after_warmup, format_op_table, op_type_table
from dynashape.oplist import BUILTIN_PLUGIN, MARKDOWN_COMMAND, op_entries, render_markdown
from dynashape.records import OpLibrary, same_dtype
from dynashape.registry import get_registry

REPO = Path(__file__).resolve().parents[2]
OP_TYPES = {"Relu", "MatMul", "Add", "Gather"}


def _run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def _invoke(*args):
    """(exit code, stdout): stderr (a broken third-party plugin's warning) is left out."""
    result = _run(*args)
    return result.exit_code, result.stdout


def _assert_one_line_error(args, *needles, code=None):
    """The command fails with exactly one ``Error:`` line holding ``needles`` and no traceback."""
    result = _run(*args)
    exit_code, out = result.exit_code, result.output
    assert exit_code != 0 and (code is None or exit_code == code), out
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out
    assert all(n in errors[0] for n in needles), errors[0]
    return errors[0]


@pytest.fixture
def tiny(tmp_path):
    """x[batch, 4] -> Relu -> MatMul W[4, 16] -> Add B -> Gather(axis 1, idx[n]) -> y[batch, n]."""
    inits = [numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(4, 16) / 64, "W"),
             numpy_helper.from_array(np.ones(16, np.float32), "B")]
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("MatMul", ["a", "W"], ["b"], name="matmul"),
             helper.make_node("Add", ["b", "B"], ["c"], name="add"),
             helper.make_node("Gather", ["c", "idx"], ["y"], name="gather", axis=1)]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
                                          helper.make_tensor_value_info("idx", TensorProto.INT64, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])], inits)
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    idx = tmp_path / "idx.npy"
    np.save(idx, np.array([0, 5, 15], np.int64))
    return str(path), f"idx={idx}"


@pytest.fixture
def test_plugin():
    """A plugin of domain ``test.cli_tools``: op ``Twice`` versions 1 and 3."""
    lib = OpLibrary()

    @lib.op("Twice", since_version=(1, 3), domain="test.cli_tools", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Twice", domain="test.cli_tools")
    def _twice(inputs, outputs, ctx):
        np.multiply(inputs[0], 2, out=outputs[0])

    name = dynashape.register_plugin(lib.plugin(), name="cli-tools-test")
    yield name
    dynashape.unregister_plugin(name)


# --- ops ---------------------------------------------------------------------------

def test_ops_json_lists_gather_with_its_versions_and_plugin():
    code, out = _invoke("ops", "--format", "json")
    assert code == 0, out
    entries = json.loads(out)
    gather = next(e for e in entries if e["op_type"] == "Gather" and e["domain"] == "ai.onnx")
    assert gather["since_versions"] == [1, 11, 13]
    assert gather["plugin"] == BUILTIN_PLUGIN == "dynashape.ops_builtin" and gather["plugins"] == [BUILTIN_PLUGIN]
    assert gather["kernels"] == [{"since_version": 1, "end_version": None, "device": "cpu", "dtypes": None,
                                  "priority": 0, "plugin": BUILTIN_PLUGIN}]
    add = next(e for e in entries if e["op_type"] == "Add")
    assert add["since_versions"] == [1, 6, 7, 13, 14]
    keys = [(e["domain"], e["op_type"]) for e in entries]
    assert keys == sorted(keys) and len(keys) == len(set(keys)) and len(keys) >= 130


def test_ops_domain_and_plugin_filters(test_plugin):
    code, out = _invoke("ops", "--domain", "test.cli_tools", "--format", "json")
    assert code == 0, out
    twice = [e for e in json.loads(out)]
    assert [(e["domain"], e["op_type"], e["since_versions"], e["plugin"]) for e in twice] == \
        [("test.cli_tools", "Twice", [1, 3], "cli-tools-test")]
    assert twice[0]["kernels"][0]["since_version"] == 1 and twice[0]["kernels"][0]["end_version"] is None
    default = json.loads(_invoke("ops", "--domain", "ai.onnx", "--format", "json")[1])
    assert json.loads(_invoke("ops", "--domain", "", "--format", "json")[1]) == default
    assert {e["domain"] for e in default} == {"ai.onnx"} and "Twice" not in {e["op_type"] for e in default}
    builtin = json.loads(_invoke("ops", "--plugin", BUILTIN_PLUGIN, "--format", "json")[1])
    only_builtin = [dict(e, kernels=[k for k in e["kernels"] if k["plugin"] == BUILTIN_PLUGIN]) for e in default
                    if BUILTIN_PLUGIN in e["plugins"]]   # (the example plugin adds ai.onnx ops of its own)
    assert [e for e in builtin if e["domain"] == "ai.onnx"] == only_builtin
    assert {e["domain"] for e in builtin} == {"ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training",
                                              "dynashape"}
    code, out = _invoke("ops", "--domain", "test.cli_tools")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["domain", "op_type", "versions", "plugin"] and "kernels" in lines[0]
    assert lines[1].split() == ["test.cli_tools", "Twice", "1,", "3", "cli-tools-test", "cli-tools-test"]
    assert lines[-1] == "1 operators (2 schema versions) in 1 domain(s) from cli-tools-test (1)"


def test_ops_table_counts_every_operator():
    code, out = _invoke("ops")
    assert code == 0, out
    n = len(json.loads(_invoke("ops", "--format", "json")[1]))
    rows = out.splitlines()[1:-2]
    assert len(rows) == n and out.splitlines()[-2] == ""
    assert re.match(rf"^{n} operators \(\d+ schema versions\) in \d+ domain\(s\) from .*{BUILTIN_PLUGIN} \(\d+\)",
                    out.splitlines()[-1])


def test_operators_md_is_current(test_plugin):
    """docs/OPERATORS.md is the builtin plugin's listing (other plugins, like the one this
    test registers or any installed one, are left out). Regenerate with MARKDOWN_COMMAND."""
    committed = (REPO / "docs" / "OPERATORS.md").read_text(encoding="utf-8")
    expected = render_markdown(op_entries(get_registry(), plugins=[BUILTIN_PLUGIN]), [BUILTIN_PLUGIN])
    assert committed == expected, f"docs/OPERATORS.md is stale: regenerate it with `{MARKDOWN_COMMAND}`"
    code, out = _invoke(*MARKDOWN_COMMAND.split(">")[0].split()[1:])
    assert code == 0 and out == committed
    assert MARKDOWN_COMMAND in committed.splitlines()[2] and "do not edit" in committed.splitlines()[2]
    assert "| Gather | 1, 11, 13 | 1+ | dynashape.ops_builtin |" in committed.splitlines()
    assert "Twice" not in committed


@pytest.mark.parametrize("args, needles", [
    (["--domain", "no.such.domain"], ["--domain", "no.such.domain", "ai.onnx"]),
    (["--plugin", "no-such-plugin"], ["--plugin", "no-such-plugin", BUILTIN_PLUGIN]),
    (["--format", "yaml"], ["--format", "yaml"]),
])
def test_ops_bad_arguments(args, needles):
    _assert_one_line_error(["ops", *args], *needles, code=2)


# --- bench -------------------------------------------------------------------------

def _value(out: str, pattern: str) -> tuple[float, ...]:
    m = re.search(pattern, out, re.MULTILINE)
    assert m, f"{pattern!r} not in:\n{out}"
    return tuple(float(g) for g in m.groups())


def test_bench_prints_median_spread_ratio_and_new_shape_costs(tiny):
    path, idx = tiny
    code, out = _invoke("bench", path, "--dim", "batch=3", "--input", idx, "--repeat", "7", "--warmup", "1",
                        "--threads", "2", "--compare-ort")
    assert code == 0, out
    assert "inputs:          x float32[3, 4], idx int64[3]" in out
    med, p10, p90 = _value(out, r"^dynashape: +median ([\d.]+) ms  p10 ([\d.]+) ms  p90 ([\d.]+) ms  "
                                r"\(7 runs after 1 warm-up, 2 thread\(s\)\)$")
    assert 0 < p10 <= med <= p90
    ort_med, ort_p10, ort_p90 = _value(out, r"^onnxruntime: +median ([\d.]+) ms  p10 ([\d.]+) ms  p90 ([\d.]+) ms  "
                                            r"\(7 runs\)$")
    assert 0 < ort_p10 <= ort_med <= ort_p90
    (ratio,) = _value(out, r"^ratio: +dynashape / onnxruntime = ([\d.]+)x \(medians")
    half = 0.0005   # the medians are printed to 3 decimals: the ratio of the printed values may be off by that
    assert (med - half) / (ort_med + half) - 0.01 <= ratio <= (med + half) / max(ort_med - half, 1e-9) + 0.01
    first, planning, cached = _value(
        out, r"^new shape: +first run of a fresh session ([\d.]+) ms \(planning ([\d.]+) ms\) "
             r"vs cached median ([\d.]+) ms ")
    assert cached == med and first > planning > 0
    if first > p90:
        (extra,) = _value(out, r"^new shape: .* = \+([\d.]+) ms \(")
        assert extra == pytest.approx(first - med, abs=0.002)
    else:
        assert "= no more than a cached run (within their p10-p90)" in out
    warm_first, warm_med = _value(out, r"^warm new shape: +batch 3 -> 4: first run ([\d.]+) ms "
                                       r"vs its cached median ([\d.]+) ms")
    assert warm_first > 0 and warm_med > 0


def test_bench_without_warmup_times_the_cold_first_run_with_the_others(tiny, monkeypatch):
    # a scripted clock: timing on this machine is noise, the arithmetic is what is tested
    import dynashape.cli.bench as bench_module

    clock = iter([50.0, 1.0, 0.5, 2.0, 0.5, 3.0, 0.5])   # cold run, then (dynashape, ORT) x 3

    def scripted(fn):
        fn()
        return next(clock, 1.0)

    monkeypatch.setattr(bench_module, "timed_ms", scripted)
    path, idx = tiny
    code, out = _invoke("bench", path, "--dim", "batch=3", "--input", idx, "--repeat", "3", "--no-warmup",
                        "--compare-ort")
    assert code == 0, out
    # the timed runs are the cold one and the first two after it (the third is dropped)
    assert "dynashape:       median 2.000 ms  p10 1.200 ms  p90 40.400 ms  " \
           "(3 runs, the first (cold) included, 1 thread(s))" in out
    assert "onnxruntime:     median 0.500 ms  p10 0.500 ms  p90 0.500 ms  (3 runs)" in out
    assert "ratio:           dynashape / onnxruntime = 4.00x" in out
    (first,) = _value(out, r"^new shape: +first run of a fresh session ([\d.]+) ms")
    assert first == 50.0
    assert "vs cached median 2.000 ms = +48.000 ms (25.0x)" in out


def test_bench_never_prints_a_negative_cost_for_a_new_shape(tiny, monkeypatch):
    """A first run measured below the cached median is noise: it is said to cost no more."""
    import dynashape.cli.bench as bench_module

    clock = iter([1.0, 2.0, 2.0, 2.0, 1.5, 2.0, 2.0, 2.0])   # cold run 1 ms, then 2 ms runs

    def scripted(fn):
        fn()
        return next(clock, 2.0)

    monkeypatch.setattr(bench_module, "timed_ms", scripted)
    path, idx = tiny
    code, out = _invoke("bench", path, "--dim", "batch=3", "--input", idx, "--repeat", "3", "--warmup", "0")
    assert code == 0, out
    line = next(ln for ln in out.splitlines() if ln.startswith("new shape:"))
    assert line.endswith("vs cached median 2.000 ms = no more than a cached run (within their p10-p90)"), line
    assert " -" not in line


def test_bench_helpers():
    assert spread(range(1, 11)) == pytest.approx((5.5, 1.9, 9.1))
    sess = dynashape.InferenceSession(helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, "batch"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)]))
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)}
    label, grown = bumped_feeds(sess, feeds)
    assert label == "batch 3 -> 4"
    assert grown["a"].tolist() == [[0, 1, 2, 2], [3, 4, 5, 5]] and grown["b"].tolist() == [1, 1, 1, 1]
    assert np.allclose(sess.run(None, grown)[0], grown["a"] + grown["b"])


def test_bench_bad_arguments(tiny, tmp_path):
    path, _ = tiny
    _assert_one_line_error(["bench", path, "--repeat", "0"], "--repeat", code=2)
    _assert_one_line_error(["bench", path, "--warmup", "-1"], "--warmup", code=2)
    _assert_one_line_error(["bench", str(tmp_path / "missing.onnx")], "missing.onnx", "does not exist", code=2)
    _assert_one_line_error(["bench", path, "--dim", "batch"], "NAME=VALUE", code=2)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    _assert_one_line_error(["bench", str(broken)], code=1)


# --- profile -----------------------------------------------------------------------

def test_profile_writes_a_trace_covering_every_op_type(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("DYNASHAPE_OPTIMIZE", "0")   # the model's own nodes (MatMul + Add unfused)
    path, idx = tiny
    trace = tmp_path / "trace.json"
    code, out = _invoke("profile", path, "--dim", "batch=3", "--input", idx, "--repeat", "4", "-o", trace)
    assert code == 0, out
    events = json.loads(trace.read_text())
    nodes = [e for e in events if e["cat"] == "Node"]
    assert {e["args"]["op_name"] for e in nodes} == OP_TYPES
    # the trace holds the two warm-up runs too (the first plans the shape, the second waits for
    # the compiled kernels), the table only the four after them
    assert sorted(e["name"] for e in nodes) == sorted(f"{n}_kernel_time" for n in
                                                      ("relu", "matmul", "add", "gather") for _ in range(6))
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in nodes)
    assert sum(e["cat"] == "Session" and e["name"] == "model_run" for e in events) == 6
    lines = out.splitlines()
    assert lines[0].split() == ["op", "type", "calls", "total", "ms", "%", "total", "mean", "µs"]
    rows = {line.split()[0]: line.split() for line in lines[1:5]}
    assert set(rows) == OP_TYPES and all(r[1] == "4" for r in rows.values())
    total = lines[5].split()
    assert total[:2] == ["total", "16"] and total[3] == "100.0%"
    timed = after_warmup(events, 2)
    assert float(total[2]) == pytest.approx(sum(e["dur"] for e in timed if e["cat"] == "Node") / 1e3, abs=0.002)
    assert sum(float(r[3].rstrip("%")) for r in rows.values()) == pytest.approx(100.0, abs=0.3)
    assert "inputs: x float32[3, 4], idx int64[3]" in out
    assert re.search(r"^4 runs after 2 warm-up run\(s\) \(the first: [\d.]+ ms, not in the table\): [\d.]+ ms in "
                     r"model_run, [\d.]+ ms in nodes \([\d.]+%\), 0.000 ms in 0 plan\(s\)", out, re.MULTILINE)
    assert f"trace: {trace} ({len(events)} events;" in out
    code, out = _invoke("profile", path, "--dim", "batch=3", "--input", idx, "--repeat", "2", "--no-warmup",
                        "-o", trace)
    assert code == 0, out
    assert sum(e["cat"] == "Session" and e["name"] == "model_run" for e in json.loads(trace.read_text())) == 2
    assert re.search(r"^2 runs \(the first, cold, included: [\d.]+ ms\): .* in 1 plan\(s\)", out, re.MULTILINE)


def test_after_warmup_keeps_the_events_that_start_after_the_warmup_runs():
    run = lambda ts, dur: {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}   # noqa: E731
    node = lambda ts: {"cat": "Node", "name": f"n{ts}", "ts": ts, "dur": 1}             # noqa: E731
    events = [run(0, 10), node(2), node(5), run(12, 4), node(13), run(20, 3), node(21)]
    assert after_warmup(events, 0) == events
    assert after_warmup(events, 1) == events[3:]
    assert after_warmup(events, 2) == events[5:]
    assert after_warmup(events, 9) == []


def test_profile_without_output_writes_in_the_current_directory(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("DYNASHAPE_OPTIMIZE", "0")
    path, idx = tiny
    monkeypatch.chdir(tmp_path)
    code, out = _invoke("profile", path, "--dim", "batch=2", "--input", idx, "--repeat", "1")
    assert code == 0, out
    written = list(tmp_path.glob("dynashape_profile_*.json"))
    assert len(written) == 1 and f"trace: {written[0].name} (" in out
    assert {e["args"]["op_name"] for e in json.loads(written[0].read_text()) if e["cat"] == "Node"} == OP_TYPES


def test_op_type_table_groups_node_events():
    events = [{"cat": "Session", "name": "model_run", "dur": 100},
              {"cat": "Node", "name": "a_kernel_time", "dur": 30, "args": {"op_name": "MatMul"}},
              {"cat": "Node", "name": "b_kernel_time", "dur": 10, "args": {"op_name": "MatMul"}},
              {"cat": "Node", "name": "c_kernel_time", "dur": 60, "args": {"op_name": "Add"}}]
    rows = op_type_table(events)
    assert rows == [{"op_type": "Add", "calls": 1, "total_ms": 0.06, "percent": 60.0, "mean_us": 60.0},
                    {"op_type": "MatMul", "calls": 2, "total_ms": 0.04, "percent": 40.0, "mean_us": 20.0}]
    assert [line.split() for line in format_op_table(rows)[1:]] == [
        ["Add", "1", "0.060", "60.0%", "60.0"], ["MatMul", "2", "0.040", "40.0%", "20.0"],
        ["total", "3", "0.100", "100.0%", "33.3"]]


def test_profile_bad_arguments(tiny, tmp_path):
    path, _ = tiny
    _assert_one_line_error(["profile", path, "-o", "/nonexistent/dir/trace.json"], "--output",
                           "/nonexistent/dir", code=2)
    _assert_one_line_error(["profile", path, "-o", tmp_path], "--output", "is a directory", code=2)
    _assert_one_line_error(["profile", path, "--repeat", "0"], "--repeat", code=2)
    _assert_one_line_error(["profile", path, "--repeat", "many"], "--repeat", code=2)
    _assert_one_line_error(["profile", str(tmp_path / "missing.onnx")], "missing.onnx", "does not exist", code=2)
    assert list(tmp_path.glob("*.json")) == []


def _if_model():
    """If(c): then Relu(x + x), else Neg(x)."""
    from onnx import TensorProto, helper
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t1"], name="AddA"),
                                helper.make_node("Relu", ["t1"], ["t"], name="ReluA")], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="NegB")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g,
                                                name="If_0")], "g",
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_profiler_records_the_nodes_of_if_bodies_and_the_table_counts_each_once(tmp_path):
    import json

    import dynashape
    from dynashape.cli.profile import op_type_table, own_durations
    so = dynashape.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p_")
    sess = dynashape.InferenceSession(_if_model().SerializeToString(), so)
    for c in (True, False, True):
        (y,) = sess.run(None, {"c": np.array(c), "x": np.array([1.0, -2.0], np.float32)})
        np.testing.assert_array_equal(y, [2, 0] if c else [-1, 2])
    events = json.loads(open(sess.end_profiling()).read())
    nodes = [(e["name"], e["args"].get("parent"), e["args"]["op_name"]) for e in events if e["cat"] == "Node"]
    assert nodes == [("If_0_kernel_time", None, "If"), ("If_0/AddA_kernel_time", "If_0", "Add"),
                     ("If_0/ReluA_kernel_time", "If_0", "Relu"), ("If_0_kernel_time", None, "If"),
                     ("If_0/NegB_kernel_time", "If_0", "Neg"), ("If_0_kernel_time", None, "If"),
                     ("If_0/AddA_kernel_time", "If_0", "Add"), ("If_0/ReluA_kernel_time", "If_0", "Relu")]
    own = {e["name"] + str(e["ts"]): d for e, d in own_durations(events)}
    ifs = [e for e in events if e.get("name") == "If_0_kernel_time"]
    children = [e for e in events if (e.get("args") or {}).get("parent") == "If_0"]
    assert sum(own[e["name"] + str(e["ts"])] for e in ifs) == pytest.approx(
        sum(e["dur"] for e in ifs) - sum(e["dur"] for e in children), abs=1.0)
    table = {r["op_type"]: r for r in op_type_table(events)}
    assert {k: r["calls"] for k, r in table.items()} == {"If": 3, "Add": 2, "Relu": 2, "Neg": 1}
    node_us = sum(e["dur"] for e in events if e["cat"] == "Node" and "parent" not in e["args"])
    assert sum(r["total_ms"] for r in table.values()) * 1e3 == pytest.approx(node_us, abs=1.0)


def test_a_third_party_plugins_operator_list_names_its_own_command():
    text = render_markdown([], ["my_plugin", "other"])
    head = text.splitlines()[:4]
    assert head == ["# Operators", "",
                    "Generated by `dynashape ops --format markdown --plugin my_plugin --plugin other`.",
                    "The operators registered by the plugin(s) `my_plugin`, `other`."]
    assert "do not edit" not in text and "test_cli_tools" not in text
