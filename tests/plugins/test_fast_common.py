"""What the compiled kernels share (``dynashape.ops_fast.common``): the address a kernel hands
to native code is the array's first element, whatever the array."""
from __future__ import annotations

import numpy as np
import pytest

from dynashape.ops_fast.common import address


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
