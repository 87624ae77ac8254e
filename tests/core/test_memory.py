"""Memory planning: views share their source's buffer, in place only under its conditions,
exact lower bounds on hand-made graphs, arena growth, validation mode (overlaps, freed
blocks, poison), and the planner's targets on the zoo (ratio, naive/pool, planning time)."""
from __future__ import annotations


import dynashape
import numpy as np
import pytest
from dynashape import plan as plan_module
from dynashape import program as program_module
from dynashape.codegen import CodeWriter
from dynashape.program import NONE
from dynashape.planner import (
    INPLACE,
    OWN,
    VIEW,
    Block,
    StepSpec,
    align,
    check_no_overlap,
    lifetimes,
    lower_bound,
    plan_offsets,
    write_layout,
)
from dynashape.records import OpLibrary, same_dtype
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.models.test_zoo import _catalog, zoo_entry, zoo_feeds

F = TensorProto.FLOAT


# helpers ----------------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


def _run_values(sess, feeds):
    """The plan and every tensor's array (by name) of one run, intermediates included."""
    sess.run(None, feeds)
    vals = sess.engine.last_context.last_values
    return sess.plan(feeds), {n: vals[s] for n, s in sess.graph.slot.items()}


def _where(sess, plan):
    """name -> (block id, kind) of every arena-planned tensor, in this plan and the plans of
    the segments after its binding nodes."""
    plans, out = [plan], {}
    while plans:
        p = plans.pop()
        out.update({p.program.slot_names[s]: (b.id, k) for b in p.memory.blocks for s, k in zip(b.slots, b.kinds)})
        plans.extend(p.next.values())
    return out


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _in_arena(sess, a):
    return np.shares_memory(a, sess.arena.buffer)


# views --------------------------------------------------------------------------------

def _views_model():
    # a = Relu(x); Reshape, Flatten, Unsqueeze, Squeeze, Identity chain views of a; y = Neg(v5) + a
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    shape = numpy_helper.from_array(np.array([4, 8, 2], np.int64), "shape")
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["v1"]),
             helper.make_node("Flatten", ["v1"], ["v2"], axis=1),
             helper.make_node("Unsqueeze", ["v2", "axes"], ["v3"]),
             helper.make_node("Squeeze", ["v3", "axes"], ["v4"]),
             helper.make_node("Identity", ["v4"], ["v5"]),
             helper.make_node("Neg", ["v5"], ["n"]),
             helper.make_node("Add", ["n", "a"], ["y"])]
    return _model(nodes, [("x", [4, 16])], [("y", [4, 16])], [shape, axes])


def test_views_share_their_source_buffer_and_cost_no_copy():
    sess = dynashape.InferenceSession(_views_model(), validate_memory=True, optimize=False)   # Identity kept
    x = _x(4, 16)
    plan, v = _run_values(sess, {"x": x})
    a = v["a"]
    assert _in_arena(sess, a)
    for name in ("v1", "v2", "v3", "v4", "v5"):
        assert np.shares_memory(v[name], a), name
        assert v[name].ctypes.data == a.ctypes.data and v[name].size == a.size
    where = _where(sess, plan)
    assert {where[n] for n in ("a", "v1", "v2", "v3", "v4", "v5")} == {(where["a"][0], OWN)} | \
        {(where["a"][0], VIEW)}
    # no buffer is made for a view: the view steps have neither a planned nor a fresh buffer
    view_steps = [st for st in plan.steps if st.node.node.op_type in
                  ("Reshape", "Flatten", "Unsqueeze", "Squeeze", "Identity")]
    assert len(view_steps) == 5 and all([spec.kind for spec in st.outs] == [NONE] for st in view_steps)
    # the block of a lives until its last view is read (step 6: Neg of v5; step 7 reads a)
    block = next(b for b in plan.memory.blocks if b.id == where["a"][0])
    assert (block.first, block.last, block.size) == (0, 7, 4 * 16 * 4)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -np.maximum(x, 0) + np.maximum(x, 0))


