"""onnxruntime's ``onnxruntime.capi._pybind_state`` (the binding module, imported as ``C``):
the names of :mod:`dynashape.capi.onnxruntime_pybind11_state`."""
from __future__ import annotations

from typing import Any

from . import onnxruntime_pybind11_state as _state

globals().update({name: getattr(_state, name) for name in _state._EAGER})
__all__ = list(_state.__all__)


def __getattr__(name: str) -> Any:
    return getattr(_state, name)
