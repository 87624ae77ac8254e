"""dynashape: a Python ONNX runtime for dynamic shapes, built as a plugin-registry operator framework.

    import dynashape
    sess = dynashape.InferenceSession("model.onnx", allocator="pool")
    y, = sess.run(None, {"x": x})

The session API is onnxruntime's (``import dynashape as ort`` runs onnxruntime scripts):
``SessionOptions``, ``RunOptions``, ``GraphOptimizationLevel``, ``ExecutionMode``,
``get_available_providers()``, ``get_device()``, ``OrtValue``, ``SparseTensor``, ``OrtDevice``,
``IOBinding`` (``session.io_binding()``), the module functions (``set_default_logger_severity``,
``get_version_string``, ...) and ``dynashape.capi`` (docs/ORT_API.md).
"""
from __future__ import annotations

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .hookspecs import hookimpl
from .records import InferContext, KernelDef, OpDef, OpLibrary, dtype_from_attr, fixed_dtype, same_dtype
from .registry import get_registry, register_plugin, unregister_plugin
from .version import __version__


_SESSION_NAMES = ("InferenceSession", "NodeArg")
_OPTION_NAMES = ("SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder",
                 "get_available_providers", "get_all_providers", "get_device")
#: the rest of onnxruntime's top-level names: name -> the dynashape module defining it
_ORT_NAMES = {
    **dict.fromkeys(("OrtValue",), "ortvalue"),
    **dict.fromkeys(("SparseTensor", "OrtSparseFormat"), "sparse"),
    **dict.fromkeys(("IOBinding", "SessionIOBinding"), "iobinding"),
    **dict.fromkeys(("OrtDevice", "OrtDeviceVendorId", "OrtMemoryInfo", "OrtMemType", "OrtAllocatorType",
                     "OrtArenaCfg", "OrtDeviceMemoryType", "OrtMemoryInfoDeviceType", "create_and_register_allocator",
                     "create_and_register_allocator_v2"), "devices"),
    **dict.fromkeys(("set_default_logger_severity", "set_default_logger_verbosity", "get_version_string",
                     "get_build_info", "enable_telemetry_events", "disable_telemetry_events", "set_seed",
                     "set_global_thread_pool_sizes", "has_collective_ops"), "environment"),
    **dict.fromkeys(("LoraAdapter", "AdapterFormat"), "lora"),
    "ModelMetadata": "model",
}


def __getattr__(name: str):
    # the session pulls in the whole core; import it on first use only
    if name in _SESSION_NAMES:
        from . import session
        return getattr(session, name)
    if name in _OPTION_NAMES:
        from . import options
        return getattr(options, name)
    module = _ORT_NAMES.get(name)
    if module is not None:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    if name in ("capi", "datasets", "backend"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'dynashape' has no attribute '{name}'")


__all__ = [
    *_SESSION_NAMES,
    *_OPTION_NAMES,
    *_ORT_NAMES,
    "OpDef",
    "KernelDef",
    "OpLibrary",
    "InferContext",
    "hookimpl",
    "same_dtype",
    "fixed_dtype",
    "dtype_from_attr",
    "get_registry",
    "register_plugin",
    "unregister_plugin",
    "__version__",
    *_errors_all,
]


def __dir__() -> list:
    """The module's names, the lazily imported ones included (``dir(dynashape)`` lists
    ``InferenceSession`` before anything imported the session)."""
    return sorted(set(globals()) | set(__all__) | {"capi", "datasets", "backend"})
