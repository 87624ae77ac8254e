"""Batch inference benchmark: a dataset of token rows of random lengths through bert_tiny, in one
process and on Ray Data with 1 and 2 actors, with and without length bucketing, dynashape against
ONNX Runtime in the same ``map_batches`` pipeline.

What is measured (../shared/zoo/bert_tiny.onnx; --rows rows, lengths uniform in 1..100, ids in
[0, 1000), seed 0; ``attention_mask`` ones over each row, ``token_type_ids`` zeros):
  * per configuration (where: local, ray x1, ray x2; buckets: pow2 = padded to powers of two and
    the batch to a power of two <= --batch-size, none = each run padded to its longest row, what a
    plain ``map_batches(session.run)`` does; engine: dynashape, onnxruntime):
      - rows/s (wall): rows over the wall time from the first batch handed out to the last row
        collected (Ray: actor start and model compile included, the fresh actors' plan caches are
        cold); local: the median of --repeats passes on one warm predictor, and the first (cold) pass;
      - rows/s (busy): rows over the largest worker's time inside predictor calls (padding,
        runs, cutting back): the throughput once actors run, start-up excluded; Ray: the seconds
        outside it (wall - busiest worker: actor start, model compile, moving rows);
      - session runs, distinct signatures, plan-cache misses and hit rate (dynashape), padding
        overhead (cells computed beyond the real ones, %; see dynashape.batch.stats).
  * ratio: dynashape rows/s over ONNX Runtime's in the same configuration (> 1: dynashape faster).
  * correctness: the largest |difference| between dynashape's rows (pow2 buckets, local) and
    ONNX Runtime's (no bucketing, local), over both outputs of every row.
ONNX Runtime runs with 1 intra-op and 1 inter-op thread; dynashape with single-threaded BLAS
(benchmarks/_env.py); Ray actors get 1 CPU each. Both engines are driven by dynashape.batch's
Predictor (the ONNX Runtime one replaces only its ``execute``), so the comparison is the runtime's.

Targets: pow2 buckets bound each worker's plan-cache misses by 8 length x 6 batch buckets and miss
fewer plans than no bucketing; locally the warm bucketed run is at least as fast as the unbucketed
one; dynashape's rows equal ONNX Runtime's (max |diff| <= 1e-4).

Run from the repository root (needs ../shared, onnxruntime and, for the Ray rows, ray[data]):
    python benchmarks/batch.py                  # ~1.5-3 minutes on 2 CPUs
    python benchmarks/batch.py --no-ray         # the local rows only
    python benchmarks/batch.py --rows 4000 --actors 1,2,4
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import logging
import os
import statistics
import sys
import warnings

import _common as C
import numpy as np

from dynashape.batch import Predictor, run_local, run_ray
from dynashape.batch.predictor import resolve_model
from dynashape.batch.ray_runner import quiet_ray_data_logs
from dynashape.batch.stats import merge_stats

MODEL = "bert_tiny.onnx"
NAMES = ["last_hidden_state", "pooler_output"]
MAX_LENGTH, VOCAB = 100, 1000
MISS_BOUND = 8 * 6          # pow2 length buckets for 1..100 x batch buckets 1..32
TOLERANCE = 1e-4


class OrtPredictor(Predictor):
    """dynashape.batch's bucketing, padding and cutting back around an ONNX Runtime session (CPU,
    1 intra-op and 1 inter-op thread); the dynashape session is built for the layout only."""

    def __init__(self, model, *args, **kwargs):
        import onnxruntime as ort

        model = resolve_model(model)
        super().__init__(model, *args, **kwargs)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.ort = ort.InferenceSession(model if isinstance(model, bytes) else str(model), so,
                                        providers=["CPUExecutionProvider"])

    def execute(self, feeds: dict) -> list:
        return self.ort.run(self.output_names, feeds)


def token_rows(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, int(k), dtype=np.int64) for k in rng.integers(1, MAX_LENGTH + 1, n)]


def _busy_rows_per_s(result) -> float:
    busiest = max((w.busy_s for w in result.workers), default=0.0)
    return result.rows / busiest if busiest > 0 else 0.0


def measure_local(model: str, rows: list, engine: type, buckets, batch_size: int, repeats: int) -> dict:
    """A cold pass over ``rows`` on a fresh predictor (its counters are reported), then ``repeats``
    warm passes on the same predictor, each over a new dataset of the same size and distribution
    (seeds 1, 2, ...): the steady state of a worker that has seen the shapes before."""
    predictor = engine(model, keep_columns=False, buckets=buckets, batch_size=batch_size)
    cold = run_local(predictor, {"input_ids": rows})
    cold_stats = merge_stats([predictor.stats])
    warm = []
    for seed in range(1, repeats + 1):
        before = merge_stats([predictor.stats])
        result = run_local(predictor, {"input_ids": token_rows(len(rows), seed)})
        busy = predictor.stats.busy_s - before.busy_s
        warm.append((result.rows_per_s, result.rows / busy, predictor.stats.cache_misses - before.cache_misses))
    return dict(wall=statistics.median(w[0] for w in warm), busy=statistics.median(w[1] for w in warm),
                warm_misses=statistics.median(w[2] for w in warm), cold=cold.rows_per_s, stats=cold_stats,
                outputs=cold.outputs, outside=None)


def measure_ray(model: str, rows: list, engine: type, buckets, batch_size: int, actors: int) -> dict:
    result = run_ray(model, {"input_ids": rows}, concurrency=actors, buckets=buckets, batch_size=batch_size,
                     predictor=engine)
    busiest = max((w.busy_s for w in result.workers), default=0.0)
    return dict(wall=result.rows_per_s, busy=_busy_rows_per_s(result), cold=result.rows_per_s, warm_misses=None,
                stats=result.total, workers=result.workers, outputs=result.outputs, outside=result.wall_s - busiest)


def max_diff(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
               for name in NAMES for x, y in zip(a[name], b[name]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000, help="rows of the dataset (1000)")
    ap.add_argument("--batch-size", type=int, default=32, help="most rows per session run (32)")
    ap.add_argument("--repeats", type=int, default=3, help="warm local passes, median reported (3)")
    ap.add_argument("--actors", default="1,2", help="Ray actor counts (1,2)")
    ap.add_argument("--no-ray", action="store_true", help="local rows only")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (read by _env; 1)")
    args = ap.parse_args(argv)

    C.header("batch inference: bert_tiny over token rows of lengths 1..100 (dynashape.batch)")
    model = str(C.require_zoo() / MODEL)
    rows = token_rows(args.rows)
    real = sum(len(r) for r in rows)
    print(f"dataset: {len(rows)} rows, {real} tokens (mean length {real / len(rows):.1f}), batch size "
          f"{args.batch_size}, rows per call {8 * args.batch_size}")
    engines = {"dynashape": Predictor, "onnxruntime": OrtPredictor}
    modes = {"pow2": "pow2", "none": None, "exact": "exact"}
    results: dict = {}
    for mode, spec in modes.items():
        for name, engine in engines.items():
            print(f"  local  {mode:4s} {name} ...", flush=True)
            results[("local", mode, name)] = measure_local(model, rows, engine, spec, args.batch_size, args.repeats)
    ray_note = None
    if not args.no_ray:
        try:
            import ray
        except ImportError:
            ray, ray_note = None, 'ray is not installed (pip install "dynashape[ray]"): Ray rows skipped'
        if ray is not None:
            actor_counts = [int(a) for a in args.actors.split(",") if a.strip()]
            cpus = max(2, max(actor_counts))
            ray.init(num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
            quiet_ray_data_logs()
            try:
                for actors in actor_counts:
                    for mode, spec in modes.items():
                        for name, engine in engines.items():
                            print(f"  ray x{actors} {mode:4s} {name} ...", flush=True)
                            results[(f"ray x{actors}", mode, name)] = measure_ray(model, rows, engine, spec,
                                                                                  args.batch_size, actors)
            finally:
                ray.shutdown()
    print()

    table = []
    for (where, mode, name), r in results.items():
        s = r["stats"]
        ort = results.get((where, mode, "onnxruntime"))
        ratio = None if name != "dynashape" or ort is None else C.fmt(r["wall"] / ort["wall"], 3) + "x"
        is_ds = name == "dynashape"
        table.append([where, mode, name, r["wall"], r["busy"], r["outside"], s.runs, s.signatures,
                      s.cache_misses if is_ds else "-",
                      C.fmt(r["warm_misses"]) if is_ds and r["warm_misses"] is not None else "-",
                      f"{s.hit_rate:.1f}" if is_ds else "-", f"{s.padding_overhead:.1f}", ratio or "-"])
    print("rows/s wall: local = median of the warm passes (new data, warm predictor); ray = one run on fresh actors,")
    print("actor start and model compile included. runs / signatures / misses / hit % / padding %: the first pass")
    print("(local) or the run (ray); warm misses: plan-cache misses per warm pass (median). outside s: ray wall")
    print("seconds outside the busiest worker's calls (actor start, compile, rows moved). vs ORT: rows/s wall ratio.")
    C.print_table(["where", "buckets", "engine", "rows/s wall", "rows/s busy", "outside s", "runs", "signatures",
                   "misses", "warm misses", "hit %", "padding %", "vs ORT"], table, align="lllrrrrrrrrrr")
    for (where, mode, name), r in results.items():
        if name == "dynashape" and "workers" in r:
            for w in sorted(r["workers"], key=lambda w: w.worker):
                print(f"  {where} {mode} worker {w.worker}: {w.rows} rows, {w.runs} runs, plan cache "
                      f"{w.cache_hits} hits / {w.cache_misses} misses ({w.hit_rate:.1f} %), padding "
                      f"{w.padding_overhead:.1f} %")
    if ray_note:
        print(ray_note)
    print()

    local = {m: results[("local", m, "dynashape")] for m in modes}
    diff = max_diff(local["pow2"]["outputs"], results[("local", "none", "onnxruntime")]["outputs"])
    ray_pow2 = [r for (w, m, n), r in results.items() if w.startswith("ray") and m == "pow2" and n == "dynashape"]
    misses = [local["pow2"]["stats"].cache_misses] + [w.cache_misses for r in ray_pow2 for w in r["workers"]]
    pad = {m: local[m]["stats"].padding_overhead for m in modes}
    print(f"target: pow2 plan-cache misses per worker <= {MISS_BOUND} (local, then each Ray worker: "
          f"{', '.join(map(str, misses))}): {C.verdict(max(misses) <= MISS_BOUND)}")
    pow2, exact = local["pow2"], local["exact"]
    fewer = pow2["stats"].cache_misses < exact["stats"].cache_misses and pow2["warm_misses"] < exact["warm_misses"]
    print(f"target: pow2 misses fewer plans than exact lengths, cold and warm (local {misses[0]} vs "
          f"{exact['stats'].cache_misses}; warm {C.fmt(pow2['warm_misses'])} vs {C.fmt(exact['warm_misses'])}): "
          f"{C.verdict(fewer)}")
    print(f"target: pow2 pads less than no bucketing ({pad['pow2']:.1f} % vs {pad['none']:.1f} %): "
          f"{C.verdict(pad['pow2'] < pad['none'])}")
    print(f"target: local warm rows/s, pow2 >= none and >= exact ({local['pow2']['wall']:.1f} vs "
          f"{local['none']['wall']:.1f} and {local['exact']['wall']:.1f}): "
          f"{C.verdict(local['pow2']['wall'] >= max(local['none']['wall'], local['exact']['wall']))}")
    print(f"target: dynashape rows equal ONNX Runtime's (max |diff| {diff:.2e} <= {TOLERANCE:g}): "
          f"{C.verdict(diff <= TOLERANCE)}")
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"]
    print(f"loadavg at the end: {' '.join(load)} (the machine may be shared: rows/s move with it)")
    return 0


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        sys.exit(main())
