"""Cold start: what a fresh process pays before its first result, dynashape against ONNX Runtime.

Per model and engine, ``--processes`` fresh Python processes (default 3, after one untimed
process that warms the disk cache, Python's bytecode cache and numba's cache), each timing:
  * import: ``import dynashape`` / ``import onnxruntime`` (numpy and the feeds already loaded);
  * session: ``InferenceSession(path)``, one intra-op thread;
  * first run, second run, and the steady median of the runs after them (~0.2 s, at least 5);
reported as medians over the processes, ms. dynashape runs twice: with numba's cache warm and
with an empty one (a new ``NUMBA_CACHE_DIR`` per process: right after ``pip install``).
``import onnx`` alone is timed too (the bound the import is held to: dynashape reads models
without importing onnx's package, dynashape.onnx_proto). The last columns add the import:
import + session + first run, what a script meets before its first result.

Python's bytecode: an installed package has its ``.pyc`` files (pip compiles them), so the
processes run with Python's bytecode cache on; where this environment switches it off
(``PYTHONDONTWRITEBYTECODE``, as this machine does), the processes run without it, caching
in a temporary ``PYTHONPYCACHEPREFIX`` the untimed process fills. ``--no-bytecode-cache`` keeps
the environment as it is: every import then compiles each module from source (~0.3 s more for
dynashape's session on bert_tiny).

Targets (issue 23): session + first run <= 3x onnxruntime's, the first run <= 3x onnxruntime's,
``import dynashape`` no slower than ``import onnx``, and with an empty numba cache session +
first run <= 2 s.

Models (``--models``, comma-separated): keys of ../shared/zoo/zoo.json or zoo2/zoo2.json (their
``small`` shape), or .onnx paths; ``--dim NAME=N`` binds a dim of every model (default for the
dims no shape gives: batch=1, sequence=16). Default: bert_tiny, resnet_tiny, gpt2_kv (zoo2) and
zoo3's minilm_l6. Feeds: ``dynashape.feeds.random_feeds`` (seed 0), made once here and loaded by
every process from a .npz.

    python benchmarks/coldstart.py
    python benchmarks/coldstart.py --models bert_tiny --processes 5
    python benchmarks/coldstart.py --models my.onnx --dim batch=1 --dim sequence=64
"""
from __future__ import annotations

import _env  # (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _common as C
import numpy as np

DEFAULT_MODELS = "bert_tiny,resnet_tiny,gpt2_kv,zoo3/minilm_l6.onnx"
DEFAULT_DIMS = {"batch": 1, "sequence": 16}
TARGET_RATIO = 3.0
TARGET_EMPTY_CACHE_MS = 2000.0

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
with np.load({feeds!r}) as data:
    feeds = {{k: data[k] for k in data.files}}
t1 = time.perf_counter()
if {engine!r} == "dynashape":
    import dynashape
    t2 = time.perf_counter()
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 1
    sess = dynashape.InferenceSession({path!r}, so)
elif {engine!r} == "onnxruntime":
    import onnxruntime as ort
    t2 = time.perf_counter()
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    sess = ort.InferenceSession({path!r}, so, providers=["CPUExecutionProvider"])
else:
    import onnx
    print(json.dumps({{"import_ms": (time.perf_counter() - t1) * 1e3}}))
    sys.exit(0)
t3 = time.perf_counter()
sess.run(None, feeds)
t4 = time.perf_counter()
sess.run(None, feeds)
t5 = time.perf_counter()
steady, end = [], time.perf_counter() + 0.2
while len(steady) < 5 or time.perf_counter() < end:
    a = time.perf_counter()
    sess.run(None, feeds)
    steady.append(time.perf_counter() - a)
