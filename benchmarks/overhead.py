"""Per-run overhead benchmark: how much dynashape adds around the kernels.

What is measured:
  a) seed demo (dynashape.demo.build_demo_model: Shape/Gather/Unsqueeze/Cast/Concat/Reshape/Add
     on float[batch,2,3]): the batch sequence 1, 2, 8, 3, 1 repeated for --rounds rounds (after
     warm-up rounds) on one session per engine, every run timed alone (time.perf_counter).
     Engines: dynashape (allocator="pool"), ONNX Runtime (CPU, 1 intra/inter-op thread),
     onnx.reference.ReferenceEvaluator; the engines take turns round by round, so load on the
     shared machine hits them alike. Reported: median/p10/p90 µs per run, ratios
     dynashape/ORT (target < 1) and reference/dynashape.
  b) bert_tiny.onnx and gpt2_tiny.onnx from ../shared/zoo:
     * cached run: median ms at the small shape (batch 1, sequence 16), dynashape vs ORT;
     * new-shape cost: on one dynashape session created once, for sequence 17, 18, ... (batch 1,
       each a plan-cache miss) the time of the first run at that shape divided by the median of
       the cached runs that follow at the same shape; reported as the median of these ratios
       (target < 2: a miss costs less than one extra run), with session.stats.planning_ms /
       cache_misses. ORT's first-run/cached ratio on the same shapes is shown for reference.
  session.stats (plan-cache hits/misses, planning and execution ms) is printed for each session.
BLAS runs single-threaded (OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1).

Run from the repository root:
    python benchmarks/overhead.py
    python benchmarks/overhead.py --rounds 500 --new-shapes 40
"""
from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import statistics
import time

import _common as C
import numpy as np

DEMO_SEQUENCE = (1, 2, 8, 3, 1)
ZOO_MODELS = ("bert_tiny.onnx", "gpt2_tiny.onnx")
SMALL = {"batch": 1, "sequence": 16}
FIRST_NEW_SEQUENCE = 17


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=500, help="rounds of the batch sequence 1,2,8,3,1 (a)")
    ap.add_argument("--new-shapes", type=int, default=24, help="fresh sequence lengths per model (b)")
    ap.add_argument("--cached-runs", type=int, default=7, help="cached runs after each first run (b)")
    return ap.parse_args(argv)


