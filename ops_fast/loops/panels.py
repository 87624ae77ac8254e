"""The loop of a GEMM against a weight packed in column panels (the kernel is
:class:`dynashape.ops_fast.onednn.gemm.PackedGemm`, where oneDNN keeps a weight row-major:
AVX2-only CPUs, whose float32 matmul in oneDNN is a jit SGEMM that packs B again on every
call, as a plain BLAS does).

The weight W (K, N) is packed once as ``panels (NP, K, 16)``: panel ``p`` holds columns
``16 p .. 16 p + 15`` of every row k at ``panels[p, k, :]``, zero-padded past N. One pass of
the micro-kernel computes a tile of R <= 6 rows x 16 columns: for each k it broadcasts the R
values ``A[r, k]`` and multiplies them by the panel's two 8-float vectors of row k into 2R
accumulators held in registers (12 of the 16 AVX registers at R = 6), then stores the tile
once. Each output element is one fused multiply-add chain over k in order, whatever R or the
thread, so every row and column of an output rounds alike (onnxruntime's MLAS computes the
same chain per K block).

numba cannot keep a tile of accumulators in registers from Python source (its arrays live in
memory and LLVM does not promote them), so the micro-kernel is written in LLVM IR through
``numba.extending.intrinsic``: ``<8 x float>`` loads, ``llvm.fma.v8f32`` and a loop whose
accumulators are SSA values. Measured on a Zen 3 (one thread, against numpy's OpenBLAS on the
plain weight): 16 x 384 @ 384 x 1536 0.27 ms against 0.41, 8 x 768 @ 768 x 2304 0.47 against
1.32, 1024 x 768 @ 768 x 768 16.3 against 18.0.
"""
from __future__ import annotations

from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from .common import JIT, threaded

#: columns of a panel (two AVX vectors of float32)
WIDTH = 16
#: rows of the largest tile (2 x 6 accumulators, 2 panel vectors and a broadcast: 15 registers)
MAX_ROWS = 6
#: rows of a panel one pass over the row tiles reads (16 KiB: it stays in L1 for every tile)
K_BLOCK = 256
#: panels one row (a decode step) reads at once: as many weight streams, the product is bound
#: by memory (768 x 2304 on a Zen 3: one panel at a time 12.4 GB/s, six 20.6, OpenBLAS 16.2)
ROW_PANELS = 6


def _tile_codegen(rows: int):
    """LLVM IR of ``C[r, 0:16] = (C[r, 0:16] if accumulate else 0) + sum_k A[r, k] * P[k, 0:16]``
    for ``rows`` rows: A at byte address ``a`` with rows ``lda`` floats apart, the panel P at ``p``
    (k rows of 16 floats), C at ``c`` with rows ``ldc`` floats apart. Unaligned loads and stores
    (align 4). Going on from the stored partial sums continues each chain exactly."""
    def codegen(context, builder, signature, args):
        a_addr, lda, p_addr, k, c_addr, ldc, accumulate = args
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        v8 = ir.VectorType(f32, 8)
        module = builder.module
        fma = module.globals.get("llvm.fma.v8f32") or ir.Function(module, ir.FunctionType(v8, [v8, v8, v8]),
                                                                   "llvm.fma.v8f32")
        a, p, c = (builder.inttoptr(x, f32.as_pointer()) for x in (a_addr, p_addr, c_addr))
        undef = ir.Constant(v8, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, 8), [0] * 8)
        vector = [builder.bitcast(builder.gep(builder.gep(c, [builder.mul(ir.Constant(i64, r), ldc)]),
                                              [ir.Constant(i64, h * 8)]), v8.as_pointer())
                  for r in range(rows) for h in (0, 1)]
        start = _initial(builder, accumulate, vector, v8)
        def step(kk, acc):
            row = builder.gep(p, [builder.mul(kk, ir.Constant(i64, WIDTH))])
            halves = [builder.load(builder.bitcast(builder.gep(row, [ir.Constant(i64, h * 8)]), v8.as_pointer()),
                                   align=4) for h in (0, 1)]
            summed = []
            for r in range(rows):
                x = builder.load(builder.gep(a, [builder.add(builder.mul(ir.Constant(i64, r), lda), kk)]), align=4)
                x = builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(i32, 0)), undef, splat)
                summed += [builder.call(fma, [x, halves[h], acc[2 * r + h]]) for h in (0, 1)]
            return summed
        totals = _k_loop(builder, k, start, step)
        for total, pointer in zip(totals, vector):
            builder.store(total, pointer, align=4)
        return context.get_dummy_value()
    return codegen


