"""The LLVM IR of the one-row product against a weight in oneDNN's blocked layout (:mod:`.gemv`
runs it): ``y (N,) = x (K,) @ W (+ bias)`` for W read as ``slabs (NB, Kp, 64)``.

Slab ``s`` holds columns ``64 s .. 64 s + 63`` of every row k of W at ``slabs[s, k, :]``
(oneDNN's ``BA16a64b`` and the like, rows padded to Kp, columns zero-padded past N): the
slabs follow each other, so the whole product is one sequential read of the weight. For each
slab the loop broadcasts ``x[k]`` and multiplies it by the row's eight 8-float vectors into
eight accumulators held in registers, k in order (each output element is one fused
multiply-add chain, as in a tile of :mod:`.panels_ir`), then stores the 64 sums once, with
the bias added where there is one.

Two exported functions (C calling convention, every argument an ``i64``, addresses as integers):

* ``dyn_slab_gemv(x, slabs, k, kp, y, bias, s0, s1)``: slabs ``s0 .. s1 - 1`` in full (``y``
  and ``bias``, 0 for none, are the addresses of slab s0's first column); nothing when k <= 0.
* ``dyn_parallel(args)``: the slabs ``0 .. count - 1`` split over the threads of an OpenMP team
  (:func:`.ir_util.team_function`; the values ``x, slabs, k, kp, y, bias, count``).

Nothing else is referenced (no constant pool, no library call): the object's ``.text`` runs
wherever it is placed (:mod:`.machine_code`).
"""
from __future__ import annotations

from llvmlite import ir

from .gemv import FUNCTIONS, PARALLEL_ARGS, WIDTH
from .ir_util import V8, broadcast, counting, exported, floats, function, i64, k_loop, share, team_function, vector

__all__ = ["FUNCTIONS", "module"]   # (FUNCTIONS: what the build exports, read by .build)

#: 8-float vectors in a slab's row
VECTORS = WIDTH // 8


def module() -> ir.Module:
    """The IR module with :data:`FUNCTIONS`."""
    mod = ir.Module(name="dynashape_gemv")
    fma = ir.Function(mod, ir.FunctionType(V8, [V8, V8, V8]), "llvm.fma.v8f32")
    gemv = _slab_gemv_function(mod, fma)
    exported(mod, gemv)
    _parallel_function(mod, gemv)
    return mod


def _slab_gemv_function(mod: ir.Module, fma) -> ir.Function:
    """``slab_gemv(x, slabs, k, kp, y, bias, s0, s1)``: see the module's docstring."""
    fn, b = function(mod, "slab_gemv", 8)
    x_addr, slabs, k, kp, y_addr, bias_addr, s0, s1 = fn.args
    x, y0 = floats(b, x_addr), floats(b, y_addr)
    zero = ir.Constant(V8, [0.0] * 8)
    # (nothing when k <= 0: the caller writes y; a loop storing zeros could become a memset call)
    s1 = b.select(b.icmp_signed(">", k, i64(0)), s1, s0)
    with counting(b, s0, s1, 1) as s:
        slab = floats(b, b.add(slabs, b.mul(b.mul(s, kp), i64(WIDTH * 4))))

        def step(kk, acc):
            xk = broadcast(b, b.load(b.gep(x, [kk]), align=4))
            row = b.gep(slab, [b.mul(kk, i64(WIDTH))])
            return [b.call(fma, [xk, b.load(vector(b, row, h * 8), align=4), acc[h]]) for h in range(VECTORS)]

        sums = k_loop(b, k, [zero] * VECTORS, step)
        offset = b.mul(b.sub(s, s0), i64(WIDTH))
        sums = _plus_bias(b, sums, bias_addr, offset)
        out = b.gep(y0, [offset])
        for h, total in enumerate(sums):
            b.store(total, vector(b, out, h * 8), align=4)
    b.ret_void()
    return fn


def _plus_bias(b: ir.IRBuilder, sums: list, bias_addr, offset) -> list:
    """``sums`` plus the 64 bias values at ``offset`` where ``bias_addr`` is not 0 (a branch:
    no bias is never read)."""
    before = b.block
    add, joined = b.append_basic_block("bias_add"), b.append_basic_block("bias_done")
    b.cbranch(b.icmp_signed("!=", bias_addr, i64(0)), add, joined)
    b.position_at_end(add)
    bias = b.gep(floats(b, bias_addr), [offset])
    added = [b.fadd(total, b.load(vector(b, bias, h * 8), align=4)) for h, total in enumerate(sums)]
    b.branch(joined)
    b.position_at_end(joined)
    out = []
    for total, plus in zip(sums, added):
        phi = b.phi(V8)
        phi.add_incoming(total, before)
        phi.add_incoming(plus, add)
        out.append(phi)
    return out


def _parallel_function(mod: ir.Module, gemv: ir.Function) -> None:
    """``dyn_parallel(args)``: each thread of the team takes its share of the slabs."""
    b, values, me, team = team_function(mod, "dyn_parallel", PARALLEL_ARGS - 2)
    x, slabs, k, kp, y, bias, count = values
    q0, q1 = share(b, i64(0), count, me, team)
    with b.if_then(b.icmp_signed("<", q0, q1)):
        offset = b.mul(q0, i64(WIDTH * 4))
        bias = b.select(b.icmp_signed("!=", bias, i64(0)), b.add(bias, offset), bias)
        b.call(gemv, [x, slabs, k, kp, b.add(y, offset), bias, q0, q1])
    b.ret_void()
