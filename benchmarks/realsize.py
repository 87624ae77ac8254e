"""Real-size benchmark: dynashape vs ONNX Runtime on real architectures at their real sizes
(benchmarks/export_realsize.py: BERT base and MiniLM, GPT-2 and a SmolLM-like Llama with KV cache,
ResNet-50, MobileNetV3, the Whisper base encoder), or on a model of your own.

What is measured, per model and named shape (benchmarks/_realsize.py; a KV decoder's step
feeds past tensors of the shape's past length, an all-ones attention_mask of past + new and
position_ids past .. past + new - 1; other inputs by dynashape.feeds.random_feeds, seed 0):
  * one thread, in this process: both sessions (``SessionOptions.intra_op_num_threads = 1``,
    BLAS single-threaded by benchmarks/_env.py) called in turn, dynashape, onnxruntime,
    dynashape, ...: the median of the per-run process CPU time (``time.process_time``) and of
    the wall time, ms; the ratio dynashape / onnxruntime of the CPU-time medians;
  * correctness: every output of dynashape against onnxruntime's as max |a - b| / max |b| (the
    output's scale: random weights make some outputs tiny), flagged above 1e-3;
  * default threads (unless ``--no-default-threads``): the same in a subprocess whose environment
    has no OPENBLAS_NUM_THREADS / OMP_NUM_THREADS and whose sessions leave intra_op_num_threads
    unset (0): each engine's own default thread count; wall-time medians and their ratio. The
    engines take turns of ~0.3 s of runs, each after a 0.1 s pause: a thread pool spins for a while
    after its run (onnxruntime's workers, OpenBLAS's) and would slow the other engine's next run;
  * peak RSS (unless ``--no-rss``), at the model's middle shape (the second one): one fresh
    process per engine imports it, creates the session (one thread), runs once and reports VmHWM
    of /proc/self/status, MB; a baseline process only imports numpy and loads the feeds;
  * where the time goes (``--breakdown``; default: the model with the worst one-thread ratio at
    its middle shape): both engines' profilers (``SessionOptions.enable_profiling``, one Chrome
    trace each in onnxruntime's format), the Node events of the timed runs summed per op type,
    ms per run for each engine and the ratio, sorted by dynashape's time. The engines fuse
    different nodes (onnxruntime: FusedMatMul, BiasGelu, ...; dynashape: docs/REWRITES.md), so
    some op types exist on one side only.
Each timed cell gets ``--warmup`` untimed runs per engine (default 2: the first plans the shape
and compiles kernels), then timed runs until both engines have run at least 5 times and for about
2 s each (``--repeat N``: exactly N; ``--target-s``). Targets: every one-thread ratio <= 1.2
(a decode step, one new token on a cache, <= 1.0), every default-thread ratio <= 1.3, every peak
RSS ratio <= 1.0.

Models folder: $DYNASHAPE_REALSIZE_DIR, else ~/.cache/dynashape/realsize (``--models-dir``), with
the exporter's realsize.json; models of the catalog that are not there are listed and skipped.

A full run takes tens of minutes on 2 cores with the defaults, ~9 with ``--repeat 2 --warmup 1``.
On a machine shared with other work, prefer the one-thread CPU-time ratios: the default-thread pass
then measures the scheduler as much as the engines (a BLAS call waits for its slowest thread), so
read it with the load averages the output prints at the start and the end.

Run from the repository root (nice it on a shared machine):
    python benchmarks/export_realsize.py          # once: the models (needs the bench extra)
    python benchmarks/realsize.py                 # every model found
    python benchmarks/realsize.py --models bert,gpt2 --repeat 3 --no-default-threads
    python benchmarks/realsize.py --breakdown all # the per-op table of every model
    python benchmarks/realsize.py --model my.onnx --shape small:input_ids=1x16,attention_mask=1x16 \\
        --shape large:batch=8,sequence=128 --dim sequence=32
``--shape NAME:ITEMS`` (repeatable) names a shape; ITEMS are INPUT=AxB (an input's whole shape)
or DIM=N (a dim_param, or INPUT:AXIS=N for an unknown dim); ``--dim NAME=N`` binds a dim in every
shape; other inputs get random feeds (``dynashape run --help``).
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import _common as C
import numpy as np
from _realsize import CATALOG, MANIFEST, default_dir, load_manifest, scaled_diff

TARGET_ONE_THREAD = 1.2
TARGET_DECODE = 1.0
TARGET_DEFAULT_THREADS = 1.3
TARGET_RSS = 1.0
DIFF_FLAG = 1e-3
ENGINES = ("dynashape", "onnxruntime")
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
#: default-thread pass: each engine's turn is ~BLOCK_S s of runs after a PAUSE_S s sleep (run_in_turn)
BLOCK_S, PAUSE_S = 0.3, 0.1


@dataclass(frozen=True)
class Shape:
    """A named shape: ``dims`` ({dim_param: size}, a catalog shape) or ``items`` (a user's
    ``INPUT=AxB`` / ``DIM=N`` strings of ``--shape`` and ``--dim``)."""

    name: str
    dims: dict = field(default_factory=dict)
    items: tuple = ()

    @property
    def text(self) -> str:
        """``batch=1,sequence=128`` / ``input_ids=1x128,batch=1``."""
        return ",".join(self.items or [f"{k}={v}" for k, v in self.dims.items()]) or "declared dims"

    @property
    def is_decode(self) -> bool:
        """One new token on a non-empty cache (the 1.0 target), or a user's shape named decode*."""
        return (self.dims.get("sequence") == 1 and self.dims.get("past_sequence", 0) > 0) or \
            self.name.startswith("decode")


