"""``onnx.backend.base.Backend`` for dynashape, so ONNX's backend test suite can run it.

    import onnx.backend.test
    from dynashape import backend
    suite = onnx.backend.test.BackendTest(backend.DynashapeBackend, __name__)

It is also onnxruntime's ``onnxruntime.backend`` (``backend.prepare(path).run(x)``;
``dynashape.backend.backend.OnnxRuntimeBackend``, ``dynashape.backend.backend_rep``): a model
given as a path or bytes is loaded as a session directly (no ``onnx.checker`` pass, as
onnxruntime), a ``ModelProto`` is checked first, and a session or prepared rep is taken as it is.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ..errors import InvalidArgumentError, UnsupportedOperatorError
from ..session import InferenceSession

__all__ = ["DynashapeBackend", "DynashapeRep", "is_compatible", "prepare", "run", "run_model", "run_node",
           "supports_device"]


class DynashapeRep(BackendRep):
    """A prepared model: one session, run with inputs given positionally or by name."""

    def __init__(self, session: InferenceSession):
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """The outputs for ``inputs``: a dict of input name -> value, a list (or tuple) of
        values in input order, or the one input's value (an array, or a dict for a map input).

        Raises:
            InvalidArgumentError: a single value for a model of several inputs.
        """
        names = [i.name for i in self.session.get_inputs()]
        if isinstance(inputs, dict) and inputs and set(inputs) <= set(names):
            feed = dict(inputs)
        elif isinstance(inputs, (list, tuple)):
            feed = {n: np.asarray(v) if isinstance(v, np.generic) else v for n, v in zip(names, inputs)}
        else:
            if len(names) != 1:
                raise InvalidArgumentError(f"Model expect {len(names)} inputs; pass a list (or a dict by name)")
            feed = {names[0]: np.asarray(inputs) if isinstance(inputs, np.generic) else inputs}
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
    def prepare(cls, model: Any, device: Optional[str] = "CPU", **kwargs: Any) -> DynashapeRep:
        """A rep of ``model``: a path or bytes (loaded as they are), a ``ModelProto``
        (``onnx.checker`` first), an :class:`InferenceSession` or a rep (taken as they are).

        Raises:
            InvalidArgumentError: a device other than the CPU.
            onnx.checker.ValidationError: a ModelProto the checker rejects.
        """
        if device is not None and not cls.supports_device(device):
            raise InvalidArgumentError(f"Incompatible device expected '{device}', got 'CPU'")
        if isinstance(model, DynashapeRep):
            return model
        if isinstance(model, InferenceSession):
            return DynashapeRep(model)
        if not isinstance(model, (str, bytes, os.PathLike)):
            super().prepare(model, "CPU", **kwargs)
        return DynashapeRep(InferenceSession(model, allocator=kwargs.get("allocator", "pool")))

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Optional[Sequence] = None, **kwargs: Any) -> tuple:
        raise NotImplementedError("run_node is not used; the node tests run whole one-node models")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


is_compatible = DynashapeBackend.is_compatible
prepare = DynashapeBackend.prepare
run = run_model = DynashapeBackend.run_model
run_node = DynashapeBackend.run_node
supports_device = DynashapeBackend.supports_device
