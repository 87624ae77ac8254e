"""Transpose (float32) as a oneDNN reorder: a vectorised copy between two strided layouts.

numpy's ``copyto(out, x.transpose(perm))`` walks the output in order and reads the input
with a large stride; for the NHWC -> NCHW conversions of the layout pass that is ~13x
slower than oneDNN's JIT reorder (a (1, 112, 112, 64) tensor: 4.8 ms against 0.36 ms).
Small tensors (below :data:`MIN_ELEMENTS`) keep the numpy kernel: the ctypes calls cost
more there. Source: ONNX Transpose-21; oneDNN's reorder primitive.
"""
from __future__ import annotations

import numpy as np
from dynashape.ops_builtin import tensor_ops
from dynashape.records import OpLibrary
from dynashape.threads import intra_op_threads

from . import api, tiered
from .gemm import PRIORITY

lib = OpLibrary()

F32 = np.dtype(np.float32)
#: the smallest tensor the reorder takes
MIN_ELEMENTS = 16384


class TransposePlan:
    """The permutation; its reorder primitives per input shape are the process's shared ones."""

    opaque_to_tracing = True
    __slots__ = ("perm",)

    def __init__(self, perm):
        self.perm = tuple(perm)

    def primitive(self, view: np.ndarray, out: np.ndarray, threads: int):
        """The reorder for these strides, None until it is made (:mod:`.tiered`)."""
        return tiered.primitive(("reorder", view.shape, view.strides, out.strides, threads), _make, view.shape,
                                view.strides, out.strides, threads=threads)


def _make(shape: tuple, strides: tuple, out_strides: tuple) -> api.Primitive:
    return api.make_reorder(api.MemoryDesc.of_array(shape, strides), api.MemoryDesc.of_array(shape, out_strides))


def _accepts(ctx) -> bool:
    return ctx.dtype(0) == F32 and ctx.shape(0) is not None and api.library() is not None


def _prepare(ctx) -> TransposePlan:
    return TransposePlan(tensor_ops._perm(ctx, len(ctx.input_shapes[0])))


@lib.kernel("Transpose", dtypes=[np.float32], priority=PRIORITY, accepts=_accepts, prepare=_prepare)
def _transpose(inputs, outputs, plan: TransposePlan):
    x, out = inputs[0], outputs[0]
    view = x.transpose(plan.perm)
    prim = None
    if x.size >= MIN_ELEMENTS and not any(s % 4 for s in view.strides) and out.flags.c_contiguous:
        threads = intra_op_threads()
        prim = plan.primitive(view, out, threads)
    if prim is None:
        np.copyto(out, view)
        return
    api.set_threads(threads)
    prim.execute((x, out), plan)
