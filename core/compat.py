"""``OnnxStub``: the seed system's usage sequence (InfiniTensor's Python front end) on dynashape.

    stub = OnnxStub(model, use_naive_allocator=False)
    stub.set_input([list(x.shape)])
    stub.inputs["x"].copyin_numpy(x)
    stub.run()
    stub.getShape("y"); stub.outputs["y"].copyout_float()

The error messages follow the seed's documents (docs/SEEDS.md §5).
"""
from __future__ import annotations

from numbers import Integral
from typing import Any, Optional, Sequence

import numpy as np

from .errors import InputFixedDimMismatch, InputNameError, InputRankMismatch, InvalidFeedError, NonIntegerDimError
from .model import FIXED
from .session import InferenceSession

__all__ = ["OnnxStub", "TensorHandle"]


class TensorHandle:
    """One input or output tensor of an :class:`OnnxStub`."""

    def __init__(self, stub: "OnnxStub", name: str, is_input: bool):
        self._stub = stub
        self.name = name
        self._is_input = is_input

    def shape(self) -> list[int]:
        return self._stub.getShape(self.name)

    def copyin_numpy(self, array: np.ndarray) -> None:
        """Write an input's data; its shape must be the one given to ``set_input``."""
        if not self._is_input:
            raise InvalidFeedError(f"'{self.name}' is an output; only inputs can be written")
        want = self._stub._shapes.get(self.name)
        array = np.asarray(array)
        if want is None:
            raise InvalidFeedError(f"call set_input before writing input '{self.name}'")
        if list(array.shape) != list(want):
            raise InvalidFeedError(f"Input {self.name}: data has shape {list(array.shape)}, "
                                   f"but set_input declared {list(want)}")
        dtype = self._stub._dtypes[self.name]
        self._stub._data[self.name] = np.ascontiguousarray(array, dtype=dtype)

    def copyin_float(self, values: Sequence[float]) -> None:
        want = self._stub._shapes.get(self.name)
        if want is None:
            raise InvalidFeedError(f"call set_input before writing input '{self.name}'")
        self.copyin_numpy(np.asarray(values, dtype=np.float32).reshape(want))

    def copyin_int64(self, values: Sequence[int]) -> None:
        want = self._stub._shapes.get(self.name)
        if want is None:
            raise InvalidFeedError(f"call set_input before writing input '{self.name}'")
        self.copyin_numpy(np.asarray(values, dtype=np.int64).reshape(want))

    def copyout_numpy(self) -> np.ndarray:
        return self._stub._result(self.name).copy()

    def copyout_float(self) -> list[float]:
        return [float(v) for v in self._stub._result(self.name).reshape(-1)]

    def copyout_int64(self) -> list[int]:
        return [int(v) for v in self._stub._result(self.name).reshape(-1)]


class OnnxStub:
    """The seed's ``OnnxStub`` over a dynashape :class:`InferenceSession`.

    Args:
        model: path, bytes or ``onnx.ModelProto``.
        runtime: ignored (the seed passed ``backend.cpu_runtime()``); dynashape runs on CPU.
        use_naive_allocator: ``True`` for the naive allocator, else the pool.
    """

    def __init__(self, model: Any, runtime: Any = None, use_naive_allocator: bool = False):
        self.session = InferenceSession(model, allocator="naive" if use_naive_allocator else "pool")
        self._in = {vi.name: vi for vi in self.session.model.graph.inputs}
        self._dtypes = {vi.name: vi.dtype for vi in self.session.model.graph.inputs}
        self.inputs = {n: TensorHandle(self, n, True) for n in self._in}
        self.outputs = {o.name: TensorHandle(self, o.name, False) for o in self.session.get_outputs()}
        self._shapes: dict[str, list[int]] = {}
        self._data: dict[str, np.ndarray] = {}
        self._results: Optional[dict[str, np.ndarray]] = None

    def set_input(self, input_shapes: Sequence[Sequence[Any]]) -> None:
        """Bind one shape per model input, in the model's input order.

        Raises:
            InvalidFeedError: wrong number of shapes ("inputShapes must contain one shape per
                model input; expected N, got M").
            NonIntegerDimError: a dim is not an int ("Input X, axis 0: dimension must be an integer").
            InputRankMismatch / InputFixedDimMismatch: the shape does not fit the declared dims.
        """
        names = list(self._in)
        if len(input_shapes) != len(names):
            raise InvalidFeedError(f"inputShapes must contain one shape per model input; "
                                   f"expected {len(names)}, got {len(input_shapes)}")
        shapes: dict[str, list[int]] = {}
        for name, shape in zip(names, input_shapes):
            dims = []
            for axis, d in enumerate(shape):
                if isinstance(d, bool) or not isinstance(d, Integral):
                    raise NonIntegerDimError(f"Input {name}, axis {axis}: dimension must be an integer, "
                                             f"got {d!r} ({type(d).__name__})")
                if int(d) < 0:
                    raise InvalidFeedError(f"Input {name}, axis {axis}: dimension must be >= 0, got {int(d)}")
                dims.append(int(d))
            declared = self._in[name].dims
            if declared is not None:
                if len(declared) != len(dims):
                    raise InputRankMismatch(f"Input {name}: expected rank {len(declared)}, got {len(dims)} "
                                            f"(shape {dims})")
                for axis, (spec, d) in enumerate(zip(declared, dims)):
                    if spec.kind == FIXED and spec.value != d:
                        raise InputFixedDimMismatch(f"Input {name}, axis {axis}: expected {spec.value} "
                                                    f"(fixed dim), got {d}")
            shapes[name] = dims
        self._shapes = shapes
        self._data = {}
        self._results = None

    def run(self) -> None:
        """Run with the data written by ``copyin_*``."""
        missing = [n for n in self._in if n not in self._data]
        if missing:
            raise InputNameError(f"no data written for input(s) {missing}; call copyin_numpy first")
        outs = self.session.run(None, self._data)
        self._results = dict(zip(self.outputs, outs))

    def getShape(self, name: str) -> list[int]:
        """The shape of an input (as set) or of an output (after ``run``)."""
        if name in self._shapes:
            return list(self._shapes[name])
        return list(self._result(name).shape)

    def _result(self, name: str) -> np.ndarray:
        if name not in self.outputs:
            raise InputNameError(f"'{name}' is not an output of the model; outputs are {list(self.outputs)}")
        if self._results is None:
            raise InvalidFeedError("call run() before reading outputs")
        return self._results[name]
