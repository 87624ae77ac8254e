"""I/O binding: a session's inputs and outputs bound to memory before the run.

``session.io_binding()`` gives an :class:`IOBinding` (onnxruntime's Python wrapper);
``SessionIOBinding(session._sess)`` the binding-level object it wraps. Inputs are bound as
arrays (``bind_cpu_input``: the array itself, not a copy), as OrtValues, or as raw memory
(``bind_input(name, device, ..., element_type, shape, buffer_ptr)``: read when the run starts,
so the caller may rewrite it between runs). Outputs are bound

* to a device only (``bind_output(name)``): the run makes the value; later runs write into the
  same memory while the output's shape and element type stay the same (as onnxruntime),
  and into new memory when they change (onnxruntime raises there);
* to memory the caller owns (``bind_ortvalue_output``, or ``bind_output`` with a
  ``buffer_ptr``): the run writes the result there; its shape and element type must be the
  output's, checked before anything is written.

Only the CPU exists: binding another device raises :class:`~dynashape.errors.DeviceNotAvailableError`.
A run's failure is raised as :class:`~dynashape.errors.IOBindingError` (a ``RuntimeError``, as
onnxruntime raises) with the session's error as its ``__cause__``, unless that error is a
``RuntimeError`` already.

Source: onnxruntime's Python API reference, "IOBinding"
(https://onnxruntime.ai/docs/api/python/api_summary.html#iobinding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from .devices import CPU_DEVICE, OrtDevice, cpu_device
from .dtypes import onnx_type, type_string
from .errors import DynashapeError, IOBindingError, OrtValueError
from .ortvalue import OrtValue, OrtValueVector, array_at, element_dtype

__all__ = ["IOBinding", "SessionIOBinding", "run_with_iobinding"]


def _session_of(session: Any) -> Any:
    """The :class:`~dynashape.session.InferenceSession` behind ``session`` or its ``_sess``."""
    return getattr(session, "session", session)


@dataclass
class _Output:
    """A bound output: its device, the value it holds (None before the first run) and
    whether the caller gave that value (its memory is the caller's: never replaced)."""

    device: OrtDevice
    value: Optional[OrtValue] = None
    caller_owned: bool = False


class SessionIOBinding:
    """onnxruntime's binding-level ``SessionIOBinding(session._sess)`` (see the module)."""

    def __init__(self, session: Any) -> None:
        self._session = _session_of(session)
        self._inputs: dict[str, OrtValue] = {}
        self._outputs: dict[str, _Output] = {}

    # inputs ------------------------------------------------------------------
    def _check_input_name(self, name: str) -> None:
        s = self._session
        if name not in s._input_index and name not in s._overridable:
            raise IOBindingError(f"Error when binding input: Failed to find input name in the mapping: {name} "
                                 f"(Failed to find NodeArg with name: {name}; the model's inputs are "
                                 f"{s._input_names})")

    def bind_input(self, name: str, *args: Any) -> None:
        """``bind_input(name, array)``: the array (shared when C-contiguous); or
        ``bind_input(name, device, element_type, shape, buffer_ptr)``: the memory at
        ``buffer_ptr`` (``element_type`` a numpy type or an ONNX element type number).

        Raises:
            IOBindingError: ``name`` is no input of the model.
            OrtValueError: an unknown element type, a null pointer, a negative dim.
            DeviceNotAvailableError: a device other than the CPU.
        """
        if len(args) == 1:
            self.bind_ortvalue_input(name, OrtValue.ortvalue_from_numpy(args[0]))
            return
        if len(args) != 4:
            raise IOBindingError("bind_input takes (name, array) or (name, device, element_type, shape, buffer_ptr)")
        device, element_type, shape, buffer_ptr = args
        cpu_device(device, what=f"input '{name}'")
        self._check_input_name(name)
        self._inputs[name] = OrtValue.from_run_value(array_at(buffer_ptr, element_dtype(element_type), shape))

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an :class:`OrtValue` (its memory, not a copy).

        Raises:
            IOBindingError: ``name`` is no input of the model. OrtValueError: not an OrtValue.
        """
        self._check_input_name(name)
        if not isinstance(ortvalue, OrtValue):
            raise OrtValueError(f"bind_ortvalue_input('{name}'): expected an OrtValue, got {type(ortvalue).__name__}")
        self._inputs[name] = ortvalue

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: the CPU has no copy stream."""

    # outputs ---------------------------------------------------------------------
    def bind_output(self, name: str, device: Any = CPU_DEVICE, element_type: Any = None,
                    shape: Optional[Sequence[int]] = None, buffer_ptr: Optional[int] = None) -> None:
        """Bind an output to a device (the run makes it) or, with ``element_type``, ``shape``
        and ``buffer_ptr``, to the memory at ``buffer_ptr`` (the run writes it there). An
        output name the model lacks is reported by the run, as onnxruntime does.

        Raises:
            OrtValueError: an unknown element type, a null pointer.
            DeviceNotAvailableError: a device other than the CPU.
        """
        dev = cpu_device(device, what=f"output '{name}'")
        if buffer_ptr is None:
            self._outputs[name] = _Output(dev)
            return
        if element_type is None or shape is None:
            raise OrtValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        value = OrtValue.from_run_value(array_at(buffer_ptr, element_dtype(element_type), shape))
        self._outputs[name] = _Output(dev, value, caller_owned=True)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an output to an :class:`OrtValue` the run writes into.

        Raises:
            OrtValueError: not an OrtValue, or not a tensor.
        """
        if not isinstance(ortvalue, OrtValue) or not ortvalue.is_tensor():
            raise OrtValueError(f"bind_ortvalue_output('{name}'): expected a tensor OrtValue, got {ortvalue!r}")
        self._outputs[name] = _Output(CPU_DEVICE, ortvalue, caller_owned=True)

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: the CPU has no copy stream."""

    def get_outputs(self) -> OrtValueVector:
        """The bound outputs' values, in binding order (empty before the first run)."""
        return OrtValueVector(o.value for o in self._outputs.values() if o.value is not None)

    def copy_outputs_to_cpu(self) -> list:
        """Copies of the outputs' values: arrays (lists / dicts for sequences and maps)."""
        out = []
        for v in self.get_outputs():
            out.append(v.numpy().copy() if v.is_tensor() else _copy(v.feed_value()))
        return out

    # running -------------------------------------------------------------------
    def _run(self, run_options: Any) -> None:
        if not self._outputs:
            raise IOBindingError("Error in execution: At least one output should be requested.")
        names = list(self._outputs)
        feeds = {name: v.feed_value() for name, v in self._inputs.items()}
        try:
            results = self._session.run(names, feeds, run_options)
        except DynashapeError as exc:
            if isinstance(exc, RuntimeError):
                raise
            raise IOBindingError(f"Error in execution: {exc}") from exc
        for name, result in zip(names, results):      # check every caller-owned output before writing any
            out = self._outputs[name]
            if out.caller_owned:
                _check_fits(name, out.value, result)  # type: ignore[arg-type]
        for name, result in zip(names, results):
            out = self._outputs[name]
            held = out.value
            if out.caller_owned or (held is not None and held.is_tensor() and isinstance(result, np.ndarray)
                                    and held.numpy().shape == result.shape and held.numpy().dtype == result.dtype
                                    and held.numpy().flags.writeable):
                np.copyto(held.numpy(), result)     # type: ignore[union-attr]
            else:
                declared = self._session._outputs[self._session._output_index[name]].value_type
                out.value = OrtValue.from_run_value(result, declared)


def _copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return dict(value) if isinstance(value, dict) else value


def _check_fits(name: str, bound: OrtValue, result: Any) -> None:
    """Raise IOBindingError unless ``result`` fits the caller's output memory ``bound``."""
    if not isinstance(result, np.ndarray):
        raise IOBindingError(f"Error in execution: output '{name}' is not a tensor; bind it with bind_output(name)")
    want = bound.numpy()
    if want.dtype != result.dtype and not (want.dtype.kind == "O" and result.dtype.kind in "OUS"):
        raise IOBindingError(f"Error in execution: Unexpected output data type. Actual: "
                             f"({type_string(onnx_type(want.dtype))}) , expected: "
                             f"({type_string(onnx_type(result.dtype))}) for output '{name}'")
    if want.shape != result.shape:
        shown = ",".join(map(str, want.shape)), ",".join(map(str, result.shape))
        raise IOBindingError(f"Error in execution: Got invalid dimensions for output: {name}: the output OrtValue "
                             f"provided for output '{name}' has shape {{{shown[0]}}} but the computed output shape "
                             f"for this run is {{{shown[1]}}}")


class IOBinding:
    """onnxruntime's ``IOBinding`` (``session.io_binding()``): see the module."""

    def __init__(self, session: Any) -> None:
        self._iobinding = SessionIOBinding(session)

    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        """Bind a numpy array (itself when C-contiguous: writes to it before a run are seen).

        Raises:
            IOBindingError: ``name`` is no input of the model. OrtValueError: not an array.
        """
        self._iobinding.bind_input(name, arr_on_cpu)

    def bind_input(self, name: str, device_type: Any, device_id: int, element_type: Any, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        """Bind the memory at ``buffer_ptr``: ``shape`` elements of ``element_type`` (a numpy
        type or an ONNX element type number) on ``device_type`` ``"cpu"``."""
        self._iobinding.bind_input(name, OrtDevice.make(device_type, device_id), element_type, shape, buffer_ptr)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._iobinding.bind_ortvalue_input(name, ortvalue)

    def synchronize_inputs(self) -> None:
        self._iobinding.synchronize_inputs()

    def bind_output(self, name: str, device_type: Any = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Optional[Sequence[int]] = None, buffer_ptr: Optional[int] = None) -> None:
        """Bind an output to the device (the run makes it), or to the memory at ``buffer_ptr``
        (then ``element_type`` and ``shape`` are required).

        Raises:
            OrtValueError: ``buffer_ptr`` without ``element_type`` and ``shape``.
            DeviceNotAvailableError: a device other than the CPU.
        """
        device = OrtDevice.make(device_type, device_id)
        if buffer_ptr is None:
            self._iobinding.bind_output(name, device)
        else:
            self._iobinding.bind_output(name, device, element_type, shape, buffer_ptr)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        self._iobinding.bind_ortvalue_output(name, ortvalue)

    def synchronize_outputs(self) -> None:
        self._iobinding.synchronize_outputs()

    def get_outputs(self) -> list[OrtValue]:
        """The outputs' OrtValues (their memory: a later run may write into it)."""
        return list(self._iobinding.get_outputs())

    def get_outputs_as_ortvaluevector(self) -> OrtValueVector:
        return self._iobinding.get_outputs()

    def copy_outputs_to_cpu(self) -> list:
        """Copies of the outputs as numpy arrays (lists / dicts for sequences and maps)."""
        return self._iobinding.copy_outputs_to_cpu()

    def clear_binding_inputs(self) -> None:
        self._iobinding.clear_binding_inputs()

    def clear_binding_outputs(self) -> None:
        self._iobinding.clear_binding_outputs()


def run_with_iobinding(session: Any, iobinding: Any, run_options: Any = None) -> None:
    """Run ``session`` on ``iobinding``'s inputs and write its bound outputs.

    Raises:
        IOBindingError: no output bound, an unknown name, a feed or pre-allocated output that
            does not fit (the session's own error is the ``__cause__``).
        OrtValueError: ``iobinding`` is not an IOBinding / SessionIOBinding.
    """
    binding = iobinding._iobinding if isinstance(iobinding, IOBinding) else iobinding
    if not isinstance(binding, SessionIOBinding):
        raise OrtValueError(f"run_with_iobinding takes an IOBinding, got {type(iobinding).__name__}")
    if binding._session is not _session_of(session):
        raise IOBindingError("run_with_iobinding: the binding was made for another session")
    binding._run(run_options)