@dataclass(frozen=True)
class Model:
    """A model to measure: its file, kind and shapes (the second is the middle one)."""

    name: str
    path: Path
    kind: str
    shapes: tuple

    @property
    def middle(self) -> Shape:
        """The shape of the peak-RSS processes and the per-op breakdown: the second, or the only one."""
        return self.shapes[1] if len(self.shapes) > 1 else self.shapes[0]


# --------------------------------------------------------------------------- arguments and models
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", type=Path, default=None,
                    help=f"the exported models and {MANIFEST} (default: {default_dir()})")
    ap.add_argument("--models", default="", help="comma-separated substrings of model names to keep")
    ap.add_argument("--model", type=Path, default=None, help="measure this .onnx file instead (with --shape)")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME:ITEMS",
                    help="a named shape of --model: INPUT=AxB and DIM=N items, comma-separated (repeatable)")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="a dim of every --model shape")
    ap.add_argument("--repeat", type=int, default=None, help="exactly this many timed runs per engine and cell")
    ap.add_argument("--target-s", type=float, default=2.0, help="timed seconds per engine and cell (default 2)")
    ap.add_argument("--min-runs", type=int, default=5, help="timed runs per engine and cell, at least (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs per engine before each cell (default 2)")
    ap.add_argument("--no-default-threads", action="store_true", help="skip the default-thread pass")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS processes")
    ap.add_argument("--breakdown", default="worst",
                    help="per-op tables: worst (default), all, none, or comma-separated model names")
    # the subprocesses of the default-thread pass and of the RSS measurement
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)   # read by _env
    ap.add_argument("--worker", choices=("threads", "rss"), help=argparse.SUPPRESS)
    ap.add_argument("--engine", choices=(*ENGINES, "baseline"), help=argparse.SUPPRESS)
    ap.add_argument("--feeds", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def parse_shape(text: str) -> tuple[str, list[str]]:
    """``NAME:ITEM,ITEM`` -> (NAME, [ITEM, ...]).

    Raises:
        SystemExit: no ``NAME:`` or no items.
    """
    name, sep, items = text.partition(":")
    if not sep or not name or not items:
        sys.exit(f"--shape {text!r}: expected NAME:INPUT=AxB,DIM=N,... (e.g. b1s128:input_ids=1x128)")
    return name, [i for i in items.split(",") if i]


def catalog_models(folder: Path, wanted: list[str]) -> tuple[list[Model], list[str]]:
    """The models of ``folder`` (its manifest, else the catalog's shapes for a known file name),
    and the names of the catalog models that are not there."""
    manifest = load_manifest(folder)
    names = list(CATALOG) + [n for n in manifest if n not in CATALOG]
    names = [n for n in names if not wanted or any(w in n for w in wanted)]
    found, missing = [], []
    for name in names:
        entry, known = manifest.get(name) or {}, CATALOG.get(name)
        path = folder / entry.get("file", f"{name}.onnx")
        shapes = entry.get("shapes") or (known.shapes if known else {})
        if not path.exists() or not shapes:
            missing.append(name)
            continue
        kind = entry.get("kind") or (known.kind if known else "?")
        found.append(Model(name, path, kind, tuple(Shape(s, dict(d)) for s, d in shapes.items())))
    return found, missing


def user_model(path: Path, shape_args: list[str], dim_args: list[str]) -> Model:
    """``--model`` with its ``--shape`` / ``--dim`` options (item strings; resolved by ``feeds``)."""
    if not path.exists():
        sys.exit(f"--model {path}: no such file")
    shapes = [parse_shape(s) for s in shape_args] or [("default", [])]
    return Model(path.stem, path, "user", tuple(Shape(n, items=(*dim_args, *items)) for n, items in shapes))


# --------------------------------------------------------------------------- sessions and feeds
def dynashape_session(path: Path, threads: int, profile_prefix: str | None = None):
    """dynashape (pool allocator), ``intra_op_num_threads = threads`` (0: unset, the default)."""
    import dynashape
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = threads
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dynashape.InferenceSession(str(path), so, allocator="pool")


def ort_session(path: Path, threads: int, profile_prefix: str | None = None):
    """onnxruntime CPU, ``intra_op_num_threads = threads`` (0: its default), default optimizations."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if threads:
        so.inter_op_num_threads = 1   # sequential execution uses none; as benchmarks/_common.py
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def make_session(engine: str, path: Path, threads: int, profile_prefix: str | None = None):
    return (dynashape_session if engine == "dynashape" else ort_session)(path, threads, profile_prefix)


def feeds_for(sess, shape: Shape) -> dict:
    """Feeds of a dynashape session at ``shape`` (seed 0): dynashape.feeds' random values (ids within
    their embedding table, masks ones, type ids zeros, floats N(0, 1)), then position_ids set to
    the last positions of the attention mask (past .. past + new - 1 of a KV decoder's step).

    Raises:
        click.ClickException: a dim without a value, a name that is not a dim or input of the model.
    """
    from dynashape.cli.common import feeds_from_options, ordered_feeds
    items = shape.items or tuple(f"{k}={v}" for k, v in shape.dims.items())
    names = {i.name for i in sess.get_inputs()}
    shapes = tuple(i for i in items if i.split("=", 1)[0] in names)
    dims = tuple(i for i in items if i not in shapes)
    feeds = ordered_feeds(sess, feeds_from_options(sess, dims, shapes, (), 0))
    mask, pos = feeds.get("attention_mask"), feeds.get("position_ids")
    if mask is not None and pos is not None and mask.ndim == pos.ndim == 2 and mask.shape[1] >= pos.shape[1]:
        total, new = mask.shape[1], pos.shape[1]
        feeds["position_ids"] = np.broadcast_to(np.arange(total - new, total, dtype=pos.dtype), pos.shape).copy()
    return feeds


def save_feeds(feeds: dict, path: Path) -> Path:
    np.savez(path, **feeds)
    return path


def load_feeds(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


# --------------------------------------------------------------------------- timing
def run_in_turn(fns: dict, warmup: int, repeat: int | None, min_runs: int, target_s: float,
                block_s: float = 0.0, pause_s: float = 0.0, max_runs: int = 500) -> dict:
    """Call each of ``fns`` ({engine: fn}) in turn: ``warmup`` untimed rounds, then timed turns,
    exactly ``repeat`` runs per engine or until every engine ran ``min_runs`` times and the timed
    runs add up to about ``target_s`` seconds per engine (at most ``max_runs``).

    A turn is one run (a, b, a, b, ...) or, with ``block_s``, as many runs as fill about
    ``block_s`` seconds, after a ``pause_s`` sleep: with several threads, an engine's thread pool
    spins for a while after its run (onnxruntime's workers, OpenBLAS's) and would slow the
    other engine's next run. Returns {engine: {"cpu_ms", "wall_ms": medians of the process CPU
    time and the wall time of a run, ms; "runs"}}."""
    last = {}
    for _ in range(warmup):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            last[k] = time.perf_counter() - t0
    gc.collect()
    cpu: dict = {k: [] for k in fns}
    wall: dict = {k: [] for k in fns}
    spent = 0.0

    def done(k) -> bool:
        n = len(wall[k])
        return n >= (repeat if repeat is not None else max_runs)

    while not all(done(k) for k in fns):
        for k, fn in fns.items():
            per_turn = max(1, round(block_s / last[k])) if block_s and last.get(k) else 1
            if pause_s:
                time.sleep(pause_s)
            for _ in range(per_turn):
                if done(k):
                    break
                c0, w0 = time.process_time(), time.perf_counter()
                fn()
                w1, c1 = time.perf_counter(), time.process_time()
                cpu[k].append((c1 - c0) * 1e3)
                wall[k].append((w1 - w0) * 1e3)
                spent += w1 - w0
        if repeat is None and min(len(w) for w in wall.values()) >= min_runs and spent >= target_s * len(fns):
            break
    return {k: {"cpu_ms": statistics.median(cpu[k]), "wall_ms": statistics.median(wall[k]), "runs": len(wall[k])}
            for k in fns}


def time_sessions(sessions: dict, feeds: dict, args, **turns) -> dict:
    """run_in_turn over ``sessions`` ({engine: session}) on ``feeds``, with the timing options."""
    return run_in_turn({e: (lambda s=s: s.run(None, feeds)) for e, s in sessions.items()}, warmup=args.warmup,
                       repeat=args.repeat, min_runs=args.min_runs, target_s=args.target_s, **turns)


def compare_outputs(got: list, ref: list, names: list[str]) -> tuple[float, str]:
    """(worst max|a-b|/max|b| over the outputs, the output's name)."""
    diffs = [scaled_diff(g, r) for g, r in zip(got, ref)]
    if not diffs:
        return 0.0, "-"
    worst = max(range(len(diffs)), key=lambda i: (np.isnan(diffs[i]), diffs[i]))
    return diffs[worst], names[worst]


def one_thread_pass(model: Model, feeds_dir: Path, args) -> list[dict]:
    """The one-thread cells of ``model``, in this process; each shape's feeds saved to
    ``feeds_dir/<shape>.npz`` for the subprocesses."""
    sessions, created = {}, []
    for engine in ENGINES:
        t0 = time.perf_counter()
        sessions[engine] = make_session(engine, model.path, 1)
        created.append(f"{time.perf_counter() - t0:.1f} s ({engine})")
    print(f"{model.name}: sessions created in {' / '.join(created)}", flush=True)
    dyn, ort = sessions["dynashape"], sessions["onnxruntime"]
    names = [o.name for o in ort.get_outputs()]
    rows = []
    for shape in model.shapes:
        row = {"model": model.name, "shape": shape.name, "decode": shape.is_decode}
        try:
            feeds = feeds_for(dyn, shape)
            save_feeds(feeds, feeds_dir / f"{shape.name}.npz")
            row["diff"], row["output"] = compare_outputs(dyn.run(None, feeds), ort.run(None, feeds), names)
            row.update(cell_times(time_sessions(sessions, feeds, args)))
            row["ratio"] = row["dyn_cpu"] / row["ort_cpu"]
            row["wall_ratio"] = row["dyn_wall"] / row["ort_wall"]
        except Exception as exc:  # noqa: BLE001 - report the failure in the row and go on
            row["error"] = C.short_error(exc)
        rows.append(row)
        print_progress(row)
    return rows


def cell_times(times: dict) -> dict:
    """The row fields of run_in_turn's result (ms, runs per engine)."""
    return {"dyn_cpu": times["dynashape"]["cpu_ms"], "ort_cpu": times["onnxruntime"]["cpu_ms"],
            "dyn_wall": times["dynashape"]["wall_ms"], "ort_wall": times["onnxruntime"]["wall_ms"],
            "runs": times["dynashape"]["runs"]}


def print_progress(row: dict) -> None:
    if row.get("error"):
        print(f"  {row['shape']}: {row['error']}", flush=True)
        return
    print(f"  {row['shape']}: 1 thread: dynashape {C.fmt_ms(row['dyn_cpu'])} ms, onnxruntime "
          f"{C.fmt_ms(row['ort_cpu'])} ms (CPU), {row['ratio']:.2f}x, {row['runs']} runs each; "
          f"max|diff|/max|ref| {C.fmt(row['diff'])} ({row['output']})", flush=True)


# --------------------------------------------------------------------------- subprocesses
def run_worker(argv: list[str], threads: int, timeout: float = 3600) -> dict:
    """Run this script as a worker (``--worker ...``) with ``threads`` (0: the thread variables
    removed from its environment); its JSON line, or {"error": ...}."""
    env = {k: v for k, v in os.environ.items() if threads or k not in THREAD_VARS}
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--threads", str(threads)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"error": C.short_error_text((out.stderr.strip().splitlines() or ["failed"])[-1], 80)}
    return json.loads(lines[-1])


def default_threads_pass(model: Model, feeds_dir: Path, args) -> dict:
    """The default-thread cells of ``model`` (a worker process): {shape: {"dyn_ms", "ort_ms", ...}}."""
    argv = ["--worker", "threads", "--model", str(model.path), "--feeds", str(feeds_dir),
            "--warmup", str(args.warmup), "--min-runs", str(args.min_runs), "--target-s", str(args.target_s)]
    if args.repeat is not None:
        argv += ["--repeat", str(args.repeat)]
    return run_worker(argv, threads=0)


def threads_worker(args) -> dict:
    """In the worker: both engines at their default threads on each saved shape, wall medians."""
    sessions = {e: make_session(e, args.model, 0) for e in ENGINES}
    shapes = json.loads((args.feeds / "shapes.json").read_text())
    out = {"blas": C.blas_info(), "shapes": {}}
    for name in shapes:
        try:
            times = time_sessions(sessions, load_feeds(args.feeds / f"{name}.npz"), args,
                                  block_s=BLOCK_S, pause_s=PAUSE_S)
            out["shapes"][name] = {"dyn_ms": times["dynashape"]["wall_ms"], "ort_ms": times["onnxruntime"]["wall_ms"],
                                   "dyn_cpu": times["dynashape"]["cpu_ms"], "ort_cpu": times["onnxruntime"]["cpu_ms"],
                                   "runs": times["dynashape"]["runs"]}
        except Exception as exc:  # noqa: BLE001 - report it for this shape
            out["shapes"][name] = {"error": C.short_error(exc)}
    out["blas_after"] = C.blas_info()
    return out


def rss_worker(args) -> dict:
    """In the worker: import the engine, create its session (one thread), run once; VmHWM, MB."""
    feeds = load_feeds(args.feeds)
    if args.engine != "baseline":
        make_session(args.engine, args.model, 1).run(None, feeds)
    with open("/proc/self/status") as f:
        hwm = [int(line.split()[1]) for line in f if line.startswith("VmHWM:")]
    return {"rss_mb": hwm[0] / 1024.0}


def rss_pass(model: Model, feeds_dir: Path) -> dict:
    """Peak RSS of a fresh process per engine at the model's middle shape: {engine: MB or error}."""
    feeds = feeds_dir / f"{model.middle.name}.npz"
    if not feeds.exists():
        return {e: "no feeds" for e in ("baseline", *ENGINES)}
    out = {}
    for engine in ("baseline", *ENGINES):
        res = run_worker(["--worker", "rss", "--engine", engine, "--model", str(model.path), "--feeds", str(feeds)],
                         threads=1)
        out[engine] = res.get("rss_mb", res.get("error"))
    return out


# --------------------------------------------------------------------------- per-op breakdown
def timed_node_events(events: list, runs: int) -> list:
    """The Node events inside the last ``runs`` ``model_run`` spans of a trace (the warm-up runs,
    planning and kernel compilation excluded)."""
    spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                   if e.get("cat") == "Session" and e.get("name") == "model_run")[-runs:]
    return [e for e in events if e.get("cat") == "Node" and any(a <= e["ts"] <= b for a, b in spans)]


