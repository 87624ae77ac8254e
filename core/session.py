"""``InferenceSession``: import once, run again and again with changing shapes.

At creation the model is imported, its constants folded and one program compiled
(:mod:`dynashape.program`: symbolic inference, steps, memory structure, generated code).
Each run looks its input signature up in the plan cache; a new signature is validated
against the declared inputs and planned by one call of generated code. The run itself
takes an execution context from a small pool, so concurrent ``run`` calls on one session
are correct and overlap. A run that raises leaves the session as it was.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from .dtypes import MapType, OptionalType, SequenceType, type_key, value_type_string
from .engine import Engine, LiveStats
from .errors import (DimParamMismatch, InputDtypeMismatch, InputFixedDimMismatch, InputNameError,
                     InputRankMismatch, InvalidArgumentError, InvalidFeedError, MapItemTypeError, OutputNameError,
                     RunTerminated)
from .executor import Arena, RunStats
from .compilation import compile_graph
from .graph import input_dims
from .limits import resolve_memory_limit
from .model import FIXED, SYMBOLIC, Graph, Model, ModelMetadata, ValueInfo, load_model, model_metadata, session_copy
from .free_dims import apply_free_dimension_overrides
from . import compiled as compiled_models
from . import gcpause
from .compiled import CompiledModel
from .options import (RunOptions, SessionOptions, check_provider_names, load_config_from_model_enabled,
                      options_from_model, resolve_providers, session_settings, warn_once)
from .plan import Plan
from .profiling import Profiler
from .program import Program
from .registry import get_registry
from .subgraph import SubgraphRunner
from .symbolic_inference import SymbolicGraph
from .threads import BlasThreads, waiting_for_compiled_kernels

__all__ = ["InferenceSession", "NodeArg", "SessionStats"]

ALLOCATORS = ("pool", "naive")
#: the entry-point names of the accelerated-kernel plugins: dynashape.ops_builtin.fast (numba loops) and
#: dynashape.ops_builtin.fast.onednn (oneDNN)
COMPILED_KERNELS_PLUGINS = frozenset({"fast", "onednn"})

#: Counters of a session (summed over its execution contexts).
SessionStats = RunStats


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as ORT describes it: ``name``, ``shape`` (int / str / None per
    dim; None for the whole shape when the rank is unknown) and ``type`` (``"tensor(float)"``)."""

    name: str
    shape: Optional[list]
    type: str


def compiled_kernel_plugins(choice: Union[bool, Iterable[str]]) -> frozenset:
    """The accelerated-kernel plugins a session's ``compiled_kernels`` argument selects.

    Raises:
        ValueError: a name that is not one of COMPILED_KERNELS_PLUGINS.
    """
    if isinstance(choice, bool):
        return COMPILED_KERNELS_PLUGINS if choice else frozenset()
    names = frozenset(choice)
    unknown = names - COMPILED_KERNELS_PLUGINS
    if unknown:
        raise ValueError(f"compiled_kernels: unknown plugin(s) {sorted(unknown)}; expected True, False or a set of "
                         f"{sorted(COMPILED_KERNELS_PLUGINS)}")
    return names


def _feed_checker(inputs: Sequence[ValueInfo]):
    """``fit(arrays)``: True when the arrays (in input order) have the declared dtypes, ranks
    and fixed dims (generated once: a new signature checks its feeds in one call; a False
    answer runs the validation that explains what is wrong)."""
    from .codegen import CodeWriter

    w = CodeWriter("feed-check")
    w.emit("def fit(a):", 0)
    conds = []
    for pos, vi in enumerate(inputs):
        if vi.is_container:   # lists and None were checked by feed_array; an array is checked in full
            conds.append(f"type(a[{pos}]) is {w.const(np.ndarray, 'nd')}")
            continue
        want = vi.dtype
        if want is not None and want != object:
            conds.append(f"a[{pos}].dtype != {w.const(want, 'd')}")
        elif want == object:
            conds.append(f"a[{pos}].dtype.kind not in 'OUS'")
        if vi.dims is None:
            continue
        conds.append(f"a[{pos}].ndim != {len(vi.dims)}")
        conds.extend(f"a[{pos}].shape[{axis}] != {d.value}" for axis, d in enumerate(vi.dims) if d.kind == FIXED)
    w.emit(f"return not ({' or '.join(conds) if conds else 'False'})")
    return w.compile()["fit"]


#: onnxruntime keyword arguments that are accepted and have no effect here
_ORT_KWARGS = ("disabled_optimizers", "read_config_from_model")


def _unwrap(value: Any) -> Any:
    """An OrtValue feed as the value it holds (a sparse tensor densified: dynashape treats
    sparse graph inputs as dense)."""
    value = value.feed_value()
    from .sparse import SparseTensor
    return value.to_dense() if isinstance(value, SparseTensor) else value


def _check_ort_kwargs(kwargs: dict) -> None:
    for name in kwargs:
        if name not in _ORT_KWARGS:
            raise TypeError(f"InferenceSession() got an unexpected keyword argument '{name}'")
        warn_once(f"kwarg:{name}", f"InferenceSession(..., {name}=...) is accepted but has no effect in dynashape", 4)


