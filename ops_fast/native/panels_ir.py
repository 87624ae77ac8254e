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

from contextlib import contextmanager

from llvmlite import ir

from .panels import FUNCTIONS, K_BLOCK, M_BLOCK, MAX_ROWS, PARALLEL_ARGS, ROW_PANELS, WIDTH

__all__ = ["FUNCTIONS", "module"]   # (FUNCTIONS: what the build exports, read by .build)

F32, I32, I64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
V8 = ir.VectorType(F32, 8)


def module() -> ir.Module:
    """The IR module with :data:`FUNCTIONS`."""
    mod = ir.Module(name="dynashape_panels")
    fma = ir.Function(mod, ir.FunctionType(V8, [V8, V8, V8]), "llvm.fma.v8f32")
    tiles = {rows: _tile_function(mod, fma, rows) for rows in (MAX_ROWS, 4, 2, 1)}
    panels = _panels_function(mod, tiles)
    rows = _row_panels_function(mod, fma)
    for fn in (panels, rows):
        _exported(mod, fn)
    _parallel_function(mod, panels, rows)
    return mod


def _function(mod: ir.Module, name: str, count: int, internal: bool = True) -> tuple:
    """A function of ``count`` i64 arguments; internal ones are inlined where called (a call
    to an exported function would leave a relocation in a position-independent object)."""
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64] * count), name)
    fn.attributes.add("nounwind")
    if internal:
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _exported(mod: ir.Module, body: ir.Function) -> None:
    """``dyn_<name>``: the internal function ``body`` (named ``<name>``) under its exported name."""
    fn, b = _function(mod, f"dyn_{body.name}", len(body.args), internal=False)
    b.call(body, list(fn.args))
    b.ret_void()


def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def _floats(builder: ir.IRBuilder, address) -> ir.Value:
    return builder.inttoptr(address, F32.as_pointer())


def _vector(builder: ir.IRBuilder, base, offset: int) -> ir.Value:
    return builder.bitcast(builder.gep(base, [ir.Constant(I64, offset)]), V8.as_pointer())


def _broadcast(builder: ir.IRBuilder, x) -> ir.Value:
    undef = ir.Constant(V8, ir.Undefined)
    return builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(I32, 0)), undef,
                                  ir.Constant(ir.VectorType(I32, 8), [0] * 8))


def _tile_function(mod: ir.Module, fma, rows: int) -> ir.Function:
    """``tile{rows}(a, lda, p, k, c, ldc, accumulate)``: ``C[r, 0:16] = (C[r, 0:16] if
    accumulate else 0) + sum_k A[r, k] * P[k, 0:16]`` for ``rows`` rows (A with rows ``lda``
    floats apart, the panel P k rows of 16 floats, C with rows ``ldc`` floats apart; unaligned
    loads and stores). Going on from stored partial sums continues each chain exactly."""
    fn, builder = _function(mod, f"tile{rows}", 7)
    a_addr, lda, p_addr, k, c_addr, ldc, accumulate = fn.args
    a, p, c = (_floats(builder, x) for x in (a_addr, p_addr, c_addr))
    pointers = [_vector(builder, builder.gep(c, [builder.mul(ir.Constant(I64, r), ldc)]), h * 8)
                for r in range(rows) for h in (0, 1)]
    start = _initial(builder, accumulate, pointers)

    def step(kk, acc):
        row = builder.gep(p, [builder.mul(kk, ir.Constant(I64, WIDTH))])
        halves = [builder.load(_vector(builder, row, h * 8), align=4) for h in (0, 1)]
        summed = []
        for r in range(rows):
            x = builder.load(builder.gep(a, [builder.add(builder.mul(ir.Constant(I64, r), lda), kk)]), align=4)
            x = _broadcast(builder, x)
            summed += [builder.call(fma, [x, halves[h], acc[2 * r + h]]) for h in (0, 1)]
        return summed

    for total, pointer in zip(_k_loop(builder, k, start, step), pointers):
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


