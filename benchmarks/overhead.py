"""Per-run overhead benchmark: how much dynashape adds around the kernels.

What is measured:
  a) seed demo (dynashape.demo.build_demo_model: Shape/Gather/Unsqueeze/Cast/Concat/Reshape/Add
     on float[batch,2,3]): the batch sequence 1, 2, 8, 3, 1 repeated for --rounds rounds (after
     warm-up rounds) on one session per engine, every run timed alone (time.perf_counter).
     Engines: dynashape (allocator="pool"), ONNX Runtime (CPU, 1 intra/inter-op thread),
     onnx.reference.ReferenceEvaluator; the engines take turns round by round, so load on the
     shared machine hits them alike. Reported: median/p10/p90 µs per run, ratios
     dynashape/ORT (target < 1) and reference/dynashape.
  b) every model of ../shared/zoo/zoo.json with a sequence dim (a symbol "sequence" or
     "sequence_length" in its named shapes; group ort-optimized skipped): bert_tiny, distilbert_tiny,
     dynamo/bert_tiny, dynamo/gpt2_tiny, gpt2_tiny, lstm_small, silero_vad_16k_sequence today. One
     session per engine (dynashape allocator="pool", ONNX Runtime CPU 1 thread), at batch 1 where
     the model has a batch dim, other dims from its small shape:
     * cached run: median ms at the small shape (sequence 16; silero: sequence_length 1);
     * new-shape cost: for --new-shapes (32) consecutive new sequence lengths starting right after
       the small shape's (17, 18, ...; silero 2, 3, ...), each a plan-cache miss, the time of the
       first run at that shape divided by the median of the --cached-runs runs that follow at the
       same shape; reported as the median of these ratios (target <= 1.5 for dynashape), with
       session.stats.planning_ms / cache_misses; ORT's ratio on the same shapes for reference;
     * per-step µs: dynashape's cached ms / len(session.program.steps), "-" while the session has
       no program.steps;
     * the engine's own cost per step (kernels replaced by a no-op): the generated run function
       against the same steps driven by a plain Python loop.
  session.stats (plan-cache hits/misses, planning and execution ms) is printed for each session.
BLAS runs single-threaded (benchmarks/_env.py).

Run from the repository root:
    python benchmarks/overhead.py                        # ~2 minutes
    python benchmarks/overhead.py --rounds 500 --new-shapes 40
    python benchmarks/overhead.py --quick --models bert  # keys containing any of these substrings
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import statistics
import time
import types
import warnings

import _common as C
import numpy as np

DEMO_SEQUENCE = (1, 2, 8, 3, 1)
SEQUENCE_SYMBOLS = ("sequence", "sequence_length")
TARGET_FIRST = 1.5


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=None, help="rounds of the batch sequence 1,2,8,3,1 (a; 500)")
    ap.add_argument("--new-shapes", type=int, default=None, help="fresh sequence lengths per model (b; 32)")
    ap.add_argument("--first-sequence", type=int, default=None,
                    help="first new sequence length (b; default: the small shape's + 1, i.e. 17, and 2 for silero)")
    ap.add_argument("--cached-runs", type=int, default=7, help="cached runs after each first run (b)")
    ap.add_argument("--models", default="", help="comma-separated substrings of zoo keys to keep (b)")
    ap.add_argument("--quick", action="store_true", help="100 rounds (a), 8 new shapes per model (b)")
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (100 if args.quick else 500)
    args.new_shapes = args.new_shapes or (8 if args.quick else 32)
    return args


def percentile(xs, q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def timed(fn) -> float:
    """Seconds one call of fn() takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- a) seed demo
def demo_engines(model) -> dict:
    """{name: (run(x) -> outputs, dynashape session or None)} for the three engines."""
    from onnx.reference import ReferenceEvaluator
    dyn = C.dynashape_session(model, allocator="pool")
    ort_sess = C.ort_session(model)
    ref = ReferenceEvaluator(model)
    return {
        "dynashape": lambda x: dyn.run(None, {"x": x}),
        "onnxruntime": lambda x: ort_sess.run(None, {"x": x}),
        "reference": lambda x: ref.run(None, {"x": x}),
    }, dyn