def feed_array(vi: ValueInfo, value: Any) -> np.ndarray:
    """A feed that is not an ndarray as an array, converted as onnxruntime does: Python lists,
    tuples, scalars and numpy scalars take the declared element type (ints may become
    floats; floats never silently become ints).

    A sequence input (``seq(...)``) takes a list (or tuple) of arrays, each converted so;
    an optional input (``optional(...)``) takes None (empty) or its element.

    Raises:
        InvalidFeedError: ``None`` for a tensor or sequence, an object that is not
            array-like, ragged lists, an array for a sequence.
        InputDtypeMismatch: values of a kind that does not convert to the declared type
            (for a sequence: naming the element).
    """
    # (an OrtValue's module is imported by then: a session that never meets one never imports it)
    ortvalue = sys.modules.get(f"{__package__}.ortvalue")
    if ortvalue is not None and isinstance(value, ortvalue.OrtValue):
        value = _unwrap(value)
    if vi.value_type is not None:
        return container_feed(vi.name, vi.value_type, value)
    return _tensor_feed(f"input '{vi.name}'", vi.type, vi.dtype, value)


def _tensor_feed(where: str, type_text: str, want: Optional[np.dtype], value: Any) -> np.ndarray:
    if value is None:
        raise InvalidFeedError(f"{where}: got None, expected {type_text} (a numpy array or a list)")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InvalidFeedError(f"{where}: cannot make a {type_text} tensor from the "
                               f"{type(value).__name__} given ({exc})") from None
    if want is None or arr.dtype == want:
        return arr
    if want == object:
        if arr.dtype.kind == "V":    # fixed-size byte records: each element's bytes, as onnxruntime reads them
            return np.array([bytes(v).decode("utf-8", "surrogateescape") for v in arr.reshape(-1)],
                            dtype=object).reshape(arr.shape)
        return arr if arr.dtype.kind in "OUS" else arr.astype(object)
    if arr.dtype.kind == "O":
        raise InvalidFeedError(f"{where}: cannot make a {type_text} tensor from the {type(value).__name__} "
                               "given (not a number, list of numbers or array)")
    if isinstance(value, np.ndarray) or not (np.can_cast(arr.dtype, want, "same_kind")
                                             or arr.dtype.kind in "biu" and want.kind in "biuf"):
        raise InputDtypeMismatch(f"{where}: expected {type_text} (numpy {want}), got {type(value).__name__} "
                                 f"of numpy {arr.dtype}")
    return arr.astype(want)


def container_feed(name: str, vtype: Any, value: Any, where: str = "") -> Any:
    """A feed of a sequence/optional/map input checked against its declared type ``vtype``:
    a sequence as a list whose elements are checked (and converted) in turn, an optional
    as None or its element checked, a map as a dict (:func:`map_feed`).

    Raises:
        InvalidFeedError / InputDtypeMismatch: naming the input (and the element).
    """
    at = f"input '{name}'{where}"
    if isinstance(vtype, OptionalType):
        return None if value is None else container_feed(name, vtype.elem, value, where)
    if isinstance(vtype, SequenceType):
        if not isinstance(value, (list, tuple)):
            got = "None" if value is None else f"a {type(value).__name__}"
            raise InvalidFeedError(f"{at}: expected {value_type_string(vtype)} (a list of arrays), got {got}")
        return [container_feed(name, vtype.elem, x, f"{where} element {k}") for k, x in enumerate(value)]
    if isinstance(vtype, MapType):
        return map_feed(at, vtype, value)
    if vtype is None:   # element type not declared: any array, list or None
        if value is None or type(value) is list:
            return value if value is None else [container_feed(name, None, x, f"{where} element {k}")
                                                for k, x in enumerate(value)]
        return value if type(value) is np.ndarray else _tensor_feed(at, "tensor", None, value)
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        raise InvalidFeedError(f"{at}: expected {value_type_string(vtype)}, got a list of arrays (a sequence)")
    return _tensor_feed(at, value_type_string(vtype), vtype, value)


def _map_item(at: str, what: str, dtype: Any, x: Any) -> Any:
    """One key or value of a map feed: a str for strings, an int for integer keys, and a
    numpy scalar of ``dtype`` for numeric values (the map's type is read from them)."""
    if dtype is None:
        return x
    if np.dtype(dtype).kind in "OUS":
        if isinstance(x, bytes):
            return x.decode("utf-8")
        if isinstance(x, str):
            return x
    elif np.dtype(dtype).kind in "iu":
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            return int(x) if what == "key" else np.dtype(dtype).type(x)
    elif isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        return np.dtype(dtype).type(x)
    c_type = {"int64": "int64_t", "float32": "float", "float64": "double"}.get(np.dtype(dtype).name, "std::string")
    raise MapItemTypeError(f"{at}: a map {what} must be {value_type_string(dtype)}, got {type(x).__name__} {x!r} "
                           f"(Unexpected {what} type  {type(x)}, it cannot be linked to C type {c_type})")


def map_feed(at: str, vtype: MapType, value: Any) -> dict:
    """A map feed (a dict) with its keys and values of the declared key and value types
    (:func:`_map_item`), in the caller's order.

    Raises:
        InvalidFeedError: not a dict. InputDtypeMismatch: a key or value of another type.
    """
    if not isinstance(value, dict):
        got = "None" if value is None else f"a {type(value).__name__}"
        raise InvalidFeedError(f"{at}: expected {value_type_string(vtype)} (a dict), got {got}")
    return {_map_item(at, "key", vtype.key, k): _map_item(at, "value", vtype.value, v) for k, v in value.items()}


