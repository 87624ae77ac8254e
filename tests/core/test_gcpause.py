"""The cyclic garbage collector is held off while a model or a subgraph body compiles
(dynashape.gcpause), and comes back as it was."""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape import gcpause


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_pausing_nests_and_restores_the_collector(collector_on):
    with gcpause.pausing():
        assert not gc.isenabled()
        with gcpause.pausing():
            assert not gc.isenabled()
        assert not gc.isenabled()          # the outer pause still holds
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="inside"):
        with gcpause.pausing():
            raise RuntimeError("inside")
    assert gc.isenabled()                  # restored after an exception too


def test_a_collector_the_application_disabled_stays_disabled(collector_on):
    gc.disable()
    with gcpause.pausing():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_concurrent_pauses_end_with_the_last(collector_on):
    inside, release = threading.Event(), threading.Event()

    def compile_in_thread():
        with gcpause.pausing():
            inside.set()
            release.wait(5)
    t = threading.Thread(target=compile_in_thread)
    t.start()
    inside.wait(5)
    with gcpause.pausing():
        pass
    assert not gc.isenabled()              # the thread's pause is still on
    release.set()
    t.join(5)
    assert gc.isenabled()


def test_a_session_and_a_subgraph_body_compile_with_the_collector_off(collector_on, monkeypatch):
    from dynashape import compilation
    seen = []

    def recording(prepare):
        def prepare_graph(*args, **kwargs):
            seen.append(gc.isenabled())
            return prepare(*args, **kwargs)
        return prepare_graph
    monkeypatch.setattr(compilation, "prepare_graph", recording(compilation.prepare_graph))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "b", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    model = helper.make_model(helper.make_graph([node], "g", [x, c], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = dynashape.InferenceSession(model.SerializeToString())
    (out,) = sess.run(None, {"x": np.array([1.0, -2.0], np.float32), "c": np.array(True)})
    np.testing.assert_array_equal(out, [-1.0, 2.0])
    assert seen and not any(seen), seen    # the main graph's and the branch's prepare ran paused
    assert len(seen) >= 2 and gc.isenabled()


class _Node:
    pass


def test_the_compiles_objects_end_in_the_oldest_generation_without_a_collection(collector_on):
    """After the pause, what it allocated is no young generation the collector would walk at
    the next allocation (gc.freeze + gc.unfreeze); garbage cycles made during the pause are
    still collected, by a full collection."""
    collections = []

    def count(phase, info):
        if phase == "stop":
            collections.append(info["generation"])
    gc.collect()
    with gcpause.pausing():
        kept = [{"i": i} for i in range(20000)]       # (well over the young threshold)
        cycle = _Node()
        cycle.me = cycle
        dropped = weakref.ref(cycle)
        del cycle
    gc.callbacks.append(count)
    try:
        assert gc.get_count()[0] < gc.get_threshold()[0]
        extra = [[] for _ in range(100)]
        assert collections == []                      # no young collection started at once
    finally:
        gc.callbacks.remove(count)
    assert dropped() is not None                      # (a cycle: only a collection frees it)
    gc.collect()
    assert dropped() is None
    assert len(kept) == 20000 and len(extra) == 100


def test_objects_the_application_froze_stay_frozen(collector_on):
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gcpause.pausing():
            [{"i": i} for i in range(1000)]
        assert gc.get_freeze_count() == frozen        # not unfrozen by the pause's end
    finally:
        gc.unfreeze()
