"""dynashape: a Python ONNX runtime for dynamic shapes, built as a plugin-registry operator framework.

    import dynashape
    sess = dynashape.InferenceSession("model.onnx", allocator="pool")
    y, = sess.run(None, {"x": x})

The session API is onnxruntime's (``import dynashape as ort`` runs onnxruntime scripts):
``SessionOptions``, ``RunOptions``, ``GraphOptimizationLevel``, ``ExecutionMode``,
``get_available_providers()``, ``get_device()``.
"""
from __future__ import annotations

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .hookspecs import hookimpl
from .records import InferContext, KernelDef, OpDef, OpLibrary, dtype_from_attr, fixed_dtype, same_dtype
from .registry import get_registry, register_plugin, unregister_plugin

__version__ = "0.1.0"


_SESSION_NAMES = ("InferenceSession", "NodeArg")
_OPTION_NAMES = ("SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode",
                 "get_available_providers", "get_all_providers", "get_device")


def __getattr__(name: str):
    # the session pulls in the whole core; import it on first use only
    if name in _SESSION_NAMES:
        from . import session
        return getattr(session, name)
    if name in _OPTION_NAMES:
        from . import options
        return getattr(options, name)
    raise AttributeError(f"module 'dynashape' has no attribute '{name}'")


__all__ = [
    *_SESSION_NAMES,
    *_OPTION_NAMES,
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
