"""Concurrency benchmark: one dynashape session shared by several threads.

What is measured:
  a) throughput: bert_tiny.onnx and gpt2_tiny.onnx (../shared/zoo) at batch 8, sequence 128, and
     gpt2_kv.onnx (../shared/zoo/zoo2) at its "large" shape (batch 8, past 120, new 8). On one
     session per engine (plan cached by a warm-up run), --throughput-runs runs on 1 thread vs the
     same total split over 2 threads (threading.Thread, every thread calling run on the SAME
     session, released together by a barrier); wall time from the release to the last join.
     Reported: runs/s for 1 and 2 threads (median over --repeats alternating measurements) and
     the speedup (target >= 1.5x for dynashape). ONNX Runtime (CPU, 1 intra-op and 1 inter-op
     thread per run; it allows concurrent runs on one session) is measured the same way, for
     reference.
  b) correctness: --threads threads x --runs runs on ONE dynashape session, each run with its own
     shape (bert_tiny, batch in 1..4, sequence in 1..48, drawn from a generator seeded per thread)
     and its own values (make_inputs seeded per run); the plan cache (8 signatures) misses often,
     so planning runs concurrently with execution. Every output is compared exactly
     (np.array_equal, shape and dtype included) with the result of the same feeds computed
     beforehand on a separate session, single-threaded: once right after the run, and again when
     the thread has finished all its runs (it keeps every output: a later run must not overwrite
     an earlier run's arrays). Reported: mismatches at each check (target 0), errors, wall time.
BLAS runs single-threaded (benchmarks/_env.py). Timings are not asserted.

Run from the repository root:
    python benchmarks/concurrency.py               # ~1-2 minutes
    python benchmarks/concurrency.py --quick       # fewer runs (a: 30 per cell, b: 4 x 100)
    python benchmarks/concurrency.py --runs 2000   # b) runs per thread
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import statistics
import threading
import time
import warnings

import _common as C
import numpy as np

THROUGHPUT_SHAPE = {"batch": 8, "sequence": 128}
TARGET_SPEEDUP = 1.5
CHECK_MODEL = "bert_tiny.onnx"
BATCHES = (1, 4)        # inclusive range of b)
SEQUENCES = (1, 48)


def start_together(threads: list, barrier) -> float:
    """Start the threads, release them together through ``barrier`` (the caller's last party),
    wait for all; seconds from the release to the last join."""
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a: 30 runs per cell, 1 repeat; b: 100 runs per thread")
    ap.add_argument("--throughput-runs", type=int, default=None, help="a) runs per measurement (default 120)")
    ap.add_argument("--repeats", type=int, default=None, help="a) measurements per cell (default 3)")
    ap.add_argument("--threads", type=int, default=4, help="b) threads (4)")
    ap.add_argument("--runs", type=int, default=None, help="b) runs per thread (default 500)")
    ap.add_argument("--seed", type=int, default=0, help="b) base seed of shapes and values")
    return ap.parse_args(argv)


# --------------------------------------------------------------------------- a) throughput
def run_threads(run, feeds, total: int, n_threads: int) -> float:
    """Wall seconds of `total` calls run(feeds) split over n_threads threads (released together)."""
    counts = [total // n_threads + (1 if i < total % n_threads else 0) for i in range(n_threads)]
    barrier = threading.Barrier(n_threads + 1)
    errors: list = []

    def work(n):
        barrier.wait()
        try:
            for _ in range(n):
                run(feeds)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    wall = start_together([threading.Thread(target=work, args=(n,)) for n in counts], barrier)
    if errors:
        raise errors[0]
    return wall


def throughput_models(zoo2: bool) -> list[tuple[str, object, dict]]:
    """[(label, path, feeds)]: the zoo models at batch 8 x sequence 128 and gpt2_kv's large shape."""
    out = []
    for name in ("bert_tiny.onnx", "gpt2_tiny.onnx"):
        out.append((f"{name[:-5]} b8 s128", C.ZOO_DIR / name,
                    lambda p=C.ZOO_DIR / name: C.make_feeds(p, THROUGHPUT_SHAPE)))
    if zoo2:
        p = C.ZOO2_DIR / "gpt2_kv.onnx"
        out.append(("gpt2_kv large", p, lambda p=p: C.zoo2_make_inputs().make_inputs(p, shape="large")))
    return out


def bench_throughput(total: int, repeats: int) -> None:
    zoo2 = (C.ZOO2_DIR / "zoo2.json").exists()
    print(f"a) throughput: {total} runs per measurement, 1 thread vs 2 threads on one session; "
          f"median runs/s over {repeats} measurement(s) each")
    if not zoo2:
        print(f"   ({C.ZOO2_DIR} not found: gpt2_kv skipped)")
    rows, verdicts, stats = [], [], []
    for label, path, make in throughput_models(zoo2):
        try:
            feeds = make()
        except Exception as exc:  # noqa: BLE001 - report it and go on
            rows.append([label, "-", "-", "-", "-", "-", "-", "-", "feeds: " + C.short_error(exc, 60)])
            continue
        cell = {"label": label}
        for engine in ("dynashape", "onnxruntime"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sess = C.dynashape_session(path) if engine == "dynashape" else C.ort_session(path)

                def run(f, s=sess):
                    return s.run(None, f)

                run(feeds)  # warm-up: plans this shape
                rates = {1: [], 2: []}
                for _ in range(repeats):
                    for n in (1, 2):
                        rates[n].append(total / run_threads(run, feeds, total, n))
                cell[engine] = {n: statistics.median(r) for n, r in rates.items()}
                if engine == "dynashape":
                    cell["stats"] = sess.stats
            except Exception as exc:  # noqa: BLE001 - report it and go on
                cell[engine] = None
                cell.setdefault("error", f"{engine}: {C.short_error(exc, 70)}")
        d, o = cell.get("dynashape"), cell.get("onnxruntime")
        sd = d[2] / d[1] if d else None
        so = o[2] / o[1] if o else None
        verdicts.append((label, sd))
        rows.append([label, None if d is None else f"{d[1]:.1f}", None if d is None else f"{d[2]:.1f}",
                     None if sd is None else f"{sd:.2f}x", C.verdict(None if sd is None else sd >= TARGET_SPEEDUP),
                     None if o is None else f"{o[1]:.1f}", None if o is None else f"{o[2]:.1f}",
                     None if so is None else f"{so:.2f}x", cell.get("error", "")])
        if "stats" in cell:
            stats.append((label, cell["stats"]))
    C.print_table(["model", "dyn runs/s 1T", "dyn runs/s 2T", "dyn speedup", f">= {TARGET_SPEEDUP}x",
                   "ORT runs/s 1T", "ORT runs/s 2T", "ORT speedup", "note"], rows, align="lrrrlrrrl")
    measured = [v for v in verdicts if v[1] is not None]
    if measured:
        worst = min(measured, key=lambda v: v[1])
        print(f"dynashape 2-thread speedup: worst {worst[1]:.2f}x ({worst[0]}); target >= {TARGET_SPEEDUP}x: "
              f"{C.verdict(worst[1] >= TARGET_SPEEDUP)}")
    for label, st in stats:
        C.print_stats(label, st)
    print()


# --------------------------------------------------------------------------- b) correctness
def thread_feeds(path, model, thread: int, runs: int, seed: int) -> list[dict]:
    """The feeds of one thread's runs: shapes from a generator seeded by (seed, thread), values
    from make_inputs seeded by (seed, thread, run)."""
    from make_inputs import make_inputs
    rng = np.random.default_rng([seed, thread])
    out = []
    for i in range(runs):
        dims = {"batch": int(rng.integers(BATCHES[0], BATCHES[1] + 1)),
                "sequence": int(rng.integers(SEQUENCES[0], SEQUENCES[1] + 1))}
        out.append(make_inputs(path, dims, seed=(seed * 1_000_003 + thread) * 100_003 + i, model=model))
    return out


def same(got, want) -> bool:
    return len(got) == len(want) and all(
        g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want))


def bench_correctness(n_threads: int, runs: int, seed: int) -> None:
    import onnx
    path = C.ZOO_DIR / CHECK_MODEL
    print(f"b) correctness: {n_threads} threads x {runs} runs on one dynashape session ({CHECK_MODEL}, "
          f"batch {BATCHES[0]}..{BATCHES[1]}, sequence {SEQUENCES[0]}..{SEQUENCES[1]}, per-thread seeded shapes)")
    model = onnx.load(str(path))
    t0 = time.perf_counter()
    feeds = [thread_feeds(path, model, t, runs, seed) for t in range(n_threads)]
    shapes = {tuple(f["input_ids"].shape) for fs in feeds for f in fs}
    t_feeds = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_sess = C.dynashape_session(path)
        t0 = time.perf_counter()
        expected = [[ref_sess.run(None, f) for f in fs] for fs in feeds]
        t_ref = time.perf_counter() - t0
        sess = C.dynashape_session(path)
    print(f"   {len(shapes)} distinct shapes; feeds made in {t_feeds:.1f} s; reference (separate session, "
          f"one thread) in {t_ref:.1f} s")

    results = [{"immediate": 0, "end": 0, "errors": 0, "first_error": "", "done": 0} for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads + 1)

    def work(t):
        res, kept = results[t], []
        barrier.wait()
        for i, f in enumerate(feeds[t]):
            try:
                got = sess.run(None, f)
            except Exception as exc:  # noqa: BLE001 - report it and go on
                res["errors"] += 1
                res["first_error"] = res["first_error"] or f"run {i}: {C.short_error(exc, 80)}"
                kept.append(None)
                continue
            kept.append(got)
            res["immediate"] += not same(got, expected[t][i])
            res["done"] += 1
        res["end"] = sum(1 for got, want in zip(kept, expected[t]) if got is not None and not same(got, want))

    wall = start_together([threading.Thread(target=work, args=(t,)) for t in range(n_threads)], barrier)
    rows = [[f"thread {t}", r["done"], r["immediate"], r["end"], r["errors"], r["first_error"]]
            for t, r in enumerate(results)]
    C.print_table(["thread", "runs ok", "mismatches after run", "mismatches at thread end", "errors", "first error"],
                  rows, align="lrrrrl")
    immediate = sum(r["immediate"] for r in results)
    end = sum(r["end"] for r in results)
    errors = sum(r["errors"] for r in results)
    total = n_threads * runs
    print(f"wall {wall:.2f} s for {total} runs ({total / wall:.0f} runs/s; the reference took {t_ref:.2f} s "
          f"on one thread)")
    print(f"mismatches: {immediate} right after the run, {end} at thread end; errors: {errors}; "
          f"target 0: {C.verdict(immediate == 0 and end == 0 and errors == 0)}")
    C.print_stats("shared session", sess.stats)
    print()


def main(argv=None) -> int:
    args = parse_args(argv)
    C.require_zoo()
    total = args.throughput_runs or (30 if args.quick else 120)
    repeats = args.repeats or (1 if args.quick else 3)
    runs = args.runs or (100 if args.quick else 500)
    C.header("concurrency benchmark: one dynashape session shared by threads" + (" [--quick]" if args.quick else ""))
    t0 = time.perf_counter()
    bench_throughput(total, repeats)
    bench_correctness(args.threads, runs, args.seed)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
