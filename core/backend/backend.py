"""onnxruntime's ``onnxruntime.backend.backend`` names: ``OnnxRuntimeBackend`` is
:class:`dynashape.backend.DynashapeBackend`."""
from __future__ import annotations

from . import DynashapeBackend, is_compatible, prepare, run, supports_device

OnnxRuntimeBackend = DynashapeBackend

__all__ = ["OnnxRuntimeBackend", "is_compatible", "prepare", "run", "supports_device"]
