"""Per-node microbenchmark: each GEMM and convolution class of the real-size models, one node
(or one fused group) per model, dynashape against ONNX Runtime on the same feeds.

Classes (shapes from bert-base, all-MiniLM-L6, gpt2 with KV cache, resnet50, mobilenet_v3):
  * MatMul against a constant weight, batched activations ``(B, S, K) x (K, N)``: few rows
    (decode, b1 s16), many rows (b8 s128), the LM head;
  * Gemm with a bias row (gpt2's Conv1D), MatMul + bias + Gelu (the fused FFN);
  * the attention products of two activations ``(B, H, S, D) x (B, H, D, S)``;
  * dense convolutions (3x3, 7x7 stride 2), pointwise 1x1 (and strided), depthwise (3x3, 5x5,
    stride 2), an SE block's 1x1 on a 1x1 image, grouped; with a bias, a residual Add + Relu,
    Sigmoid * x (SiLU) and HardSwish after them.

Each model is built with onnx.helper (random weights, seed 0) with symbolic dims, run by both
engines in turn in this process at one intra-op thread (``--threads N`` for N, ``--threads 0``
for each engine's default: every core), process CPU time per run at one thread (wall time
otherwise), medians over runs filling ~0.3 s after a warm-up. A dynashape single-node Conv
model includes the channels-last layout pass's two Transposes, as ONNX Runtime's includes
its NCHWc reorders. Outputs are compared relative to their scale (max |a-b| / max |b|).

    python benchmarks/kernels.py                 # every class
    python benchmarks/kernels.py --only conv     # names containing any of these substrings
    python benchmarks/kernels.py --threads 0     # each engine's default thread count
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import _common as C

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _rand(*shape, scale=1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, inits, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "kernel", [helper.make_tensor_value_info(n, F, d) for n, d in inputs],
                              [helper.make_tensor_value_info(nodes[-1].output[0], F, None)],
                              [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


# --------------------------------------------------------------------------- the classes
def matmul(b, s, k, n, bias=False, gelu=False):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h" if bias else "y"])]
    inits = [("w", _rand(k, n, scale=k ** -0.5))]
    if bias:
        nodes.append(helper.make_node("Add", ["h", "b"], ["a" if gelu else "y"]))
        inits.append(("b", _rand(n)))
    if gelu:
        nodes.append(helper.make_node("Gelu", ["a"], ["y"]))
    return _model(nodes, [("x", ["batch", "seq", k])], inits, opset=20 if gelu else 17), {"x": _rand(b, s, k)}


def gemm(m, k, n):
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"])
    return _model([node], [("x", ["rows", k])], [("w", _rand(k, n, scale=k ** -0.5)), ("b", _rand(n))]), \
        {"x": _rand(m, k)}


def attention_scores(b, h, s, d):
    node = helper.make_node("MatMul", ["q", "k"], ["y"])
    m = _model([node], [("q", ["batch", h, "seq", d]), ("k", ["batch", h, d, "seq"])], [])
    return m, {"q": _rand(b, h, s, d), "k": _rand(b, h, d, s)}


def conv(n, c, hw, m, k, stride=1, group=1, epilogue=""):
    h, w = hw
    pad = k // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if epilogue else "y"], strides=[stride, stride],
                              pads=[pad] * 4, group=group)]
    inits = [("w", _rand(m, c // group, k, k, scale=(c // group * k * k) ** -0.5)), ("b", _rand(m))]
    inputs = [("x", ["batch", c, "height", "width"])]
    if epilogue == "residual_relu":
        nodes += [helper.make_node("Add", ["c", "x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    elif epilogue == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    elif epilogue == "hardswish":
        nodes.append(helper.make_node("HardSwish", ["c"], ["y"]))
    return _model(nodes, inputs, inits), {"x": _rand(n, c, h, w)}


CLASSES = [
    # name, builder, args
    ("matmul decode 1x1 768->2304", matmul, (1, 1, 768, 2304)),
    ("matmul decode 1x1 768->3072 (gpt2 MLP)", matmul, (1, 1, 768, 3072)),
    ("matmul decode 1x1 3072->768 (gpt2 MLP)", matmul, (1, 1, 3072, 768)),
    ("matmul decode 1x1 576->192 (SmolLM k, v)", matmul, (1, 1, 576, 192)),
    ("matmul decode 1x1 576->1536 (SmolLM MLP)", matmul, (1, 1, 576, 1536)),
    ("matmul decode 1x1 1536->576 (SmolLM MLP)", matmul, (1, 1, 1536, 576)),
    ("matmul b1 s16 768->3072", matmul, (1, 16, 768, 3072)),
    ("matmul b1 s16 3072->768", matmul, (1, 16, 3072, 768)),
    ("matmul b1 s128 768->768", matmul, (1, 128, 768, 768)),
    ("matmul b8 s128 768->3072", matmul, (8, 128, 768, 3072)),
    ("matmul b8 s128 384->1536 (MiniLM)", matmul, (8, 128, 384, 1536)),
    ("matmul+bias b1 s16 384->384 (MiniLM)", matmul, (1, 16, 384, 384, True)),
    ("matmul+bias+gelu b1 s16 384->1536 (MiniLM)", matmul, (1, 16, 384, 1536, True, True)),
    ("matmul+bias b1 s16 1536->384 (MiniLM)", matmul, (1, 16, 1536, 384, True)),
    ("matmul lm head b1 s1 768->50257", matmul, (1, 1, 768, 50257)),
    ("matmul lm head b1 s1 576->49152 (SmolLM)", matmul, (1, 1, 576, 49152)),
    ("matmul+bias+gelu b1 s128 768->3072", matmul, (1, 128, 768, 3072, True, True)),
    ("gemm+bias 16x768->2304 (gpt2 Conv1D)", gemm, (16, 768, 2304)),
    ("gemm+bias 1024x768->768", gemm, (1024, 768, 768)),
    ("attention scores b8 h12 s128 d64", attention_scores, (8, 12, 128, 64)),
    ("conv 7x7 s2 3->64 b1 224", conv, (1, 3, (224, 224), 64, 7, 2)),
    ("conv 3x3 64->64 b1 56", conv, (1, 64, (56, 56), 64, 3)),
    ("conv 3x3 64->64 b8 56", conv, (8, 64, (56, 56), 64, 3)),
    ("conv 3x3 s2 128->128 b1 56", conv, (1, 128, (56, 56), 128, 3, 2)),
    ("conv 3x3 256->256 b1 14 +residual+relu", conv, (1, 256, (14, 14), 256, 3, 1, 1, "residual_relu")),
    ("conv 1x1 64->256 b1 56", conv, (1, 64, (56, 56), 256, 1)),
    ("conv 1x1 256->64 b1 56", conv, (1, 256, (56, 56), 64, 1)),
    ("conv 1x1 s2 512->1024 b1 28", conv, (1, 512, (28, 28), 1024, 1, 2)),
    ("conv 1x1 960->160 b1 7", conv, (1, 960, (7, 7), 160, 1)),
    ("conv 1x1 SE 960->240 on 1x1", conv, (1, 960, (1, 1), 240, 1)),
    ("depthwise 3x3 16 b1 112", conv, (1, 16, (112, 112), 16, 3, 1, 16)),
    ("depthwise 3x3 s2 64 b1 112", conv, (1, 64, (112, 112), 64, 3, 2, 64)),
    ("depthwise 5x5 672 b1 14", conv, (1, 672, (14, 14), 672, 5, 1, 672)),
    ("depthwise 5x5 960 b1 7 +hardswish", conv, (1, 960, (7, 7), 960, 5, 1, 960, "hardswish")),
    ("depthwise 3x3 96 b8 48x160", conv, (8, 96, (48, 160), 96, 3, 1, 96)),
    ("grouped 3x3 g8 128->128 b1 28", conv, (1, 128, (28, 28), 128, 3, 1, 8)),
    ("conv 3x3 32->32 b1 112 +silu", conv, (1, 32, (112, 112), 32, 3, 1, 1, "silu")),
]


# --------------------------------------------------------------------------- timing
def _in_turn(ds, ort_sess, feeds: dict, cpu: bool) -> tuple:
    """(dynashape, ORT) medians, ms: the engines in turn, twice, the lower of each."""
    best = [float("inf"), float("inf")]
    for _ in range(2):
        for i, sess in enumerate((ds, ort_sess)):
            best[i] = min(best[i], _median(lambda s=sess: s.run(None, feeds), cpu))
    return best[0], best[1]


def _median(fn, cpu: bool, target_s: float = 0.3, max_runs: int = 200) -> float:
    """Median ms of fn() (process CPU time when ``cpu``, else wall time) after one warm-up."""
    clock = time.process_time if cpu else time.perf_counter
    fn()
    times, total = [], 0.0
    while len(times) < 5 or (total < target_s and len(times) < max_runs):
        t0 = clock()
        fn()
        dt = clock() - t0
        times.append(dt)
        total += dt
    return statistics.median(times) * 1e3


def _sessions(model: onnx.ModelProto):
    import dynashape
    import onnxruntime as ort
    data = model.SerializeToString()
    so, dso = ort.SessionOptions(), dynashape.SessionOptions()
    if _env.THREADS:
        so.intra_op_num_threads = dso.intra_op_num_threads = _env.THREADS
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return dynashape.InferenceSession(data, dso), ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _scaled_diff(a, b) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        if y.size:
            worst = max(worst, float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(y))), 1e-30)))
    return worst


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated substrings of the class names to keep")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of both engines (0: each default)")
    args = ap.parse_args(argv)
    keep = [s for s in args.only.split(",") if s]
    C.header("kernels: one node per GEMM / convolution class, dynashape vs ONNX Runtime")
    cpu = _env.THREADS == 1
    print(f"timing: median {'process CPU' if cpu else 'wall'} time per run\n")
    rows, ratios = [], {}
    for name, build, params in CLASSES:
        if keep and not any(k in name for k in keep):
            continue
        model, feeds = build(*params)
        ds, ort_sess = _sessions(model)
        kernels = sorted({f"{st.node.node.op_type}:{st.kernel.plugin}" for st in ds.program.steps
                          if st.node.node.op_type not in ("Transpose", "Identity")})
        diff = _scaled_diff(ds.run(None, feeds), ort_sess.run(None, feeds))
        t_ds, t_ort = _in_turn(ds, ort_sess, feeds, cpu)
        ratios[name] = t_ds / t_ort
        rows.append([name, C.fmt_ms(t_ds), C.fmt_ms(t_ort), f"{t_ds / t_ort:.2f}", f"{diff:.1e}", " ".join(kernels)])
        print(f"  {name}: {t_ds / t_ort:.2f}x", flush=True)
    print()
    C.print_table(["class", "dynashape ms", "ORT ms", "ratio", "max rel diff", "dynashape kernels"], rows,
                  align="lrrrrl")
    if ratios:
        worst = max(ratios, key=ratios.get)
        geo = float(np.exp(np.mean(np.log(list(ratios.values())))))
        print(f"geometric mean of the ratios over {len(ratios)} classes: {geo:.2f}x")
        print(f"worst: {worst} {ratios[worst]:.2f}x; classes above 1.2x: "
              f"{sum(r > 1.2 for r in ratios.values())} of {len(ratios)}")


if __name__ == "__main__":
    main()
