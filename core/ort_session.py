"""The session calls of onnxruntime's API that go beyond ``run``: ``run_with_ort_values``,
``run_async`` and the binding-level session ``InferenceSession._sess``.

``run_with_ort_values`` feeds :class:`~dynashape.ortvalue.OrtValue` s and returns OrtValues
(the arrays the run made, not copied); an output the model declares ``sparse_tensor(...)`` is
returned as a COO :class:`~dynashape.sparse.SparseTensor`. ``run_async`` runs on a thread of
its own and calls ``callback(results, user_data, error_message)`` there: the results and
``""`` on success, ``[]`` and the error's message on failure; a missing input is raised at
once, as onnxruntime does.

Source: onnxruntime's Python API reference, "InferenceSession"
(https://onnxruntime.ai/docs/api/python/api_summary.html#inferencesession).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from .errors import InputNameError, InvalidFeedError
from .ortvalue import OrtValue, OrtValueVector

__all__ = ["NativeSession", "run_with_ort_values", "run_async", "check_required_inputs"]


def check_required_inputs(session: Any, input_feed: Mapping[str, Any]) -> None:
    """onnxruntime's check before a run: every model input is fed.

    Raises:
        InputNameError: "Required inputs ([...]) are missing from input feed ([...])."
    """
    missing = [n for n in session._input_names if n not in input_feed]
    if missing:
        raise InputNameError(f"Required inputs ({missing}) are missing from input feed ({list(input_feed)}).")


def _sparse_outputs(session: Any) -> set:
    """The names of the outputs the model declares as sparse tensors."""
    proto = session.model.proto
    return {o.name for o in proto.graph.output if o.type.HasField("sparse_tensor_type")}


def run_with_ort_values(session: Any, output_names: Optional[Sequence[str]], input_dict_ort_values: Mapping[str, Any],
                        run_options: Any = None) -> list[OrtValue]:
    """Run ``session`` on OrtValues; the outputs (all when ``output_names`` is None or
    empty) as OrtValues.

    Raises:
        InputNameError: a model input is missing.
        InvalidFeedError: a feed is not an OrtValue.
        and whatever ``InferenceSession.run`` raises.
    """
    check_required_inputs(session, input_dict_ort_values)
    feeds = {}
    for name, value in input_dict_ort_values.items():
        if not isinstance(value, OrtValue):
            raise InvalidFeedError(f"input '{name}': run_with_ort_values takes OrtValues, got {type(value).__name__} "
                                   "(use OrtValue.ortvalue_from_numpy, or run())")
        feeds[name] = value
    names = list(output_names) if output_names else [o.name for o in session._outputs]
    results = session.run(names, feeds, run_options)
    sparse = _sparse_outputs(session) if any(isinstance(r, np.ndarray) for r in results) else set()
    out = []
    for name, value in zip(names, results):
        if name in sparse and isinstance(value, np.ndarray):
            from .sparse import SparseTensor
            out.append(OrtValue.ort_value_from_sparse_tensor(SparseTensor.from_dense(value)))
            continue
        declared = session._outputs[session._output_index[name]].value_type
        out.append(OrtValue.from_run_value(value, declared))
    return out


def run_async(session: Any, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
              callback: Callable[[list, Any, str], None], user_data: Any, run_options: Any = None) -> None:
    """Start a run on a thread and return; ``callback(results, user_data, err)`` is called
    on that thread when it ends (``err`` is ``""`` on success, the error's message otherwise,
    with ``results`` empty).

    Raises:
        InputNameError: a model input is missing (before the run starts).
        InvalidFeedError: ``callback`` is not callable.
    """
    check_required_inputs(session, input_feed)
    if not callable(callback):
        raise InvalidFeedError(f"run_async: callback must be callable, got {type(callback).__name__}")
    feeds = dict(input_feed)

    def work() -> None:
        try:
            results = session.run(output_names, feeds, run_options)
        except Exception as exc:     # the callback reports it, as onnxruntime's does
            callback([], user_data, str(exc) or type(exc).__name__)
            return
        callback(results, user_data, "")

    threading.Thread(target=work, name="dynashape-run-async", daemon=True).start()


class NativeSession:
    """onnxruntime's binding-level session (``InferenceSession._sess``): the calls its tests
    and helpers make on it, over the dynashape session ``session``."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any], run_options: Any = None):
        return self.session.run(output_names, input_feed, run_options)

    def run_with_ort_values(self, input_dict_ort_values: Mapping[str, Any], output_names: Sequence[str],
                            run_options: Any = None) -> OrtValueVector:
        """The binding's argument order (feeds first); returns an :class:`OrtValueVector`."""
        return OrtValueVector(run_with_ort_values(self.session, output_names, input_dict_ort_values, run_options))

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None) -> None:
        from .iobinding import run_with_iobinding as run_bound
        run_bound(self.session, iobinding, run_options)

    def run_async(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any], callback: Callable,
                  user_data: Any, run_options: Any = None) -> None:
        run_async(self.session, output_names, input_feed, callback, user_data, run_options)

    @property
    def inputs_meta(self) -> list:
        return self.session.get_inputs()

    @property
    def outputs_meta(self) -> list:
        return self.session.get_outputs()

    @property
    def overridable_initializers(self) -> list:
        return self.session.get_overridable_initializers()

    @property
    def model_meta(self) -> Any:
        return self.session.get_modelmeta()

    @property
    def session_options(self) -> Any:
        return self.session.get_session_options()

    def get_providers(self) -> list:
        return self.session.get_providers()

    def get_provider_options(self) -> dict:
        return self.session.get_provider_options()

    def end_profiling(self) -> str:
        return self.session.end_profiling()

    def get_profiling_start_time_ns(self) -> int:
        return self.session.get_profiling_start_time_ns()
