"""The LLVM IR of the column-panel GEMM (:mod:`.panels` runs it): ``C (M, N) = A (M, K) @ W``
for W packed as ``panels (NP, K, 16)``.

Panel ``p`` holds columns ``16 p .. 16 p + 15`` of every row k of W at ``panels[p, k, :]``,
zero-padded past N. One pass of the micro-kernel computes a tile of R <= 6 rows x 16 columns:
for each k it broadcasts the R values ``A[r, k]`` and multiplies them by the panel's two
8-float vectors of row k into 2R accumulators held in registers (12 of the 16 AVX registers
at R = 6), then stores the tile once. Each output element is one fused multiply-add chain
over k in order, whatever R or the thread, so every row and column of an output rounds alike
(onnxruntime's MLAS computes the same chain per K block). Measured on a Zen 3 (one thread,
against numpy's OpenBLAS on the plain weight): 16 x 384 @ 384 x 1536 0.27 ms against 0.41,
8 x 768 @ 768 x 2304 0.47 against 1.32, 1024 x 768 @ 768 x 768 16.3 against 18.0.

Three exported functions (C calling convention, every argument an ``i64``, addresses as
integers, strides in floats):

* ``dyn_panels(a, lda, panels, k, c, ldc, m, q0, q1)``: panels ``q0 .. q1 - 1`` in full
  (their 16 columns of C each; ``c`` is the address of panel q0's first column), the rows in
  blocks of M_BLOCK (A is read from memory once per block, not once per panel), K in blocks of
  K_BLOCK rows (a block of a panel stays in L1 while the block's row tiles read it), row
  tiles of 6, then 4, 2 and 1 rows.
* ``dyn_row_panels(a, panels, k, c, g0, g1)``: one row, ROW_PANELS panels at a time (groups
  ``g0 .. g1 - 1``; ``c`` is the address of group g0's first column): as many weight
  streams, the product is bound by memory (768 x 2304 on a Zen 3: one panel at a time
  12.4 GB/s, six 20.6, OpenBLAS 16.2).
* ``dyn_parallel(args)``: both split over the threads of an OpenMP team (below).

Nothing else is referenced: no constant pool, no library call (the driver copies and zeroes
with numpy), so the object's ``.text`` runs wherever it is placed (:mod:`.machine_code`).
This module only builds IR (``llvmlite.ir`` is pure Python); compiling it happens in a child
process (:mod:`.build`).
"""
from __future__ import annotations

from llvmlite import ir

from .ir_util import I64, V8, broadcast, counting, exported, floats, function, i64, k_loop, share, team_function, vector
from .panels import FUNCTIONS, K_BLOCK, M_BLOCK, MAX_ROWS, PARALLEL_ARGS, ROW_PANELS, WIDTH

__all__ = ["FUNCTIONS", "module"]   # (FUNCTIONS: what the build exports, read by .build)


def module() -> ir.Module:
    """The IR module with :data:`FUNCTIONS`."""
    mod = ir.Module(name="dynashape_panels")
    fma = ir.Function(mod, ir.FunctionType(V8, [V8, V8, V8]), "llvm.fma.v8f32")
    tiles = {rows: _tile_function(mod, fma, rows) for rows in (MAX_ROWS, 4, 2, 1)}
    panels = _panels_function(mod, tiles)
    rows = _row_panels_function(mod, fma)
    for fn in (panels, rows):
        exported(mod, fn)
    _parallel_function(mod, panels, rows)
    return mod


