"""onnxruntime's ``onnxruntime.backend.backend_rep`` names: ``OnnxRuntimeBackendRep`` is
:class:`dynashape.backend.DynashapeRep`."""
from __future__ import annotations

from . import DynashapeRep

OnnxRuntimeBackendRep = DynashapeRep

__all__ = ["OnnxRuntimeBackendRep"]
