"""Soak test: one dynashape session, many runs of a zoo transformer at random shapes.

What it does (issue: "20,000 runs, random batch and sequence sizes, every 100th checked
against ONNX Runtime; RSS at start, middle and end, plan-cache statistics"):
  * one ``InferenceSession(model, allocator=pool|naive, plan_cache_size=N)`` for the whole run;
  * per run a (batch, sequence) drawn uniformly from [1, --max-batch] x [1, --max-seq] by a
    numpy Generator seeded with ``--seed``, and feeds made by the zoo's make_inputs.py for
    those dims (token ids in the vocabulary, attention mask all ones, ...), values seeded
    from the same Generator; only ``sess.run`` is timed (time.perf_counter);
  * every ``--check-every``-th run the same feeds go through ONNX Runtime (one session, CPU,
    1 thread, memory arena and memory patterns off) and every output must match: same shape and dtype,
    ``|dyn - ort| <= atol + rtol * |ort|`` (np.allclose; defaults rtol 1e-4, atol 1e-5);
  * RSS (/proc/self/statm, after gc.collect()) at the start (both sessions made and run
    once), after run 1,000, in the middle, at the end, and every 1/20th of the runs; the
    ONNX Runtime session lives in this process too, so it is made (and run) before the
    start reading, and without its arena and memory patterns its checks add no RSS of their own;
  * the session's plan-cache counters (``session.stats``) against an exact LRU of the same
    size over the same signatures, the distinct signatures seen, and the per-run times.

Acceptance: RSS growth from the 1,000-run mark to the end under 5%, no mismatch and no
failed run; the exit status is 1 otherwise. BLAS runs single-threaded (benchmarks/_env.py).
With ``--allocator naive`` the readings swing by +-5% from one to the next (each execution context
keeps the per-tensor buffers of its last 16 signatures, so RSS follows their sizes) and settle
only after a few thousand runs: judge it over 20,000 runs, and by the printed trend.

Run from the repository root:
    python benchmarks/soak.py                              # 20,000 runs of bert_tiny (~70 s, 2 cores)
    python benchmarks/soak.py --runs 3000 --allocator naive
    python benchmarks/soak.py --model gpt2_tiny --max-batch 4 --max-seq 64
    python benchmarks/soak.py --check-every 0              # no ONNX Runtime in the process
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import gc
import os
import statistics
import sys
import time
import warnings
from collections import OrderedDict
from pathlib import Path

import _common as C
import numpy as np

DEFAULT_SEED = 20_000
GROWTH_LIMIT = 0.05      # the acceptance criterion: RSS growth after the first 1,000 runs
BASELINE_RUN = 1_000
SAMPLES = 20             # RSS readings over the whole run, besides the named ones
DIMS = ("batch", "sequence")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20_000, help="runs of the one session (default 20000)")
    ap.add_argument("--check-every", type=int, default=100,
                    help="compare every Nth run with ONNX Runtime (default 100; 0: never, no ORT session)")
    ap.add_argument("--model", default="bert_tiny",
                    help="zoo key of a model with batch and sequence dims (default bert_tiny; "
                         "also distilbert_tiny, gpt2_tiny, dynamo/bert_tiny, ...)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"seed of the shapes and values "
                                                                    f"(default {DEFAULT_SEED})")
    ap.add_argument("--allocator", choices=("pool", "naive"), default="pool")
    ap.add_argument("--max-batch", type=int, default=8, help="batch drawn from 1..N (default 8)")
    ap.add_argument("--max-seq", type=int, default=128, help="sequence drawn from 1..N (default 128)")
    ap.add_argument("--plan-cache-size", type=int, default=8, help="the session's plan_cache_size (default 8)")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads of both engines (default 1; read by benchmarks/_env.py)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.max_batch < 1 or args.max_seq < 1 or args.check_every < 0:
        ap.error("--runs, --max-batch and --max-seq must be >= 1, --check-every >= 0")
    return args


# --------------------------------------------------------------------------- memory
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """Resident set size of this process now (/proc/self/statm; psutil where there is no
    /proc), after a full collection; None when neither is available."""
    gc.collect()
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int | None:
    """VmHWM of /proc/self/status (the process's peak RSS), None without /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


# --------------------------------------------------------------------------- plan cache model
class LruModel:
    """An exact LRU cache of signatures, the size of the session's: the hits, misses and
    evictions the session's plan cache should count for the same sequence of signatures."""

    __slots__ = ("size", "keys", "hits", "misses", "evictions")

    def __init__(self, size: int):
        self.size = max(1, size)
        self.keys: OrderedDict = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def touch(self, key) -> bool:
        """Use ``key``; True on a hit."""
        if key in self.keys:
            self.keys.move_to_end(key)
            self.hits += 1
            return True
        self.misses += 1
        self.keys[key] = None
        if len(self.keys) > self.size:
            self.keys.popitem(last=False)
            self.evictions += 1
        return False


# --------------------------------------------------------------------------- feeds and checks
def model_entry(key: str) -> tuple[Path, dict]:
    catalog = C.zoo_catalog()
    if key not in catalog:
        raise SystemExit(f"unknown zoo model {key!r}; keys: {', '.join(sorted(catalog))}")
    entry = catalog[key]
    symbols = set(entry.get("shapes", {}).get("small", {}))
    if symbols != set(DIMS):
        raise SystemExit(f"{key} has dims {sorted(symbols)}, not {list(DIMS)}: pick a transformer "
                         "(bert_tiny, distilbert_tiny, gpt2_tiny, ...)")
    return C.ZOO_DIR / entry["file"], entry


def draw_shapes(rng: np.random.Generator, runs: int, max_batch: int, max_seq: int) -> np.ndarray:
    """[runs, 3] int64: batch, sequence and the seed of the run's values."""
    out = np.empty((runs, 3), dtype=np.int64)
    out[:, 0] = rng.integers(1, max_batch + 1, size=runs)
    out[:, 1] = rng.integers(1, max_seq + 1, size=runs)
    out[:, 2] = rng.integers(0, 2**31 - 1, size=runs)
    return out


def compare(got, ref, rtol: float, atol: float) -> tuple[bool, float]:
    """(all outputs close, max |got - ref|) for one run."""
    if len(got) != len(ref):
        return False, float("inf")
    ok = True
    for x, y in zip(got, ref):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype or not np.allclose(x, y, rtol=rtol, atol=atol):
            ok = False
    return ok, C.max_abs_diff(got, ref)


def ort_checker(path: Path):
    """ONNX Runtime, CPU, ``--threads`` intra-op threads, its CPU memory arena and memory
    patterns off: the arena keeps the largest shape's buffers, and the patterns, cached per
    input shape, add ~10 MiB over the first few hundred new shapes (measured, bert_tiny):
    with a check every 100th run that would be RSS growth over the whole soak, not dynashape's."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = _env.THREADS
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_cpu_mem_arena = False
    so.enable_mem_pattern = False
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


# --------------------------------------------------------------------------- the soak
def soak(args) -> int:
    import dynashape
    import onnx
    from make_inputs import make_inputs   # the zoo's, on sys.path since require_zoo

    path, _entry = model_entry(args.model)
    proto = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(args.seed)
    plan = draw_shapes(rng, args.runs, args.max_batch, args.max_seq)
    distinct = len({(int(b), int(s)) for b, s, _ in plan})
    print(f"model {args.model} ({path.name})  allocator={args.allocator}  plan_cache_size={args.plan_cache_size}  "
          f"runs={args.runs}  check every {args.check_every or 'never'}  seed={args.seed}")
    print(f"shapes: batch 1..{args.max_batch} x sequence 1..{args.max_seq} uniform "
          f"({args.max_batch * args.max_seq} possible, {distinct} drawn)  "
          f"tolerance rtol={args.rtol:g} atol={args.atol:g}")

    def feeds_of(i: int) -> dict:
        b, s, seed = (int(x) for x in plan[i])
        return make_inputs(path, {"batch": b, "sequence": s}, seed=seed, model=proto)

    t_load = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        so = None
        if _env.THREADS > 1:
            so = dynashape.SessionOptions()
            so.intra_op_num_threads = _env.THREADS
        sess = dynashape.InferenceSession(str(path), so, allocator=args.allocator,
                                          plan_cache_size=args.plan_cache_size)
    load_ms = (time.perf_counter() - t_load) * 1e3
    ort_sess = ort_checker(path) if args.check_every else None

    lru = LruModel(args.plan_cache_size)
    times = np.zeros(args.runs)
    hit = np.zeros(args.runs, dtype=bool)
    failures: list[tuple[int, str]] = []
    mismatches: list[tuple[int, int, int, float]] = []
    checks, worst = 0, (0.0, -1)

    def one_run(i: int) -> None:
        nonlocal checks, worst
        feeds = feeds_of(i)
        hit[i] = lru.touch(tuple(int(x) for x in plan[i, :2]))
        try:
            t0 = time.perf_counter()
            got = sess.run(None, feeds)
            times[i] = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - count it and go on: the soak reports them all
            times[i] = np.nan
            failures.append((i + 1, C.short_error(exc)))
            return
        if ort_sess is not None and (i == 0 or (i + 1) % args.check_every == 0):
            checks += 1
            ok, diff = compare(got, ort_sess.run(None, feeds), args.rtol, args.atol)
            if not diff <= worst[0]:
                worst = (diff, i + 1)
            if not ok:
                mismatches.append((i + 1, int(plan[i, 0]), int(plan[i, 1]), diff))

    # run 1 (also ORT's first run) before the start reading: both sessions' first-run
    # allocations (kernels, BLAS buffers, the first arena) belong to the start
    t_start = time.perf_counter()
    one_run(0)
    marks = {"start": 1, f"run {BASELINE_RUN}": BASELINE_RUN, "middle": max(1, args.runs // 2), "end": args.runs}
    if args.runs <= BASELINE_RUN:
        del marks[f"run {BASELINE_RUN}"]
    every = max(1, args.runs // SAMPLES)
    sample_at = sorted(set(marks.values()) | set(range(every, args.runs + 1, every)))
    rss: dict[int, tuple] = {}

    def sample(n: int) -> None:
        rss[n] = (rss_bytes(), sess.arena_bytes, sess.stats.cache_misses, time.perf_counter() - t_start)

    sample(1)
    print(f"session load {load_ms:.0f} ms; RSS at start {mib(rss[1][0])} MiB\n", flush=True)
    for i in range(1, args.runs):
        one_run(i)
        if i + 1 in sample_at:
            sample(i + 1)
            if (i + 1) % every == 0 and (i + 1) % (every * 5) == 0:
                print(f"  ... {i + 1} runs, {rss[i + 1][3]:.0f} s, RSS {mib(rss[i + 1][0])} MiB", flush=True)
    total_s = time.perf_counter() - t_start
    return report(args, sess, lru, rss, marks, times, hit, distinct, checks, worst, mismatches, failures, total_s)


def report(args, sess, lru, rss, marks, times, hit, distinct, checks, worst, mismatches, failures,
           total_s) -> int:
    base_n = min(BASELINE_RUN, args.runs)
    print()
    print("RSS over the run (after gc.collect(); growth against the run-1000 reading)")
    base = rss[base_n][0]
    rows = []
    for n in sorted(rss):
        r, arena, misses, t = rss[n]
        label = ", ".join(k for k, v in marks.items() if v == n)
        growth = None if r is None or base is None or n < base_n else f"{(r - base) / base * 100:+.2f}%"
        rows.append([str(n), label, mib(r), growth, mib(arena), str(misses), f"{t:.0f}"])
    C.print_table(["run", "mark", "RSS MiB", "vs run 1000", "arena MiB", "misses", "s"], rows, align="llrrrrr")

    end = rss[args.runs][0]
    print("RSS: " + "  ".join(f"{k} {mib(rss[v][0])} MiB" for k, v in marks.items())
          + f"  peak (VmHWM) {mib(peak_rss_bytes())} MiB")
    growth_ok = None
    if base is not None and end is not None and args.runs > BASELINE_RUN:
        growth = (end - base) / base
        growth_ok = growth < GROWTH_LIMIT
        print(f"RSS growth from run {base_n} to run {args.runs}: {(end - base) / 2**20:+.1f} MiB "
              f"({growth * 100:+.2f}%) -> {'PASS' if growth_ok else 'FAIL'} (limit {GROWTH_LIMIT * 100:g}%)")
        after = [(n, r[0]) for n, r in sorted(rss.items()) if n >= base_n and r[0] is not None]
        if len(after) >= 3:
            slope = np.polyfit([n for n, _ in after], [r for _, r in after], 1)[0]
            print(f"trend after run {base_n}: {slope * 10_000 / 2**20:+.2f} MiB per 10,000 runs (least squares "
                  f"over {len(after)} readings), readings {mib(min(r for _, r in after))}.."
                  f"{mib(max(r for _, r in after))} MiB")
    else:
        print(f"RSS growth after run {BASELINE_RUN}: not measured "
              f"({'no RSS reading' if base is None else f'only {args.runs} runs'})")

    st = sess.stats.snapshot()
    held = len(getattr(sess.engine, "_plans", ()))   # no public count of the plans held
    print()
    C.print_stats("soak", st)
    print(f"plan cache: size {sess.plan_cache_size}  hits {st.cache_hits}  misses {st.cache_misses}  "
          f"evictions {st.cache_misses - held} (misses - {held} plans held)  "
          f"hit rate {st.cache_hits / max(1, st.runs) * 100:.1f}%  distinct signatures {distinct}")
    same = (lru.hits, lru.misses) == (st.cache_hits, st.cache_misses)
    print(f"exact LRU of size {lru.size} over the same signatures: hits {lru.hits}  misses {lru.misses}  "
          f"evictions {lru.evictions} -> {'same' if same else 'DIFFERENT'} counts as the session")

    ok = ~np.isnan(times)
    ok_t = times[ok]
    print()
    print(f"time: {total_s:.1f} s in all ({args.runs / total_s:.0f} runs/s, feeds and checks included); "
          f"sess.run {ok_t.sum():.1f} s" + (f", {len(ok_t) / ok_t.sum():.0f} runs/s" if ok_t.sum() else ""))
    if len(ok_t):
        print(f"sess.run median {C.fmt_ms(float(np.median(ok_t)) * 1e3)} ms  p90 "
              f"{C.fmt_ms(float(np.percentile(ok_t, 90)) * 1e3)} ms  max {C.fmt_ms(float(ok_t.max()) * 1e3)} ms"
              + "".join(f"  {name} median {C.fmt_ms(statistics.median(sel) * 1e3)} ms ({len(sel)})"
                        for name, sel in (("hits", times[hit & ok]), ("misses", times[~hit & ok])) if len(sel)))

    print()
    if args.check_every:
        print(f"ONNX Runtime checks: {checks} runs (run 1 and every {args.check_every}th)  mismatches "
              f"{len(mismatches)}  max |diff| {C.fmt(worst[0])} (run {worst[1]})")
        for n, b, s, d in mismatches[:10]:
            print(f"  MISMATCH run {n}: batch={b} sequence={s} max |diff| {C.fmt(d)}")
    else:
        print("ONNX Runtime checks: off (--check-every 0)")
    print(f"failed runs: {len(failures)}")
    for n, text in failures[:10]:
        print(f"  run {n}: {text}")

    passed = not mismatches and not failures and growth_ok is not False
    print()
    print(f"soak {'PASS' if passed else 'FAIL'}: mismatches {len(mismatches)}, failed runs {len(failures)}, "
          f"RSS growth {C.verdict(growth_ok)} (< {GROWTH_LIMIT * 100:g}% after run {BASELINE_RUN})")
    return 0 if passed else 1


def main(argv=None) -> int:
    args = parse_args(argv)
    C.require_zoo()
    checked = (f"every {args.check_every}th checked against ONNX Runtime" if args.check_every
               else "no ONNX Runtime checks")
    C.header(f"soak: {args.runs} runs of one dynashape session (allocator={args.allocator}), {checked}")
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