def percentile(xs, q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def timed(fn) -> float:
    """Seconds one call of fn() takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def print_stats(label: str, stats) -> None:
    """One line of a dynashape session's SessionStats."""
    per_miss = stats.planning_ms / stats.cache_misses if stats.cache_misses else 0.0
    print(f"session.stats [{label}]: runs={stats.runs} hits={stats.cache_hits} misses={stats.cache_misses} "
          f"planning_ms={stats.planning_ms:.2f} ({per_miss:.3f} ms/miss) execution_ms={stats.execution_ms:.1f} "
          f"symbolic_plans={stats.symbolic_plans} resolved_plans={stats.resolved_plans} "
          f"failed_runs={stats.failed_runs}")


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
    print_stats("seed demo", dyn.stats)
    print()


# --------------------------------------------------------------------------- b) zoo models
def cached_small(dyn, ort_sess, path) -> tuple[float, float]:
    """Median ms at the small shape (plan cached after the warm-up) for dynashape and ORT."""
    feeds = C.make_feeds(path, SMALL)
    timing = dict(warmup=3, min_runs=30, max_runs=300, target_s=0.5)
    dyn_ms, _ = C.median_ms(lambda: dyn.run(None, feeds), **timing)
    ort_ms, _ = C.median_ms(lambda: ort_sess.run(None, feeds), **timing)
    return dyn_ms, ort_ms


def new_shape_costs(run, path, sequences, cached_runs: int, stats=None) -> list[dict]:
    """Per fresh sequence length (batch 1): the first run's ms, the median ms of the cached runs
    that follow at that shape and, given a dynashape session's stats, the planning and execution
    ms the session booked for the first run."""
    out = []
    for seq in sequences:
        feeds = C.make_feeds(path, {"batch": 1, "sequence": seq})
        plan0, exec0 = (stats.planning_ms, stats.execution_ms) if stats else (0.0, 0.0)
        first = timed(lambda f=feeds: run(f)) * 1e3
        plan, execute = (stats.planning_ms - plan0, stats.execution_ms - exec0) if stats else (None, None)
        cached = statistics.median(timed(lambda f=feeds: run(f)) * 1e3 for _ in range(cached_runs))
        out.append(dict(seq=seq, first=first, cached=cached, plan=plan, exec=execute))
    return out


def bench_zoo_model(name: str, n_new: int, cached_runs: int) -> dict:
    path = C.ZOO_DIR / name
    t0 = time.perf_counter()
    dyn = C.dynashape_session(path, allocator="pool")
    load_ms = (time.perf_counter() - t0) * 1e3
    ort_sess = C.ort_session(path)
    dyn_ms, ort_ms = cached_small(dyn, ort_sess, path)
    sequences = range(FIRST_NEW_SEQUENCE, FIRST_NEW_SEQUENCE + n_new)
    misses0, planning0 = dyn.stats.cache_misses, dyn.stats.planning_ms
    dyn_new = new_shape_costs(lambda f: dyn.run(None, f), path, sequences, cached_runs, stats=dyn.stats)
    misses = dyn.stats.cache_misses - misses0
    planning = dyn.stats.planning_ms - planning0
    ort_new = new_shape_costs(lambda f: ort_sess.run(None, f), path, sequences, cached_runs)
    return dict(name=name, load_ms=load_ms, symbolic_ms=dyn.symbolic_inference_ms, dyn_ms=dyn_ms, ort_ms=ort_ms, dyn_new=dyn_new, ort_new=ort_new,
                new_misses=misses, new_planning_ms=planning, stats=dyn.stats)


def report_zoo(results: list[dict], n_new: int) -> None:
    print("cached run at the small shape (batch=1, sequence=16)")
    C.print_table(["model", "session ms", "of it: symbolic inference ms", "dyn ms", "ORT ms", "dyn/ORT"],
                  [[r["name"], f"{r['load_ms']:.0f}", f"{r['symbolic_ms']:.1f}", C.fmt_ms(r["dyn_ms"]), C.fmt_ms(r["ort_ms"]),
                    f"{r['dyn_ms'] / r['ort_ms']:.2f}"] for r in results])
    seqs = f"{FIRST_NEW_SEQUENCE}..{FIRST_NEW_SEQUENCE + n_new - 1}"
    print(f"new-shape cost: batch=1, sequence={seqs}, each first seen on one session; "
          "ratio = first run / median of the cached runs at that shape")
    rows = []
    for r in results:
        dyn_new, ort_new = r["dyn_new"], r["ort_new"]
        ratios = [c["first"] / c["cached"] for c in dyn_new]
        med = statistics.median(ratios)
        per_miss = r["new_planning_ms"] / r["new_misses"] if r["new_misses"] else float("nan")
        rows.append([r["name"], C.fmt_ms(statistics.median(c["first"] for c in dyn_new)),
                     C.fmt_ms(statistics.median(c["plan"] for c in dyn_new)),
                     C.fmt_ms(statistics.median(c["exec"] for c in dyn_new)),
                     C.fmt_ms(statistics.median(c["cached"] for c in dyn_new)),
                     f"{med:.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}", f"{r['new_misses']}",
                     f"{per_miss:.3f}", f"{statistics.median(c['first'] / c['cached'] for c in ort_new):.2f}",
                     "met" if med < 2 else "NOT met"])
    C.print_table(["model", "first ms", "of it: plan", "exec", "cached ms", "first/cached", "range", "misses",
                   "planning ms/miss", "ORT first/cached", "< 2x"], rows)
    print("(first ms, plan, exec, cached ms: medians over the new shapes; plan and exec: what session.stats\n"
          " booked for the first run; first/cached: median of the per-shape ratios)")
    print()
    for r in results:
        print_stats(r["name"], r["stats"])
    print()


def main(argv=None) -> int:
    args = parse_args(argv)
    C.require_zoo()
    C.header("overhead benchmark: per-run latency and new-shape cost")
    t0 = time.perf_counter()
    bench_demo(args.rounds)
    print(f"b) zoo models: {', '.join(ZOO_MODELS)}")
    results = []
    for name in ZOO_MODELS:
        try:
            results.append(bench_zoo_model(name, args.new_shapes, args.cached_runs))
        except Exception as exc:  # report and go on with the other model
            print(f"{name}: FAILED {C.short_error(exc, 200)}")
    if results:
        report_zoo(results, args.new_shapes)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