def profile(engine: str, model: Model, feeds: dict, runs: int, warmup: int, folder: str) -> dict:
    """One engine's profile of ``runs`` runs after ``warmup``: {op type: (ms per run, calls per run)}
    and "run_ms", the median model_run span (ms, the profiler on)."""
    from dynashape.cli.profile import op_type_table, session_durations_ms
    sess = make_session(engine, model.path, 1, profile_prefix=os.path.join(folder, f"{engine}_"))
    for _ in range(warmup + runs):
        sess.run(None, feeds)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    table = {r["op_type"]: (r["total_ms"] / runs, r["calls"] / runs)
             for r in op_type_table(timed_node_events(events, runs))}
    return {"ops": table, "run_ms": statistics.median(session_durations_ms(events, "model_run")[-runs:])}


#: op types the engines fuse differently, grouped so that the two sides compare: a fused op sits with
#: what it replaces, and the activations one engine fuses into a MatMul or a Conv sit with it on both
#: sides. Adds stay apart (Add): dynashape fuses bias adds into FusedMatMul, onnxruntime's NCHWc convs
#: take a CNN's residual adds, so Add can show on one side only. onnxruntime's ReorderInput /
#: ReorderOutput are the NCHWc layout changes around its convolutions.
FAMILIES = {
    "MatMul/Gemm (+Gelu, attention)": ("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "FusedAttention", "Softmax",
                                       "Attention", "MultiHeadAttention", "GroupQueryAttention", "Gelu", "BiasGelu",
                                       "FastGelu", "QuickGelu"),
    "Conv (+activations)": ("Conv", "FusedConv", "NhwcFusedConv", "ReorderInput", "ReorderOutput", "Relu", "Clip",
                            "HardSwish", "HardSigmoid", "LeakyRelu"),
    "normalization": ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                      "SkipSimplifiedLayerNormalization", "RMSNormalization"),
}
FAMILY_OF = {op: family for family, ops in FAMILIES.items() for op in ops}


