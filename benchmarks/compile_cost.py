"""What the compiled kernels (dynashape.ops_builtin.fast, numba) cost to compile, and what the
on-disk cache saves.

For each model, three fresh processes (so nothing is compiled in memory yet) time
importing dynashape + creating the session, the first run, and the median of the next
runs:
  * "empty cache": NUMBA_CACHE_DIR is a new empty folder: every loop the model needs
    compiles during its first run;
  * "warm cache": the same folder again: the loops load from disk;
  * "numpy kernels": InferenceSession(..., compiled_kernels=False), for reference.
The first run of the warm-cache process minus its cached median is what a new process
pays for the compiled kernels once the machine has compiled them.

Run from the repository root:
    python benchmarks/compile_cost.py                     # bert_tiny, resnet_tiny, vit_tiny
    python benchmarks/compile_cost.py --models gpt2,ppocr
    python benchmarks/compile_cost.py --threads 2     # sessions with two intra-op threads
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import json
import os
import subprocess
import sys
import tempfile

import _common as C

CHILD = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
import _env
t0 = time.perf_counter()
import dynashape
import _common as C
C.require_zoo()
path, shape, compiled = {path!r}, {shape!r}, {compiled!r}
sess = dynashape.InferenceSession(path, compiled_kernels=compiled)
t1 = time.perf_counter()
feeds = C.make_feeds(path, shape)
t2 = time.perf_counter()
sess.run(None, feeds)
t3 = time.perf_counter()
median, _ = C.median_ms(lambda: sess.run(None, feeds), warmup=1, min_runs=5, max_runs=30, target_s=0.2)
print(json.dumps({{"create_ms": (t1 - t0) * 1e3, "first_ms": (t3 - t2) * 1e3, "median_ms": median}}))
"""


def measure(path: str, shape: str, cache_dir: str, compiled: bool) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    code = CHILD.format(bench=str(C.REPO / "benchmarks"), path=path, shape=shape, compiled=compiled)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert_tiny,resnet_tiny,vit_tiny", help="comma-separated zoo keys")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads of the sessions (OMP_NUM_THREADS, read by _env; default 1)")
    args = ap.parse_args(argv)
    C.require_zoo()
    C.header("compile cost of the compiled kernels (dynashape.ops_builtin.fast): fresh processes, empty vs warm cache")
    try:
        from dynashape.ops_builtin import fast as ops_fast
    except ImportError:
        ops_fast = None
    if ops_fast is None or not ops_fast.enabled():
        print(f"compiled kernels not available: {getattr(ops_fast, 'REASON', 'dynashape.ops_builtin.fast missing')}")
        return 0
    catalog = C.zoo_catalog()
    rows = []
    for key in [k for k in args.models.split(",") if k]:
        entry = catalog[key]
        path, shape = str(C.ZOO_DIR / entry["file"]), "small"
        with tempfile.TemporaryDirectory() as cache:
            cold = measure(path, shape, cache, True)
            warm = measure(path, shape, cache, True)
        plain = measure(path, shape, tempfile.gettempdir(), False)
        for label, r in (("empty cache", cold), ("warm cache", warm), ("numpy kernels", plain)):
            rows.append([key, label, C.fmt_ms(r["create_ms"]), C.fmt_ms(r["first_ms"]), C.fmt_ms(r["median_ms"]),
                         C.fmt_ms(r["first_ms"] - r["median_ms"])])
    C.print_table(["model (small shape)", "process", "import+session ms", "first run ms", "cached run ms",
                   "first - cached ms"], rows, align="llrrrr")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