def _k_loop(builder: ir.IRBuilder, k, start: list, step) -> list:
    """A loop over ``kk`` in 0 .. k - 1 (none when k <= 0) carrying vectors that begin as
    ``start``: ``step(kk, carried)`` emits one iteration and returns the next values. Returns
    the values after the loop (``start`` where it ran no iteration), the builder at its exit.
    The carried values are SSA values, so LLVM keeps them in registers."""
    entry = builder.block
    loop, done = builder.append_basic_block("k_loop"), builder.append_basic_block("k_done")
    builder.cbranch(builder.icmp_signed(">", k, ir.Constant(I64, 0)), loop, done)
    builder.position_at_end(loop)
    kk = builder.phi(I64)
    kk.add_incoming(ir.Constant(I64, 0), entry)
    carried = []
    for initial in start:
        phi = builder.phi(initial.type)
        phi.add_incoming(initial, entry)
        carried.append(phi)
    nxt_values = step(kk, carried)
    nxt = builder.add(kk, ir.Constant(I64, 1))
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


@contextmanager
def _counting(builder: ir.IRBuilder, start, stop, step: int):
    """``for i in range(start, stop, step)`` (step > 0): the body is emitted inside the block,
    which yields ``i``; it may branch, the loop continues from wherever the body ends."""
    before = builder.block
    header, body, done = (builder.append_basic_block(name) for name in ("for", "for_body", "for_done"))
    builder.branch(header)
    builder.position_at_end(header)
    i = builder.phi(I64)
    i.add_incoming(start, before)
    builder.cbranch(builder.icmp_signed("<", i, stop), body, done)
    builder.position_at_end(body)
    yield i
    i.add_incoming(builder.add(i, ir.Constant(I64, step)), builder.block)
    builder.branch(header)
    builder.position_at_end(done)


def _panels_function(mod: ir.Module, tiles: dict) -> ir.Function:
    """``dyn_panels``: the rows of A in blocks of M_BLOCK, in each the panels, in each K in
    blocks of K_BLOCK rows, in each the row tiles of the block (the panel's K block stays in cache
    while they read it, and the block's 16 columns of C from one K block to the next)."""
    fn, b = _function(mod, "panels", 9)
    a, lda, panels, k, c, ldc, m, q0, q1 = fn.args

    def smaller(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)

    with _counting(b, _i64(0), m, M_BLOCK) as m0:
        rows = smaller(b.sub(m, m0), _i64(M_BLOCK))
        with _counting(b, q0, q1, 1) as q:
            pc = b.add(c, b.mul(b.add(b.mul(m0, ldc), b.mul(b.sub(q, q0), _i64(WIDTH))), _i64(4)))
            with _counting(b, _i64(0), k, K_BLOCK) as k0:
                depth = smaller(b.sub(k, k0), _i64(K_BLOCK))
                more = b.zext(b.icmp_signed(">", k0, _i64(0)), I64)
                pa = b.add(a, b.mul(b.add(b.mul(m0, lda), k0), _i64(4)))
                pp = b.add(panels, b.mul(b.add(b.mul(q, k), k0), _i64(WIDTH * 4)))
                _row_tiles(b, tiles, pa, lda, pp, depth, pc, ldc, more, rows)
    b.ret_void()
    return fn


def _row_tiles(b: ir.IRBuilder, tiles: dict, pa, lda, pp, depth, pc, ldc, more, m) -> None:
    """The tiles of ``m`` rows against one panel's K block: MAX_ROWS rows at a time, then the
    remainder (0-5 rows) as 4, 2 and 1 rows, each at most once."""

    def call(rows: int, r0):
        ar = b.add(pa, b.mul(b.mul(r0, lda), _i64(4)))
        cr = b.add(pc, b.mul(b.mul(r0, ldc), _i64(4)))
        b.call(tiles[rows], [ar, lda, pp, depth, cr, ldc, more])

    full = b.mul(b.sdiv(m, _i64(MAX_ROWS)), _i64(MAX_ROWS))
    with _counting(b, _i64(0), full, MAX_ROWS) as r0:
        call(MAX_ROWS, r0)
    r0 = full
    for rows in (4, 2, 1):
        with b.if_then(b.icmp_signed(">=", b.sub(m, r0), _i64(rows))):
            call(rows, r0)
        r0 = b.select(b.icmp_signed(">=", b.sub(m, r0), _i64(rows)), b.add(r0, _i64(rows)), r0)