def breakdown_rows(dyn: dict, ort: dict) -> list[list]:
    """Rows of the per-op table: {op type: (ms, calls) per run} of each engine, grouped by FAMILIES,
    families (and op types in a family) by dynashape's time, then onnxruntime's. A family of
    several op types gets a subtotal row, its members indented without a ratio (the same name can
    be a different fusion on each side)."""
    dyn_total = sum(v[0] for v in dyn.values()) or 1.0
    groups: dict = {}
    for op in {*dyn, *ort}:
        groups.setdefault(FAMILY_OF.get(op, op), []).append(op)

    def key(ops):
        return (-sum(dyn[o][0] for o in ops if o in dyn), -sum(ort[o][0] for o in ops if o in ort))

    def row(label, d, o, ratio=True):
        return [label, C.fmt_ms(d and d[0]), C.fmt_ms(o and o[0]), ratio_text(d and d[0], o and o[0]) if ratio else "",
                f"{100 * d[0] / dyn_total:.1f}%" if d else "-", "-" if d is None else f"{d[1]:g}",
                "-" if o is None else f"{o[1]:g}"]

    def total(table, ops):
        ops = [o for o in ops if o in table]
        return (sum(table[o][0] for o in ops), sum(table[o][1] for o in ops)) if ops else None

    rows = []
    for family, ops in sorted(groups.items(), key=lambda g: key(g[1])):
        ops.sort(key=lambda o: key([o]))
        if len(ops) == 1:
            rows.append(row(ops[0], dyn.get(ops[0]), ort.get(ops[0])))
            continue
        rows.append(row(family, total(dyn, ops), total(ort, ops)))
        rows += [row("  " + o, dyn.get(o), ort.get(o), ratio=False) for o in ops]
    rows.append(row("total (nodes)", total(dyn, list(dyn)), total(ort, list(ort))))
    return rows


