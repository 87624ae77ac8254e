"""The threaded numba loops (``dynashape.ops_builtin.fast.loops.threaded``) at one and at N intra-op
threads, dynashape against ONNX Runtime at the same thread count.

One node per model (built with onnx.helper, random data, seed 0): ConvTranspose (the direct
loop and col2im), MaxPool, AveragePool, Resize (linear), a bidirectional LSTM; dynashape with the
numba kernels only (``compiled_kernels={"fast"}``, the loops this measures; oneDNN would take
some of these nodes), waiting for them to be compiled (a warm-up run first). Each engine runs
alone in this process, in turn, at 1 and at ``--threads N`` (default 2) intra-op threads; wall
time medians over runs filling ~0.3 s. Columns: each engine's median, dynashape / ORT, and
dynashape's speed-up from 1 to N threads. Outputs are compared (max |a-b| / max |b|).

    python benchmarks/threads.py               # N = 2
    python benchmarks/threads.py --threads 4
"""
from __future__ import annotations

import _env  # noqa: F401  (first: the BLAS environment, before numpy is imported)

# isort: split
import argparse

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import _common as C

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _model(node, inputs: dict, weights: dict, opset: int = 17) -> bytes:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, F, [None] * a.ndim) for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, F, None) for o in node.output],
        [numpy_helper.from_array(w, n) for n, w in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def cases() -> list[tuple[str, bytes, dict]]:
    def f32(*shape):
        return RNG.standard_normal(shape).astype(np.float32)
    x = {"x": f32(1, 64, 56, 56)}
    small = {"x": f32(1, 64, 28, 28)}
    seq = {"x": f32(64, 4, 128)}
    return [
        ("ConvTranspose 64->32 3x3 s2 (28x28)",
         _model(helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2]), small,
                {"w": f32(64, 32, 3, 3)}), small),
        ("ConvTranspose 64->64 4x4 s2 p1 (28x28)",
         _model(helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]), small,
                {"w": f32(64, 64, 4, 4)}), small),
        ("MaxPool 3x3 s2 (56x56)",
         _model(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                x, {}), x),
        ("AveragePool 3x3 s1 (56x56)",
         _model(helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), x, {}), x),
        ("Resize linear x2 (28x28)",
         _model(helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear"), small,
                {"scales": np.array([1, 1, 2, 2], np.float32)}), small),
        ("LSTM bidirectional h128 (s64 b4)",
         _model(helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=128, direction="bidirectional"),
                seq, {"W": f32(2, 512, 128) * 0.1, "R": f32(2, 512, 128) * 0.1, "B": f32(2, 1024) * 0.1}), seq),
    ]


def _dynashape(data: bytes, threads: int):
    import dynashape
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = threads
    return dynashape.InferenceSession(data, so, compiled_kernels={"fast"}, wait_for_compiled_kernels=True)


def _ort(data: bytes, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _rel_diff(a, b) -> float:
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="the N of the N-thread columns (default 2)")
    args = ap.parse_args(argv)
    n = max(2, args.threads)
    C.header(f"threaded numba loops: 1 and {n} intra-op threads, dynashape (numba kernels) vs ONNX Runtime")
    rows = []
    for name, data, feeds in cases():
        row, times = [name], {}
        for threads in (1, n):
            for engine, make in (("dyn", _dynashape), ("ort", _ort)):
                sess = make(data, threads)
                out = sess.run(None, feeds)[0]
                times[engine, threads], _ = C.median_ms(lambda s=sess, f=feeds: s.run(None, f))
                if engine == "dyn":
                    got = out
                else:
                    diff = _rel_diff(got, out)
            row += [C.fmt_ms(times["dyn", threads]), C.fmt_ms(times["ort", threads]),
                    C.fmt(times["dyn", threads] / times["ort", threads], 2)]
        row += [C.fmt(times["dyn", 1] / times["dyn", n], 2), f"{diff:.1e}"]
        rows.append(row)
    C.print_table(["node", "dyn 1t ms", "ORT 1t ms", "dyn/ORT 1t", f"dyn {n}t ms", f"ORT {n}t ms", f"dyn/ORT {n}t",
                   f"dyn 1t/{n}t", "rel diff"], rows, align="lrrrrrrrr")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
