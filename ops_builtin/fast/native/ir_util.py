"""Building blocks of the native kernels' LLVM IR (``llvmlite.ir``, pure Python: nothing is
compiled here; :mod:`.build` does that in a child process): functions of i64 arguments,
addresses as float pointers, 8-float vectors, counted loops whose carried vectors stay in
registers, and the prologue of a function an OpenMP team runs. Used by :mod:`.panels_ir` and
:mod:`.gemv_ir`; a cache entry of either depends on this file too (:func:`.machine_code.cache_key`).
"""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

__all__ = ["F32", "I32", "I64", "V8", "function", "exported", "i64", "floats", "vector", "broadcast", "k_loop",
           "counting", "share", "team_function"]

F32, I32, I64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
V8 = ir.VectorType(F32, 8)


def function(mod: ir.Module, name: str, count: int, internal: bool = True) -> tuple:
    """A function of ``count`` i64 arguments; internal ones are inlined where called (a call
    to an exported function would leave a relocation in a position-independent object)."""
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64] * count), name)
    fn.attributes.add("nounwind")
    if internal:
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def exported(mod: ir.Module, body: ir.Function) -> None:
    """``dyn_<name>``: the internal function ``body`` (named ``<name>``) under its exported name."""
    fn, b = function(mod, f"dyn_{body.name}", len(body.args), internal=False)
    b.call(body, list(fn.args))
    b.ret_void()


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def floats(builder: ir.IRBuilder, address) -> ir.Value:
    return builder.inttoptr(address, F32.as_pointer())


def vector(builder: ir.IRBuilder, base, offset: int) -> ir.Value:
    return builder.bitcast(builder.gep(base, [ir.Constant(I64, offset)]), V8.as_pointer())


def broadcast(builder: ir.IRBuilder, x) -> ir.Value:
    undef = ir.Constant(V8, ir.Undefined)
    return builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(I32, 0)), undef,
                                  ir.Constant(ir.VectorType(I32, 8), [0] * 8))


def k_loop(builder: ir.IRBuilder, k, start: list, step) -> list:
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
def counting(builder: ir.IRBuilder, start, stop, step: int):
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


def share(b: ir.IRBuilder, start, stop, part, parts) -> tuple:
    """Part ``part`` of ``parts`` of start .. stop - 1: consecutive, sizes differing by at most one."""
    one = ir.Constant(I64, 1)
    count = b.sub(stop, start)
    step, extra = b.sdiv(count, parts), b.srem(count, parts)
    low = b.add(b.add(start, b.mul(part, step)), b.select(b.icmp_signed("<", part, extra), part, extra))
    return low, b.add(b.add(low, step), b.select(b.icmp_signed("<", part, extra), one, ir.Constant(I64, 0)))


def team_function(mod: ir.Module, name: str, count: int) -> tuple:
    """``name(args)``, run by every thread of an OpenMP team (``GOMP_parallel``): ``args``
    points at ``2 + count`` i64 values, the first two the addresses of the runtime's
    ``omp_get_thread_num`` and ``omp_get_num_threads`` (called through those pointers, so the
    object references no symbol). Returns ``(builder, values, me, team)``: the builder in the
    function's body, the ``count`` other values, this thread's number and the team's size."""
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]), name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    args = b.bitcast(fn.args[0], I64.as_pointer())
    thread_num, num_threads, *values = (b.load(b.gep(args, [ir.Constant(I64, i)])) for i in range(2 + count))
    query = ir.FunctionType(I32, []).as_pointer()
    me = b.sext(b.call(b.inttoptr(thread_num, query), []), I64)
    size = b.sext(b.call(b.inttoptr(num_threads, query), []), I64)
    return b, values, me, size
