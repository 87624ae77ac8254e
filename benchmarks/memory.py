"""Memory benchmark: the pool planner on every zoo model, and peak RSS against ONNX Runtime.

Part 1, per model (zoo.json, group "ort-optimized" skipped) at its small and large shapes,
from ``InferenceSession(path, allocator="pool").plan(feeds)`` (planning only, no run):
  * nodes: ONNX nodes of the file / nodes that remain after import (Constant nodes become
    initializers); steps: nodes that run (the rest are folded on the host);
  * naive: bytes of one buffer per planned tensor (views excluded, they never copy);
  * lower bound: max over steps of the live bytes (views and in-place outputs merged);
  * arena: the pool plan's arena; arena/lb and naive/arena;
  * plan ms: the placement from scratch (greedy by size / breadth, improve: ``planner.plan_offsets``)
    of the plan's blocks, the median of 5 (a kept placement order costs far less: part 1b).
A synthetic 800-node model (repeated residual blocks) is planned the same way.

Part 1b, every signature a session meets: each zoo model with a sequence dim through 32
consecutive sequence lengths (batch 1), and 64 greedy decoding steps of zoo2's KV-cache
decoders (every step a new past length): the largest arena / lower bound over all of them
(target <= 1.05, re-layouts included), how many plans re-placed from scratch, and the
median per-signature layout ms.

Part 2, at the large shapes: peak RSS (``VmHWM`` of /proc/self/status; ``ru_maxrss`` where
there is no /proc, which on Linux would carry the parent's peak over ``exec``) of whole processes that import the
engine, make the feeds with the zoo's make_inputs.py, build a session and run once:
dynashape (pool), dynashape (naive), ONNX Runtime (CPU, 1 thread), and a baseline process
that only imports numpy/onnx and makes the feeds. BLAS runs single-threaded (benchmarks/_env.py,
imported by these processes too).

Any model (``--model PATH``, repeatable; the zoo is not needed): peak RSS and session-creation
seconds of fresh processes that import the engine, create the session, and run once on feeds
made from the session's declared inputs with the dims of ``--dims`` (integer inputs: mask-like
names ones, type ids zeros, others ints in [0, 100); floats N(0, 1)): dynashape (pool), ONNX
Runtime (CPU, 1 thread) and a baseline process that imports numpy and onnx only. Each process runs
``--repeat`` times; the medians are printed.

Run from the repository root:
    python benchmarks/memory.py                 # everything (~2 minutes on 2 cores)
    python benchmarks/memory.py --no-rss        # part 1 only
    python benchmarks/memory.py --models gpt2   # keys containing any of these substrings
    python benchmarks/memory.py --model ../models/bert_base.onnx --model ../models/resnet50.onnx \
        --dims batch=1,sequence=128,height=224,width=224 --repeat 3
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import _common as C
import numpy as np
from _decoding import decode_info, greedy_decode

SHAPES = ("small", "large")

_RSS_SCRIPT = r"""
import sys, json, resource, warnings
engine, path, shape, zoo, bench = sys.argv[1:6]
sys.path.insert(0, bench)
import _env  # the benchmarks' BLAS environment, before numpy
warnings.simplefilter("ignore")
sys.path.insert(0, zoo)
import numpy as np
from make_inputs import make_inputs
feeds = make_inputs(path, shape=shape)
if engine == "ort":
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1; so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    out = sess.run(None, feeds)
elif engine in ("pool", "naive"):
    import dynashape
    sess = dynashape.InferenceSession(path, allocator=engine)
    out = sess.run(None, feeds)
else:
    out = []
hwm = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print(json.dumps({"maxrss_kb": hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "outputs": [float(np.asarray(o, dtype=np.float64).sum()) for o in out
                              if np.asarray(o).dtype.kind in "biuf"]}))