def test_a_view_of_a_graph_input_is_zero_copy_and_a_non_contiguous_input_is_copied():
    shape = numpy_helper.from_array(np.array([2, 32], np.int64), "shape")
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
               [("x", [4, 16])], [("y", [2, 32])], [shape])
    sess = dynashape.InferenceSession(m)
    x = _x(4, 16)
    _, v = _run_values(sess, {"x": x})
    assert np.shares_memory(v["r"], x)          # the caller's array, never copied
    big = _x(16, 4)
    strided = big.T                              # not contiguous: the view op copies
    assert not strided.flags.c_contiguous
    _, v = _run_values(sess, {"x": strided})
    assert not np.shares_memory(v["r"], big)
    np.testing.assert_array_equal(sess.run(None, {"x": strided})[0], np.maximum(strided.reshape(2, 32), 0))


def test_a_graph_output_that_views_a_tensor_gets_that_tensor_fresh_and_uncopied():
    # y = Reshape(a): a's buffer is made for each run (not in the arena), so y is handed out
    # as it is, a view of this run's own memory
    shape = numpy_helper.from_array(np.array([64], np.int64), "shape")
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Reshape", ["a", "shape"], ["y"]),
                helper.make_node("Neg", ["x"], ["z"])], [("x", [4, 16])], [("y", [64]), ("z", [4, 16])], [shape])
    for validate in (False, True):
        sess = dynashape.InferenceSession(m, validate_memory=validate)
        x = _x(4, 16)
        y, _ = sess.run(None, {"x": x})
        assert sess.last_plan.memory.blocks == [] and sess.arena_bytes == 0
        a = sess.engine.last_context.last_values[sess.graph.slot["a"]]
        assert np.shares_memory(y, a) and sess.program.output_copy == [False, False]
        y2, _ = sess.run(None, {"x": -x})
        assert not np.shares_memory(y, y2)
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(64))
        np.testing.assert_array_equal(y2, np.maximum(-x, 0).reshape(64))


# in place ---------------------------------------------------------------------------------

def test_elementwise_chain_runs_in_place_in_one_block():
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                helper.make_node("Sigmoid", ["b"], ["c"]), helper.make_node("Neg", ["c"], ["y"])],
               [("x", [4, 16])], [("y", [4, 16])])
    sess = dynashape.InferenceSession(m, validate_memory=True)
    x = _x(4, 16)
    plan, v = _run_values(sess, {"x": x})
    where = _where(sess, plan)
    assert where == {"a": (0, OWN), "b": (0, INPLACE), "c": (0, INPLACE)}
    assert v["a"].ctypes.data == v["b"].ctypes.data == v["c"].ctypes.data
    assert not np.shares_memory(v["a"], x)        # never over a graph input
    assert not np.shares_memory(v["y"], sess.arena.buffer)   # graph outputs are fresh
    m_ = plan.memory
    assert (m_.arena_bytes, m_.lower_bound_bytes, m_.naive_bytes) == (256, 256, 3 * 256)
    expected = -1 / (1 + np.exp(np.maximum(x, 0)))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-6)


def test_no_in_place_while_the_input_is_read_later():
    # b = Neg(a) cannot overwrite a (read again by the Add); the Add may take a's block
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Neg", ["c"], ["y"])],
               [("x", [4, 16])], [("y", [4, 16])])
    sess = dynashape.InferenceSession(m, validate_memory=True)
    x = _x(4, 16)
    plan, _ = _run_values(sess, {"x": x})
    where = _where(sess, plan)
    assert where["b"][1] == OWN and where["b"][0] != where["a"][0]
    assert where["c"] == (where["a"][0], INPLACE)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.zeros((4, 16), np.float32))