def _with_initializers(model: Model, arrays: Mapping[str, np.ndarray]) -> Model:
    """``model`` (a session's own copy) with the initializers of ``arrays``' names replaced
    (``SessionOptions.add_initializer``; names it lacks are ignored).

    Raises:
        InvalidArgumentError: an array of another dtype or shape than the initializer's.
    """
    inits = model.graph.initializers
    for name, arr in arrays.items():
        old = inits.get(name)
        if old is None:
            continue
        if old.dtype != arr.dtype or old.shape != arr.shape:
            raise InvalidArgumentError(f"initializer '{name}': the supplied OrtValue is {arr.dtype} of shape "
                                       f"{list(arr.shape)}, the model's is {old.dtype} of shape {list(old.shape)}")
        view = arr.view()
        view.flags.writeable = False
        inits[name] = view
    return model


def _cpu_memory_info() -> Any:
    from .devices import OrtAllocatorType, OrtMemoryInfo, OrtMemType
    return OrtMemoryInfo("Cpu", OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, OrtMemType.DEFAULT)


def _node_arg(vi: ValueInfo) -> NodeArg:
    if vi.is_container:   # as onnxruntime: an optional tensor shows its element's dims, a sequence []
        return NodeArg(vi.name, [] if vi.elem_dims is None else [d.display for d in vi.elem_dims], vi.type)
    shape = None if vi.dims is None else [d.display for d in vi.dims]
    return NodeArg(vi.name, shape, vi.type)


