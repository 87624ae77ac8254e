"""What the compiled kernels share (``dynashape.ops_builtin.fast.common``): the address a kernel hands
to native code is the array's first element, whatever the array."""
from __future__ import annotations

import numpy as np
import pytest

from dynashape.ops_builtin.fast.common import address


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32).reshape(3, 4),               # writable, contiguous
    lambda: np.arange(40, dtype=np.float32).reshape(10, 4)[3:7],          # a view at an offset
    lambda: np.arange(40, dtype=np.float32).reshape(10, 4)[:, 1:3],       # strided rows
    lambda: np.arange(40, dtype=np.float64).reshape(10, 4).T,             # Fortran order
    lambda: _read_only(np.arange(6, dtype=np.int64)),                     # read-only (an initializer)
    lambda: np.empty((0, 5), np.float32),                                 # empty
    lambda: np.full((), 2.5, np.float32),                                 # 0-d
], ids=["contiguous", "offset-view", "strided", "fortran", "read-only", "empty", "scalar"])
def test_address_is_the_first_elements_whatever_the_array(make):
    a = make()
    assert address(a) == a.ctypes.data
    if a.size:
        first = np.ctypeslib.as_array((np.ctypeslib.as_ctypes_type(a.dtype) * 1).from_address(address(a)))
        assert first[0] == a[(0,) * a.ndim]


def test_a_refused_arrays_address_is_remembered_while_it_lives_and_forgotten_after():
    """A read-only weight is looked up once (the buffer protocol refuses it on every call);
    once it dies, an array that gets its id has its own address, not the dead one's."""
    from dynashape.ops_builtin.fast import common

    weight = _read_only(np.arange(64, dtype=np.float32))
    assert address(weight) == address(weight) == weight.ctypes.data
    assert id(weight) in common._REFUSED
    key = id(weight)
    del weight
    assert key not in common._REFUSED
    for _ in range(50):    # new read-only arrays, some of them at the freed id
        other = _read_only(np.arange(64, dtype=np.float32) + 1)
        assert address(other) == other.ctypes.data
        del other
    view = np.arange(40, dtype=np.float32).reshape(10, 4)[:, 1:3]
    assert address(view) == view.ctypes.data == address(view)
    empty = np.empty(0, np.float32)
    assert address(empty) == empty.ctypes.data and id(empty) not in common._REFUSED
