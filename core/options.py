"""onnxruntime's session and run options, and what each one means here.

``dynashape.SessionOptions`` has the fields and methods of ``onnxruntime.SessionOptions``
so a script written for onnxruntime runs unchanged. :func:`session_settings` turns one into
what a session uses; a field that has no meaning here is accepted and warned about once
per process (``RuntimeWarning``), never silently dropped.

Mapping (source: onnxruntime's ``SessionOptions`` reference,
https://onnxruntime.ai/docs/api/python/api_summary.html#sessionoptions):

==========================================  ==============================================
``graph_optimization_level``                kept on the session; ``ORT_DISABLE_ALL`` turns
                                            constant folding and the graph rewrites off
``intra_op_num_threads``                    BLAS threads during ``run`` (threadpoolctl) and
                                            the compiled kernels' threads
                                            (``dynashape.threads.intra_op_threads``); 0 = BLAS
                                            as is, kernels on every core (``OMP_NUM_THREADS``
                                            when set)
``enable_cpu_mem_arena``/``enable_mem_pattern``  both True: ``"pool"`` allocator; either False: ``"naive"``
``enable_profiling``/``profile_file_prefix``  per-node Chrome trace, written by ``end_profiling()``
``log_severity_level``                      3 (error) or 4 (fatal) silences dynashape's warnings
``execution_mode``                          ``ORT_SEQUENTIAL``; ``ORT_PARALLEL`` warns and runs sequentially
``add_session_config_entry``                stored (``get_session_config_entry``); warned once, unused
==========================================  ==============================================
"""
from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from .errors import InvalidArgumentError

__all__ = ["ExecutionMode", "GraphOptimizationLevel", "RunOptions", "SessionOptions", "get_all_providers",
           "get_available_providers", "get_device", "resolve_providers"]

CPU = "CPUExecutionProvider"


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's graph optimization levels (same names and values)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes (same names and values)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


_warned: set = set()


def warn_once(key: str, message: str, stacklevel: int = 3) -> None:
    """A ``RuntimeWarning`` the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"dynashape: {message}", RuntimeWarning, stacklevel=stacklevel)


#: Fields with no meaning here: name -> the default that is silently fine.
_UNUSED_FIELDS = {
    "inter_op_num_threads": 0,
    "enable_mem_reuse": True,
    "use_deterministic_compute": False,
    "optimized_model_filepath": "",
    "log_verbosity_level": 0,
    "logid": "",
    "use_per_session_threads": True,
}


@dataclass
class SessionOptions:
    """The options of a session, as ``onnxruntime.SessionOptions`` (see the module table for
    what each does here). Pass it as ``InferenceSession(path, sess_options)``."""

    graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
    enable_cpu_mem_arena: bool = True
    enable_mem_pattern: bool = True
    enable_mem_reuse: bool = True
    enable_profiling: bool = False
    profile_file_prefix: str = "dynashape_profile_"
    log_severity_level: int = -1
    log_verbosity_level: int = 0
    logid: str = ""
    optimized_model_filepath: str = ""
    use_deterministic_compute: bool = False
    use_per_session_threads: bool = True
    _config: dict = field(default_factory=dict, repr=False)

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Store a session config entry (``"session.intra_op.allow_spinning"``, ...); kept for
        ``get_session_config_entry`` and warned about once: none changes what dynashape does."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """The stored value of ``key``.

        Raises:
            InvalidArgumentError: ``key`` was never added (onnxruntime raises too).
        """
        try:
            return self._config[key]
        except KeyError:
            raise InvalidArgumentError(f"session config entry '{key}' is not set") from None

    def add_free_dimension_override_by_name(self, dim_param: str, value: int) -> None:
        """Not supported: dynashape binds every ``dim_param`` from the feeds of each run."""
        warn_once("add_free_dimension_override_by_name",
                  "SessionOptions.add_free_dimension_override_by_name is ignored: dim_params are bound "
                  "from the feeds of each run")

    def register_custom_ops_library(self, path: str) -> None:
        """Not supported: custom operators are dynashape plugins (see docs/OP_AUTHORING.md).

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"cannot load the custom-op library '{path}': onnxruntime custom-op libraries are "
                                  "native code; dynashape operators are Python plugins (docs/OP_AUTHORING.md)")


