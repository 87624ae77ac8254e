"""Decoding benchmark: greedy decoding of zoo2's KV-cache decoders, dynashape vs ONNX Runtime.

What is measured, for every model of ../shared/zoo/zoo2/zoo2.json with a "decode" block
(gpt2_kv, llama_kv, optimum/gpt2_merged), with the protocol of zoo2/README.md (functions in
benchmarks/_decoding.py): batch 1, step 1 = an 8-token prompt (seeded token ids in [0, vocab))
into an empty cache (past tensors (1, heads, 0, head_dim); merged decoders use_cache_branch=False),
then 64 - 1 steps that each feed the argmax token of the previous step, the previous presents as
pasts, a mask of ones of length past+1 and position ids [[past]] (use_cache_branch=True). Every
step is a shape the session has not seen. One session per engine: dynashape (allocator="pool")
and ONNX Runtime (CPU, 1 intra-op and 1 inter-op thread), in this process, one after the other.
  * prompt ms: step 1; ms/step: median of steps 2..64 (each run timed alone, time.perf_counter);
  * dyn/ORT: the ratio of the ms/step medians (target <= 4);
  * first/cached: right after each step the same feeds run again on the same session (a plan-cache
    hit for dynashape) and are timed; median(step times) / median(repeat times) over steps 2..64
    (target <= 1.3 for dynashape; ORT's for reference);
  * tokens == ORT: the 64 generated tokens are ORT's; max|logits diff| over all steps;
  * summary: session creation ms; the cold pass (the sum of all 64 steps' first runs on the fresh
    session, the prompt included) and the warm pass (the sum of the repeats) against ORT's
    (issue 23: each <= 1.5x);
  * session.stats (plan-cache misses, planning ms) of each dynashape session.
For optimum/gpt2_merged also: the If's then_branch (taken when use_cache_branch is True, the one
that Concats past and new) extracted as a standalone model (_decoding.extract_branch); the
recorded feeds of steps 2..64 are replayed on fresh sessions of the merged model and of the
branch (minus use_cache_branch), interleaved step by step, first run at each shape timed (step 2
warms both up): merged / branch-alone per step (target <= 1.2 for dynashape; ORT for
reference), with its outputs checked against the merged model's.
A failing engine is reported in one line and its numbers are "-". Timings are not asserted.

Run from the repository root:
    python benchmarks/decode.py                 # ~1 minute
    python benchmarks/decode.py --models llama  # keys containing any of these substrings
    python benchmarks/decode.py --quick         # 16 steps
"""
from __future__ import annotations

import _env  # (first: the BLAS environment, before numpy is imported)

# isort: split
import os

if _env.COLD_START:   # a fresh session's decoding as a default session meets it: compiled kernels not waited for
    os.environ.pop("DYNASHAPE_COMPILED_WAIT", None)

# isort: split
import argparse
import statistics
import time
import warnings

import _common as C
import _decoding as D
import numpy as np

ENGINES = ("onnxruntime", "dynashape")
PROMPT_LEN = 8
TARGET_RATIO = 4.0       # dynashape / ORT per step
TARGET_FIRST = 1.3       # dynashape first run at a new shape / cached run at that shape
TARGET_MERGED = 1.2      # dynashape merged decoder / its use_cache branch alone
TARGET_PASS = 1.5        # issue 23: dynashape's cold (and warm) pass / ORT's


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="", help="comma-separated substrings of zoo2 keys to keep")
    ap.add_argument("--steps", type=int, default=64, help="decoding steps, the prompt step included (64)")
    ap.add_argument("--quick", action="store_true", help="16 steps")
    return ap.parse_args(argv)


def make_session(engine: str, model):
    return C.ort_session(model) if engine == "onnxruntime" else C.dynashape_session(model, allocator="pool")


def median_ms(xs) -> float | None:
    xs = list(xs)
    return statistics.median(xs) * 1e3 if xs else None


def ratio(a, b) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def yes_no(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "NO")


def check_inputs(sess, info: D.DecodeInfo, decode: dict) -> str:
    """'' when the session's get_inputs() names and dtypes are the file's declared ones."""
    try:
        got = D.decode_info(sess, decode)
    except ValueError as exc:
        return "get_inputs: " + C.short_error(exc, 80)
    if list(got.inputs.items()) != list(info.inputs.items()):
        return f"get_inputs differ from the file: {got.inputs} vs {info.inputs}"
    return ""


