"""onnxruntime's process-wide settings: the default logger, version and build strings,
telemetry, the seed and the global thread pools.

==============================================  =============================================
``set_default_logger_severity(level)``          the severity sessions use when their
                                                ``SessionOptions.log_severity_level`` is -1:
                                                3 (error) or 4 (fatal) silences dynashape's
                                                warnings, as the per-session option does
``set_default_logger_verbosity(level)``         kept (dynashape has no verbose log)
``get_version_string()``                        dynashape's version
``get_build_info()``                            ``"dynashape <version> Build Info: ..."``
``enable/disable_telemetry_events()``           accepted: dynashape sends no telemetry
``set_seed(seed)``                              kept (:func:`global_seed`); dynashape's random
                                                ops draw from their ``seed`` attribute or from
                                                the OS, per run (ops_builtin/random.py)
``set_global_thread_pool_sizes(intra, inter)``  sessions with ``use_per_session_threads =
                                                False`` take ``intra`` as their
                                                ``intra_op_num_threads``; once set, a session
                                                with per-session threads raises, and a second
                                                call raises, as in onnxruntime
==============================================  =============================================

Source: onnxruntime's Python API reference (https://onnxruntime.ai/docs/api/python/api_summary.html).
"""
from __future__ import annotations

import threading
from typing import Optional

from .errors import Fail, InvalidArgumentError

__all__ = ["set_default_logger_severity", "set_default_logger_verbosity", "get_version_string", "get_build_info",
           "enable_telemetry_events", "disable_telemetry_events", "set_seed", "set_global_thread_pool_sizes",
           "global_thread_pool_sizes", "default_logger_severity", "global_seed", "has_collective_ops"]

_lock = threading.Lock()
_state: dict = {"severity": 2, "verbosity": 0, "seed": None, "pools": None, "telemetry": False}


class GlobalThreadPoolError(Fail):
    """``set_global_thread_pool_sizes`` called a second time (onnxruntime: Fail)."""


def _level(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {value!r}")
    return int(value)


def set_default_logger_severity(log_severity_level: int) -> None:
    """Set the default log severity (0 verbose, 1 info, 2 warning, 3 error, 4 fatal).

    Raises:
        InvalidArgumentError: not an int.
    """
    _state["severity"] = _level(log_severity_level, "log_severity_level")


def set_default_logger_verbosity(log_verbosity_level: int) -> None:
    """Set the default verbosity (kept; dynashape has no verbose log).

    Raises:
        InvalidArgumentError: not an int.
    """
    _state["verbosity"] = _level(log_verbosity_level, "log_verbosity_level")


def default_logger_severity() -> int:
    """The severity set by :func:`set_default_logger_severity` (2, warning, by default)."""
    return int(_state["severity"])


def get_version_string() -> str:
    """dynashape's version (``dynashape.__version__``)."""
    from .version import __version__
    return __version__


def get_build_info() -> str:
    """A line naming dynashape's version and what it runs on."""
    import platform

    import numpy as np
    return (f"dynashape {get_version_string()} Build Info: pure-Python runtime, numpy {np.__version__}, "
            f"Python {platform.python_version()}, providers: CPUExecutionProvider")


def enable_telemetry_events() -> None:
    """Accepted: dynashape sends no telemetry."""
    _state["telemetry"] = True


def disable_telemetry_events() -> None:
    """Accepted: dynashape sends no telemetry."""
    _state["telemetry"] = False


def set_seed(seed: int) -> None:
    """Keep ``seed`` (:func:`global_seed`); see the module for what uses it.

    Raises:
        InvalidArgumentError: not an int.
    """
    _state["seed"] = _level(seed, "seed")


def global_seed() -> Optional[int]:
    return _state["seed"]


def set_global_thread_pool_sizes(intra_op_num_threads: int = 0, inter_op_num_threads: int = 0) -> None:
    """Create the process's global thread pools: sessions whose options say
    ``use_per_session_threads = False`` use ``intra_op_num_threads`` (0: every core).

    Raises:
        GlobalThreadPoolError: the pools exist already ("Global thread pools have already
            been created, cannot replace them").
        InvalidArgumentError: a size that is not an int >= 0.
    """
    intra = _level(intra_op_num_threads, "intra_op_num_threads")
    inter = _level(inter_op_num_threads, "inter_op_num_threads")
    if intra < 0 or inter < 0:
        raise InvalidArgumentError(f"thread pool sizes must be >= 0, got {intra}, {inter}")
    with _lock:
        if _state["pools"] is not None:
            raise GlobalThreadPoolError("Global thread pools have already been created, cannot replace them")
        _state["pools"] = (intra, inter)


def global_thread_pool_sizes() -> Optional[tuple[int, int]]:
    """``(intra, inter)`` once :func:`set_global_thread_pool_sizes` was called, else None."""
    return _state["pools"]


def has_collective_ops() -> bool:
    """False: no collective (multi-device) operators."""
    return False