"""


_MODEL_RSS_SCRIPT = r"""
import sys, json, time, warnings
engine, path, dims_json, bench = sys.argv[1:5]
sys.path.insert(0, bench)
import _env  # the benchmarks' BLAS environment, before numpy
warnings.simplefilter("ignore")
import numpy as np
import onnx  # noqa: F401  (the baseline imports what the engines import)


def feeds_for(inputs, dims):
    rng = np.random.default_rng(0)
    out = {}
    for vi in inputs:
        shape = [d if isinstance(d, int) else dims[d] for d in vi.shape]
        kind = vi.type[len("tensor("):-1]
        dtype = {"float": np.float32, "double": np.float64, "float16": np.float16, "int64": np.int64,
                 "int32": np.int32, "bool": np.bool_}[kind]
        if np.dtype(dtype).kind in "iu":
            name = vi.name.lower()
            out[vi.name] = (np.ones(shape, dtype) if "mask" in name else np.zeros(shape, dtype) if "type" in name
                            else rng.integers(0, 100, shape).astype(dtype))
        elif dtype is np.bool_:
            out[vi.name] = np.ones(shape, dtype)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
    return out


dims = json.loads(dims_json)
created = 0.0
if engine == "ort":
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1; so.log_severity_level = 3
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    created = time.perf_counter() - t0
elif engine == "pool":
    import dynashape
    t0 = time.perf_counter()
    sess = dynashape.InferenceSession(path, allocator=engine)
    created = time.perf_counter() - t0
out = sess.run(None, feeds_for(sess.get_inputs(), dims)) if engine != "none" else []
hwm = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print(json.dumps({"maxrss_kb": hwm[0] if hwm else None, "create_s": created,
                  "outputs": [float(np.asarray(o, dtype=np.float64).sum()) for o in out
                              if np.asarray(o).dtype.kind in "biuf"]}))