def decode_engine(engine: str, model, info: D.DecodeInfo, decode: dict, steps: int, prompt) -> dict:
    """Greedy decoding on one fresh session of `engine`, repeating every step's feeds once."""
    r = {"engine": engine, "error": "", "log": [], "repeat": [], "repeat_same": True}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            t0 = time.perf_counter()
            sess = make_session(engine, model)
            r["load_ms"] = (time.perf_counter() - t0) * 1e3
            r["sess"] = sess
            r["note"] = check_inputs(sess, info, decode)

            def run(f):
                return sess.run(None, f)

            def on_step(step, feeds, outs):
                t = time.perf_counter()
                again = run(feeds)
                r["repeat"].append(time.perf_counter() - t)
                r["repeat_same"] &= all(np.array_equal(a, outs[n]) for n, a in zip(info.outputs, again))
                r["log"].append((feeds, outs))

            r["tokens"], r["times"], r["logits"] = D.greedy_decode(run, info, steps=steps, prompt=prompt,
                                                                   on_step=on_step)
        except Exception as exc:  # noqa: BLE001 - report it and go on
            r["error"] = C.short_error(exc, 240)
    r["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return r


def summarize(r: dict, ref: dict | None) -> dict:
    """Medians (steps 2..N) and the comparison with ORT's decode."""
    if r["error"]:
        return {}
    s = {"prompt": r["times"][0] * 1e3, "step": median_ms(r["times"][1:]), "cached": median_ms(r["repeat"][1:]),
         "session": r["load_ms"], "cold_pass": sum(r["times"]) * 1e3, "warm_pass": sum(r["repeat"]) * 1e3}
    s["first_cached"] = ratio(s["step"], s["cached"])
    if ref is not None and not ref["error"] and r is not ref:
        s["same_tokens"] = bool(np.array_equal(r["tokens"], ref["tokens"]))
        s["diff"] = max(C.max_abs_diff([a], [b]) for a, b in zip(r["logits"], ref["logits"]))
        s["ratio"] = ratio(s["step"], median_ms(ref["times"][1:]))
        s["cold_ratio"] = ratio(s["cold_pass"], sum(ref["times"]) * 1e3)
        s["warm_ratio"] = ratio(s["warm_pass"], sum(ref["repeat"]) * 1e3)
    return s


def branch_alone(engine: str, branch, merged_path, merged: dict, fallback: dict, info: D.DecodeInfo) -> dict:
    """The recorded feeds of steps 2..N of a merged decode (this engine's; ORT's when this engine's
    decode failed) replayed on fresh sessions of the merged model and of the extracted branch
    (without the flag), the two interleaved step by step so that both meet the same machine:
    each step is the first run at its shape on each session; the first replayed step warms
    both up (compiling the branch) and is not timed."""
    log = merged["log"][1:] if not merged["error"] else fallback["log"][1:]
    out = {"error": "", "times": [], "merged_times": [], "diff": 0.0, "same_tokens": True,
           "source": engine if not merged["error"] else "onnxruntime"}
    if len(log) < 2:
        out["error"] = "no recorded steps"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sess = make_session(engine, branch)
            whole = make_session(engine, merged_path)
            out["sess"] = sess
            names = [o.name for o in sess.get_outputs()]
            li = names.index(info.logits)
            for k, (feeds, outs) in enumerate(log):
                f = {name: v for name, v in feeds.items() if name != info.use_cache_branch}
                t0 = time.perf_counter()
                whole.run(None, feeds)
                t1 = time.perf_counter()
                got = sess.run(None, f)
                t2 = time.perf_counter()
                if k:
                    out["merged_times"].append(t1 - t0)
                    out["times"].append(t2 - t1)
                want = [outs[n] for n in names]
                out["diff"] = max(out["diff"], C.max_abs_diff(got, want))
                out["same_tokens"] &= bool(np.array_equal(np.argmax(got[li][:, -1], -1),
                                                          np.argmax(want[li][:, -1], -1)))
        except Exception as exc:  # noqa: BLE001 - report it and go on
            out["error"] = C.short_error(exc, 240)
    return out


def bench_merged(key: str, path, results: dict, info: D.DecodeInfo) -> dict:
    import onnx
    print(f"{key}: use_cache branch extracted as a standalone model")
    model = onnx.load(str(path))
    try:
        branch = D.extract_branch(model, use_cache=True, condition=info.use_cache_branch)
        onnx.checker.check_model(branch)
    except Exception as exc:  # noqa: BLE001 - report it and go on
        print(f"  extract_branch FAILED: {C.short_error(exc, 160)}\n")
        return {}
    past = {p.past for p in info.pasts}
    concat = sum(1 for n in branch.graph.node if n.op_type == "Concat" and past & set(n.input))
    print(f"  then_branch: {len(branch.graph.node)} nodes, {len(branch.graph.initializer)} initializers, "
          f"inputs {[i.name for i in branch.graph.input]}, outputs {[o.name for o in branch.graph.output]}; "
          f"Concat nodes reading a past input: {concat}; onnx.checker: ok")
    rows, out = [], {}
    for engine in ENGINES:
        m = results[engine]
        b = branch_alone(engine, branch, path, m, results["onnxruntime"], info)
        merged_step = median_ms(b["merged_times"])
        b["step"] = median_ms(b["times"])
        b["ratio"] = ratio(merged_step, b["step"])
        out[engine] = b
        rows.append([engine, C.fmt_ms(merged_step), C.fmt_ms(b["step"]),
                     "-" if b["ratio"] is None else f"{b['ratio']:.2f}",
                     "-" if b["error"] else C.fmt(b["diff"]), "-" if b["error"] else yes_no(b["same_tokens"]),
                     f"{b['source']}'s" if not b["error"] else "-", b["error"]])
    C.print_table(["engine", "merged ms/step", "branch ms/step", "merged/branch", "max|diff| vs merged",
                   "same argmax", "feeds", "note"], rows, align="lrrrrrll")
    d = out["dynashape"]
    print(f"  dynashape merged / branch-alone per step = {C.fmt(d['ratio'])} (target <= {TARGET_MERGED}: "
          f"{C.verdict(None if d['ratio'] is None else d['ratio'] <= TARGET_MERGED)}); "
          f"ORT (reference) = {C.fmt(out['onnxruntime']['ratio'])}")
    if "sess" in d:
        C.print_stats(f"{key} branch", d["sess"].stats)
    print()
    return out


def bench_model(key: str, entry: dict, steps: int) -> dict:
    path = C.ZOO2_DIR / entry["file"]
    decode = entry["decode"]
    try:
        info = D.decode_info(path, decode)
    except Exception as exc:  # noqa: BLE001 - report it and go on
        print(f"{key}: FAILED {C.short_error(exc, 200)}\n")
        return {"key": key, "error": C.short_error(exc)}
    prompt = D.default_prompt(info.vocab or 1000, PROMPT_LEN)
    results = {e: decode_engine(e, path, info, decode, steps, prompt) for e in ENGINES}
    ref = results["onnxruntime"]
    sums = {e: summarize(results[e], ref) for e in ENGINES}
    rows = []
    for e in ENGINES:
        r, s = results[e], sums[e]
        stats = getattr(r.get("sess"), "stats", None)
        note = ("FAILED (below)" if r["error"] else r.get("note", ""))
        if r["warnings"]:
            note = (note + "; " if note else "") + f"{len(r['warnings'])} warning(s): {r['warnings'][0][:60]}"
        rows.append([e, C.fmt_ms(s.get("prompt")), C.fmt_ms(s.get("step")), C.fmt_ms(s.get("cached")),
                     "-" if s.get("first_cached") is None else f"{s['first_cached']:.2f}",
                     "-" if s.get("ratio") is None else f"{s['ratio']:.2f}",
                     yes_no(s.get("same_tokens")), C.fmt(s.get("diff")),
                     "-" if r["error"] else yes_no(r["repeat_same"]),
                     stats.cache_misses if stats else "-",
                     f"{stats.planning_ms:.1f}" if stats else "-", note])
    print(f"{key}  ({path.relative_to(C.ZOO2_DIR)}; {len(info.pasts) // 2} layers, past heads x dim "
          f"{info.pasts[0].heads}x{info.pasts[0].head_dim}; {steps} steps, prompt {PROMPT_LEN} tokens, batch 1)")
    C.print_table(["engine", "prompt ms", "ms/step", "cached ms/step", "first/cached", "dyn/ORT", "tokens==ORT",
                   "max|logits diff|", "repeat==first", "misses", "planning ms", "note"], rows,
                  align="lrrrrrrrrrrl")
    for e in ENGINES:
        if results[e]["error"]:
            print(f"  {e} FAILED: {results[e]['error']}")
    if not ref["error"]:
        print(f"  ORT tokens: {' '.join(map(str, ref['tokens'][0]))}")
    s = sums["dynashape"]
    if s:
        print(f"  dynashape / ORT per step = {C.fmt(s.get('ratio'))} (target <= {TARGET_RATIO:g}: "
              f"{C.verdict(None if s.get('ratio') is None else s['ratio'] <= TARGET_RATIO)}); "
              f"dynashape per-step / its cached run = {C.fmt(s['first_cached'])} (target <= {TARGET_FIRST}: "
              f"{C.verdict(None if s['first_cached'] is None else s['first_cached'] <= TARGET_FIRST)}); "
              f"tokens identical: {yes_no(s.get('same_tokens'))}")
    if "sess" in results["dynashape"]:
        C.print_stats(key, results["dynashape"]["sess"].stats)
    print()
    out = {"key": key, "results": results, "sums": sums}
    if info.use_cache_branch:
        out["branch"] = bench_merged(key, path, results, info)
    return out


def summary(done: list[dict]) -> None:
    rows = []
    for d in done:
        if "sums" not in d:
            rows.append([d["key"], "-", "-", "-", "-", "-", "-", d.get("error", "")])
            continue
        s, o = d["sums"]["dynashape"], d["sums"]["onnxruntime"]
        b = d.get("branch", {}).get("dynashape", {})
        rows.append([d["key"], C.fmt_ms(s.get("step")), C.fmt_ms(o.get("step")),
                     "-" if s.get("ratio") is None else f"{s['ratio']:.2f}",
                     "-" if s.get("first_cached") is None else f"{s['first_cached']:.2f}",
                     C.fmt_ms(s.get("session")), C.fmt_ms(o.get("session")),
                     C.fmt_ms(s.get("cold_pass")), C.fmt_ms(o.get("cold_pass")), C.fmt(s.get("cold_ratio")),
                     C.fmt(s.get("warm_ratio")), yes_no(s.get("same_tokens")),
                     "-" if b.get("ratio") is None else f"{b['ratio']:.2f}",
                     C.short_error_text(d["results"]["dynashape"]["error"], 90)])
    print("summary (dynashape; targets: dyn/ORT <= 4, first/cached <= 1.3, merged/branch <= 1.2, same tokens; "
          f"issue 23: the cold pass (every step of a fresh session, the prompt included) and the warm pass "
          f"(each step's feeds again) <= {TARGET_PASS:g}x onnxruntime's)")
    C.print_table(["model", "dyn ms/step", "ORT ms/step", "dyn/ORT", "first/cached", "dyn session ms",
                   "ORT session ms", "dyn cold pass ms", "ORT cold pass ms", "cold pass dyn/ORT",
                   "warm pass dyn/ORT", "tokens==ORT", "merged/branch", "error"], rows, align="lrrrrrrrrrrrrl")


def main(argv=None) -> int:
    args = parse_args(argv)
    C.require_zoo2()
    steps = 16 if args.quick and args.steps == 64 else args.steps
    C.header("decode benchmark: greedy KV-cache decoding, dynashape (allocator=pool) vs ONNX Runtime"
             + (" [--quick]" if args.quick else ""))
    wanted = [s for s in args.models.split(",") if s]
    catalog = {k: v for k, v in C.zoo2_catalog().items()
               if "decode" in v and (not wanted or any(w in k for w in wanted))}
    print(f"models with a decode block: {', '.join(catalog) or 'none'}; {steps} steps each\n")
    t0 = time.perf_counter()
    done = [bench_model(key, entry, steps) for key, entry in catalog.items()]
    if done:
        summary(done)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