def _initial(builder, accumulate, pointers, v8) -> list:
    """The tile's starting sums: the vectors at ``pointers`` where ``accumulate`` (an i64) is
    non-zero, else zeros (a branch, so C is not read when it holds no partial sums yet)."""
    zero = ir.Constant(v8, [0.0] * 8)
    entry = builder.block
    load, joined = builder.append_basic_block("tile_load"), builder.append_basic_block("tile_start")
    builder.cbranch(builder.icmp_signed("!=", accumulate, ir.Constant(accumulate.type, 0)), load, joined)
    builder.position_at_end(load)
    loaded = [builder.load(p, align=4) for p in pointers]
    builder.branch(joined)
    builder.position_at_end(joined)
    start = []
    for value in loaded:
        phi = builder.phi(v8)
        phi.add_incoming(zero, entry)
        phi.add_incoming(value, load)
        start.append(phi)
    return start


def _k_loop(builder, k, start: list, step) -> list:
    """A loop over ``kk`` in 0 .. k - 1 (none when k <= 0) carrying vectors that begin as
    ``start``: ``step(kk, carried)`` emits one iteration and returns the next values. Returns
    the values after the loop (``start`` where it ran no iteration), the builder at its exit."""
    i64 = ir.IntType(64)
    entry = builder.block
    loop, done = builder.append_basic_block("k_loop"), builder.append_basic_block("k_done")
    builder.cbranch(builder.icmp_signed(">", k, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    kk = builder.phi(i64)
    kk.add_incoming(ir.Constant(i64, 0), entry)
    carried = []
    for initial in start:
        phi = builder.phi(initial.type)
        phi.add_incoming(initial, entry)
        carried.append(phi)
    nxt_values = step(kk, carried)
    nxt = builder.add(kk, ir.Constant(i64, 1))
    body_end = builder.block
    kk.add_incoming(nxt, body_end)
    for phi, value in zip(carried, nxt_values):
        phi.add_incoming(value, body_end)
    builder.cbranch(builder.icmp_signed("<", nxt, k), loop, done)
    builder.position_at_end(done)
    totals = []
    for initial, value in zip(start, nxt_values):   # (every phi first: LLVM wants them at the top)
        total = builder.phi(initial.type)
        total.add_incoming(initial, entry)
        total.add_incoming(value, body_end)
        totals.append(total)
    return totals


def _row_codegen(count: int):
    """LLVM IR of ``c[0:16 count] = sum_k a[k] * P_g[k, 0:16]`` over ``count`` consecutive
    panels P_g (``stride`` floats apart, from ``p``): one row, ``count`` weight streams, each
    element the same fused multiply-add chain over k as in a tile."""
    def codegen(context, builder, signature, args):
        a_addr, p_addr, stride, k, c_addr = args
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        v8 = ir.VectorType(f32, 8)
        module = builder.module
        fma = module.globals.get("llvm.fma.v8f32") or ir.Function(module, ir.FunctionType(v8, [v8, v8, v8]),
                                                                   "llvm.fma.v8f32")
        a, p, c = (builder.inttoptr(x, f32.as_pointer()) for x in (a_addr, p_addr, c_addr))
        zero, undef = ir.Constant(v8, [0.0] * 8), ir.Constant(v8, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, 8), [0] * 8)
        def step(kk, acc):
            x = builder.load(builder.gep(a, [kk]), align=4)
            x = builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(i32, 0)), undef, splat)
            offset = builder.mul(kk, ir.Constant(i64, WIDTH))
            summed = []
            for g in range(count):
                row = builder.gep(p, [builder.add(builder.mul(ir.Constant(i64, g), stride), offset)])
                for h in (0, 1):
                    v = builder.load(builder.bitcast(builder.gep(row, [ir.Constant(i64, h * 8)]), v8.as_pointer()),
                                     align=4)
                    summed.append(builder.call(fma, [x, v, acc[2 * g + h]]))
            return summed
        totals = _k_loop(builder, k, [zero] * (2 * count), step)
        for i, total in enumerate(totals):
            builder.store(total, builder.bitcast(builder.gep(c, [ir.Constant(i64, i * 8)]), v8.as_pointer()), align=4)
        return context.get_dummy_value()
    return codegen