def _row_panels_function(mod: ir.Module, fma) -> ir.Function:
    """``dyn_row_panels``: ``c[16 ROW_PANELS g .. +16 ROW_PANELS] = sum_k a[k] * P_j[k, 0:16]``
    over the group's ROW_PANELS consecutive panels P_j, each element the same fused
    multiply-add chain over k as in a tile."""
    fn, b = _function(mod, "row_panels", 6)
    a_addr, panels, k, c_addr, g0, g1 = fn.args
    a, c0 = _floats(b, a_addr), _floats(b, c_addr)
    zero = ir.Constant(V8, [0.0] * 8)
    stride = b.mul(k, ir.Constant(I64, WIDTH))               # floats from one panel to the next
    # (nothing when k <= 0: the caller zeroes C; a loop storing zeros would become a memset call)
    g1 = b.select(b.icmp_signed(">", k, ir.Constant(I64, 0)), g1, g0)
    with _counting(b, g0, g1, 1) as g:
        p = _floats(b, b.add(panels, b.mul(b.mul(g, stride), ir.Constant(I64, ROW_PANELS * 4))))
        c = b.gep(c0, [b.mul(b.sub(g, g0), ir.Constant(I64, ROW_PANELS * WIDTH))])

        def step(kk, acc):
            x = _broadcast(b, b.load(b.gep(a, [kk]), align=4))
            offset = b.mul(kk, ir.Constant(I64, WIDTH))
            summed = []
            for j in range(ROW_PANELS):
                row = b.gep(p, [b.add(b.mul(ir.Constant(I64, j), stride), offset)])
                summed += [b.call(fma, [x, b.load(_vector(b, row, h * 8), align=4), acc[2 * j + h]]) for h in (0, 1)]
            return summed

        for i, total in enumerate(_k_loop(b, k, [zero] * (2 * ROW_PANELS), step)):
            b.store(total, _vector(b, c, i * 8), align=4)
    b.ret_void()
    return fn


def _share(b: ir.IRBuilder, start, stop, part, parts) -> tuple:
    """Part ``part`` of ``parts`` of start .. stop - 1: consecutive, sizes differing by at most one."""
    one = ir.Constant(I64, 1)
    count = b.sub(stop, start)
    step, extra = b.sdiv(count, parts), b.srem(count, parts)
    low = b.add(b.add(start, b.mul(part, step)), b.select(b.icmp_signed("<", part, extra), part, extra))
    return low, b.add(b.add(low, step), b.select(b.icmp_signed("<", part, extra), one, ir.Constant(I64, 0)))


def _parallel_function(mod: ir.Module, panels: ir.Function, rows: ir.Function) -> None:
    """``dyn_parallel(args)``, run by every thread of an OpenMP team (``GOMP_parallel``):
    ``args`` points at PARALLEL_ARGS i64 values, the first two the addresses of the runtime's
    ``omp_get_thread_num`` and ``omp_get_num_threads`` (called through those pointers, so the
    object references no symbol). The thread takes its share of the row groups (one row) and
    of the full panels ``first .. full - 1``."""
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]), "dyn_parallel")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    args = b.bitcast(fn.args[0], I64.as_pointer())
    (thread_num, num_threads, a, lda, panel_base, k, c, ldc, m, groups, first, full) = (
        b.load(b.gep(args, [ir.Constant(I64, i)])) for i in range(PARALLEL_ARGS))
    query = ir.FunctionType(I32, []).as_pointer()
    me = b.sext(b.call(b.inttoptr(thread_num, query), []), I64)
    team = b.sext(b.call(b.inttoptr(num_threads, query), []), I64)
    g0, g1 = _share(b, ir.Constant(I64, 0), groups, me, team)
    with b.if_then(b.icmp_signed("<", g0, g1)):
        b.call(rows, [a, panel_base, k, b.add(c, b.mul(g0, ir.Constant(I64, ROW_PANELS * WIDTH * 4))), g0, g1])
    last_first = b.sub(b.sub(team, ir.Constant(I64, 1)), me)      # (the row groups' last thread first)
    q0, q1 = _share(b, first, full, last_first, team)
    with b.if_then(b.icmp_signed("<", q0, q1)):
        b.call(panels, [a, lda, panel_base, k, b.add(c, b.mul(q0, ir.Constant(I64, WIDTH * 4))), ldc, m, q0, q1])
    b.ret_void()