"""


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="", help="comma-separated substrings of zoo keys to keep")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS processes (part 2)")
    ap.add_argument("--model", action="append", default=[], metavar="PATH",
                    help="measure this model only (repeatable): peak RSS and session creation, no zoo needed")
    ap.add_argument("--dims", default="batch=1,sequence=128,height=224,width=224",
                    help="symbolic input dims for --model, as name=value,...")
    ap.add_argument("--repeat", type=int, default=1, help="processes per engine and --model (medians)")
    return ap.parse_args(argv)


def model_rss(engine: str, path: str, dims: dict) -> dict:
    """One fresh process of ``engine`` ("pool", "ort" or "none") on ``path``: peak RSS (MB),
    session-creation seconds and the sums of the outputs; ``{"error": ...}`` when it failed."""
    try:
        out = subprocess.run([sys.executable, "-c", _MODEL_RSS_SCRIPT, engine, path, json.dumps(dims),
                              str(Path(__file__).resolve().parent)], check=False,
                             capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return {"error": "timeout"}
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1][:80]}
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return {"mb": data["maxrss_kb"] / 1024.0, "create_s": data["create_s"], "outputs": data["outputs"]}


def models_part(paths: list, dims: dict, repeat: int) -> None:
    """Peak RSS and session creation of dynashape (pool) and ONNX Runtime on each model."""
    rows = []
    for path in paths:
        med = {}
        for engine in ("none", "pool", "ort"):
            runs = [model_rss(engine, path, dims) for _ in range(max(1, repeat))]
            ok = [r for r in runs if "error" not in r]
            med[engine] = ({"mb": statistics.median(r["mb"] for r in ok),
                            "create_s": statistics.median(r["create_s"] for r in ok), "outputs": ok[0]["outputs"]}
                           if ok else {"error": runs[0]["error"]})
        pool, ort = med["pool"], med["ort"]
        same = "outputs" in pool and "outputs" in ort and len(pool["outputs"]) == len(ort["outputs"]) and \
            all(abs(a - b) <= 1e-2 * max(1.0, abs(a)) for a, b in zip(pool["outputs"], ort["outputs"]))
        rows.append([Path(path).name, med["none"].get("mb"), pool.get("mb", pool.get("error")), ort.get("mb"),
                     None if "mb" not in pool or "mb" not in ort else pool["mb"] / ort["mb"],
                     pool.get("create_s"), ort.get("create_s"), "yes" if same else "?"])
    C.print_table(["model", "baseline MB", "dynashape pool MB", "ORT MB", "pool / ORT", "dynashape create s",
                   "ORT create s", "same sums"], rows, align="lrrrrrrr")


def synthetic_model(n_nodes: int = 800, d: int = 32):
    """[batch, seq, d] -> repeated residual blocks (MatMul, Add, Relu, views, Transpose, Softmax)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    inits = [numpy_helper.from_array(np.array([0, -1, 2, d // 2], np.int64), "shape4"),
             numpy_helper.from_array(np.array([0, -1, d], np.int64), "shape3")]
    nodes, x, i = [], "x", 0
    while len(nodes) < n_nodes - 11:
        i += 1
        inits += [init(f"w{i}", rng.standard_normal((d, 2 * d)) * 0.1), init(f"b{i}", rng.standard_normal(2 * d)),
                  init(f"v{i}", rng.standard_normal((2 * d, d)) * 0.1), init(f"g{i}", rng.standard_normal(d))]
        t = [f"t{i}_{k}" for k in range(11)]
        mk = helper.make_node
        nodes += [mk("MatMul", [x, f"w{i}"], [t[0]]), mk("Add", [t[0], f"b{i}"], [t[1]]), mk("Relu", [t[1]], [t[2]]),
                  mk("MatMul", [t[2], f"v{i}"], [t[3]]), mk("Reshape", [t[3], "shape4"], [t[4]]),
                  mk("Transpose", [t[4]], [t[5]], perm=[0, 2, 1, 3]), mk("Softmax", [t[5]], [t[6]], axis=-1),
                  mk("Transpose", [t[6]], [t[7]], perm=[0, 2, 1, 3]), mk("Reshape", [t[7], "shape3"], [t[8]]),
                  mk("Add", [x, t[8]], [t[9]]), mk("Mul", [t[9], f"g{i}"], [t[10]])]
        x = t[10]
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    g = helper.make_graph(nodes, "synthetic",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def plan_row(sess, feeds, onnx_nodes) -> dict:
    from dynashape.planner import Block, plan_offsets
    plan = sess.plan(feeds)
    m = plan.memory
    times = []
    for _ in range(5):
        blocks = [Block(b.id, b.size, b.first, b.last) for b in m.blocks]
        t0 = time.perf_counter()
        plan_offsets(blocks)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"nodes": f"{onnx_nodes}/{len(sess.graph.nodes)}", "steps": len(plan.steps), "blocks": len(m.blocks),
            "naive": m.naive_bytes, "lb": m.lower_bound_bytes, "arena": m.arena_bytes,
            "ratio": m.ratio, "saving": m.naive_bytes / m.arena_bytes if m.arena_bytes else None,
            "ms": statistics.median(times), "n_nodes": len(sess.graph.nodes)}


def part1(catalog, zoo) -> list:
    import dynashape
    import onnx
    rows, checks = [], []
    for key, entry in catalog.items():
        path = str(zoo / entry["file"])
        n_onnx = len(onnx.load(path, load_external_data=False).graph.node)
        sess = dynashape.InferenceSession(path, allocator="pool")
        for shape in SHAPES:
            if shape not in entry.get("shapes", {}):
                continue
            dims = ",".join(f"{k}={v}" for k, v in entry["shapes"][shape].items())
            try:
                r = plan_row(sess, C.make_feeds(path, shape), n_onnx)
            except Exception as exc:  # noqa: BLE001 - a model the runtime cannot plan yet
                rows.append([key, shape, dims, C.short_error(exc, 60)] + [None] * 8)
                continue
            rows.append([key, shape, dims, r["nodes"], r["steps"], r["naive"], r["lb"], r["arena"],
                         f"{r['ratio']:.3f}", None if r["saving"] is None else f"{r['saving']:.1f}x",
                         C.fmt_ms(r["ms"])])
            checks.append((key, shape, r))
    synth = dynashape.InferenceSession(synthetic_model(800), allocator="pool")
    for shape, (b, s) in (("small", (1, 16)), ("large", (8, 128))):
        r = plan_row(synth, {"x": np.zeros((b, s, 32), np.float32)}, 800)
        rows.append(["synthetic-800", shape, f"batch={b},seq={s}", r["nodes"], r["steps"], r["naive"], r["lb"],
                     r["arena"], f"{r['ratio']:.3f}", f"{r['saving']:.1f}x", C.fmt_ms(r["ms"])])
        checks.append(("synthetic-800", shape, r))
    C.print_table(["model", "shape", "dims", "nodes onnx/run", "steps", "naive B", "lower bound B", "arena B",
                   "arena/lb", "naive/arena", "plan ms"], rows, align="lllrrrrrrrr")
    return checks


def part1b(catalog, zoo) -> list:
    """Max arena / lower bound over every signature of a sequence sweep or a decoding run."""
    import dynashape
    import dynashape.plan as plan_module
    rows, worst = [], []
    relayouts = {"n": 0}
    real = plan_module.plan_offsets

    def counting(blocks, *a, **k):
        relayouts["n"] += 1
        return real(blocks, *a, **k)

    plan_module.plan_offsets = counting
    try:
        for key, entry in catalog.items():
            small = entry.get("shapes", {}).get("small", {})
            seq = next((k for k in ("sequence", "sequence_length") if k in small), None)
            if seq is None:
                continue
            path = str(zoo / entry["file"])
            sess = dynashape.InferenceSession(path, allocator="pool")
            plans = []
            for n in range(small[seq] + 1, small[seq] + 33):
                feeds = C.make_feeds(path, dict(small, **{seq: n}))
                plans.append(sess.plan(feeds))
            rows.append(_sweep_row(key, f"{seq}={small[seq] + 1}..{small[seq] + 32}", plans, relayouts))
            worst.append(rows[-1][3])
        decoders = C.zoo2_catalog() if (C.ZOO2_DIR / "zoo2.json").exists() else {}
        for key, entry in decoders.items():
            if "decode" not in entry or "use_cache_branch" in entry["decode"]:
                continue
            sess = dynashape.InferenceSession(str(C.ZOO2_DIR / entry["file"]), allocator="pool")
            plans = []

            def run(feeds, sess=sess, plans=plans):
                out = sess.run(None, feeds)
                plans.append(sess.last_plan)
                return out
            greedy_decode(run, decode_info(sess, entry["decode"]), steps=64)
            rows.append(_sweep_row(key, "64 decoding steps", plans, relayouts))
            worst.append(rows[-1][3])
    finally:
        plan_module.plan_offsets = real
    print("1b) every signature of a sweep: arena / lower bound (kept placement orders, re-placed above 1.05x)")
    C.print_table(["model", "signatures", "plans", "max arena/lb", "re-placed", "median plan ms"], rows)
    if worst:
        print(f"max arena/lb over all signatures: {max(worst):.3f}; target <= 1.05: {C.verdict(max(worst) <= 1.05)}")
    print()
    return worst


def _sweep_row(key: str, what: str, plans: list, relayouts: dict) -> list:
    ratios = [p.arena_bytes / p.lower_bound_bytes for p in plans if p.lower_bound_bytes]
    replaced, relayouts["n"] = relayouts["n"], 0
    return [key, what, len(plans), max(ratios) if ratios else 1.0, replaced,
            C.fmt_ms(statistics.median(p.planning_ms for p in plans))]


def rss(engine: str, path: str, shape: str, zoo) -> tuple:
    try:
        out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, engine, path, shape, str(zoo),
                              str(Path(__file__).resolve().parent)], check=False,
                             capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    if out.returncode != 0:
        return None, (out.stderr.strip().splitlines() or ["failed"])[-1][:60]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return data["maxrss_kb"] / 1024.0, data["outputs"]


def part2(catalog, zoo) -> list:
    rows, results = [], []
    for key, entry in catalog.items():
        if "large" not in entry.get("shapes", {}):
            continue
        path = str(zoo / entry["file"])
        base, _ = rss("none", path, "large", zoo)
        ort_mb, ort_out = rss("ort", path, "large", zoo)
        pool_mb, pool_out = rss("pool", path, "large", zoo)
        naive_mb, _ = rss("naive", path, "large", zoo)
        same = isinstance(ort_out, list) and isinstance(pool_out, list) and len(ort_out) == len(pool_out) and \
            all(abs(a - b) <= 1e-2 * max(1.0, abs(a)) for a, b in zip(ort_out, pool_out))
        verdict = "-" if ort_mb is None or pool_mb is None else ("yes" if pool_mb <= ort_mb else "NO")
        rows.append([key, base, pool_mb, naive_mb, ort_mb,
                     None if pool_mb is None or base is None else pool_mb - base,
                     None if ort_mb is None or base is None else ort_mb - base,
                     verdict, "yes" if same else "?"])
        results.append((key, pool_mb, ort_mb))
    C.print_table(["model (large)", "baseline MB", "dynashape pool MB", "dynashape naive MB", "ORT MB",
                   "pool - base", "ORT - base", "pool <= ORT", "same sums"], rows, align="lrrrrrrrr")
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.model:
        dims = {k: int(v) for k, v in (kv.split("=", 1) for kv in args.dims.split(",") if kv)}
        C.header(f"memory: peak RSS and session creation (fresh process, one run at {dims}) vs ONNX Runtime")
        models_part(args.model, dims, args.repeat)
        return 0
    zoo = C.require_zoo()
    warnings.simplefilter("ignore")
    catalog = C.zoo_catalog()
    if args.models:
        keep = [s for s in args.models.split(",") if s]
        catalog = {k: v for k, v in catalog.items() if any(s in k for s in keep)}
    C.header("memory: pool planner vs lower bound and naive; peak RSS vs ONNX Runtime")
    checks = part1(catalog, zoo)
    part1b(catalog, zoo)
    worst = max(checks, key=lambda c: c[2]["ratio"])
    big = [c for c in checks if c[2]["n_nodes"] > 20 and c[2]["saving"] is not None]
    least = min(big, key=lambda c: c[2]["saving"]) if big else None
    slowest = max(checks, key=lambda c: c[2]["ms"])
    print(f"arena / lower bound: worst {worst[2]['ratio']:.3f} ({worst[0]} {worst[1]}); target <= 1.05: "
          f"{'met' if worst[2]['ratio'] <= 1.05 else 'NOT met'}")
    if least:
        print(f"naive / arena on models with > 20 nodes: least {least[2]['saving']:.1f}x ({least[0]} {least[1]}); "
              f"target >= 2x: {'met' if least[2]['saving'] >= 2 else 'NOT met'}")
    print(f"memory planning: slowest {slowest[2]['ms']:.2f} ms ({slowest[0]} {slowest[1]}); target < 20 ms "
          f"on an 800-node model: {'met' if slowest[2]['ms'] < 20 else 'NOT met'}")
    print()
    if not args.no_rss:
        results = part2(catalog, zoo)
        done = [r for r in results if r[1] is not None and r[2] is not None]
        over = [r[0] for r in done if r[1] > r[2]]
        print(f"peak RSS at the large shapes: dynashape pool <= ORT on {len(done) - len(over)} of {len(done)} models"
              + (f"; higher on {', '.join(over)}" if over else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