def _tile_function(mod: ir.Module, fma, rows: int) -> ir.Function:
    """``tile{rows}(a, lda, p, k, c, ldc, accumulate)``: ``C[r, 0:16] = (C[r, 0:16] if
    accumulate else 0) + sum_k A[r, k] * P[k, 0:16]`` for ``rows`` rows (A with rows ``lda``
    floats apart, the panel P k rows of 16 floats, C with rows ``ldc`` floats apart; unaligned
    loads and stores). Going on from stored partial sums continues each chain exactly."""
    fn, builder = function(mod, f"tile{rows}", 7)
    a_addr, lda, p_addr, k, c_addr, ldc, accumulate = fn.args
    a, p, c = (floats(builder, x) for x in (a_addr, p_addr, c_addr))
    pointers = [vector(builder, builder.gep(c, [builder.mul(ir.Constant(I64, r), ldc)]), h * 8)
                for r in range(rows) for h in (0, 1)]
    start = _initial(builder, accumulate, pointers)

    def step(kk, acc):
        row = builder.gep(p, [builder.mul(kk, ir.Constant(I64, WIDTH))])
        halves = [builder.load(vector(builder, row, h * 8), align=4) for h in (0, 1)]
        summed = []
        for r in range(rows):
            x = builder.load(builder.gep(a, [builder.add(builder.mul(ir.Constant(I64, r), lda), kk)]), align=4)
            x = broadcast(builder, x)
            summed += [builder.call(fma, [x, halves[h], acc[2 * r + h]]) for h in (0, 1)]
        return summed

    for total, pointer in zip(k_loop(builder, k, start, step), pointers):
        builder.store(total, pointer, align=4)
    builder.ret_void()
    return fn


def _initial(builder: ir.IRBuilder, accumulate, pointers: list) -> list:
    """The tile's starting sums: the vectors at ``pointers`` where ``accumulate`` is non-zero,
    else zeros (a branch, so C is not read when it holds no partial sums yet)."""
    zero = ir.Constant(V8, [0.0] * 8)
    entry = builder.block
    load, joined = builder.append_basic_block("tile_load"), builder.append_basic_block("tile_start")
    builder.cbranch(builder.icmp_signed("!=", accumulate, ir.Constant(I64, 0)), load, joined)
    builder.position_at_end(load)
    loaded = [builder.load(p, align=4) for p in pointers]
    builder.branch(joined)
    builder.position_at_end(joined)
    start = []
    for value in loaded:
        phi = builder.phi(V8)
        phi.add_incoming(zero, entry)
        phi.add_incoming(value, load)
        start.append(phi)
    return start


def _panels_function(mod: ir.Module, tiles: dict) -> ir.Function:
    """``dyn_panels``: the rows of A in blocks of M_BLOCK, in each the panels, in each K in
    blocks of K_BLOCK rows, in each the row tiles of the block (the panel's K block stays in cache
    while they read it, and the block's 16 columns of C from one K block to the next)."""
    fn, b = function(mod, "panels", 9)
    a, lda, panels, k, c, ldc, m, q0, q1 = fn.args

    def smaller(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)

    with counting(b, i64(0), m, M_BLOCK) as m0:
        rows = smaller(b.sub(m, m0), i64(M_BLOCK))
        with counting(b, q0, q1, 1) as q:
            pc = b.add(c, b.mul(b.add(b.mul(m0, ldc), b.mul(b.sub(q, q0), i64(WIDTH))), i64(4)))
            with counting(b, i64(0), k, K_BLOCK) as k0:
                depth = smaller(b.sub(k, k0), i64(K_BLOCK))
                more = b.zext(b.icmp_signed(">", k0, i64(0)), I64)
                pa = b.add(a, b.mul(b.add(b.mul(m0, lda), k0), i64(4)))
                pp = b.add(panels, b.mul(b.add(b.mul(q, k), k0), i64(WIDTH * 4)))
                _row_tiles(b, tiles, pa, lda, pp, depth, pc, ldc, more, rows)
    b.ret_void()
    return fn