def breakdown(model: Model, feeds_dir: Path, args) -> None:
    """Print the per-op-type table of ``model`` at its middle shape."""
    feeds = load_feeds(feeds_dir / f"{model.middle.name}.npz")
    runs = args.repeat or 5
    with tempfile.TemporaryDirectory(prefix="realsize_profile_") as folder:
        prof = {e: profile(e, model, feeds, runs, args.warmup, folder) for e in ENGINES}
        gc.collect()
    rows = breakdown_rows(prof["dynashape"]["ops"], prof["onnxruntime"]["ops"])
    run_ms = [prof[e]["run_ms"] for e in ENGINES]
    rows.append(["model_run (median)", C.fmt_ms(run_ms[0]), C.fmt_ms(run_ms[1]), ratio_text(*run_ms), "", "", ""])
    print(f"where the time goes: {model.name} at {model.middle.name} ({model.middle.text}), one thread, "
          f"profilers on, ms per run (mean of {runs} runs after {args.warmup} warm-up); op types as each engine "
          "names them, fused ones grouped with what they replace")
    C.print_table(["op type", "dynashape ms", "onnxruntime ms", "dyn/ORT", "dyn share", "dyn calls", "ORT calls"],
                  rows, align="lrrrrrr")


def ratio_text(a, b) -> str:
    """``a / b`` with two decimals, ``-`` when either is missing."""
    return f"{a / b:.2f}" if a is not None and b else "-"