def test_no_in_place_while_a_view_of_the_input_is_read_later():
    shape = numpy_helper.from_array(np.array([64], np.int64), "shape")
    shape2 = numpy_helper.from_array(np.array([4, 16], np.int64), "shape2")
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Reshape", ["a", "shape"], ["v"]),
                helper.make_node("Neg", ["a"], ["b"]), helper.make_node("Reshape", ["v", "shape2"], ["w"]),
                helper.make_node("Add", ["b", "w"], ["y"])],
               [("x", [4, 16])], [("y", [4, 16])], [shape, shape2])
    sess = dynashape.InferenceSession(m, validate_memory=True)
    x = _x(4, 16)
    plan, _ = _run_values(sess, {"x": x})
    where = _where(sess, plan)
    assert where["b"][1] == OWN and where["b"][0] != where["a"][0]
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.zeros((4, 16), np.float32))


def test_no_in_place_over_an_initializer_or_when_sizes_differ():
    c = _init("C", np.full((4, 16), 2.0))
    m = _model([helper.make_node("Relu", ["x"], ["a"]),
                helper.make_node("Add", ["C", "a"], ["b"]),         # (0, 0) is C: never; (0, 1) is a: yes
                helper.make_node("Relu", ["s"], ["s1"]),             # [4, 1]
                helper.make_node("Add", ["s1", "b"], ["d"]),          # broadcast: s1 is smaller -> not over s1
                helper.make_node("Neg", ["d"], ["y"])],
               [("x", [4, 16]), ("s", [4, 1])], [("y", [4, 16])], [c])
    sess = dynashape.InferenceSession(m, validate_memory=True)
    x, s = _x(4, 16), _x(4, 1, seed=1)
    plan, v = _run_values(sess, {"x": x, "s": s})
    where = _where(sess, plan)
    assert where["b"] == (where["a"][0], INPLACE)
    assert where["d"] == (where["a"][0], INPLACE) and where["s1"][0] != where["a"][0]
    assert not np.shares_memory(v["b"], v["C"])
    for _ in range(2):
        (y,) = sess.run(None, {"x": x, "s": s})
        np.testing.assert_allclose(y, -(np.maximum(s, 0) + 2 + np.maximum(x, 0)), rtol=1e-6)
    np.testing.assert_array_equal(sess.graph.constants[sess.graph.slot["C"]], np.full((4, 16), 2.0, np.float32))


def test_in_place_needs_the_kernel_to_declare_it():
    perm = [1, 0]
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["b"], perm=perm),
                helper.make_node("Neg", ["b"], ["y"])], [("x", [8, 8])], [("y", [8, 8])])
    sess = dynashape.InferenceSession(m, validate_memory=True)
    x = _x(8, 8)
    plan, _ = _run_values(sess, {"x": x})
    where = _where(sess, plan)
    assert where["b"][1] == OWN and where["b"][0] != where["a"][0]   # Transpose has no may_inplace
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -np.maximum(x, 0).T)


def test_one_input_twice_in_place_only_for_two_input_ops():
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
                helper.make_node("Mul", ["a", "a"], ["sq"]),                  # two inputs: in place over a
                helper.make_node("Relu", ["x"], ["p"]),
                helper.make_node("Sum", ["p", "b", "p"], ["s"]),              # three: not over p, over b
                helper.make_node("Add", ["sq", "s"], ["y"])],
               [("x", [4, 16])], [("y", [4, 16])])
    sess = dynashape.InferenceSession(m, validate_memory=True)
    x = _x(4, 16)
    plan, _ = _run_values(sess, {"x": x})
    where = _where(sess, plan)
    assert where["sq"] == (where["a"][0], INPLACE)
    assert where["s"] == (where["b"][0], INPLACE)
    r = np.maximum(x, 0)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], r * r + (2 * r - x), rtol=1e-6)


def test_naive_allocator_never_shares_buffers():
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                helper.make_node("Neg", ["b"], ["y"])], [("x", [4, 16])], [("y", [4, 16])])
    sess = dynashape.InferenceSession(m, allocator="naive")
    x = _x(4, 16)
    _, v = _run_values(sess, {"x": x})
    assert not np.shares_memory(v["a"], v["b"])
    assert sess.last_plan.memory.naive_bytes == 512 and sess.arena_bytes == 0


