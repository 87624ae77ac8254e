"""Import: an ONNX model (path, bytes or ModelProto) as a :class:`Graph` of plain objects.

Each input dim keeps its kind (ONNX IR.md "Tensor shapes"): fixed (``dim_value``),
symbolic (``dim_param``) or unknown (neither, or a negative ``dim_value``: exporters such as
Paddle2ONNX write -1 for a free dim, and onnxruntime reads it as unknown; 0 is a real,
empty dim). Graph inputs that are also initializers are not model inputs but
``Graph.overridable`` (IR.md: defaults that may be overridden): a run that feeds one
overrides it, as in onnxruntime (``InferenceSession.get_overridable_initializers``); a run
that does not uses the initializer as a constant.

Weights are held once (:mod:`dynashape.weights`): a model read from a path is memory-mapped
and the main graph's initializers are read-only views of the map (aligned data) or copies
(the rest), a model given as bytes is scanned the same way, and the ``ModelProto`` kept in
:attr:`Model.proto` carries the graph and metadata without the initializers' data.
"""
from __future__ import annotations

import os
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping, Optional, Union

import numpy as np

from . import onnx_proto
from .onnx_proto import AttributeProto

from .dtypes import MapType, OptionalType, SequenceType, np_dtype, type_string, value_type_string
from .errors import (ExternalDataError, InvalidArgumentError, ModelFileNotFoundError, ModelLoadError, ModelParseError,
                     NestingLimitError)
from .external_data import Region, load_external_data
from .symbolic import Dim, sym
from .validate import validate_model
from .weights import (LITTLE_ENDIAN, Buffer, WireFormatError, array_from_region, map_file, plain_dtype,
                      release_pages, scan_model)

__all__ = ["DimSpec", "ValueInfo", "Node", "Graph", "Model", "load_model", "session_copy", "FIXED", "SYMBOLIC",
           "UNKNOWN"]

FIXED, SYMBOLIC, UNKNOWN = "fixed", "symbolic", "unknown"


@dataclass(frozen=True)
class DimSpec:
    """One declared dim: ``kind`` is "fixed" (``value`` int), "symbolic" (``value`` the
    dim_param name) or "unknown" (``value`` None)."""

    kind: str
    value: Union[int, str, None]

    @property
    def display(self) -> Union[int, str, None]:
        return self.value


@dataclass
class ValueInfo:
    """A named value's declared type: ONNX elem type, numpy dtype and dims (None: no shape).

    A sequence or optional value (IR.md "Types": ``seq(T)``, ``optional(T)``) has
    ``value_type`` set (a :class:`~dynashape.dtypes.SequenceType` /
    :class:`~dynashape.dtypes.OptionalType`, also what ``dtype`` returns), ``elem_type`` 0
    and ``dims`` None (a container has no tensor shape); ``elem_dims`` keeps the declared
    dims of an ``optional(tensor)``'s element (what onnxruntime shows as its shape).
    """

    name: str
    elem_type: int
    dims: Optional[tuple[DimSpec, ...]]
    value_type: Any = None
    elem_dims: Optional[tuple[DimSpec, ...]] = None

    @property
    def dtype(self) -> Any:
        if self.value_type is not None:
            return self.value_type
        return np_dtype(self.elem_type) if self.elem_type else None

    @property
    def is_container(self) -> bool:
        """True for a sequence or optional value."""
        return self.value_type is not None

    @property
    def type(self) -> str:
        if self.value_type is not None:
            return value_type_string(self.value_type)
        return type_string(self.elem_type)

    @property
    def rank(self) -> Optional[int]:
        return None if self.dims is None else len(self.dims)


@dataclass
class Node:
    """One node: ``inputs`` may hold "" for an absent optional input. ``opset`` pins the
    version of its domain for this node alone (a rewrite making an ONNX op newer than the
    model's opset); None takes the model's."""

    #: the imported model holds no symbolic dims: a kernel's prepared value that keeps its
    #: node (If, Loop, Scan) is not searched through (dynashape.node.contains_expr)
    opaque_to_tracing: ClassVar[bool] = True

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: Optional[int] = None

    def __repr__(self) -> str:
        return f"Node({self.op_type} '{self.name}': {list(self.inputs)} -> {list(self.outputs)})"


