"""onnxruntime's binding module (``onnxruntime.capi.onnxruntime_pybind11_state``) on dynashape.

The status exceptions (``Fail``, ``InvalidArgument``, ``NoSuchFile``, ``InvalidProtobuf``, ...;
:mod:`dynashape.errors`, each a :class:`~dynashape.errors.DynashapeError`), the value and
device classes (``OrtValue``, ``OrtValueVector``, ``SparseTensor``, ``OrtDevice``,
``OrtMemoryInfo``, ``SessionIOBinding``), the options and the module functions. The
session classes (``InferenceSession``, ``NodeArg``, ``ModelMetadata``) are imported on first
use, as ``import dynashape`` does: they pull in the whole runtime.
"""
from __future__ import annotations

from typing import Any

from ..devices import (OrtAllocatorType, OrtArenaCfg, OrtDevice, OrtDeviceMemoryType, OrtMemoryInfo,
                       OrtMemoryInfoDeviceType, OrtMemType, create_and_register_allocator,
                       create_and_register_allocator_v2)
from ..environment import (disable_telemetry_events, enable_telemetry_events, get_build_info, get_version_string,
                           has_collective_ops, set_default_logger_severity, set_default_logger_verbosity,
                           set_global_thread_pool_sizes, set_seed)
from ..errors import (DeviceReset, EngineError, EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf,
                      ModelLoadCanceled, ModelLoaded, ModelRequiresCompilation, NoModel, NoSuchFile, NotFound,
                      NotImplemented, RuntimeException)
from ..iobinding import SessionIOBinding
from ..options import (ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions,
                       get_all_providers, get_available_providers, get_default_session_options, get_device)
from ..ortvalue import OrtValue, OrtValueVector, is_dlpack_uint8_tensor
from ..sparse import OrtSparseFormat, SparseBlockSparseView, SparseCooView, SparseCsrView, SparseTensor

_SESSION_NAMES = ("InferenceSession", "NodeArg")
_LAZY = ("ModelMetadata", "LoraAdapter", "AdapterFormat")

__all__ = [
    "DeviceReset", "EngineError", "EPFail", "Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf",
    "ModelLoadCanceled", "ModelLoaded", "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NotFound",
    "NotImplemented", "RuntimeException",
    "OrtAllocatorType", "OrtArenaCfg", "OrtDevice", "OrtDeviceMemoryType", "OrtMemoryInfo", "OrtMemoryInfoDeviceType",
    "OrtMemType", "create_and_register_allocator", "create_and_register_allocator_v2",
    "disable_telemetry_events", "enable_telemetry_events", "get_build_info", "get_version_string",
    "has_collective_ops", "set_default_logger_severity", "set_default_logger_verbosity",
    "set_global_thread_pool_sizes", "set_seed",
    "SessionIOBinding",
    "ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "RunOptions", "SessionOptions", "get_all_providers",
    "get_available_providers", "get_default_session_options", "get_device",
    "OrtValue", "OrtValueVector", "is_dlpack_uint8_tensor",
    "OrtSparseFormat", "SparseBlockSparseView", "SparseCooView", "SparseCsrView", "SparseTensor",
    "InferenceSession", "NodeArg", "ModelMetadata", "LoraAdapter", "AdapterFormat",  # noqa: F822 (__getattr__)
]
#: the names bound at import (the rest come from __getattr__)
_EAGER = [n for n in __all__ if n not in _SESSION_NAMES and n not in _LAZY]


def __getattr__(name: str) -> Any:
    if name in _SESSION_NAMES:
        from .. import session
        return getattr(session, name)
    if name == "ModelMetadata":
        from ..model import ModelMetadata
        return ModelMetadata
    if name in ("LoraAdapter", "AdapterFormat"):
        from .. import lora
        return getattr(lora, name)
    raise AttributeError(f"module 'dynashape.capi.onnxruntime_pybind11_state' has no attribute '{name}'")