def bench_demo(rounds: int, warmup_rounds: int = 5) -> None:
    from dynashape.demo import build_demo_model, demo_input
    print(f"a) seed demo: batches {','.join(map(str, DEMO_SEQUENCE))} x {rounds} rounds "
          f"({rounds * len(DEMO_SEQUENCE)} runs per engine, {warmup_rounds} warm-up rounds)")
    engines, dyn = demo_engines(build_demo_model())
    inputs = [demo_input(b) for b in DEMO_SEQUENCE]
    diffs = {name: max(C.max_abs_diff(run(x), engines["onnxruntime"](x)) for x in inputs)
             for name, run in engines.items()}
    times: dict[str, list[float]] = {name: [] for name in engines}
    for r in range(warmup_rounds + rounds):
        for name, run in engines.items():
            for x in inputs:
                dt = timed(lambda run=run, x=x: run(x))
                if r >= warmup_rounds:
                    times[name].append(dt * 1e6)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    rows = [[name, f"{med[name]:.1f}", f"{percentile(ts, 10):.1f}", f"{percentile(ts, 90):.1f}",
             f"{statistics.fmean(ts):.1f}", C.fmt(diffs[name])] for name, ts in times.items()]
    C.print_table(["engine", "median µs", "p10 µs", "p90 µs", "mean µs", "max|diff| vs ORT"], rows)
    ratio = med["dynashape"] / med["onnxruntime"]
    print(f"dynashape / ORT       = {ratio:.2f}  (target < 1: {'met' if ratio < 1 else 'NOT met'})")
    print(f"reference / dynashape = {med['reference'] / med['dynashape']:.1f}")
    C.print_stats("seed demo", dyn.stats)
    print()


# --------------------------------------------------------------------------- b) zoo models
def sequence_models(wanted: list[str]) -> list[dict]:
    """The zoo.json models (group ort-optimized skipped) whose named shapes have a sequence symbol:
    [{key, path, seq (the symbol), base (the small shape, batch 1 where there is a batch)}]."""
    out = []
    for key, entry in C.zoo_catalog().items():
        shapes = entry.get("shapes", {})
        seq = next((s for s in SEQUENCE_SYMBOLS if any(s in dims for dims in shapes.values())), None)
        if seq is None or (wanted and not any(w in key for w in wanted)):
            continue
        base = dict(shapes.get("small") or next(iter(shapes.values())))
        if "batch" in base:
            base["batch"] = 1
        out.append({"key": key, "path": C.ZOO_DIR / entry["file"], "seq": seq, "base": base})
    return out


def cached_small(run, feeds) -> float:
    """Median ms at one shape (plan cached after the warm-up)."""
    return C.median_ms(lambda: run(feeds), warmup=3, min_runs=30, max_runs=300, target_s=0.5)[0]


def new_shape_costs(run, path, shapes: list[dict], cached_runs: int, stats=None) -> list[dict]:
    """Per fresh shape: the first run's ms, the median ms of the cached runs that follow at that
    shape and, given a dynashape session's stats, the planning and execution ms the session
    booked for the first run. The feeds of every shape are made before any is timed: making
    them reads the model file, which would evict the caches right before each first run."""
    out = []
    all_feeds = [C.make_feeds(path, dims) for dims in shapes]
    for dims, feeds in zip(shapes, all_feeds):
        plan0, exec0 = (stats.planning_ms, stats.execution_ms) if stats else (0.0, 0.0)
        first = timed(lambda f=feeds: run(f)) * 1e3
        plan, execute = (stats.planning_ms - plan0, stats.execution_ms - exec0) if stats else (None, None)
        cached = statistics.median(timed(lambda f=feeds: run(f)) * 1e3 for _ in range(cached_runs))
        out.append({"dims": dims, "first": first, "cached": cached, "plan": plan, "exec": execute})
    return out