@dataclass
class Graph:
    """A (sub)graph. ``inputs`` are the real inputs (initializers excluded).

    ``initializers`` are read-only arrays. A session drops those no node reads after
    constant folding (:meth:`release`); ``released`` keeps their shapes and dtypes."""

    opaque_to_tracing: ClassVar[bool] = True   # (as Node's)

    name: str
    nodes: list[Node]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    initializers: dict[str, np.ndarray]
    value_info: dict[str, ValueInfo]
    #: initializers also listed as graph inputs: defaults a feed may override (IR.md)
    overridable: list[ValueInfo] = field(default_factory=list)
    #: initializers whose data was released: name -> (shape, dtype)
    released: dict[str, tuple[tuple[int, ...], np.dtype]] = field(default_factory=dict)
    #: the graph this one was rewritten from (its initializers are released with ours)
    origin: Optional["Graph"] = field(default=None, repr=False)

    def release(self, names: Iterable[str]) -> None:
        """Drop these initializers' arrays, keeping their shapes and dtypes in ``released``
        (in the graph this one was rewritten from too)."""
        names = list(names)
        for name in names:
            arr = self.initializers.pop(name, None)
            if arr is not None:
                self.released[name] = (tuple(arr.shape), arr.dtype)
        if self.origin is not None:
            self.origin.release(names)

    def outer_names(self) -> set[str]:
        """Names this graph reads but does not define (outer-scope values of a subgraph)."""
        defined = {v.name for v in self.inputs} | set(self.initializers)
        used: set[str] = set()
        for n in self.nodes:
            used.update(i for i in n.inputs if i and i not in defined)
            for a in n.attrs.values():
                if isinstance(a, Graph):
                    used |= a.outer_names() - defined
            defined.update(n.outputs)
        used.update(o.name for o in self.outputs if o.name not in defined)
        return used


@dataclass
class Model:
    """An imported model.

    ``proto`` is the model without the data of its main graph's initializers (their names,
    element types and dims stay; the arrays are ``graph.initializers``): metadata, the nodes,
    subgraphs and functions. ``path`` is the file it was read from (None for bytes and
    ModelProtos); ``external_data`` whether initializers are read from other files."""

    graph: Graph
    opsets: dict[str, int]
    ir_version: int
    proto: onnx_proto.ModelProto
    path: Optional[str] = None
    external_data: bool = False