# --------------------------------------------------------------------------- the report
def print_shapes(models: list[Model]) -> None:
    for m in models:
        shapes = "; ".join(f"{s.name} ({s.text})" for s in m.shapes)
        print(f"  {m.name} [{m.kind}] {m.path}: {shapes}; middle {m.middle.name}")
    print()


def one_thread_table(rows: list[dict]) -> None:
    print("one thread (intra_op_num_threads = 1, BLAS 1 thread): medians per run, ms; dyn/ORT of CPU time")
    table = [[r["model"], r["shape"], C.fmt_ms(r.get("dyn_cpu")), C.fmt_ms(r.get("ort_cpu")), ratio_text(
        r.get("dyn_cpu"), r.get("ort_cpu")), C.fmt_ms(r.get("dyn_wall")), C.fmt_ms(r.get("ort_wall")),
        ratio_text(r.get("dyn_wall"), r.get("ort_wall")), r.get("runs"), C.fmt(r.get("diff")),
        ("FLAG " if flagged(r) else "") + r.get("output", "") if "diff" in r else "", r.get("error", "")]
        for r in rows]
    C.print_table(["model", "shape", "dyn CPU", "ORT CPU", "dyn/ORT", "dyn wall", "ORT wall", "wall ratio", "runs",
                   "max rel diff", "worst output", "note"], table, align="llrrrrrrrrll")