def bench_zoo_model(m: dict, n_new: int, cached_runs: int, first_seq: int | None) -> dict:
    path, seq, base = m["path"], m["seq"], m["base"]
    start = first_seq if first_seq is not None else base[seq] + 1
    shapes = [dict(base, **{seq: s}) for s in range(start, start + n_new)]
    r = {"name": m["key"], "seq": seq, "base": base, "seqs": f"{start}..{start + n_new - 1}", "error": ""}
    ort_sess = C.ort_session(path)
    r["ort_ms"] = cached_small(lambda f: ort_sess.run(None, f), C.make_feeds(path, base))
    r["ort_new"] = new_shape_costs(lambda f: ort_sess.run(None, f), path, shapes, cached_runs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            dyn = C.dynashape_session(path, allocator="pool")
            r["load_ms"] = (time.perf_counter() - t0) * 1e3
            r["symbolic_ms"] = dyn.symbolic_inference_ms
            r["stats"] = dyn.stats
            r["dyn_ms"] = cached_small(lambda f: dyn.run(None, f), C.make_feeds(path, base))
            misses0, planning0 = dyn.stats.cache_misses, dyn.stats.planning_ms
            r["dyn_new"] = new_shape_costs(lambda f: dyn.run(None, f), path, shapes, cached_runs, stats=dyn.stats)
            r["new_misses"] = dyn.stats.cache_misses - misses0
            r["new_planning_ms"] = dyn.stats.planning_ms - planning0
            r["steps"] = len(dyn.program.steps)
            r["dispatch"] = dispatch_us_per_step(dyn, C.make_feeds(path, base))
    except Exception as exc:  # noqa: BLE001 - report it in the tables and go on with the other models
        r["error"] = C.short_error(exc, 120)
    return r


def _noop_kernel(inputs, outputs, prepared):
    return None


def dispatch_us_per_step(sess, feeds, repeat: int = 2000) -> tuple[float, float, int]:
    """The engine's own cost per step of a cached run, kernels excluded: segment 0's generated
    ``run`` with every kernel replaced by a no-op, and the same steps as a plain Python loop
    (``for step: compute(inputs, buffers, prepared); store outputs``). Returns (generated µs,
    loop µs, steps)."""
    sess.run(None, feeds)
    plan = sess.last_plan
    ctx = sess.engine.last_context
    seg = plan.segment
    buffers = ctx.buffers(plan)
    fn = seg.run.fn         # (the generated function of the segment's Calls)
    names = {k: _noop_kernel for k in fn.__globals__ if k.startswith("_k")}
    run = types.FunctionType(fn.__code__, dict(fn.__globals__, **names), "run", fn.__defaults__)
    v = list(plan.template)
    for slot, name in zip(sess.program.pg.input_slots, sess._input_names):
        v[slot] = feeds[name]
    steps = [(st.inputs, st.outputs, b, p) for st, b, p in zip(seg.steps, buffers, plan.prepared)]

    def loop():
        for ins, outs, b, p in steps:
            r = _noop_kernel([v[i] for i in ins], b, p)
            for o, a in zip(outs, b if r is None else r):
                if o >= 0:
                    v[o] = a

    def generated():
        run(v, buffers, plan.prepared, plan.shapes)

    n = max(1, len(seg.steps))
    out = []
    for fn in (generated, loop):
        fn()
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        out.append((time.perf_counter() - t0) / repeat / n * 1e6)
    return out[0], out[1], len(seg.steps)


def report_zoo(results: list[dict]) -> None:
    print("cached run at the small shape (batch=1 where the model has a batch)")
    rows = []
    for r in results:
        dyn_ms, ort_ms = r.get("dyn_ms"), r.get("ort_ms")
        rows.append([r["name"], ",".join(f"{k}={v}" for k, v in r["base"].items()),
                     None if r.get("load_ms") is None else f"{r['load_ms']:.0f}",
                     None if r.get("symbolic_ms") is None else f"{r['symbolic_ms']:.1f}",
                     C.fmt_ms(dyn_ms), C.fmt_ms(ort_ms),
                     None if dyn_ms is None or not ort_ms else f"{dyn_ms / ort_ms:.2f}", r["error"]])
    C.print_table(["model", "dims", "session ms", "of it: symbolic inference ms", "dyn ms", "ORT ms", "dyn/ORT",
                   "note"], rows, align="llrrrrrl")
    print(f"new-shape cost: {len(results[0]['ort_new']) if results else 0} consecutive new sequence lengths per model, "
          "batch=1, each first seen on one session; ratio = first run / median of the cached runs at that shape")
    rows, worst = [], None
    for r in results:
        ort_ratio = statistics.median(c["first"] / c["cached"] for c in r["ort_new"])
        dyn_new = r.get("dyn_new")
        if not dyn_new:
            rows.append([r["name"], f"{r['seq']}={r['seqs']}", None, None, None, None, None, None, None, None, None,
                         f"{ort_ratio:.2f}", "-", r["error"]])
            continue
        ratios = [c["first"] / c["cached"] for c in dyn_new]
        m = statistics.median(ratios)
        worst = max(worst or (0.0, ""), (m, r["name"]))
        cached = statistics.median(c["cached"] for c in dyn_new)
        per_step = "-" if not r.get("steps") else f"{cached * 1e3 / r['steps']:.1f}"
        per_miss = r["new_planning_ms"] / r["new_misses"] if r["new_misses"] else float("nan")
        rows.append([r["name"], f"{r['seq']}={r['seqs']}", C.fmt_ms(statistics.median(c["first"] for c in dyn_new)),
                     C.fmt_ms(statistics.median(c["plan"] for c in dyn_new)),
                     C.fmt_ms(statistics.median(c["exec"] for c in dyn_new)),
                     C.fmt_ms(cached), per_step, f"{m:.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}",
                     f"{r['new_misses']}", f"{per_miss:.3f}", f"{ort_ratio:.2f}",
                     C.verdict(m <= TARGET_FIRST), r["error"]])
    C.print_table(["model", "new shapes", "first ms", "of it: plan", "exec", "cached ms", "per-step µs",
                   "first/cached", "range", "misses", "planning ms/miss", "ORT first/cached",
                   f"<= {TARGET_FIRST}x", "note"], rows, align="llrrrrrrrrrrll")
    print("(first ms, plan, exec, cached ms: dynashape medians over the new shapes; plan and exec: what\n"
          " session.stats booked for the first run; first/cached: median of the per-shape ratios; per-step µs:\n"
          " cached ms / len(session.program.steps), '-' while the session has no program.steps)")
    if worst:
        print(f"dynashape first/cached at a new shape: worst median {worst[0]:.2f} ({worst[1]}); "
              f"target <= {TARGET_FIRST}: {C.verdict(worst[0] <= TARGET_FIRST)}")
    print()
    print("engine overhead of a cached run (kernels replaced by a no-op), at the small shape")
    rows = [[r["name"], r["dispatch"][2], f"{r['dispatch'][0]:.3f}", f"{r['dispatch'][1]:.3f}",
             f"{r['dispatch'][1] / r['dispatch'][0]:.1f}"] for r in results if r.get("dispatch")]
    C.print_table(["model", "steps", "generated run µs/step", "Python loop µs/step", "loop/generated"], rows)
    for r in results:
        if "stats" in r:
            C.print_stats(r["name"], r["stats"])
    print()


def main(argv=None) -> int:
    args = parse_args(argv)
    C.require_zoo()
    C.header("overhead benchmark: per-run latency and new-shape cost")
    t0 = time.perf_counter()
    bench_demo(args.rounds)
    models = sequence_models([w for w in args.models.split(",") if w])
    print(f"b) zoo models with a sequence dim ({'/'.join(SEQUENCE_SYMBOLS)}; group ort-optimized skipped): "
          f"{', '.join(m['key'] for m in models)}")
    results = []
    for m in models:
        try:
            results.append(bench_zoo_model(m, args.new_shapes, args.cached_runs, args.first_sequence))
        except Exception as exc:  # noqa: BLE001 - feeds or ORT failed: report and go on with the other models
            print(f"{m['key']}: FAILED {C.short_error(exc, 200)}")
    if results:
        report_zoo(results)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