@dataclass(frozen=True)
class ModelMetadata:
    """A model's metadata, as ``onnxruntime.ModelMetadata`` (ONNX IR.md "Models")."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict


def model_metadata(proto: onnx_proto.ModelProto) -> ModelMetadata:
    """The producer, graph name, domain, doc strings, model_version and metadata_props."""
    return ModelMetadata(producer_name=proto.producer_name, graph_name=proto.graph.name, domain=proto.domain,
                         description=proto.doc_string, graph_description=proto.graph.doc_string,
                         version=int(proto.model_version),
                         custom_metadata_map={p.key: p.value for p in proto.metadata_props})


def _dims(tt) -> Optional[tuple[DimSpec, ...]]:
    if not tt.HasField("shape"):
        return None
    out = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            out.append(DimSpec(FIXED, int(d.dim_value)))
        elif d.dim_param:
            out.append(DimSpec(SYMBOLIC, d.dim_param))
        else:
            out.append(DimSpec(UNKNOWN, None))
    return tuple(out)


def type_of(t: onnx_proto.TypeProto) -> Any:
    """The engine's type of an ONNX TypeProto: a numpy dtype for a tensor (None when its
    elem type is undefined), :class:`SequenceType` / :class:`OptionalType` for containers
    and :class:`MapType` for maps (element types nested), None for anything else (opaque, an
    empty TypeProto)."""
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(t, kind).elem_type
        return np_dtype(elem) if elem else None
    if kind == "sequence_type":
        return SequenceType(type_of(t.sequence_type.elem_type) if t.sequence_type.HasField("elem_type") else None)
    if kind == "optional_type":
        return OptionalType(type_of(t.optional_type.elem_type) if t.optional_type.HasField("elem_type") else None)
    if kind == "map_type":
        key = t.map_type.key_type
        return MapType(np_dtype(key) if key else None,
                       type_of(t.map_type.value_type) if t.map_type.HasField("value_type") else None)
    return None


def _value_info(vi: onnx_proto.ValueInfoProto) -> ValueInfo:
    t = vi.type
    if t.HasField("tensor_type"):
        return ValueInfo(vi.name, t.tensor_type.elem_type, _dims(t.tensor_type))
    if t.HasField("sparse_tensor_type"):
        return ValueInfo(vi.name, t.sparse_tensor_type.elem_type, _dims(t.sparse_tensor_type))
    if t.HasField("sequence_type") or t.HasField("optional_type") or t.HasField("map_type"):
        elem_dims = None
        if t.HasField("optional_type") and t.optional_type.elem_type.HasField("tensor_type"):
            elem_dims = _dims(t.optional_type.elem_type.tensor_type)
        return ValueInfo(vi.name, 0, None, value_type=type_of(t), elem_dims=elem_dims)
    return ValueInfo(vi.name, 0, None)


def _attr_value(a: onnx_proto.AttributeProto) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return _tensor(a.t, f"attribute '{a.name}'")
    if t == AttributeProto.SPARSE_TENSOR:
        return _sparse_to_dense(a.sparse_tensor)
    if t == AttributeProto.GRAPH:
        return _graph(a.g)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [_tensor(x, f"attribute '{a.name}'") for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [_graph(g) for g in a.graphs]
    if t == AttributeProto.TYPE_PROTO:
        return type_of(a.tp)
    if t == AttributeProto.TYPE_PROTOS:
        return [type_of(x) for x in a.type_protos]
    raise ModelLoadError(f"attribute '{a.name}' has unsupported type {t}")


def _tensor(t: onnx_proto.TensorProto, what: str = "initializer") -> np.ndarray:
    """The array of a TensorProto; ModelLoadError naming it when its data does not fit its
    dims and type."""
    try:
        return onnx_proto.to_array(t)
    except Exception as exc:  # noqa: BLE001 - numpy's or onnx's message, put in context
        raise _unreadable(t, what, exc) from exc


def _unreadable(t: onnx_proto.TensorProto, what: str, exc: Exception) -> ModelLoadError:
    kind = onnx_proto.TensorProto.DataType.Name(t.data_type) if t.data_type in _DATA_TYPES else t.data_type
    return ModelLoadError(f"{what} '{t.name}' ({kind}, dims {list(t.dims)}) cannot be read: its data does not "
                          f"match its type and dims ({type(exc).__name__}: {exc})")


_DATA_TYPES = set(onnx_proto.TensorProto.DataType.values())
#: TensorProto fields that hold data (what Model.proto's initializers are stripped of)
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def _sparse_to_dense(sp: onnx_proto.SparseTensorProto) -> np.ndarray:
    """A sparse tensor as a dense array (IR.md "Sparse tensors": indices are linear, shape
    [NNZ], or coordinates, shape [NNZ, rank]). Raises ModelLoadError naming it when an
    index lies outside its dims."""
    name = sp.values.name
    values = _tensor(sp.values, "sparse tensor values")
    idx = _tensor(sp.indices, "sparse tensor indices").astype(np.int64)
    dims = tuple(sp.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    bounds = (dense.size,) if idx.ndim == 1 else dims
    if idx.ndim not in (1, 2) or (idx.ndim == 2 and idx.shape[1:] != (len(dims),)) or len(idx) != values.size:
        raise ModelLoadError(f"sparse tensor '{name}': indices of shape {list(idx.shape)} do not fit "
                             f"{values.size} values of a tensor of dims {list(dims)}")
    bad = ((idx < 0) | (idx >= np.array(bounds, np.int64))).reshape(len(idx), -1).any(axis=1)
    if bad.any():
        raise ModelLoadError(f"sparse tensor '{name}' (dims {list(dims)}): index {idx[bad][0].tolist()} "
                             "is out of range")
    if idx.ndim == 1:
        dense.reshape(-1)[idx] = values.reshape(-1)
    else:
        dense[tuple(idx.T)] = values.reshape(-1)
    return dense


def _graph(g: onnx_proto.GraphProto, arrays: Optional[list] = None) -> Graph:
    """The Graph of ``g``; ``arrays`` (per initializer, in order) are the main graph's
    initializers made already (None entries are read from ``g``)."""
    inits = {t.name: arrays[k] if arrays is not None and arrays[k] is not None else _tensor(t)
             for k, t in enumerate(g.initializer)}
    for sp in g.sparse_initializer:
        inits[sp.values.name] = _sparse_to_dense(sp)
    for arr in inits.values():
        arr.flags.writeable = False
    nodes = []
    for i, n in enumerate(g.node):
        attrs = {a.name: _attr_value(a) for a in n.attribute}
        nodes.append(Node(n.name or f"{n.op_type}_{i}", n.op_type, n.domain if n.domain != "ai.onnx" else "",
                          tuple(n.input), tuple(n.output), attrs))
    return Graph(
        name=g.name,
        nodes=nodes,
        inputs=[_value_info(v) for v in g.input if v.name not in inits],
        outputs=[_value_info(v) for v in g.output],
        initializers=inits,
        value_info={v.name: _value_info(v) for v in g.value_info},
        overridable=[_value_info(v) for v in g.input if v.name in inits],
    )


def session_copy(model: Model) -> Model:
    """``model`` with a main graph of its own to release initializers from (the arrays are
    shared, read-only): a session made from a caller's Model leaves that Model whole."""
    g = model.graph
    graph = dataclasses.replace(g, initializers=dict(g.initializers), released=dict(g.released), origin=None)
    return dataclasses.replace(model, graph=graph)