@intrinsic
def row_panels(typingctx, a, p, stride, k, c):
    return types.void(*([types.int64] * 5)), _row_codegen(ROW_PANELS)


def _tile(rows: int):
    @intrinsic
    def tile(typingctx, a, lda, p, k, c, ldc, accumulate):
        return types.void(*([types.int64] * 7)), _tile_codegen(rows)
    return tile


tile6, tile4, tile2, tile1 = _tile(6), _tile(4), _tile(2), _tile(1)


@threaded(JIT)
def panel_gemm(a, panels, c, scratch):
    """``c (M, N) = a (M, K) @ W`` for W packed as ``panels (NP, K, 16)`` (NP * 16 >= N); a's
    rows may be strided (its columns contiguous), c C-contiguous. Per panel, K in blocks of
    K_BLOCK rows (the panel's block stays in L1 while every row tile reads it), tiles of 6, 4,
    2 and 1 rows (one row: ROW_PANELS full panels at a time first); the last panel, where N
    is not a multiple of 16, goes through ``scratch (M, 16)`` (float32). Panels split over
    the threads."""
    m, k = a.shape
    n = c.shape[1]
    npanels = panels.shape[0]
    lda, ldc = a.strides[0] // 4, c.strides[0] // 4
    pa, pc = a.ctypes.data, c.ctypes.data
    first = 0
    if m == 1:                       # one row: ROW_PANELS full panels at once, the rest in tiles
        groups = (n // WIDTH) // ROW_PANELS
        for g in prange(groups):
            row_panels(pa, panels.ctypes.data + g * ROW_PANELS * k * WIDTH * 4, k * WIDTH, k,
                       pc + g * ROW_PANELS * WIDTH * 4)
        first = groups * ROW_PANELS
    for q in prange(first, npanels):
        col = q * WIDTH
        partial = col + WIDTH > n
        base, ld = (scratch.ctypes.data, WIDTH) if partial else (pc + col * 4, ldc)
        for k0 in range(0, k, K_BLOCK):
            depth = min(K_BLOCK, k - k0)
            pp = panels.ctypes.data + (q * k + k0) * WIDTH * 4
            more = 1 if k0 > 0 else 0
            r0 = 0
            while r0 < m:
                rows = min(MAX_ROWS, m - r0)
                if rows == 5 or rows == 3:
                    rows -= 1
                pr = pa + (r0 * lda + k0) * 4
                out = base + r0 * ld * 4
                if rows == 6:
                    tile6(pr, lda, pp, depth, out, ld, more)
                elif rows == 4:
                    tile4(pr, lda, pp, depth, out, ld, more)
                elif rows == 2:
                    tile2(pr, lda, pp, depth, out, ld, more)
                else:
                    tile1(pr, lda, pp, depth, out, ld, more)
                r0 += rows
        if k == 0:
            for r in range(m):
                for j in range(min(WIDTH, n - col)):
                    c[r, col + j] = 0.0
        elif partial:
            for r in range(m):
                for j in range(n - col):
                    c[r, col + j] = scratch[r, j]