class InferenceSession:
    """Run an ONNX model with changing input shapes (the ``onnxruntime.InferenceSession`` call shape).

    The arguments are onnxruntime's, in its order; dynashape's own are keywords.

    Args:
        path_or_bytes: a path, serialized bytes or an ``onnx.ModelProto`` (or a
            :class:`~dynashape.model.Model` from ``load_model``, which the session reads and
            leaves whole: another session can be made from it). A path is memory-mapped and
            the weights are read-only views of the file where their data is aligned, copies
            otherwise (:func:`dynashape.model.load_model`): the file must not be rewritten in
            place while the session lives. Initializers that no node reads after constant
            folding and the rewrites are released (``session.model.graph.released`` keeps
            their shapes and dtypes); overridable
            initializers stay, with what a run that overrides one compiles from.
        sess_options: a :class:`~dynashape.options.SessionOptions` (what each field does here
            is in :mod:`dynashape.options`).
        providers: onnxruntime's provider list (names or ``(name, options)``); only
            ``"CPUExecutionProvider"`` exists, others fall back to it with a warning.
        provider_options: a list of option dicts, one per provider.
        allocator: ``"pool"`` (one arena per execution context, offsets planned per input
            signature, reused when the new shapes fit and grown when they don't) or
            ``"naive"`` (one buffer per tensor). Default: from ``sess_options``
            (``enable_cpu_mem_arena`` and ``enable_mem_pattern`` both True: pool).
        plan_cache_size: how many input signatures keep their plan (LRU).
        validate_memory: validation mode (also ``DYNASHAPE_VALIDATE_MEMORY=1``; see
            docs/MEMORY.md): every pool plan is checked for overlapping live tensors, runs
            poison freed arena blocks and check that every arena array a step reads or
            writes lies in its own live block, and every plan made from the symbolic
            program is checked against per-node inference. Raises ``MemoryPlanError`` /
            ``PlanCheckError``.
        strict_dim_params: a declared ``dim_param`` bound to two values in one run is a
            ``DimParamMismatch`` (by default, as in ONNX Runtime, declared dim_params are
            hints: the conflicting axes get symbols of their own, with a warning once).
        compiled_kernels: use the accelerated-kernel plugins where they are installed
            (``pip install "dynashape[fast]"``): ``fast`` (numba loops) and ``onednn`` (oneDNN
            GEMM, convolutions, the channels-last layout pass). True: both; False: the numpy
            kernels only; a set of plugin names: those only (``{"fast"}``). Default True
            (``DYNASHAPE_FAST=0`` turns both off everywhere, ``DYNASHAPE_ONEDNN=0`` oneDNN's).
        optimize: run the registered graph rewrites (fusions, docs/REWRITES.md) at
            creation; what fired is ``session.rewrites``. Default True, or the environment
            variable ``DYNASHAPE_OPTIMIZE`` (``0`` turns them off); ``sess_options`` with
            ``graph_optimization_level = ORT_DISABLE_ALL`` turns them off too.

        memory_limit: the bytes one tensor, or all intermediate tensors of one plan, may take
            (an int, or a string such as ``"8GiB"``). Default: ``DYNASHAPE_MEMORY_LIMIT``,
            else the machine's memory (physical RAM or the container's cgroup limit). A plan
            over it raises ``ResourceLimitError`` before allocating (:mod:`dynashape.limits`).
        wait_for_compiled_kernels: runs wait for the compiled kernels while numba starts (the
            first run that needs one, ~1 s per process) instead of taking the kernels' numpy
            path meanwhile (:mod:`dynashape.ops_builtin.fast.tiering`): every run then computes with
            the same kernels, bit for bit. Default False (also ``DYNASHAPE_COMPILED_WAIT=1``).
        lazy_subgraphs: compile each If/Loop/Scan body when it first runs, so that a branch
            that is never taken costs nothing. Default False: every body is compiled with the
            session, as onnxruntime initialises its subgraphs, so that no run pays for one
            (a merged decoder's first two steps would each compile a whole decoder).
        external_data_dir: the directory external-data files are read from when the model
            is given as bytes or a ``ModelProto`` (a path reads them from the model's own
            directory). Every reference must resolve inside it: absolute paths, ``..`` and
            symlinks leaving it raise ``ExternalDataError`` (:mod:`dynashape.external_data`).

        **kwargs: onnxruntime's ``disabled_optimizers`` / ``read_config_from_model`` (no effect).

    Raises:
        ModelLoadError: the model cannot be read, or breaks a rule of ONNX that onnxruntime
            also enforces (:mod:`dynashape.validate`: ``DuplicateNameError``,
            ``UndefinedValueError``, ``InvalidAttributeError``, ``NestingLimitError``), or an
            external-data reference is unsafe or missing (``ExternalDataError``).
        ResourceLimitError: a constant the model makes at load is over ``memory_limit``.
        UnsupportedOperatorError: an operator has no definition for the model's opset.
        InvalidArgumentError: malformed ``sess_options``, ``providers`` or ``provider_options``.
        ValueError: an unknown allocator.
        TypeError: an unknown keyword argument.
    """

    @gcpause.paused     # (a compile's allocations live on: collections would free nothing, gcpause.py)
    def __init__(self, path_or_bytes: Any, sess_options: Optional[SessionOptions] = None, providers: Any = None,
                 provider_options: Any = None, *, allocator: Optional[str] = None, plan_cache_size: int = 8,
                 validate_memory: Optional[bool] = None, strict_dim_params: bool = False,
                 optimize: Optional[bool] = None, compiled_kernels: Union[bool, Iterable[str]] = True,
                 memory_limit: Union[int, str, None] = None, external_data_dir: Optional[str] = None,
                 wait_for_compiled_kernels: bool = False, lazy_subgraphs: bool = False, **kwargs: Any):
        _check_ort_kwargs(kwargs)
        settings = session_settings(sess_options, allocator)
        self._providers, self._provider_options = resolve_providers(providers, provider_options)
        self.strict_dim_params = bool(strict_dim_params)
        self.validate_memory = (os.environ.get("DYNASHAPE_VALIDATE_MEMORY", "") in ("1", "true")
                                if validate_memory is None else bool(validate_memory))
        self.memory_limit = resolve_memory_limit(memory_limit)
        self.external_data_dir = external_data_dir
        t_load = time.perf_counter()
        supplied = sess_options.initializer_arrays() if sess_options is not None else {}
        self.model: Model = (_with_initializers(session_copy(path_or_bytes), supplied)
                             if isinstance(path_or_bytes, Model)
                             else load_model(path_or_bytes, external_data_dir=external_data_dir, initializers=supplied))
        if load_config_from_model_enabled(sess_options) and not isinstance(path_or_bytes, Model):
            from_model = options_from_model(model_metadata(self.model.proto).custom_metadata_map, sess_options)
            if from_model is not None:
                sess_options, settings = from_model, session_settings(from_model, allocator)
        if settings.allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {ALLOCATORS}, got {settings.allocator!r}")
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._settings = settings
        self.allocator = settings.allocator
        self._profiler = Profiler(settings.profile_prefix) if settings.profile_prefix is not None else None
        so = self._sess_options
        self.model = apply_free_dimension_overrides(self.model, so._free_dims_by_name, so._free_dims_by_denotation)
        self.registry = get_registry()
        self.compiled_kernels = compiled_kernel_plugins(compiled_kernels)
        if self.compiled_kernels != COMPILED_KERNELS_PLUGINS:
            self.registry = self.registry.without(COMPILED_KERNELS_PLUGINS - self.compiled_kernels)
        self._overridable = {vi.name for vi in self.model.graph.overridable}
        if optimize is None:
            optimize = os.environ.get("DYNASHAPE_OPTIMIZE", "1") not in ("0", "false", "off")
        self.optimize = bool(optimize) and settings.fold_constants
        self._inputs = self.model.graph.inputs
        self._outputs = self.model.graph.outputs
        if so.optimized_model_filepath:
            from .optimized_model import write_optimized_model
            write_optimized_model(self.model, self.registry, os.fspath(so.optimized_model_filepath), so._config,
                                  settings.fold_constants, self.memory_limit)
        key = None if self.model.external_data or supplied else compiled_models.model_key(path_or_bytes)
        if key is not None:
            key += (self.registry, settings.fold_constants, self.optimize, self.allocator, self.validate_memory,
                    self.memory_limit, int(plan_cache_size), bool(lazy_subgraphs),
                    tuple(sorted(so._free_dims_by_name.items())),
                    tuple(sorted(so._free_dims_by_denotation.items())))
        #: what this session compiled, or took from an earlier session of the same model (compiled.py)
        found = compiled_models.lookup(key) if key is not None else None
        shared = found is not None
        c: CompiledModel = found if found is not None else self._compile_graph(settings)
        if key is not None and not shared:
            compiled_models.store(key, c)
        self._compiled = c
        self.graph, self.rewrites, self.folded_nodes, self._override_base = (
            c.graph, c.rewrites, c.folded_nodes, c.override_base)
        # (a shared graph holds the first session's arrays: this model's own are not needed)
        self.model.graph.release([n for n in self.model.graph.initializers
                                  if shared or self.graph.slot.get(n) not in self.graph.constants])
        dims, dtypes = input_dims(self.graph, self._inputs)
        t0 = time.perf_counter()
        self.engine = Engine(self.graph, self.registry, dims, dtypes, [vi.name for vi in self._inputs],
                             self.allocator, validate=self.validate_memory, strict_dim_params=self.strict_dim_params,
                             plan_cache_size=plan_cache_size, name=self.model.graph.name or "model",
                             optimize=self.optimize, fold=settings.fold_constants, memory_limit=self.memory_limit,
                             shared=self._compiled, body_runner=SubgraphRunner, eager_bodies=not lazy_subgraphs)
        self.engine.profiler = self._profiler
        self.engine.quiet = settings.quiet
        # the constants a kernel's prepacked form replaced (program.py, _release_prepacked)
        self.model.graph.release([self.graph.names[s] for s in self.graph.packed_away])
        self.symbolic_inference_ms = (time.perf_counter() - t0) * 1e3
        self._input_index = {vi.name: i for i, vi in enumerate(self._inputs)}
        self._input_names = [vi.name for vi in self._inputs]
        self._output_index = {vi.name: i for i, vi in enumerate(self._outputs)}
        self._all_outputs = list(range(len(self._outputs)))
        self._feeds_fit = _feed_checker(self._inputs)
        self._overriding: dict = {}
        self._blas = BlasThreads(settings.blas_threads) if settings.blas_threads else None
        #: runs wait for compiled kernels still starting instead of taking their numpy path
        self.wait_for_compiled_kernels = bool(wait_for_compiled_kernels)
        self._plain_runs = self._profiler is None and self._blas is None and not self.wait_for_compiled_kernels
        self.shape_conflicts = self._declared_vs_inferred()
        if self._profiler is not None:
            self._profiler.session_event("session_initialization", t_load, time.perf_counter())

    def _compile_graph(self, settings) -> CompiledModel:
        """Prepare, fold and rewrite the model's graph (what sessions of one model share)."""
        c = compile_graph(self.model, self.registry, self._inputs, fold=settings.fold_constants,
                          optimize=self.optimize, memory_limit=self.memory_limit, overridable=self._overridable,
                          release_unread=True)
        return CompiledModel(c.graph, c.rewrites, c.folded_nodes, c.override_base)

    # description ------------------------------------------------------------
    @property
    def program(self) -> Program:
        """The compiled program for the declared dims (steps, segments, generated code)."""
        return self.engine.program

    @property
    def symbolic(self) -> SymbolicGraph:
        """Every tensor's symbolic shape, dtype and value, and every node's status."""
        return self.engine.program.sg

    @property
    def plan_cache_size(self) -> int:
        return self.engine.plan_cache_size

    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        """The outputs as the model declares them (name, declared dims: ints, dim_param names,
        None where unknown; type), as onnxruntime reports them. Their inferred symbolic shapes:
        :meth:`get_inferred_outputs` and :attr:`symbolic_shapes`."""
        return [_node_arg(v) for v in self._outputs]

    def get_inferred_outputs(self) -> list[NodeArg]:
        """Outputs with their inferred symbolic shapes (``["batch", "sequence*2"]``); the
        declared shape where inference found the output data-dependent."""
        out = []
        for v in self._outputs:
            slot = self.graph.slot[v.name]
            if self.symbolic.shapes[slot] is not None and not self.symbolic.is_data_dependent(slot):
                out.append(NodeArg(v.name, self.symbolic.display_shape(slot), v.type))
            else:
                out.append(_node_arg(v))
        return out

    @property
    def symbolic_shapes(self) -> dict:
        """``{name: shape}`` of every graph input and output as inference finds it: ints and
        symbolic dims as text (``"past_sequence + sequence"``; ``"unk__N"`` where a dim depends on
        data), None where the rank is unknown (``dynashape inspect`` lists every tensor's)."""
        sg, slots = self.symbolic, self.graph.slot
        return {v.name: sg.display_shape(slots[v.name]) for v in list(self._inputs) + list(self._outputs)
                if v.name in slots}

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Initializers that are also graph inputs: a feed of that name overrides the value."""
        return [_node_arg(v) for v in self.model.graph.overridable]

    def get_modelmeta(self) -> ModelMetadata:
        """Producer, graph name, domain, descriptions, version and ``custom_metadata_map``."""
        return model_metadata(self.model.proto)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        """``{"CPUExecutionProvider": {option: value as str}}``, as onnxruntime returns it."""
        return {p: dict(o) for p, o in zip(self._providers, self._provider_options)}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
        """Choose providers again (only the CPU one exists; others onnxruntime knows fall back
        with a warning).

        Raises:
            UnknownProviderError: a name onnxruntime does not know ("Unknown Provider Type: X",
                a ``RuntimeError`` as in onnxruntime).
            InvalidArgumentError: malformed arguments.
        """
        check_provider_names(providers)
        self._providers, self._provider_options = resolve_providers(providers, provider_options)

    def disable_fallback(self) -> None:
        """Accepted: there is no other provider to fall back from."""

    def enable_fallback(self) -> None:
        """Accepted: there is no other provider to fall back from."""

    def end_profiling(self) -> str:
        """Stop profiling and write the trace (:mod:`dynashape.profiling`); returns its path,
        ``""`` when the session was not profiling (as onnxruntime).

        Raises:
            OSError: the file cannot be written.
        """
        profiler = self._profiler
        if profiler is None:
            return ""
        self._profiler = None
        for engine in [self.engine] + [inner.engine for inner in self._overriding.values()]:
            engine.profiler = None
        self._plain_runs = self._blas is None and not self.wait_for_compiled_kernels
        return profiler.write()

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (``time.time_ns()``), 0 when not profiling."""
        return self._profiler.start_time_ns if self._profiler is not None else 0

    # onnxruntime's OrtValue / I/O binding calls (dynashape.ortvalue, dynashape.iobinding,
    # dynashape.ort_session) ---------------------------------------------------
    def io_binding(self) -> Any:
        """An :class:`~dynashape.iobinding.IOBinding` of this session (inputs and outputs bound
        to memory before ``run_with_iobinding``)."""
        from .iobinding import IOBinding
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: Any, run_options: Optional[RunOptions] = None) -> None:
        """Run on ``iobinding``'s inputs, writing its bound outputs (:mod:`dynashape.iobinding`).

        Raises:
            IOBindingError: no output bound, an unknown name, a feed or pre-allocated output
                that does not fit (a ``RuntimeError``, as onnxruntime raises).
        """
        from .iobinding import run_with_iobinding
        run_with_iobinding(self, iobinding, run_options)

    def run_with_ort_values(self, output_names: Optional[Sequence[str]], input_dict_ort_values: Mapping[str, Any],
                            run_options: Optional[RunOptions] = None) -> list:
        """Run on :class:`~dynashape.ortvalue.OrtValue` feeds; the outputs as OrtValues
        (:func:`dynashape.ort_session.run_with_ort_values`).

        Raises:
            InputNameError: an input is missing ("Required inputs ... are missing").
            InvalidFeedError: a feed is not an OrtValue; and what :meth:`run` raises.
        """
        from .ort_session import run_with_ort_values
        return run_with_ort_values(self, output_names, input_dict_ort_values, run_options)

    def run_async(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any], callback: Any,
                  user_data: Any, run_options: Optional[RunOptions] = None) -> None:
        """Run on a thread of its own; ``callback(results, user_data, error_message)`` is
        called there (:func:`dynashape.ort_session.run_async`).

        Raises:
            InputNameError: an input is missing (raised at once).
        """
        from .ort_session import run_async
        run_async(self, output_names, input_feed, callback, user_data, run_options)

    @property
    def _sess(self) -> Any:
        """onnxruntime's binding-level session (``SessionIOBinding(session._sess)``,
        ``session._sess.run_with_ort_values(...)``): :class:`~dynashape.ort_session.NativeSession`."""
        from .ort_session import NativeSession
        return NativeSession(self)

    def get_input_memory_infos(self) -> list:
        """One CPU :class:`~dynashape.devices.OrtMemoryInfo` per input."""
        return [_cpu_memory_info() for _ in self._inputs]

    def get_output_memory_infos(self) -> list:
        """One CPU :class:`~dynashape.devices.OrtMemoryInfo` per output."""
        return [_cpu_memory_info() for _ in self._outputs]

    def get_tuning_results(self) -> list:
        """``[]``: dynashape has no tunable kernels."""
        return []

    def set_tuning_results(self, results: Any, *, error_on_invalid: bool = False) -> None:
        """Accepted: dynashape has no tunable kernels."""

    def _declared_vs_inferred(self) -> list[str]:
        """Graph outputs whose declared fixed dims contradict inference (reported, not trusted)."""
        conflicts = []
        for v in self._outputs:
            inferred = self.symbolic.shapes[self.graph.slot[v.name]]
            if v.dims is None or inferred is None:
                continue
            if len(v.dims) != len(inferred):
                conflicts.append(f"output '{v.name}': declared rank {len(v.dims)}, inferred {len(inferred)}")
                continue
            for axis, (d, i) in enumerate(zip(v.dims, inferred)):
                if d.kind == FIXED and isinstance(i, int) and d.value != i:
                    conflicts.append(f"output '{v.name}', axis {axis}: declared {d.value}, inferred {i}")
        for c in conflicts if not self._settings.quiet else ():
            warnings.warn(f"dynashape: {c}; the inferred shape is used", RuntimeWarning, stacklevel=3)
        return conflicts

    @property
    def stats(self) -> LiveStats:
        """Plan-cache hits and misses, planning and execution ms, summed over the contexts."""
        return self.engine.stats

    @property
    def last_plan(self) -> Optional[Plan]:
        return self.engine.last_plan

    # running -----------------------------------------------------------------
    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: Optional[RunOptions] = None) -> list[np.ndarray]:
        """Run the model on ``input_feed`` and return the requested outputs (all when None).

        Feeds are numpy arrays of the declared element type; lists, scalars and numpy
        scalars are converted to it (:func:`feed_array`). A sequence input (``seq(...)``)
        takes a list of arrays, an optional input (``optional(...)``) None or its element;
        sequence outputs are lists of arrays, an empty optional output is None. A feed for
        an initializer that is also a graph input (``get_overridable_initializers()``)
        overrides it. Arrays returned are never touched by a later or concurrent run.

        Raises:
            InputNameError: a required input is missing, or an unknown input/output name.
            InputDtypeMismatch / InputRankMismatch / InputFixedDimMismatch / DimParamMismatch:
                a feed does not fit the declared input.
            ShapeInferenceError: an operator's shape rule is broken for these shapes.
            ExecutionError: a kernel failed.
            RunTerminated: ``run_options.terminate`` is set.
        """
        if run_options is None and self._plain_runs:
            return self._run(output_names, input_feed)
        return self._run_with_options(output_names, input_feed, run_options)

    def _run_with_options(self, output_names, input_feed, run_options: Optional[RunOptions]) -> list[np.ndarray]:
        if run_options is not None:
            if not isinstance(run_options, RunOptions):
                raise InvalidArgumentError(f"run_options must be a dynashape.RunOptions, got "
                                           f"{type(run_options).__name__}")
            if run_options.terminate:
                raise RunTerminated("the run did not start: RunOptions.terminate is set")
            if run_options._adapters:      # LoRA parameters fed by name (dynashape.lora)
                from .lora import adapter_feeds
                input_feed = adapter_feeds(run_options._adapters, input_feed)
        t0 = time.perf_counter()
        if self._blas is not None:
            self._blas.enter()
        try:
            if self.wait_for_compiled_kernels:
                with waiting_for_compiled_kernels():
                    return self._run(output_names, input_feed)
            return self._run(output_names, input_feed)
        finally:
            if self._blas is not None:
                self._blas.leave()
            if self._profiler is not None:
                self._profiler.session_event("model_run", t0, time.perf_counter())

    def _run(self, output_names, input_feed) -> list[np.ndarray]:
        wanted = self._all_outputs if not output_names else self._wanted(output_names)
        try:
            feeds = [input_feed[n] for n in self._input_names]
        except (KeyError, TypeError):
            self._validate(input_feed)
            raise
        key: list[Any] = []
        for i, a in enumerate(feeds):
            if type(a) is not np.ndarray:
                feeds[i] = a = feed_array(self._inputs[i], a)
                if type(a) is not np.ndarray:   # a sequence (list) or an empty optional (None), checked
                    key.append(None)
                    key.append(type_key(a))
                    continue
            key.append(a.shape)
            key.append(a.dtype)
        key_t = tuple(key)
        plan = self.engine.cached_plan(key_t)
        if len(input_feed) != len(feeds) and self._overridable and not self._overridable.isdisjoint(input_feed):
            return self._run_overriding(output_names, input_feed)
        if len(input_feed) != len(feeds) or plan is None and (self.strict_dim_params or not self._feeds_fit(feeds)):
            if any(type(a) is np.ndarray and a.dtype.kind == "V" for a in feeds):   # byte records: converted once
                return self._run(output_names, {n: feed_array(self._inputs[self._input_index[n]], v)
                                                if type(v) is np.ndarray and v.dtype.kind == "V"
                                                and n in self._input_index else v for n, v in input_feed.items()})
            try:
                self._validate(input_feed)
            except Exception:
                self.engine.stats_failed()
                raise
        return self.engine.run(key_t, feeds, wanted, plan)

    def _run_overriding(self, output_names, input_feed: Mapping[str, Any]) -> list[np.ndarray]:
        """Run with some initializers fed: on a session (compiled once per set of fed names)
        of the model where those initializers are inputs, made from the graph as it was
        before anything that depends on an overridable initializer was folded."""
        names = frozenset(self._overridable.intersection(input_feed))
        inner = self._overriding.get(names)
        if inner is None:
            base = self._override_base
            assert base is not None
            graph = Graph(base.name, base.nodes, base.inputs + [v for v in base.overridable if v.name in names],
                          base.outputs, {k: v for k, v in base.initializers.items() if k not in names},
                          base.value_info, [v for v in base.overridable if v.name not in names])
            model = Model(graph, self.model.opsets, self.model.ir_version, self.model.proto, self.model.path)
            so = replace(self._sess_options, enable_profiling=False, intra_op_num_threads=0,
                         optimized_model_filepath="")
            inner = InferenceSession(model, so, allocator=self.allocator, plan_cache_size=self.plan_cache_size,
                                     validate_memory=self.validate_memory, strict_dim_params=self.strict_dim_params,
                                     optimize=self.optimize, compiled_kernels=self.compiled_kernels,
                                     memory_limit=self.memory_limit, external_data_dir=self.external_data_dir)
            inner.engine.profiler = self._profiler
            inner = self._overriding.setdefault(names, inner)
        return inner._run(output_names, input_feed)

    def _wanted(self, output_names: Sequence[str]) -> list[int]:
        out = []
        for n in output_names:
            i = self._output_index.get(n)
            if i is None:
                raise OutputNameError(f"unknown output name '{n}'; the model's outputs are "
                                     f"{[o.name for o in self._outputs]}")
            out.append(i)
        return out

    def _validate(self, input_feed: Mapping[str, Any]) -> None:
        """Raise the first problem of the feeds: type, names, then each input's dtype and dims."""
        if not isinstance(input_feed, Mapping):
            raise InvalidFeedError(f"input_feed must be a dict of name -> array, got {type(input_feed).__name__}")
        unknown = [k for k in input_feed if k not in self._input_index]
        if unknown:
            raise InputNameError(f"unknown input name(s) {unknown}; the model's inputs are "
                                 f"{[v.name for v in self._inputs]}")
        missing = [vi for vi in self._inputs if vi.name not in input_feed]
        if missing:
            vi = missing[0]
            raise InputNameError(f"Required inputs ({[v.name for v in missing]}) are missing from input feed "
                                 f"({list(input_feed)}): missing input '{vi.name}' (expected {vi.type} with shape "
                                 f"{_node_arg(vi).shape})")
        bound: dict[str, tuple[int, str, int]] = {}
        for vi in self._inputs:
            arr = input_feed[vi.name]
            self._check_feed(vi, arr if isinstance(arr, np.ndarray) else feed_array(vi, arr),
                             bound if self.strict_dim_params else None)

    @staticmethod
    def _check_feed(vi: ValueInfo, arr: np.ndarray, bound: Optional[dict]) -> None:
        if vi.is_container:
            container_feed(vi.name, vi.value_type, arr)
            if type(arr) is np.ndarray and vi.elem_dims is not None:   # an optional tensor's element
                InferenceSession._check_feed(ValueInfo(vi.name, 0, vi.elem_dims), arr, None)
            return
        want = vi.dtype
        if want is not None and arr.dtype != want and not (want == object and arr.dtype.kind in "OUS"):
            raise InputDtypeMismatch(f"input '{vi.name}': expected {vi.type} (numpy {want}), got numpy {arr.dtype} "
                                     f"(Unexpected input data type. Actual: ({value_type_string(arr.dtype)}) , "
                                     f"expected: ({vi.type}))")
        if vi.dims is None:
            return
        if arr.ndim != len(vi.dims):
            raise InputRankMismatch(f"input '{vi.name}': expected rank {len(vi.dims)} (shape "
                                    f"{_node_arg(vi).shape}), got rank {arr.ndim} with shape {list(arr.shape)}")
        for axis, (d, got) in enumerate(zip(vi.dims, arr.shape)):
            if d.kind == FIXED and got != d.value:
                raise InputFixedDimMismatch(f"input '{vi.name}', axis {axis}: expected {d.value} (fixed dim), "
                                            f"got {got} (shape {list(arr.shape)})")
            if d.kind == SYMBOLIC and bound is not None:
                prev = bound.get(d.value)
                if prev is not None and prev[0] != got:
                    raise DimParamMismatch(
                        f"dim_param '{d.value}' is bound to {prev[0]} by input '{prev[1]}' axis {prev[2]} "
                        f"and to {got} by input '{vi.name}' axis {axis}")
                bound[d.value] = (got, vi.name, axis)

    def plan(self, input_feed: Mapping[str, Any]) -> Plan:
        """The plan of these feeds' signature (segment 0: shapes, steps, memory), from the cache
        or made now, without running; an execution context binds its buffers as a run would.
        ``plan(...).memory`` has ``arena_bytes``, ``lower_bound_bytes``, ``naive_bytes``,
        ``planning_ms`` and the blocks."""
        feeds = self._checked_feeds(input_feed)
        key = tuple(x for a in feeds for x in ((a.shape, a.dtype) if isinstance(a, np.ndarray)
                                               else (None, type_key(a))))
        return self.engine.plan(key, feeds)

    def _checked_feeds(self, input_feed: Mapping[str, Any]) -> list:
        """The feeds, validated, in input order (arrays where the input is a tensor)."""
        self._validate(input_feed)
        return [a if isinstance(a, np.ndarray) else feed_array(vi, a)
                for vi, a in zip(self._inputs, (input_feed[n] for n in self._input_names))]

    def check_fits(self, input_feed: Mapping[str, Any]) -> None:
        """Raise ResourceLimitError where a run on feeds of these shapes and dtypes would go
        over ``memory_limit`` (a tensor, the arena), before anything of that size is made; the
        plan is neither cached nor counted (the next run plans as a first run does). Only the
        feeds' shapes and dtypes are read, and the values of inputs shapes depend on: zero-stride
        placeholders do (``dynashape.feeds.placeholder_feeds``).

        Raises:
            ResourceLimitError: naming the tensor (or node), its bytes and the limit.
            InvalidFeedError: a feed does not fit its input.
            ShapeInferenceError: an op's rule is broken by these shapes.
        """
        self.engine.check_plan(self._checked_feeds(input_feed))

    def trim(self) -> None:
        """Release the arenas and every cached plan (memory comes back on the next run); those
        of the other sessions sharing this one's compiled model too (``dynashape.compiled``)."""
        self.engine.clear()

    @property
    def arena(self) -> Arena:
        """The segment-0 arena of the most recently used execution context."""
        ctx = self.engine.last_context
        if ctx is None:
            return Arena()
        return ctx.arena(0)

    @property
    def arena_bytes(self) -> int:
        """Arena capacity in bytes over every execution context (0 for the naive allocator)."""
        return sum(ctx.arena_bytes for ctx in list(self.engine._contexts))