# the planner's functions on hand-made steps ----------------------------------------------------

def test_lifetimes_merge_views_and_in_place_outputs():
    steps = [StepSpec((0,), (1,), (256,)),                            # 1 = f(0): own
             StepSpec((1,), (2,), (None,), aliases={0: 0}),           # 2 = view of 1
             StepSpec((2,), (3,), (256,), inplace=((0, 0),)),         # 3 over 2's block (dies here)
             StepSpec((3,), (4,), (512,)),
             StepSpec((4,), (5,), (None,))]                           # graph output
    blocks = lifetimes(steps, keep=[5])
    assert [(b.size, b.first, b.last, b.slots, b.kinds, b.steps) for b in blocks] == [
        (256, 0, 3, [1, 2, 3], [OWN, VIEW, INPLACE], [0, 1, 2]), (512, 3, 4, [4], [OWN], [3])]
    assert lower_bound(blocks) == 256 + 512
    # without in place, 3 gets a block of its own
    blocks = lifetimes(steps, keep=[5], inplace=False)
    assert [(b.first, b.last, b.slots) for b in blocks] == [(0, 2, [1, 2]), (2, 3, [3]), (3, 4, [4])]
    # 1 read again at step 3: its block (with the view 2) is alive after step 2, no in place
    steps[3] = StepSpec((3, 1), (4,), (512,))
    blocks = lifetimes(steps, keep=[5])
    assert [(b.first, b.last, b.slots) for b in blocks] == [(0, 3, [1, 2]), (2, 3, [3]), (3, 4, [4])]
    # sizes differ: no in place
    steps[2] = StepSpec((2,), (3,), (128,), inplace=((0, 0),))
    steps[3] = StepSpec((3,), (4,), (512,))
    assert [b.slots for b in lifetimes(steps, keep=[5])] == [[1, 2], [3], [4]]


def test_lower_bound_of_hand_made_blocks():
    blocks = [Block(0, 100, 0, 2), Block(1, 64, 1, 3), Block(2, 200, 3, 4)]
    # aligned: 128, 64, 256; steps: 0:128  1:192  2:192  3:320  4:256
    assert lower_bound(blocks) == 320
    plan = plan_offsets(blocks)
    assert plan.arena_bytes == 320 and not check_no_overlap(blocks)
    assert plan.naive_bytes == 0  # blocks without kinds: nothing counted


_lifetime = st.tuples(st.integers(0, 12), st.integers(0, 6)).map(lambda fl: (fl[0], fl[0] + fl[1]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_lifetime, st.integers(0, 5000)), min_size=1, max_size=14), st.randoms())
def test_a_kept_placement_order_stacks_each_block_on_the_overlapping_ones_below_it(specs, rnd):
    """The generated layout prunes its max terms to the blocks that can end highest; the
    offsets must equal placing each block, in order, above every earlier overlapping one."""
    blocks = [Block(k, 0, first, last) for k, ((first, last), _) in enumerate(specs)]
    sizes = [n for _, n in specs]
    order = list(range(len(blocks)))
    rnd.shuffle(order)
    w = CodeWriter("test-layout")
    write_layout(w, blocks, order)
    offsets, top, bound = w.compile()["layout"](sizes)

    expected, ends = {}, {}
    for k in order:
        expected[k] = max((ends[j] for j in ends if blocks[j].overlaps(blocks[k])), default=0)
        ends[k] = expected[k] + align(sizes[k])
    assert list(offsets) == [expected[k] for k in range(len(blocks))]
    assert top == max(ends.values())
    assert bound == lower_bound([Block(k, n, b.first, b.last) for k, (b, n) in enumerate(zip(blocks, sizes))])