def default_threads_table(rows: list[dict], blas: str) -> None:
    print(f"default threads (intra_op_num_threads unset, no thread variables; worker BLAS: {blas}): "
          "medians per run, ms; dyn/ORT of wall time (CPU time: all threads, spinning included)")
    table = [[r["model"], r["shape"], C.fmt_ms(r.get("dyn_ms")), C.fmt_ms(r.get("ort_ms")),
              ratio_text(r.get("dyn_ms"), r.get("ort_ms")), C.fmt_ms(r.get("dyn_cpu")), C.fmt_ms(r.get("ort_cpu")),
              r.get("runs"), r.get("error", "")] for r in rows]
    C.print_table(["model", "shape", "dyn wall", "ORT wall", "dyn/ORT", "dyn CPU", "ORT CPU", "runs", "note"], table,
                  align="llrrrrrrl")


def rss_table(rows: list[dict]) -> None:
    print("peak RSS (VmHWM) of a fresh process: import, session (1 thread), one run at the middle shape, MB")
    table = []
    for r in rows:
        dyn, ort = r["rss"].get("dynashape"), r["rss"].get("onnxruntime")
        errors = "; ".join(f"{k}: {v}" for k, v in r["rss"].items() if isinstance(v, str))
        table.append([r["model"], r["shape"], num(r["rss"].get("baseline")), num(dyn), num(ort),
                      ratio_text(num(dyn), num(ort)), errors])
    C.print_table(["model", "shape", "baseline", "dynashape", "onnxruntime", "dyn/ORT", "note"], table,
                  align="llrrrrl")


def num(v):
    return v if isinstance(v, (int, float)) else None


def flagged(row: dict) -> bool:
    return "diff" in row and not row["diff"] <= DIFF_FLAG


def target_line(what: str, cells: list[tuple[str, float, float]]) -> None:
    """``what``: the worst of (label, ratio, limit) cells and met / NOT met (every cell within its limit)."""
    if not cells:
        print(f"{what}: not measured")
        return
    over = [c for c in cells if not c[1] <= c[2]]
    worst = max(cells, key=lambda c: c[1] / c[2])
    print(f"{what}: worst {worst[1]:.2f} ({worst[0]}), {len(cells) - len(over)} of {len(cells)} within -> "
          f"{C.verdict(not over)}" + (f"; over: {', '.join(f'{c[0]} {c[1]:.2f}' for c in over)}" if over else ""))


def targets(one: list[dict], default: list[dict], rss: list[dict]) -> None:
    target_line(f"one-thread dyn/ORT (CPU time) <= {TARGET_ONE_THREAD} (decode step <= {TARGET_DECODE})",
                [(f"{r['model']} {r['shape']}", r["ratio"], TARGET_DECODE if r["decode"] else TARGET_ONE_THREAD)
                 for r in one if "ratio" in r])
    target_line(f"default-thread dyn/ORT (wall) <= {TARGET_DEFAULT_THREADS}",
                [(f"{r['model']} {r['shape']}", r["dyn_ms"] / r["ort_ms"], TARGET_DEFAULT_THREADS)
                 for r in default if "dyn_ms" in r])
    target_line(f"peak RSS dyn/ORT <= {TARGET_RSS}",
                [(f"{r['model']} {r['shape']}", r["rss"]["dynashape"] / r["rss"]["onnxruntime"], TARGET_RSS)
                 for r in rss if num(r["rss"].get("dynashape")) and num(r["rss"].get("onnxruntime"))])
    bad = [f"{r['model']} {r['shape']} {r['output']} {C.fmt(r['diff'])}" for r in one if flagged(r)]
    failed = [f"{r['model']} {r['shape']}" for r in one if r.get("error")]
    print(f"correctness max|dyn-ORT|/max|ORT| <= {DIFF_FLAG:g} on every output: {C.verdict(not bad and not failed)}"
          + (f"; flagged: {', '.join(bad)}" if bad else "") + (f"; failed: {', '.join(failed)}" if failed else ""))