def load_model(model: Union[str, os.PathLike, bytes, bytearray, memoryview, onnx_proto.ModelProto],
               external_data_dir: Optional[Union[str, os.PathLike]] = None,
               initializers: Optional[Mapping[str, np.ndarray]] = None) -> Model:
    """Read a model from a path, serialized bytes or a ``ModelProto``, read its external data
    (from the model's directory, or ``external_data_dir`` for bytes and protos; see
    :mod:`dynashape.external_data`) and check it (:mod:`dynashape.validate`).

    The main graph's initializers are read once (:mod:`dynashape.weights`): from a path the
    file is memory-mapped and each array is a read-only view of the map where its data is
    aligned for its dtype, else an aligned copy; from ``bytes`` the same views (copies when
    the views would keep less than half of the buffer in use alive); from a ``bytearray`` or
    ``memoryview``, which the caller may change, copies; external data is mapped like a
    path. From a ``ModelProto`` (never modified) each array is ``numpy_helper.to_array``'s.

    Returns:
        the :class:`Model`: each initializer a read-only array of its dims and the numpy
        dtype of its element type (``ml_dtypes`` for bfloat16, float8 and 4-bit types),
        bit-equal to ``numpy_helper.to_array``; ``proto`` without initializer data.

    ``initializers`` (name -> array) replace the main graph's initializers of those names
    (``SessionOptions.add_initializer`` / ``add_external_initializers``): their data, inline or
    external, is not read (an external file need not exist); the array (a read-only view of
    it) is used. A name the graph has no initializer of is ignored.

    Raises:
        ModelLoadError: the file is missing or not a valid ONNX model (a truncated file
            names the initializer it cuts off; an initializer whose data does not fit its
            dims and type is named); its subclasses ExternalDataError (an unsafe or missing
            external-data reference) and those of :func:`dynashape.validate.validate_model`.
        InvalidArgumentError: a supplied initializer's dtype or shape is not the model's.
    """
    base_dir = os.fspath(external_data_dir) if external_data_dir is not None else None
    path = None
    source: Optional[_Source] = None
    originals = None
    try:
        if isinstance(model, onnx_proto.ModelProto):
            proto, originals = _skeleton(model), model.graph.initializer
        elif isinstance(model, (bytes, bytearray, memoryview)):
            proto, source = _parse(_flat(model), copy=not isinstance(model, bytes))
        elif isinstance(model, (str, os.PathLike)):
            if not os.path.exists(model):
                raise ModelFileNotFoundError(f"model file '{model}' does not exist")
            path = os.path.abspath(os.fspath(model))
            proto, source = _parse(map_file(os.fspath(model)), copy=False)
            if base_dir is None:
                base_dir = os.path.dirname(path)
        else:
            raise ModelLoadError(f"cannot load a model from {type(model).__name__}; "
                                 "expected a path, bytes or onnx.ModelProto")
    except ModelLoadError:
        raise
    except Exception as exc:
        if "MaxDepth" in str(exc):   # protobuf (upb) stops at 100 nested messages
            raise NestingLimitError("the model nests messages deeper than protobuf parses (100 levels: about 32 "
                                    f"levels of If/Loop/Scan bodies inside each other): {exc}") from exc
        raise ModelParseError(f"could not parse the ONNX model: {exc}") from exc
    opsets = {}
    for o in proto.opset_import:
        opsets["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    if "" not in opsets and proto.ir_version < 3:
        opsets[""] = 1
    supplied = _supplied_initializers(proto.graph.initializer, initializers) if initializers else {}
    external = load_external_data(proto, base_dir)
    validate_model(proto, opsets)
    try:
        arrays = _initializer_arrays(proto.graph.initializer, source, originals, external, supplied)
        graph = _graph(proto.graph, arrays)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not import graph '{proto.graph.name}': {exc}") from exc
    for t in proto.graph.initializer:
        for name in _DATA_FIELDS:
            t.ClearField(name)
    return Model(graph=graph, opsets=opsets, ir_version=int(proto.ir_version), proto=proto, path=path,
                 external_data=bool(external))


@dataclass(frozen=True)
class _Source:
    """The serialized model the initializers' data is read from: ``regions[k]`` is
    ``(offset, length)`` of initializer k's raw_data in ``buf`` (None: read from the proto);
    ``copy``: the caller may change ``buf`` (a bytearray / memoryview), so no views of it."""

    buf: Buffer
    regions: list
    copy: bool


def _flat(data: Union[bytes, bytearray, memoryview]) -> Buffer:
    """The bytes of a bytes-like object, indexable by byte (a copy only for a memoryview that
    is not contiguous)."""
    if isinstance(data, memoryview):
        try:
            return data.cast("B")
        except TypeError:
            return bytes(data)
    return data


def _parse(buf: Buffer, copy: bool) -> tuple[onnx_proto.ModelProto, Optional[_Source]]:
    """The ModelProto of ``buf``, parsed without the raw_data the scanner found; onnx parses
    the whole buffer where the scanner cannot read it (then no source: the proto holds all).

    Raises:
        ModelLoadError: a raw_data runs past the end of the file (:func:`weights.scan_model`).
        Exception: onnx's parse errors (protobuf's DecodeError, its nesting limit).
    """
    if LITTLE_ENDIAN:
        try:
            scan = scan_model(buf)
        except WireFormatError:
            scan = None
        if scan is not None:
            proto = onnx_proto.load_from_string(scan.stripped)
            if len(proto.graph.initializer) == len(scan.regions):
                return proto, _Source(buf, scan.regions, copy)
    return onnx_proto.load_from_string(bytes(buf)), None


def _supplied_initializers(inits, supplied: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Per initializer index, the caller's array replacing it (read-only views); those
    initializers lose their external-data reference so their files are never opened.

    Raises:
        InvalidArgumentError: an array's dtype or shape differs from the initializer's.
    """
    out = {}
    for k, t in enumerate(inits):
        arr = supplied.get(t.name)
        if arr is None:
            continue
        want = np_dtype(t.data_type)
        if arr.dtype != want and not (want == object and arr.dtype.kind in "OUS"):
            raise InvalidArgumentError(f"initializer '{t.name}': the supplied OrtValue is {arr.dtype}, the model's "
                                       f"initializer is {type_string(t.data_type)} (numpy {want})")
        if tuple(arr.shape) != tuple(t.dims):
            raise InvalidArgumentError(f"initializer '{t.name}': the supplied OrtValue has shape {list(arr.shape)}, "
                                       f"the model's initializer {list(t.dims)}")
        view = arr.view()
        view.flags.writeable = False
        out[k] = view
        del t.external_data[:]
        t.data_location = onnx_proto.TensorProto.DEFAULT
    return out


def _initializer_arrays(inits, source: Optional[_Source], originals, external: dict[int, Region],
                        supplied: Optional[dict[int, np.ndarray]] = None) -> list:
    """Per initializer of the main graph (``inits``, the parsed proto's), its array where it
    is made from a buffer: the caller's (``supplied``), the source's regions, external files
    (mapped), or the caller's ModelProto (``originals``); None where ``_graph`` reads it from
    ``inits``."""
    arrays: list = [None] * len(inits)
    files: dict[str, Buffer] = {}
    viewed: list[int] = []
    for k, t in enumerate(inits):
        if supplied and k in supplied:
            arrays[k] = supplied[k]
        elif k in external:
            path, offset, length = external[k]
            if path not in files:
                try:
                    files[path] = map_file(path)
                except OSError as exc:
                    raise ExternalDataError(f"external data of tensor '{t.name}': cannot read '{path}': {exc}") \
                        from exc
            if plain_dtype(t.data_type) is None or not LITTLE_ENDIAN:   # packed/string types: onnx reads them
                t.raw_data = bytes(files[path][offset:offset + length])
                del t.external_data[:]
                t.data_location = onnx_proto.TensorProto.DEFAULT
                continue
            arrays[k] = _from_region(t, files[path], offset, length, copy=False)
        elif source is not None and source.regions[k] is not None:
            offset, length = source.regions[k]
            arrays[k] = _from_region(t, source.buf, offset, length, copy=source.copy)
            if not arrays[k].flags.owndata:
                viewed.append(k)
        elif originals is not None:
            arrays[k] = _tensor(originals[k])
    if source is not None and isinstance(source.buf, bytes) and \
            2 * sum(arrays[k].nbytes for k in viewed) < len(source.buf):
        for k in viewed:        # views would keep a buffer mostly of copied or unused bytes alive
            arrays[k] = arrays[k].copy()
    # every page of the maps the scan and the copies touched leaves memory; a view's pages come
    # back from the page cache when a kernel reads them (a weight a packed copy replaces: never)
    for buf in list(files.values()) + ([source.buf] if source is not None else []):
        release_pages(buf, 0, len(buf))
    return arrays


def _from_region(t: onnx_proto.TensorProto, buf: Buffer, offset: int, length: int, copy: bool) -> np.ndarray:
    dtype = plain_dtype(t.data_type)
    assert dtype is not None
    try:
        return array_from_region(buf, offset, length, dtype, tuple(t.dims), copy)
    except ValueError as exc:
        raise _unreadable(t, "initializer", exc) from exc


def _skeleton(model: onnx_proto.ModelProto) -> onnx_proto.ModelProto:
    """A copy of ``model`` without the data of its main graph's initializers (what
    :attr:`Model.proto` holds); ``model`` is not modified."""
    out = onnx_proto.ModelProto()
    _copy_fields(model, out, ("graph",))
    if model.HasField("graph"):
        out.graph.SetInParent()
        _copy_fields(model.graph, out.graph, ("initializer",))
        for t in model.graph.initializer:
            _copy_fields(t, out.graph.initializer.add(), _DATA_FIELDS)
    return out


def _copy_fields(src, dst, skip: tuple) -> None:
    for fd, value in src.ListFields():
        if fd.name in skip:
            continue
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == 3   # LABEL_REPEATED
        if repeated and fd.message_type is not None:
            target = getattr(dst, fd.name)
            for item in value:      # CopyFrom copies at any depth; extend / MergeFrom parse (100 levels)
                target.add().CopyFrom(item)
        elif repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def input_dim_exprs(vi: ValueInfo, taken: set[str]) -> Optional[tuple[Dim, ...]]:
    """Symbolic shape of a graph input: ints, its dim_param symbols, and a fresh
    ``unk__<input>_<axis>`` symbol for each unknown dim (never colliding with ``taken``)."""
    if vi.dims is None:
        return None
    out: list[Dim] = []
    for axis, d in enumerate(vi.dims):
        if d.kind == FIXED:
            out.append(int(d.value))  # type: ignore[arg-type]
        elif d.kind == SYMBOLIC:
            out.append(sym(str(d.value)))
        else:
            name = f"unk__{vi.name}_{axis}"
            while name in taken:
                name += "_"
            taken.add(name)
            out.append(sym(name))
    return tuple(out)
