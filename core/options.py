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
                                            (-1: ``set_default_logger_severity``'s level)
``execution_mode``                          ``ORT_SEQUENTIAL``; ``ORT_PARALLEL`` warns and runs sequentially
``optimized_model_filepath``                the model as dynashape runs it (constants folded)
                                            is written there (:mod:`dynashape.optimized_model`)
``use_per_session_threads``                 False: the global pool's size
                                            (``set_global_thread_pool_sizes``) is the
                                            intra-op thread count
``add_initializer``/``add_external_initializers``  OrtValues that replace the model's
                                            initializers of those names (external ones
                                            need no file)
``add_free_dimension_override_by_name``/    the named ``dim_param`` (or the dims with that
``_by_denotation``                          denotation) of the graph inputs becomes that
                                            fixed value (:mod:`dynashape.free_dims`)
``add_session_config_entry``                stored (``get_session_config_entry``); the keys
                                            in :data:`CONFIG_KEYS_USED` act, the rest are
                                            warned about once
==========================================  ==============================================

``ORT_LOAD_CONFIG_FROM_MODEL=1`` in the environment (or the config entry
``session.load_model_config_from_model = 1``) makes a session take its options from the
model's ``ort_config`` metadata (:func:`options_from_model`), as onnxruntime does.
"""
from __future__ import annotations

import enum
import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from . import environment
from .errors import (ConfigEntryNotFoundError, InvalidArgumentError, NativeLibraryError, OrtValueError,
                     ThreadPoolConfigError, UnknownProviderError)

__all__ = ["ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "RunOptions", "SessionOptions",
           "get_all_providers", "get_available_providers", "get_device", "resolve_providers", "check_provider_names",
           "options_from_model", "get_default_session_options", "ALL_PROVIDERS", "CONFIG_KEYS_USED"]

CPU = "CPUExecutionProvider"

#: every provider name onnxruntime knows, in its order of precedence (``get_all_providers()``
#: of onnxruntime 1.32): dynashape falls back from each to the CPU one
ALL_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider",
                 "OpenVINOExecutionProvider", "DnnlExecutionProvider", "VitisAIExecutionProvider",
                 "QNNExecutionProvider", "NnapiExecutionProvider", "VSINPUExecutionProvider", "JsExecutionProvider",
                 "CoreMLExecutionProvider", "DmlExecutionProvider", "RknpuExecutionProvider",
                 "WebNNExecutionProvider", "WebGpuExecutionProvider", "XnnpackExecutionProvider",
                 "CANNExecutionProvider", "AzureExecutionProvider", CPU)

#: the session config entries that change what a session does (the rest are kept and warned about)
CONFIG_KEYS_USED = frozenset({"session.optimized_model_external_initializers_file_name",
                              "session.optimized_model_external_initializers_min_size_in_bytes",
                              "session.load_model_config_from_model", "session.use_env_allocators",
                              "session.allow_released_opsets_only"})


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


class ExecutionOrder(enum.IntEnum):
    """onnxruntime's node execution orders (accepted; dynashape's order is its program's)."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


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
    "log_verbosity_level": 0,
    "logid": "",
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
    execution_order: ExecutionOrder = ExecutionOrder.DEFAULT
    _config: dict = field(default_factory=dict, repr=False)
    #: name -> OrtValue replacing the model's initializer of that name
    _initializers: dict = field(default_factory=dict, repr=False)
    #: dim_param name -> value, and dim denotation -> value (free dimension overrides)
    _free_dims_by_name: dict = field(default_factory=dict, repr=False)
    _free_dims_by_denotation: dict = field(default_factory=dict, repr=False)

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Store a session config entry (``"session.intra_op.allow_spinning"``, ...); kept for
        ``get_session_config_entry``. Those in :data:`CONFIG_KEYS_USED` act; the rest are
        warned about once: they do not change what dynashape does."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """The stored value of ``key``.

        Raises:
            ConfigEntryNotFoundError: ``key`` was never added (a ``RuntimeError`` and a
                ``ValueError``; onnxruntime: "SessionOptions does not have configuration with key").
        """
        try:
            return self._config[key]
        except KeyError:
            raise ConfigEntryNotFoundError(f"SessionOptions does not have configuration with key: {key} "
                                           f"(session config entry '{key}' is not set)") from None

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Pin the graph inputs' ``dim_param`` ``dim_name`` to ``dim_value``: the dim is that
        fixed value in the compiled program and ``get_inputs()``; a feed of another size is an
        ``InputFixedDimMismatch`` naming the input and axis (:mod:`dynashape.free_dims`).

        Raises:
            InvalidArgumentError: ``dim_value`` is not an int.
        """
        self._free_dims_by_name[str(dim_name)] = _dim_value(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        """Pin every graph-input dim whose denotation is ``dim_denotation`` (``"DATA_BATCH"``,
        ...) to ``dim_value``, as :meth:`add_free_dimension_override_by_name` does.

        Raises:
            InvalidArgumentError: ``dim_value`` is not an int.
        """
        self._free_dims_by_denotation[str(dim_denotation)] = _dim_value(dim_value)

    def add_initializer(self, name: str, ortvalue: Any) -> None:
        """Use ``ortvalue``'s tensor (its memory, not a copy: keep it alive and unchanged while
        sessions use it) for the model's initializer ``name``; a name the model lacks is
        ignored, as in onnxruntime.

        Raises:
            OrtValueError: ``ortvalue`` is not an OrtValue holding a tensor.
        """
        from .ortvalue import OrtValue
        if not isinstance(ortvalue, OrtValue) or not ortvalue.is_tensor():
            raise OrtValueError(f"add_initializer('{name}'): the provided Python object must be an OrtValue holding "
                                f"a tensor, got {type(ortvalue).__name__}")
        self._initializers[str(name)] = ortvalue

    def add_external_initializers(self, names: list, ortvalues: list) -> None:
        """Supply initializers whose data the model keeps in external files: each name's
        OrtValue replaces that initializer, and its file is not read (need not exist).

        Raises:
            OrtValueError: the lists' lengths differ, or a value is not a tensor OrtValue.
        """
        if len(names) != len(ortvalues):
            raise OrtValueError(f"Expecting names and ort_values lists to have equal length ({len(names)} names, "
                                f"{len(ortvalues)} values)")
        for name, value in zip(names, ortvalues):
            self.add_initializer(name, value)

    def register_custom_ops_library(self, library_path: str) -> None:
        """Not supported: custom operators are dynashape plugins (see docs/OP_AUTHORING.md).

        Raises:
            NativeLibraryError: always (a ``NotImplementedError``; onnxruntime: Fail when the
                library cannot be loaded).
        """
        raise NativeLibraryError(f"cannot load the custom-op library '{library_path}': onnxruntime custom-op "
                                 "libraries are native code; dynashape operators are Python plugins "
                                 "(docs/OP_AUTHORING.md)")

    def initializer_arrays(self) -> dict:
        """The arrays :meth:`add_initializer` supplied, by name."""
        return {name: value.numpy() for name, value in self._initializers.items()}


def _dim_value(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"a free dimension override must be an int, got {value!r}")
    return int(value)


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
    _adapters: list = field(default_factory=list, repr=False)

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        """The stored value of ``key``.

        Raises:
            ConfigEntryNotFoundError: ``key`` was never added.
        """
        try:
            return self._config[key]
        except KeyError:
            raise ConfigEntryNotFoundError(f"RunOptions does not have configuration with key: {key} "
                                           f"(run config entry '{key}' is not set)") from None

    def add_active_adapter(self, adapter: Any) -> None:
        """Activate a LoRA adapter for this run: its parameters are fed as the inputs of
        those names (:class:`~dynashape.lora.LoraAdapter`).

        Raises:
            InvalidArgumentError: not a LoraAdapter.
        """
        from .lora import LoraAdapter
        if not isinstance(adapter, LoraAdapter):
            raise InvalidArgumentError(f"add_active_adapter takes a LoraAdapter, got {type(adapter).__name__}")
        self._adapters.append(adapter)


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
    unused = sorted(k for k in so._config if k not in CONFIG_KEYS_USED)
    if unused:
        warn_once("option:config", f"session config entries {unused} are stored but have no effect "
                  "in dynashape", 4)
    threads = so.intra_op_num_threads
    if not isinstance(threads, int) or threads < 0:
        raise InvalidArgumentError(f"SessionOptions.intra_op_num_threads must be an int >= 0, got {threads!r}")
    pools = environment.global_thread_pool_sizes()
    if pools is not None and so.use_per_session_threads:
        raise ThreadPoolConfigError("use_per_session_threads must be false when using a global thread pool "
                                    "(set_global_thread_pool_sizes was called)")
    if not so.use_per_session_threads:
        if pools is None:
            warn_once("option:use_per_session_threads", "SessionOptions.use_per_session_threads = False has no "
                      "effect without set_global_thread_pool_sizes: the session's own settings are used", 4)
        else:
            threads = pools[0]
    if allocator is None:
        allocator = "pool" if so.enable_cpu_mem_arena and so.enable_mem_pattern else "naive"
    return SessionSettings(
        allocator=allocator,
        fold_constants=GraphOptimizationLevel(so.graph_optimization_level) != GraphOptimizationLevel.ORT_DISABLE_ALL,
        blas_threads=threads,
        profile_prefix=so.profile_file_prefix if so.enable_profiling else None,
        quiet=(so.log_severity_level if so.log_severity_level >= 0 else environment.default_logger_severity()) >= 3)


def get_available_providers() -> list[str]:
    """The execution providers this build can run: ``["CPUExecutionProvider"]``."""
    return [CPU]


def get_all_providers() -> list[str]:
    """Every provider name onnxruntime knows (:data:`ALL_PROVIDERS`), the CPU one last:
    dynashape runs each on the CPU."""
    return list(ALL_PROVIDERS)


def get_default_session_options() -> SessionOptions:
    """A SessionOptions with every field at its default."""
    return SessionOptions()


def check_provider_names(providers: Any) -> None:
    """What onnxruntime's ``set_providers`` checks first: each name is one it knows.

    Raises:
        UnknownProviderError: "Unknown Provider Type: <name>" (a ``RuntimeError``).
    """
    if providers is None or isinstance(providers, str) or not isinstance(providers, (list, tuple)):
        return
    for p in providers:
        name = p[0] if isinstance(p, tuple) and len(p) == 2 else p
        if isinstance(name, str) and name not in ALL_PROVIDERS:
            raise UnknownProviderError(f"Unknown Provider Type: {name}")


#: the SessionOptions fields an ``ort_config`` may set (onnxruntime's inference_session_utils.cc)
_MODEL_CONFIG_FIELDS = {"intra_op_num_threads": int, "inter_op_num_threads": int, "execution_mode": ExecutionMode,
                        "graph_optimization_level": GraphOptimizationLevel, "enable_profiling": bool}


def load_config_from_model_enabled(so: Optional[SessionOptions]) -> bool:
    """True when the environment (``ORT_LOAD_CONFIG_FROM_MODEL=1``) or ``so``'s config entry
    ``session.load_model_config_from_model = 1`` asks for the model's own options."""
    if os.environ.get("ORT_LOAD_CONFIG_FROM_MODEL", "0") == "1":
        return True
    return so is not None and so._config.get("session.load_model_config_from_model", "0") == "1"


def options_from_model(metadata: dict, so: Optional[SessionOptions]) -> Optional[SessionOptions]:
    """The session options the model's ``ort_config`` metadata (JSON: ``{"session_options":
    {"intra_op_num_threads": 2, ...}}``) gives: defaults with those fields set, the config
    entries and initializers of ``so`` kept; None when the model has no ``ort_config``.

    Raises:
        InvalidArgumentError: the JSON cannot be parsed, or names a field or value the
            config may not set.
    """
    text = metadata.get("ort_config")
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"Could not finalize session options while constructing the inference session: "
                                   f"Json stored in the `ort_config` key cannot be parsed: {exc}") from None
    fields = config.get("session_options", {}) if isinstance(config, dict) else None
    if not isinstance(fields, dict):
        raise InvalidArgumentError(f"the model's ort_config must be an object with a \"session_options\" object, "
                                   f"got {text!r}")
    out = SessionOptions()
    if so is not None:
        out._config, out._initializers = dict(so._config), dict(so._initializers)
        out._free_dims_by_name, out._free_dims_by_denotation = so._free_dims_by_name, so._free_dims_by_denotation
    for key, value in fields.items():
        kind = _MODEL_CONFIG_FIELDS.get(key)
        if kind is None:
            raise InvalidArgumentError(f"the model's ort_config sets '{key}', which is not one of "
                                       f"{sorted(_MODEL_CONFIG_FIELDS)}")
        try:
            setattr(out, key, kind(value))
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"the model's ort_config sets '{key}' to {value!r}, not a valid value") \
                from None
    return out


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