def choose_breakdown(spec: str, models: list[Model], one: list[dict]) -> list[Model]:
    """The models of ``--breakdown``: worst (the highest one-thread ratio at the middle shape), all,
    none, or names."""
    if spec == "none":
        return []
    if spec == "all":
        return models
    if spec == "worst":
        middle = {m.name: m.middle.name for m in models}
        cells = [r for r in one if r.get("ratio") and middle.get(r["model"]) == r["shape"]]
        worst = max(cells, key=lambda r: r["ratio"])["model"] if cells else None
        return [m for m in models if m.name == worst]
    wanted = [s for s in spec.split(",") if s]
    return [m for m in models if m.name in wanted]


def measure(models: list[Model], args) -> None:
    """Every pass over every model, then the tables, the breakdowns and the target lines."""
    one, default, rss, blas = [], [], [], "-"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="realsize_feeds_") as tmp:
        dirs = {m.name: Path(tmp) / m.name for m in models}
        for m in models:
            dirs[m.name].mkdir()
            (dirs[m.name] / "shapes.json").write_text(json.dumps([s.name for s in m.shapes]))
            rows = one_thread_pass(m, dirs[m.name], args)
            one += rows
            if not args.no_default_threads:
                res = default_threads_pass(m, dirs[m.name], args)
                blas = res.get("blas", blas)
                for s in m.shapes:
                    cell = res.get("shapes", {}).get(s.name) or {"error": res.get("error", "not run")}
                    default.append({"model": m.name, "shape": s.name, **cell})
                print(f"  default threads: {done_text(default[-len(m.shapes):])}", flush=True)
            if not args.no_rss:
                rss.append({"model": m.name, "shape": m.middle.name, "rss": rss_pass(m, dirs[m.name])})
                print(f"  peak RSS at {m.middle.name}: " + ", ".join(
                    f"{k} {C.fmt(v) if num(v) else v}" for k, v in rss[-1]["rss"].items()) + " MB", flush=True)
        print(f"\nmeasured in {time.perf_counter() - t0:.0f} s; loadavg now {loadavg()} (the machine is shared)\n")
        one_thread_table(one)
        if default:
            default_threads_table(default, blas)
        if rss:
            rss_table(rss)
        for m in choose_breakdown(args.breakdown, models, one):
            try:
                breakdown(m, dirs[m.name], args)
            except Exception as exc:  # noqa: BLE001 - a profile that fails does not hide the rest
                print(f"where the time goes: {m.name}: {C.short_error(exc)}\n")
    targets(one, default, rss)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def done_text(rows: list[dict]) -> str:
    return ", ".join(f"{r['shape']} {r.get('error') or ratio_text(r['dyn_ms'], r['ort_ms']) + 'x'}" for r in rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(threads_worker(args) if args.worker == "threads" else rss_worker(args)))
        return 0
    if args.model is not None:
        models, missing = [user_model(args.model, args.shape, args.dim)], []
    else:
        folder = (args.models_dir or default_dir()).expanduser()
        models, missing = catalog_models(folder, [s for s in args.models.split(",") if s])
        if not models:
            print(f"no real-size models in {folder}: export them with python benchmarks/export_realsize.py {folder}")
            return 0
    C.header("real-size models: dynashape vs ONNX Runtime, one thread and default threads; peak RSS; per-op time")
    timing = (f"exactly {args.repeat} timed runs" if args.repeat is not None else
              f">= {args.min_runs} timed runs and ~{args.target_s:g} s per engine") + f" after {args.warmup} warm-up"
    print(f"timing per cell: {timing}, engines in turn; default-thread pass: "
          f"{'skipped' if args.no_default_threads else 'a subprocess without ' + '/'.join(THREAD_VARS)}")
    print(f"models ({len(models)}):")
    print_shapes(models)
    if missing:
        print(f"not found, skipped: {', '.join(missing)} (python benchmarks/export_realsize.py exports them)\n")
    measure(models, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