def _row_tiles(b: ir.IRBuilder, tiles: dict, pa, lda, pp, depth, pc, ldc, more, m) -> None:
    """The tiles of ``m`` rows against one panel's K block: MAX_ROWS rows at a time, then the
    remainder (0-5 rows) as 4, 2 and 1 rows, each at most once."""

    def call(rows: int, r0):
        ar = b.add(pa, b.mul(b.mul(r0, lda), i64(4)))
        cr = b.add(pc, b.mul(b.mul(r0, ldc), i64(4)))
        b.call(tiles[rows], [ar, lda, pp, depth, cr, ldc, more])

    full = b.mul(b.sdiv(m, i64(MAX_ROWS)), i64(MAX_ROWS))
    with counting(b, i64(0), full, MAX_ROWS) as r0:
        call(MAX_ROWS, r0)
    r0 = full
    for rows in (4, 2, 1):
        with b.if_then(b.icmp_signed(">=", b.sub(m, r0), i64(rows))):
            call(rows, r0)
        r0 = b.select(b.icmp_signed(">=", b.sub(m, r0), i64(rows)), b.add(r0, i64(rows)), r0)


def _row_panels_function(mod: ir.Module, fma) -> ir.Function:
    """``dyn_row_panels``: ``c[16 ROW_PANELS g .. +16 ROW_PANELS] = sum_k a[k] * P_j[k, 0:16]``
    over the group's ROW_PANELS consecutive panels P_j, each element the same fused
    multiply-add chain over k as in a tile."""
    fn, b = function(mod, "row_panels", 6)
    a_addr, panels, k, c_addr, g0, g1 = fn.args
    a, c0 = floats(b, a_addr), floats(b, c_addr)
    zero = ir.Constant(V8, [0.0] * 8)
    stride = b.mul(k, ir.Constant(I64, WIDTH))               # floats from one panel to the next
    # (nothing when k <= 0: the caller zeroes C; a loop storing zeros would become a memset call)
    g1 = b.select(b.icmp_signed(">", k, ir.Constant(I64, 0)), g1, g0)
    with counting(b, g0, g1, 1) as g:
        p = floats(b, b.add(panels, b.mul(b.mul(g, stride), ir.Constant(I64, ROW_PANELS * 4))))
        c = b.gep(c0, [b.mul(b.sub(g, g0), ir.Constant(I64, ROW_PANELS * WIDTH))])

        def step(kk, acc):
            x = broadcast(b, b.load(b.gep(a, [kk]), align=4))
            offset = b.mul(kk, ir.Constant(I64, WIDTH))
            summed = []
            for j in range(ROW_PANELS):
                row = b.gep(p, [b.add(b.mul(ir.Constant(I64, j), stride), offset)])
                summed += [b.call(fma, [x, b.load(vector(b, row, h * 8), align=4), acc[2 * j + h]]) for h in (0, 1)]
            return summed

        for i, total in enumerate(k_loop(b, k, [zero] * (2 * ROW_PANELS), step)):
            b.store(total, vector(b, c, i * 8), align=4)
    b.ret_void()
    return fn


def _parallel_function(mod: ir.Module, panels: ir.Function, rows: ir.Function) -> None:
    """``dyn_parallel(args)``, run by every thread of an OpenMP team (``GOMP_parallel``):
    ``args`` points at PARALLEL_ARGS i64 values (:func:`.ir_util.team_function`). The thread
    takes its share of the row groups (one row) and of the full panels ``first .. full - 1``."""
    b, values, me, team = team_function(mod, "dyn_parallel", PARALLEL_ARGS - 2)
    a, lda, panel_base, k, c, ldc, m, groups, first, full = values
    g0, g1 = share(b, ir.Constant(I64, 0), groups, me, team)
    with b.if_then(b.icmp_signed("<", g0, g1)):
        b.call(rows, [a, panel_base, k, b.add(c, b.mul(g0, ir.Constant(I64, ROW_PANELS * WIDTH * 4))), g0, g1])
    last_first = b.sub(b.sub(team, ir.Constant(I64, 1)), me)      # (the row groups' last thread first)
    q0, q1 = share(b, first, full, last_first, team)
    with b.if_then(b.icmp_signed("<", q0, q1)):
        b.call(panels, [a, lda, panel_base, k, b.add(c, b.mul(q0, ir.Constant(I64, WIDTH * 4))), ldc, m, q0, q1])
    b.ret_void()
