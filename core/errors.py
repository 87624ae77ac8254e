"""The dynashape exception hierarchy.

Every error raised by dynashape derives from :class:`DynashapeError` and also from the
builtin exception a caller would naturally catch (``ValueError``, ``TypeError``,
``NotImplementedError``, ``KeyError``), so ``except ValueError`` keeps working.

onnxruntime reports failures as status exceptions named after its status codes (``Fail``,
``InvalidArgument``, ``NoSuchFile``, ... in ``onnxruntime.capi.onnxruntime_pybind11_state``,
each a plain ``Exception``). The same names are defined here (:class:`OrtStatusError` and its
subclasses, re-exported by ``dynashape.capi.onnxruntime_pybind11_state``), and each dynashape
error also derives from the one onnxruntime raises in its place, so a script's
``except Fail`` / ``except InvalidArgument`` catches dynashape's errors too:

======================================  ==================================================
dynashape                               onnxruntime status
======================================  ==================================================
ModelLoadError (and subclasses)         Fail (a graph rule: InvalidGraph; an undefined
                                        value: InvalidArgument too; file missing:
                                        NoSuchFile; unparsable bytes: InvalidProtobuf)
InvalidFeedError, InvalidArgumentError  InvalidArgument
UnsupportedOperatorError                NotImplemented and InvalidGraph (onnxruntime
                                        raises InvalidGraph for an op without a schema,
                                        NotImplemented for one without a kernel)
ShapeInferenceError, ExecutionError,    Fail (a kernel's failed check)
ResourceLimitError, PluginError,
RunTerminated
MemoryPlanError, PlanCheckError         EngineError
======================================  ==================================================

Where onnxruntime raises a plain ``RuntimeError`` (an unknown provider, a missing config
entry, a failed I/O-binding run), dynashape's class also derives from ``RuntimeError``.
"""
from __future__ import annotations

__all__ = [
    "OutputNameError",
    "MapItemTypeError",
    "IndexOutOfRangeError",
    "DynashapeError",
    "OrtStatusError",
    "ModelFileNotFoundError",
    "ModelParseError",
    "OrtArgumentError",
    "UnknownProviderError",
    "ConfigEntryNotFoundError",
    "DeviceNotAvailableError",
    "OrtValueError",
    "IOBindingError",
    "ThreadPoolConfigError",
    "NativeLibraryError",
    "ModelLoadError",
    "InvalidModelError",
    "DuplicateNameError",
    "UndefinedValueError",
    "InvalidAttributeError",
    "TypeConstraintError",
    "ExternalDataError",
    "NestingLimitError",
    "ResourceLimitError",
    "InvalidFeedError",
    "InputNameError",
    "InputRankMismatch",
    "InputFixedDimMismatch",
    "InputDtypeMismatch",
    "DimParamMismatch",
    "NonIntegerDimError",
    "ShapeInferenceError",
    "UnsupportedOperatorError",
    "PluginError",
    "KernelConflictError",
    "PluginContractError",
    "ExecutionError",
    "MemoryPlanError",
    "PlanCheckError",
    "InvalidArgumentError",
    "RunTerminated",
]


class DynashapeError(Exception):
    """Base class of every error dynashape raises."""


# onnxruntime's status exceptions (onnxruntime/core/common/status.h: StatusCode; the Python
# classes of onnxruntime/python/onnxruntime_pybind_exceptions.cc). They are not in __all__:
# ``NotImplemented`` would shadow the builtin constant in ``from dynashape.errors import *``;
# ``dynashape.capi.onnxruntime_pybind11_state`` exports them, as onnxruntime does.

class OrtStatusError(DynashapeError):
    """Base of onnxruntime's status exceptions: ``code`` is onnxruntime's status code and
    ``status`` its name (``[ONNXRuntimeError] : code : status : message`` in onnxruntime)."""

    code = 0
    status = "OK"


class Fail(OrtStatusError):
    """onnxruntime's FAIL (1): a generic failure (model load, a kernel, an option)."""

    code, status = 1, "FAIL"


class InvalidArgument(OrtStatusError):
    """onnxruntime's INVALID_ARGUMENT (2): a feed, a name or an option value is wrong."""

    code, status = 2, "INVALID_ARGUMENT"


class NoSuchFile(OrtStatusError):
    """onnxruntime's NO_SUCHFILE (3): the model file does not exist."""

    code, status = 3, "NO_SUCHFILE"


class NoModel(OrtStatusError):
    """onnxruntime's NO_MODEL (4)."""

    code, status = 4, "NO_MODEL"


class EngineError(OrtStatusError):
    """onnxruntime's ENGINE_ERROR (5): the runtime's own invariants are broken."""

    code, status = 5, "ENGINE_ERROR"


class RuntimeException(OrtStatusError):
    """onnxruntime's RUNTIME_EXCEPTION (6): a node failed while running."""

    code, status = 6, "RUNTIME_EXCEPTION"


