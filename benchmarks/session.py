"""Session creation inside one warm process, dynashape against ONNX Runtime: the compile itself,
without the imports and first-use costs a fresh process adds (benchmarks/coldstart.py has those).

Per model, in one process where both engines already made a session of every model (modules,
registry, oneDNN and numba warm), ``--repeats`` rounds, the engines in turn, each timing:
  * dynashape "new": ``InferenceSession(path)`` with nothing of the model compiled in the process
    (``dynashape.compiled.clear()`` first: prepare, fold, rewrites, programs, every If/Loop/Scan
    body, weights packed);
  * dynashape "again": a second session of the same model, which takes the first one's
    compilation (issue 23: <= 0.3x "new");
  * onnxruntime: ``InferenceSession(path)``, one intra-op thread.
Reported: median and best ms of each, and dynashape new / onnxruntime.

Models (``--models``, comma-separated): keys of ../shared/zoo/zoo.json or zoo2/zoo2.json, or
.onnx paths. Default: bert_tiny, resnet_tiny, vit_tiny, gpt2_kv and optimum's merged decoder.

    python benchmarks/session.py
    python benchmarks/session.py --models bert_tiny --repeats 15
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import statistics
import time
import warnings
from pathlib import Path

import _common as C

DEFAULT_MODELS = "bert_tiny,resnet_tiny,vit_tiny,gpt2_kv,optimum/gpt2_merged"
SECOND_TARGET = 0.3


def timed(make) -> tuple[float, object]:
    """(ms, what ``make()`` returned)."""
    t0 = time.perf_counter()
    made = make()
    return (time.perf_counter() - t0) * 1e3, made


def measure(path: Path, repeats: int) -> dict:
    """{"new": [...], "again": [...], "ort": [...]} ms per round."""
    import dynashape
    from dynashape import compiled

    def session():
        return dynashape.InferenceSession(str(path))

    times: dict = {"new": [], "again": [], "ort": []}
    for _ in range(repeats):
        compiled.clear()
        ms, first = timed(session)     # (kept alive: the second session takes its compilation)
        times["new"].append(ms)
        times["again"].append(timed(session)[0])
        times["ort"].append(timed(lambda: C.ort_session(path))[0])
        del first
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated zoo / zoo2 keys or .onnx paths")
    ap.add_argument("--repeats", type=int, default=9, help="timed rounds per model (default 9)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    C.header("session creation in a warm process: dynashape (a new model, the same model again) vs onnxruntime")
    models = [C.resolve_model(s)[:2] for s in args.models.split(",") if s]
    import dynashape
    for _, path in models:      # (every module, registry entry and shared primitive warm)
        dynashape.InferenceSession(str(path))
        C.ort_session(path)
    rows, seconds = [], []
    for label, path in models:
        t = measure(path, args.repeats)
        med = {k: statistics.median(v) for k, v in t.items()}
        second = med["again"] / med["new"]
        seconds.append((label, second))
        rows.append([label, C.fmt_ms(med["new"]), C.fmt_ms(min(t["new"])), C.fmt_ms(med["again"]),
                     C.fmt(second, 2), C.fmt_ms(med["ort"]), C.fmt_ms(min(t["ort"])),
                     C.fmt(med["new"] / med["ort"], 2)])
    C.print_table(["model", "dyn new ms", "best", "dyn again ms", "again/new", "ORT ms", "best", "dyn new/ORT"], rows)
    worst = max(seconds, key=lambda x: x[1])
    print(f"\nmedians of {args.repeats} rounds; a second session of the same model / the first <= {SECOND_TARGET}: "
          f"worst {worst[1]:.2f} ({worst[0]}) -> {C.verdict(worst[1] <= SECOND_TARGET)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