def _branchy_model():
    w1, w2, w3 = _init("W1", _x(16, 32)), _init("W2", _x(16, 8, seed=2)), _init("W3", _x(32, 8, seed=3))
    nodes = [helper.make_node("Relu", ["x"], ["a"]),              # 0: a [4,16] 256 B
             helper.make_node("MatMul", ["a", "W1"], ["b"]),      # 1: b [4,32] 512 B
             helper.make_node("MatMul", ["a", "W2"], ["c"]),      # 2: c [4,8] 128 B (a dies)
             helper.make_node("MatMul", ["b", "W3"], ["d"]),      # 3: d [4,8] 128 B (b dies)
             helper.make_node("Add", ["c", "d"], ["e"]),          # 4: e over c
             helper.make_node("Relu", ["e"], ["y"])]              # 5: graph output
    return _model(nodes, [("x", [4, 16])], [("y", [4, 8])], [w1, w2, w3])


def test_lower_bound_of_a_hand_made_graph():
    sess = dynashape.InferenceSession(_branchy_model(), validate_memory=True)
    x = _x(4, 16)
    plan = sess.plan({"x": x})
    m = plan.memory
    # live bytes per step: 0: a=256  1: a+b=768  2: a+b+c=896  3: b+c+d=768  4: c/e+d=256  5: e=128
    assert m.lower_bound_bytes == 896
    assert m.arena_bytes == 896
    assert m.naive_bytes == 256 + 512 + 128 + 128 + 128
    assert m.planning_ms > 0
    (y,) = sess.run(None, {"x": x})
    a = np.maximum(x, 0)
    w = {i.name: numpy_helper.to_array(i) for i in _branchy_model().graph.initializer}
    np.testing.assert_allclose(y, np.maximum(a @ w["W2"] + (a @ w["W1"]) @ w["W3"], 0), rtol=1e-5, atol=1e-6)


def test_offsets_are_64_byte_aligned():
    for n in (1, 3, 5):
        m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["b"]),
                    helper.make_node("Add", ["a", "b"], ["y"])], [("x", ["n", "n"])], [("y", ["n", "n"])])
        sess = dynashape.InferenceSession(m)
        plan = sess.plan({"x": _x(n, n)})
        assert all(b.offset % 64 == 0 for b in plan.memory.blocks)
        assert plan.memory.lower_bound_bytes == 2 * align(n * n * 4)


# arena policy -------------------------------------------------------------------------------

def test_arena_grows_only_when_a_plan_needs_more_and_trim_releases_it():
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
                helper.make_node("Add", ["a", "b"], ["y"])], [("x", ["n", "n"])], [("y", ["n", "n"])])
    sess = dynashape.InferenceSession(m)
    seen = []
    for n in (8, 16, 4, 16, 12, 32, 8):
        x = _x(n, n)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0) + np.maximum(x, 0).T)
        seen.append((sess.arena_bytes, sess.arena.grow_count, sess.arena.buffer.ctypes.data))
    need = [2 * align(n * n * 4) for n in (8, 16, 4, 16, 12, 32, 8)]
    assert need == [512, 2048, 128, 2048, 1152, 8192, 512]
    assert [c for c, _, _ in seen] == [512, 2048, 2048, 2048, 2048, 8192, 8192]
    assert [g for _, g, _ in seen] == [1, 2, 2, 2, 2, 3, 3]
    assert seen[1][2] == seen[2][2] == seen[3][2] == seen[4][2]     # the same buffer is kept
    sess.trim()
    assert sess.arena_bytes == 0
    sess.run(None, {"x": _x(4, 4)})
    assert sess.arena_bytes == 128


# validation mode --------------------------------------------------------------------------------

def test_validation_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv("DYNASHAPE_VALIDATE_MEMORY", "1")
    sess = dynashape.InferenceSession(_branchy_model())
    sess.run(None, {"x": _x(4, 16)})
    assert sess.validate_memory and sess.engine.last_context.validate and (sess.arena.buffer == 0xFF).all()
    monkeypatch.setenv("DYNASHAPE_VALIDATE_MEMORY", "0")
    sess = dynashape.InferenceSession(_branchy_model())
    sess.run(None, {"x": _x(4, 16)})
    assert not sess.validate_memory and not sess.engine.last_context.validate
    assert not (sess.arena.buffer == 0xFF).all()


