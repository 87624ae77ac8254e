"""The dynashape exception hierarchy.

Every error raised by dynashape derives from :class:`DynashapeError` and also from the
builtin exception a caller would naturally catch (``ValueError``, ``TypeError``,
``NotImplementedError``, ``KeyError``), so ``except ValueError`` keeps working.
"""
from __future__ import annotations

__all__ = [
    "DynashapeError",
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


class ModelLoadError(DynashapeError, ValueError):
    """The model could not be read or is not a valid ONNX graph."""


class InvalidModelError(ModelLoadError):
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


class UndefinedValueError(InvalidModelError):
    """A graph output or node input names a value nothing defines (or a cycle)."""


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


class ResourceLimitError(DynashapeError, MemoryError):
    """A plan, one tensor or an allocation would exceed the session's ``memory_limit``, an
    element count overflows int64, or the operating system refused the memory. ``node`` names
    the node ("" for a whole plan), ``nbytes`` the bytes asked for (None where unknown) and
    ``limit`` the session's limit in bytes."""

    def __init__(self, message: str, *, node: str = "", nbytes: "int | None" = None, limit: "int | None" = None):
        super().__init__(message)
        self.node = node
        self.nbytes = nbytes
        self.limit = limit


class InvalidFeedError(DynashapeError, ValueError):
    """A feed given to ``run`` (or ``set_input``) does not fit the model's inputs."""


class InputNameError(InvalidFeedError, KeyError):
    """A required input is missing or an unknown input name was given."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class InputRankMismatch(InvalidFeedError):
    """A feed has a different rank than the model declares."""


class InputFixedDimMismatch(InvalidFeedError):
    """A feed's dim differs from a fixed ``dim_value`` the model declares."""


class InputDtypeMismatch(InvalidFeedError, TypeError):
    """A feed has a different element type than the model declares."""


class DimParamMismatch(InvalidFeedError):
    """One ``dim_param`` symbol is bound to two different values in one run."""


class NonIntegerDimError(InvalidFeedError, TypeError):
    """A dimension given for an input is not an integer (floats, strings, None)."""


class ShapeInferenceError(DynashapeError, ValueError):
    """An operator's shape rule is broken by its inputs (raised by an op's infer_shape).

    ``kind`` is a short CamelCase tag of the rule (``ReshapeElementCountMismatch``),
    ``node`` the node name and ``op_type`` the operator.
    """

    def __init__(self, message: str, *, node: str = "", op_type: str = "", kind: str = ""):
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.kind = kind


class UnsupportedOperatorError(DynashapeError, NotImplementedError):
    """No registered definition or kernel fits an operator of the model."""


class PluginError(DynashapeError, RuntimeError):
    """A plugin registered invalid records or failed while being loaded."""


class PluginContractError(PluginError):
    """A plugin's op or kernel broke its contract at run time: inference returned a bare
    shape, or a kernel returned an output of another dtype or shape than inference declared,
    or left a planned output unwritten. The message names the plugin, op and node."""


class KernelConflictError(PluginError):
    """Two kernels of equal priority overlap in version range, device and dtypes."""


class ExecutionError(DynashapeError, RuntimeError):
    """A kernel failed while running a node."""


class MemoryPlanError(DynashapeError, RuntimeError):
    """A memory plan violates its invariants (found by validation mode)."""


class PlanCheckError(DynashapeError, RuntimeError):
    """Validation mode: a plan made from the symbolic program disagrees with per-node inference."""


class InvalidArgumentError(DynashapeError, ValueError):
    """An argument of the session API is malformed (options, providers, config keys)."""


class RunTerminated(DynashapeError, RuntimeError):
    """A run was asked to stop (``RunOptions.terminate``); the session stays usable."""