class InvalidProtobuf(OrtStatusError):
    """onnxruntime's INVALID_PROTOBUF (7): the bytes are not a ModelProto."""

    code, status = 7, "INVALID_PROTOBUF"


class ModelLoaded(OrtStatusError):
    """onnxruntime's MODEL_LOADED (8)."""

    code, status = 8, "MODEL_LOADED"


class NotImplemented(OrtStatusError):  # noqa: A001 (onnxruntime's name)
    """onnxruntime's NOT_IMPLEMENTED (9): no kernel for an operator."""

    code, status = 9, "NOT_IMPLEMENTED"


class InvalidGraph(OrtStatusError):
    """onnxruntime's INVALID_GRAPH (10): the graph breaks a rule of ONNX."""

    code, status = 10, "INVALID_GRAPH"


class EPFail(OrtStatusError):
    """onnxruntime's EP_FAIL (11): an execution provider failed."""

    code, status = 11, "EP_FAIL"


class ModelLoadCanceled(OrtStatusError):
    """onnxruntime's MODEL_LOAD_CANCELED (12)."""

    code, status = 12, "MODEL_LOAD_CANCELED"


class ModelRequiresCompilation(OrtStatusError):
    """onnxruntime's MODEL_REQUIRES_COMPILATION (13)."""

    code, status = 13, "MODEL_REQUIRES_COMPILATION"


class NotFound(OrtStatusError):
    """onnxruntime's NOT_FOUND (14)."""

    code, status = 14, "NOT_FOUND"


class DeviceReset(OrtStatusError):
    """onnxruntime's device-reset exception (a GPU was reset; never raised on the CPU)."""

    status = "DEVICE_RESET"


#: onnxruntime's status exceptions by name (what ``capi.onnxruntime_pybind11_state`` exports)
ORT_STATUS_ERRORS = {c.__name__: c for c in (Fail, InvalidArgument, NoSuchFile, NoModel, EngineError,
                                               RuntimeException, InvalidProtobuf, ModelLoaded, NotImplemented,
                                               InvalidGraph, EPFail, ModelLoadCanceled, ModelRequiresCompilation,
                                               NotFound, DeviceReset)}


class ModelLoadError(Fail, DynashapeError, ValueError):
    """The model could not be read or is not a valid ONNX graph."""


class InvalidModelError(InvalidGraph, ModelLoadError):
    """The model breaks a rule of ONNX (IR.md, or an operator's schema in ``onnx.defs``) that
    onnxruntime also enforces at load. ``node`` and ``op_type`` name the offending node
    ("" for a graph-level rule), ``graph`` the (sub)graph."""

    def __init__(self, message: str, *, node: str = "", op_type: str = "", graph: str = ""):
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.graph = graph


class DuplicateNameError(InvalidModelError):
    """A value name is defined twice (IR.md "Names Within a Graph": SSA): two nodes writing it,
    a node writing a graph input or initializer, or a graph input listed twice."""


class UndefinedValueError(InvalidArgument, InvalidModelError):
    """A graph output or node input names a value nothing defines (or a cycle); onnxruntime
    raises InvalidArgument for it."""


class InvalidAttributeError(InvalidModelError, TypeError):
    """A node attribute has the wrong type for its schema, a required one is missing, an
    unknown one is given, or the attributes break the operator's own rule (Split-18 with
    neither ``split`` nor ``num_outputs``)."""


class TypeConstraintError(InvalidModelError, TypeError):
    """A node input's declared element type is not one its operator's schema allows, or two
    inputs of one type constraint (``T``) have different types."""


class ExternalDataError(ModelLoadError):
    """An external-data reference is unsafe (absolute, ``..``, a symlink leaving the model's
    directory), missing, out of the file's bounds, or cannot be resolved (bytes without a
    base directory)."""


class NestingLimitError(ModelLoadError):
    """Subgraphs (If/Loop/Scan bodies) are nested deeper than dynashape supports."""


class ResourceLimitError(Fail, DynashapeError, MemoryError):
    """A plan, one tensor or an allocation would exceed the session's ``memory_limit``, an
    element count overflows int64, or the operating system refused the memory. ``node`` names
    the node ("" for a whole plan), ``nbytes`` the bytes asked for (None where unknown) and
    ``limit`` the session's limit in bytes."""

    def __init__(self, message: str, *, node: str = "", nbytes: "int | None" = None, limit: "int | None" = None):
        super().__init__(message)
        self.node = node
        self.nbytes = nbytes
        self.limit = limit


class InvalidFeedError(InvalidArgument, DynashapeError, ValueError):
    """A feed given to ``run`` (or ``set_input``) does not fit the model's inputs."""


