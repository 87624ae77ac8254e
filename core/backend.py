"""``onnx.backend.base.Backend`` for dynashape, so ONNX's backend test suite can run it.

    import onnx.backend.test
    from dynashape import backend
    suite = onnx.backend.test.BackendTest(backend.DynashapeBackend, __name__)
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .errors import UnsupportedOperatorError
from .session import InferenceSession

__all__ = ["DynashapeBackend", "DynashapeRep", "prepare", "run_model", "run_node", "supports_device"]


class DynashapeRep(BackendRep):
    """A prepared model: one session, run with inputs given positionally or by name."""

    def __init__(self, session: InferenceSession):
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        names = [i.name for i in self.session.get_inputs()]
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feed = dict(zip(names, inputs))
        return tuple(self.session.run(None, feed))


class DynashapeBackend(Backend):
    """CPU backend over :class:`dynashape.InferenceSession` (allocator from ``allocator=``)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            cls.prepare(model, device, **kwargs)
            return True
        except UnsupportedOperatorError:
            return False

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> DynashapeRep:
        super().prepare(model, device, **kwargs)
        return DynashapeRep(InferenceSession(model, allocator=kwargs.get("allocator", "pool")))

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Optional[Sequence] = None, **kwargs: Any) -> tuple:
        raise NotImplementedError("run_node is not used; the node tests run whole one-node models")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = DynashapeBackend.prepare
run_model = DynashapeBackend.run_model
run_node = DynashapeBackend.run_node
supports_device = DynashapeBackend.supports_device
