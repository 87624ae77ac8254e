"""The seed's OnnxStub usage sequence and its documented error messages (docs/SEEDS.md §5)."""
from __future__ import annotations

import numpy as np
import pytest

import dynashape
from dynashape.compat import OnnxStub
from dynashape.demo import BIAS, build_demo_model


@pytest.fixture(params=[False, True], ids=["pool", "naive"])
def stub(request):
    return OnnxStub(build_demo_model(), None, use_naive_allocator=request.param)


def test_stub_sequence_gives_reshape_plus_bias(stub):
    for batch in (1, 2, 8, 3, 1):
        x = np.arange(batch * 6, dtype=np.float32).reshape(batch, 2, 3)
        stub.set_input([list(x.shape)])
        stub.inputs["x"].copyin_numpy(x)
        stub.run()
        assert stub.getShape("y") == [batch, 6]
        assert stub.outputs["y"].copyout_float() == (x.reshape(batch, 6) + BIAS).reshape(-1).tolist()
        np.testing.assert_array_equal(stub.outputs["y"].copyout_numpy(), x.reshape(batch, 6) + BIAS)


def test_set_input_with_no_shapes(stub):
    with pytest.raises(dynashape.InvalidFeedError,
                       match=r"^inputShapes must contain one shape per model input; expected 1, got 0$"):
        stub.set_input([])


def test_set_input_with_a_float_dim(stub):
    with pytest.raises(dynashape.NonIntegerDimError, match=r"^Input x, axis 0: dimension must be an integer"):
        stub.set_input([[2.0, 2, 3]])


@pytest.mark.parametrize("bad", ["2", None])
def test_set_input_with_string_or_none_dim(stub, bad):
    with pytest.raises(TypeError, match="axis 0: dimension must be an integer"):
        stub.set_input([[bad, 2, 3]])


def test_numpy_integer_dims_are_accepted(stub):
    stub.set_input([[np.int64(2), np.int32(2), 3]])
    assert stub.getShape("x") == [2, 2, 3]


def test_fixed_dim_given_another_value_is_rejected(stub):
    with pytest.raises(dynashape.InputFixedDimMismatch, match=r"Input x, axis 1: expected 2 \(fixed dim\), got 4"):
        stub.set_input([[2, 4, 3]])


def test_copyin_with_other_shape_than_set(stub):
    stub.set_input([[2, 2, 3]])
    with pytest.raises(dynashape.InvalidFeedError, match=r"data has shape \[3, 2, 3\].*declared \[2, 2, 3\]"):
        stub.inputs["x"].copyin_numpy(np.zeros((3, 2, 3), np.float32))