@dataclass
class RunOptions:
    """The options of one run, as ``onnxruntime.RunOptions``. ``terminate = True`` makes the
    run raise :class:`~dynashape.errors.RunTerminated`; the rest is accepted and kept."""

    log_severity_level: int = -1
    log_verbosity_level: int = 0
    logid: str = ""
    terminate: bool = False
    only_execute_path_to_fetches: bool = False
    _config: dict = field(default_factory=dict, repr=False)

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        try:
            return self._config[key]
        except KeyError:
            raise InvalidArgumentError(f"run config entry '{key}' is not set") from None


class SessionSettings(NamedTuple):
    """What a session takes from its :class:`SessionOptions`."""

    allocator: str
    fold_constants: bool
    blas_threads: int
    profile_prefix: Optional[str]
    quiet: bool


def session_settings(so: Optional[SessionOptions], allocator: Optional[str]) -> SessionSettings:
    """The settings of ``so`` (defaults when None); ``allocator`` given by keyword wins over
    the memory fields. Warns once per field that is set but has no meaning here.

    Raises:
        InvalidArgumentError: ``so`` is not a SessionOptions, or a field has a wrong type.
    """
    if so is None:
        so = SessionOptions()
    elif not isinstance(so, SessionOptions):
        raise InvalidArgumentError(f"sess_options must be a dynashape.SessionOptions, got {type(so).__name__}")
    for name, default in _UNUSED_FIELDS.items():
        if getattr(so, name) != default:
            warn_once(f"option:{name}", f"SessionOptions.{name} is accepted but has no effect in dynashape", 4)
    if so.execution_mode == ExecutionMode.ORT_PARALLEL:
        warn_once("option:execution_mode", "ExecutionMode.ORT_PARALLEL runs sequentially in dynashape (one run is "
                  "one thread; concurrent run calls on one session do overlap)", 4)
    if so._config:
        warn_once("option:config", f"session config entries {sorted(so._config)} are stored but have no effect "
                  "in dynashape", 4)
    threads = so.intra_op_num_threads
    if not isinstance(threads, int) or threads < 0:
        raise InvalidArgumentError(f"SessionOptions.intra_op_num_threads must be an int >= 0, got {threads!r}")
    if allocator is None:
        allocator = "pool" if so.enable_cpu_mem_arena and so.enable_mem_pattern else "naive"
    return SessionSettings(
        allocator=allocator,
        fold_constants=GraphOptimizationLevel(so.graph_optimization_level) != GraphOptimizationLevel.ORT_DISABLE_ALL,
        blas_threads=threads,
        profile_prefix=so.profile_file_prefix if so.enable_profiling else None,
        quiet=so.log_severity_level >= 3)


def get_available_providers() -> list[str]:
    """The execution providers this build can run: ``["CPUExecutionProvider"]``."""
    return [CPU]


def get_all_providers() -> list[str]:
    """Every provider name dynashape knows: the CPU one (others fall back to it)."""
    return [CPU]


def get_device() -> str:
    """``"CPU"``, as onnxruntime's CPU build says."""
    return "CPU"


def resolve_providers(providers: Any, provider_options: Any) -> tuple[list[str], list[dict]]:
    """The providers a session uses and their options, from ``InferenceSession``'s arguments.

    ``providers`` is None or a list of names or ``(name, options)`` pairs;
    ``provider_options`` a list of dicts matching it. Providers other than the CPU one
    are dropped with a warning, as onnxruntime does for providers it does not have.

    Raises:
        InvalidArgumentError: malformed arguments (a string instead of a list, lengths that
            differ, options that are not dicts).
    """
    if providers is None:
        return [CPU], [{}]
    if isinstance(providers, str) or not isinstance(providers, (list, tuple)):
        raise InvalidArgumentError(f"providers must be a list of provider names, got {providers!r}")
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidArgumentError(f"provider_options has {len(provider_options)} entries for "
                                   f"{len(providers)} providers")
    options: dict = {}
    for i, p in enumerate(providers):
        name, opts = (p[0], p[1]) if isinstance(p, tuple) and len(p) == 2 else (p, None)
        if provider_options is not None:
            opts = provider_options[i]
        if not isinstance(name, str) or (opts is not None and not isinstance(opts, dict)):
            raise InvalidArgumentError(f"providers[{i}] must be a name or a (name, options dict) pair, got {p!r}")
        if name != CPU:
            warn_once(f"provider:{name}", f"Specified provider '{name}' is not in available provider names. "
                      f"Available providers: '{CPU}'; running on the CPU", 4)
            continue
        options[name] = {str(k): str(v) for k, v in (opts or {}).items()}
    return [CPU], [options.get(CPU, {})]