class InputNameError(InvalidFeedError, KeyError):
    """A required input is missing or an unknown input name was given."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class OutputNameError(InputNameError):
    """An unknown output name was asked for (an InputNameError too, as it was before)."""


class InputRankMismatch(InvalidFeedError):
    """A feed has a different rank than the model declares."""


class InputFixedDimMismatch(InvalidFeedError):
    """A feed's dim differs from a fixed ``dim_value`` the model declares."""


class InputDtypeMismatch(InvalidFeedError, TypeError):
    """A feed has a different element type than the model declares."""


class MapItemTypeError(InputDtypeMismatch, RuntimeError):
    """A key or value of a map feed is not of the map's declared type (onnxruntime's binding
    raises a ``RuntimeError`` there: "Unexpected key type ..., it cannot be linked to C type")."""


class DimParamMismatch(InvalidFeedError):
    """One ``dim_param`` symbol is bound to two different values in one run."""


class NonIntegerDimError(InvalidFeedError, TypeError):
    """A dimension given for an input is not an integer (floats, strings, None)."""


class ShapeInferenceError(Fail, DynashapeError, ValueError):
    """An operator's shape rule is broken by its inputs (raised by an op's infer_shape).

    ``kind`` is a short CamelCase tag of the rule (``ReshapeElementCountMismatch``),
    ``node`` the node name and ``op_type`` the operator.
    """

    def __init__(self, message: str, *, node: str = "", op_type: str = "", kind: str = ""):
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.kind = kind


class IndexOutOfRangeError(ShapeInferenceError, InvalidArgument, IndexError):
    """An index a node reads from its input data is outside the dim it indexes (a token id
    beyond the embedding table): a problem of the feed's values, which onnxruntime reports as
    INVALID_ARGUMENT; also a ShapeInferenceError (``kind`` names the rule) and an IndexError."""


class UnsupportedOperatorError(NotImplemented, InvalidGraph, DynashapeError, NotImplementedError):
    """No registered definition or kernel fits an operator of the model."""


class PluginError(Fail, DynashapeError, RuntimeError):
    """A plugin registered invalid records or failed while being loaded."""


class PluginContractError(PluginError):
    """A plugin's op or kernel broke its contract at run time: inference returned a bare
    shape, or a kernel returned an output of another dtype or shape than inference declared,
    or left a planned output unwritten. The message names the plugin, op and node."""


class KernelConflictError(PluginError):
    """Two kernels of equal priority overlap in version range, device and dtypes."""


class ExecutionError(Fail, DynashapeError, RuntimeError):
    """A kernel failed while running a node."""


class MemoryPlanError(EngineError, DynashapeError, RuntimeError):
    """A memory plan violates its invariants (found by validation mode)."""


class PlanCheckError(EngineError, DynashapeError, RuntimeError):
    """Validation mode: a plan made from the symbolic program disagrees with per-node inference."""


class InvalidArgumentError(InvalidArgument, DynashapeError, ValueError):
    """An argument of the session API is malformed (options, providers, config keys)."""


class RunTerminated(Fail, DynashapeError, RuntimeError):
    """A run was asked to stop (``RunOptions.terminate``); the session stays usable."""


class ModelFileNotFoundError(NoSuchFile, ModelLoadError):
    """The model path names no file (onnxruntime: NoSuchFile)."""


class ModelParseError(InvalidProtobuf, ModelLoadError):
    """The bytes are not a serialized ModelProto (onnxruntime: InvalidProtobuf)."""


class OrtArgumentError(InvalidArgumentError, RuntimeError):
    """An argument onnxruntime rejects with a plain ``RuntimeError`` (and dynashape with a
    ``ValueError``): both ``except`` clauses catch it."""


class UnknownProviderError(OrtArgumentError):
    """``set_providers`` names a provider onnxruntime does not know ("Unknown Provider Type")."""


class ConfigEntryNotFoundError(OrtArgumentError):
    """A session or run config entry was never added."""


class DeviceNotAvailableError(OrtArgumentError):
    """An OrtValue, binding or sparse tensor asks for a device other than the CPU (or one
    that does not exist): dynashape runs on the CPU only."""


class OrtValueError(OrtArgumentError):
    """An ``OrtValue`` / ``SparseTensor`` call does not fit the value (a sequence read as a
    tensor, a size mismatch in ``update_inplace``, an element type numpy has no type for)."""


class IOBindingError(OrtArgumentError):
    """An I/O binding names an unknown input, binds no output, or a pre-allocated output has
    another shape or element type than the run produces."""


class ThreadPoolConfigError(OrtArgumentError):
    """A session asks for per-session threads after the global thread pools were made
    (``set_global_thread_pool_sizes``)."""


class NativeLibraryError(Fail, DynashapeError, NotImplementedError):
    """A native onnxruntime library (custom operators, an execution provider) cannot be
    loaded: dynashape operators are Python plugins (onnxruntime: Fail)."""