def test_validation_catches_overlapping_offsets(monkeypatch):
    real = plan_module.plan_offsets

    def broken(blocks):
        plan = real(blocks)
        for b in blocks:
            b.offset = 0          # every block at offset 0: live blocks overlap
        return plan

    monkeypatch.setattr(plan_module, "plan_offsets", broken)
    with pytest.raises(dynashape.MemoryPlanError, match="memory plan overlaps: 'a'.*and 'b'"):
        dynashape.InferenceSession(_branchy_model(), validate_memory=True).run(None, {"x": _x(4, 16)})


def test_validation_catches_a_read_of_a_freed_block(monkeypatch):
    real = program_module.lifetimes

    def broken(steps, keep=(), inplace=True):
        blocks = real(steps, keep, inplace)
        blocks[0].last = blocks[0].first      # 'a' freed right after it is written
        return blocks

    monkeypatch.setattr(program_module, "lifetimes", broken)
    sess = dynashape.InferenceSession(_branchy_model(), validate_memory=True)
    with pytest.raises(dynashape.MemoryPlanError, match=r"step 1 \(MatMul .*reads 'a' outside the lifetime"):
        sess.run(None, {"x": _x(4, 16)})


@pytest.fixture
def bad_ops():
    lib = OpLibrary()

    @lib.op("SneakyView", 1, domain="test.memory", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("SneakyView", domain="test.memory")
    def _sneaky(inputs, outputs, ctx):
        return [inputs[0][...]]          # a view of its input, but no ``aliases`` declared

    @lib.op("AccumulateInto", 1, domain="test.memory", infer_dtype=same_dtype(0))
    def _shape2(ctx):
        return [ctx.shape(0)]

    @lib.kernel("AccumulateInto", domain="test.memory")
    def _accumulate(inputs, outputs, ctx):
        outputs[0] += inputs[0]          # reads its output buffer before writing it

    name = dynashape.register_plugin(lib.plugin(), name="test-memory-bad-ops")
    yield
    dynashape.unregister_plugin(name)


def _custom(op):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]),
                           helper.make_node(op, ["a"], ["b"], domain="test.memory"),
                           helper.make_node("Neg", ["b"], ["c"]), helper.make_node("Neg", ["c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [4, 16])],
                          [helper.make_tensor_value_info("y", F, [4, 16])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.memory", 1)])


def test_validation_catches_an_undeclared_view_of_the_arena(bad_ops):
    x = _x(4, 16)
    with pytest.raises(dynashape.MemoryPlanError, match="SneakyView .*writes 'b'.*outside its block"):
        dynashape.InferenceSession(_custom("SneakyView"), validate_memory=True).run(None, {"x": x})


def test_a_kernel_that_reads_its_output_before_writing_it_is_caught(bad_ops):
    """(Its planned output is poisoned with 0xFF bytes, NaN, then with zeros: the results differ.)"""
    x = _x(4, 16)
    for validate in (True, False):
        sess = dynashape.InferenceSession(_custom("AccumulateInto"), validate_memory=validate)
        with pytest.raises(dynashape.PluginContractError, match="plugin 'test-memory-bad-ops'.*AccumulateInto.*"
                                                                 "reads outputs\\[0\\] before writing it"):
            sess.run(None, {"x": x})


def test_validation_poisons_every_block_after_its_last_use():
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
                helper.make_node("Neg", ["b"], ["y"])], [("x", [8, 8])], [("y", [8, 8])])
    sess = dynashape.InferenceSession(m, validate_memory=True)
    x = _x(8, 8)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, -np.maximum(x, 0).T)
    assert sess.arena_bytes == 512 and (sess.arena.buffer == 0xFF).all()