steady.sort()
print(json.dumps({{"import_ms": (t2 - t1) * 1e3, "session_ms": (t3 - t2) * 1e3, "first_ms": (t4 - t3) * 1e3,
                  "second_ms": (t5 - t4) * 1e3, "steady_ms": steady[len(steady) // 2] * 1e3}}))
"""

FIELDS = ("import_ms", "session_ms", "first_ms", "second_ms", "steady_ms")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated zoo / zoo2 keys or .onnx paths "
                    "(a path relative to ../shared/zoo is looked for there too)")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="a dim of every model")
    ap.add_argument("--processes", type=int, default=3, help="timed fresh processes per engine and mode (default 3)")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE as the environment has it")
    ap.add_argument("--no-empty-cache", action="store_true", help="skip the empty-numba-cache processes")
    return ap.parse_args(argv)


def parse_dims(items: list[str]) -> dict:
    dims = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            sys.exit(f"--dim {item!r}: expected NAME=N")
        dims[name] = int(value)
    return dims


def write_feeds(path: Path, dims: dict, out: Path) -> Path:
    """Feeds of ``path`` at ``dims`` (random_feeds, seed 0) saved as ``out`` (.npz)."""
    import dynashape
    from dynashape.feeds import random_feeds
    sess = dynashape.InferenceSession(str(path), compiled_kernels=False)
    np.savez(out, **random_feeds(sess, {**DEFAULT_DIMS, **dims}, seed=0))
    return out


def child_env(pycache: str | None, numba_cache: str | None) -> dict:
    env = dict(os.environ)
    if _env.COLD_START:      # (a default session: compiled kernels swapped in, not waited for)
        env.pop("DYNASHAPE_COMPILED_WAIT", None)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = numba_cache
    return env


def run_child(engine: str, path: Path, feeds: Path, env: dict) -> dict:
    code = CHILD.format(engine=engine, path=str(path), feeds=str(feeds))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"error": C.short_error_text((out.stderr.strip().splitlines() or ["failed"])[-1], 80)}
    return json.loads(lines[-1])


def medians(results: list[dict]) -> dict:
    ok = [r for r in results if "error" not in r]
    if not ok:
        return {"error": results[0]["error"]}
    return {k: statistics.median(r[k] for r in ok) for k in ok[0]}


def measure(engine: str, path: Path, feeds: Path, pycache: str | None, processes: int,
            empty_numba_cache: bool = False) -> dict:
    """Medians over ``processes`` fresh processes (after one untimed process for the warm caches)."""
    if not empty_numba_cache:
        run_child(engine, path, feeds, child_env(pycache, None))
    results = []
    for _ in range(processes):
        if empty_numba_cache:
            with tempfile.TemporaryDirectory() as numba_cache:
                results.append(run_child(engine, path, feeds, child_env(pycache, numba_cache)))
        else:
            results.append(run_child(engine, path, feeds, child_env(pycache, None)))
    return medians(results)


def ratio(a, b) -> str:
    return C.fmt(a / b, 2) if isinstance(a, float) and isinstance(b, float) and b > 0 else "-"


def row(label: str, mode: str, r: dict, ref: dict | None) -> list:
    """A table row; the ratios against ``ref`` (onnxruntime's medians; None: this is its row)."""
    if "error" in r:
        return [label, mode, r["error"]] + [""] * 9
    start = r["session_ms"] + r["first_ms"]
    ok = ref is not None and "error" not in ref
    return [label, mode, *(C.fmt_ms(r[k]) for k in FIELDS), C.fmt_ms(start),
            ratio(start, ref["session_ms"] + ref["first_ms"]) if ok else "-",
            ratio(r["first_ms"], ref["first_ms"]) if ok else "-", C.fmt_ms(r["import_ms"] + start),
            ratio(r["import_ms"] + start, ref["import_ms"] + ref["session_ms"] + ref["first_ms"]) if ok else "-"]


def main(argv=None) -> int:
    args = parse_args(argv)
    dims = parse_dims(args.dim)
    C.header("cold start: fresh processes, import / session / first run / steady, dynashape vs onnxruntime")
    bytecode_off = bool(os.environ.get("PYTHONDONTWRITEBYTECODE")) and not args.no_bytecode_cache
    bytecode = ("on (in a temporary PYTHONPYCACHEPREFIX: this environment sets PYTHONDONTWRITEBYTECODE)"
                if bytecode_off else "as the environment has it")
    print(f"   bytecode cache: {bytecode}; {args.processes} timed processes per cell after one untimed\n")
    rows, targets, import_ms = [], [], {"onnxruntime": [], "dynashape": []}
    with tempfile.TemporaryDirectory() as work:
        pycache = str(Path(work) / "pycache") if bytecode_off else None
        onnx_import = measure("onnx", Path(os.devnull), empty_feeds(work), pycache, args.processes)
        for spec in [s for s in args.models.split(",") if s]:
            label, path, shape = C.resolve_model(spec)
            feeds = write_feeds(path, {**shape, **dims}, Path(work) / f"{label}.npz")
            ort = measure("onnxruntime", path, feeds, pycache, args.processes)
            warm = measure("dynashape", path, feeds, pycache, args.processes)
            empty = None if args.no_empty_cache else measure("dynashape", path, feeds, pycache, args.processes,
                                                              empty_numba_cache=True)
            modes = [("onnxruntime", ort), ("dynashape", warm)] + ([] if empty is None else
                                                                  [("dynashape, empty numba cache", empty)])
            rows += [row(label, mode, r, None if mode == "onnxruntime" else ort) for mode, r in modes]
            targets.append((label, warm, ort, empty))
            for engine, r in (("onnxruntime", ort), ("dynashape", warm)):
                if "error" not in r:
                    import_ms[engine].append(r["import_ms"])
            print(f"  {label}: measured", flush=True)
    print()
    C.print_table(["model", "engine", "import ms", "session ms", "first ms", "second ms", "steady ms",
                   "session + first ms", "vs ORT", "first vs ORT", "import + session + first ms", "vs ORT"],
                  rows, align="llrrrrrrrrrr")
    print()
    print_targets(targets)
    print_imports(onnx_import.get("import_ms"), {e: statistics.median(v) if v else None for e, v in import_ms.items()})
    return 0


def empty_feeds(work: str) -> Path:
    """An empty .npz: the ``import onnx`` process loads its feeds as the others do before importing."""
    path = Path(work) / "empty.npz"
    np.savez(path)
    return path


def print_targets(targets: list) -> None:
    """One line per issue-23 target: the worst cell and whether every cell holds."""
    def line(what: str, cells: list) -> None:
        cells = [c for c in cells if c[1] is not None]
        if not cells:
            print(f"{what}: not measured")
            return
        worst = max(cells, key=lambda c: c[1])
        held = all(v <= limit for _, v, limit in cells)
        print(f"{what}: worst {C.fmt(worst[1], 2)} ({worst[0]}) -> {'met' if held else 'NOT met'}")

    def start(r):
        return None if r is None or "error" in r else r["session_ms"] + r["first_ms"]

    line(f"session + first run, dynashape / onnxruntime <= {TARGET_RATIO}",
         [(m, start(w) / start(o) if start(w) and start(o) else None, TARGET_RATIO) for m, w, o, _ in targets])
    def total(r):
        return None if start(r) is None else r["import_ms"] + start(r)

    print("import + session + first run, dynashape / onnxruntime (what a script meets; no target): " + ", ".join(
        f"{m} {C.fmt(total(w) / total(o), 2)}" for m, w, o, _ in targets if total(w) and total(o)))
    line(f"first run, dynashape / onnxruntime <= {TARGET_RATIO}",
         [(m, w["first_ms"] / o["first_ms"] if "error" not in w and "error" not in o else None, TARGET_RATIO)
          for m, w, o, _ in targets])
    line(f"session + first run with an empty numba cache, s <= {TARGET_EMPTY_CACHE_MS / 1e3:g}",
         [(m, start(e) / 1e3 if start(e) else None, TARGET_EMPTY_CACHE_MS / 1e3) for m, _, _, e in targets])


def print_imports(onnx_ms, engines: dict) -> None:
    """The import times (medians over every model's processes) against ``import onnx``."""
    dyn = engines.get("dynashape")
    if not onnx_ms or not dyn:
        print("import: not measured")
        return
    print(f"import dynashape {C.fmt_ms(dyn)} ms, import onnx {C.fmt_ms(onnx_ms)} ms, import onnxruntime "
          f"{C.fmt_ms(engines.get('onnxruntime'))} ms: dynashape <= onnx (5% noise allowed) -> "
          f"{'met' if dyn <= onnx_ms * 1.05 else 'NOT met'}")


if __name__ == "__main__":
    raise SystemExit(main())