# targets on real models ---------------------------------------------------------------------

def _zoo_plans():
    out = []
    for key in sorted(_catalog()):
        for shape in ("small", "large"):
            if shape in _catalog()[key]["shapes"]:
                out.append(pytest.param(key, shape, id=f"{key}-{shape}"))
    return out


@pytest.mark.parametrize("key,shape", _zoo_plans())
def test_zoo_plans_meet_the_targets(key, shape):
    from tests.conftest import SHARED
    # the planner's targets on the models' own graphs (fusions remove the small tensors that
    # make naive memory large, e.g. resnet_tiny's Relu outputs)
    sess = dynashape.InferenceSession(str(SHARED / "zoo" / zoo_entry(key)["file"]), validate_memory=True,
                                      optimize=False)
    m = sess.plan(zoo_feeds(key, shape)).memory
    assert not check_no_overlap(m.blocks)
    assert m.arena_bytes <= 1.05 * m.lower_bound_bytes
    if len(sess.graph.nodes) > 20:
        assert 2 * m.arena_bytes <= m.naive_bytes


def _stacked_blocks(n_nodes: int, d: int = 32):
    """A dynamic [batch, seq, d] model of repeated residual blocks (MatMul, Add, Relu, views,
    Transpose, Softmax): chain-like with a long-lived residual."""
    rng = np.random.default_rng(0)
    nodes, inits = [], [numpy_helper.from_array(np.array([0, -1, 2, d // 2], np.int64), "shape4"),
                        numpy_helper.from_array(np.array([0, -1, d], np.int64), "shape3")]
    x, i = "x", 0
    while len(nodes) < n_nodes - 11:
        i += 1
        inits += [_init(f"w{i}", rng.standard_normal((d, 2 * d)) * 0.1), _init(f"b{i}", rng.standard_normal(2 * d)),
                  _init(f"v{i}", rng.standard_normal((2 * d, d)) * 0.1), _init(f"g{i}", rng.standard_normal(d))]
        t = [f"t{i}_{k}" for k in range(11)]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [t[0]]), helper.make_node("Add", [t[0], f"b{i}"], [t[1]]),
                  helper.make_node("Relu", [t[1]], [t[2]]), helper.make_node("MatMul", [t[2], f"v{i}"], [t[3]]),
                  helper.make_node("Reshape", [t[3], "shape4"], [t[4]]),
                  helper.make_node("Transpose", [t[4]], [t[5]], perm=[0, 2, 1, 3]),
                  helper.make_node("Softmax", [t[5]], [t[6]], axis=-1),
                  helper.make_node("Transpose", [t[6]], [t[7]], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [t[7], "shape3"], [t[8]]),
                  helper.make_node("Add", [x, t[8]], [t[9]]), helper.make_node("Mul", [t[9], f"g{i}"], [t[10]])]
        x = t[10]
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return _model(nodes, [("x", ["batch", "seq", d])], [("y", ["batch", "seq", d])], inits)


def test_800_node_chain_plans_at_the_lower_bound_and_runs_like_naive():
    """(Planning time of this model is measured by benchmarks/memory.py, not asserted here.)"""
    sess = dynashape.InferenceSession(_stacked_blocks(800), optimize=False)   # the planner on 800 nodes
    assert len(sess.graph.nodes) >= 790
    for batch, seq in ((1, 8), (2, 16), (4, 32), (3, 7), (8, 64)):
        m = sess.plan({"x": _x(batch, seq, 32)}).memory
        assert m.arena_bytes == m.lower_bound_bytes          # chain-like: exactly the bound
        assert 2 * m.arena_bytes <= m.naive_bytes
    x = _x(2, 5, 32)
    naive = dynashape.InferenceSession(_stacked_blocks(800), allocator="naive")
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], naive.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_data_dependent_view_keeps_its_source_block_alive():
    # r = Reshape(a, Shape(NonZero(mask))) is only known at run time, yet a view of a's block:
    # b (written after it) must not reuse a's bytes while r is still to be read
    shape2 = numpy_helper.from_array(np.array([4, 16], np.int64), "shape2")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Shape", ["nz"], ["sh"]), helper.make_node("Reshape", ["a", "sh"], ["r"]),
             helper.make_node("Neg", ["x"], ["b"]), helper.make_node("Reshape", ["r", "shape2"], ["r2"]),
             helper.make_node("Add", ["r2", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4, 16]),
                                       helper.make_tensor_value_info("mask", TensorProto.BOOL, [64])],
                          [helper.make_tensor_value_info("y", F, [4, 16])], [shape2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = _x(4, 16)
    for validate in (False, True):
        sess = dynashape.InferenceSession(m, validate_memory=validate)
        (y,) = sess.run(None, {"x": x, "mask": np.ones(64, bool)})
        np.testing.assert_array_equal(y, np.maximum(x, 0) - x)
        plan = sess.last_plan
        where = _where(sess, plan)
        assert where["r"] == (where["a"][0], VIEW) and where["b"][0] != where["a"][0]


# kernel scratch buffers ------------------------------------------------------------------------

@pytest.fixture
def scratch_op():
    """test.memory::SumOfSquares(x) = (x * x).sum(-1, keepdims) with x*x in a scratch buffer;
    records the address and shape of every scratch buffer it gets."""
    lib = OpLibrary()
    seen = []

    @lib.op("SumOfSquares", 1, domain="test.memory", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [tuple(ctx.shape(0)[:-1]) + (1,)]

    def _scratch(ctx):
        return [(tuple(ctx.shape(0)), ctx.dtype(0))]

    @lib.kernel("SumOfSquares", domain="test.memory", scratch=_scratch)
    def _kernel(inputs, outputs, ctx):
        tmp = outputs[1]
        seen.append((tmp.ctypes.data, tmp.shape))
        np.multiply(inputs[0], inputs[0], out=tmp)
        np.sum(tmp, axis=-1, keepdims=True, out=outputs[0])

    name = dynashape.register_plugin(lib.plugin(), name="test-memory-scratch")
    yield seen
    dynashape.unregister_plugin(name)


def test_kernel_scratch_is_planned_in_the_arena_for_the_step_only(scratch_op):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]),
                           helper.make_node("SumOfSquares", ["a"], ["s"], domain="test.memory"),
                           helper.make_node("Neg", ["s"], ["n"]), helper.make_node("Add", ["a", "n"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, ["b", 16])],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.memory", 1)])
    for validate in (False, True):
        scratch_op.clear()
        sess = dynashape.InferenceSession(m, validate_memory=validate)
        for b in (4, 4, 2, 4):
            x = _x(b, 16, seed=b)
            (y,) = sess.run(None, {"x": x})
            a = np.maximum(x, 0)
            np.testing.assert_allclose(y, a - (a * a).sum(-1, keepdims=True), rtol=1e-5)
        plan = sess.plan({"x": _x(4, 16)})
        where = _where(sess, plan)
        block = where["SumOfSquares_1:scratch0"]
        (b,) = [bl for bl in plan.memory.blocks if bl.id == block[0]]
        assert (b.first, b.last, b.size) == (1, 1, 4 * 16 * 4)        # lives during its step only
        base = sess.arena.buffer.ctypes.data
        assert len(scratch_op) == 4 and all(base <= addr < base + sess.arena_bytes for addr, _ in scratch_op)
        # the same buffer run after run at one signature (planned, not allocated per run)
        assert scratch_op[0] == scratch_op[1] and scratch_op[2][1] == (2, 16)
    # the node contract provides scratch to a node run on its own too
    from dynashape.testing import run_node
    (s,) = run_node("SumOfSquares", [np.ones((2, 3), np.float32)], opset=1, domain="test.memory")
    np.testing.assert_array_equal(s, [[3], [3]])
