"""Import: an ONNX model (path, bytes or ModelProto) as a :class:`Graph` of plain objects.

Each input dim keeps its kind (ONNX IR.md "Tensor shapes"): fixed (``dim_value``),
symbolic (``dim_param``) or unknown (neither, or a negative ``dim_value``: exporters such as
Paddle2ONNX write -1 for a free dim, and onnxruntime reads it as unknown; 0 is a real,
empty dim). Graph inputs that are also initializers are not model inputs but
``Graph.overridable`` (IR.md: defaults that may be overridden): a run that feeds one
overrides it, as in onnxruntime (``InferenceSession.get_overridable_initializers``); a run
that does not uses the initializer as a constant.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from .dtypes import OptionalType, SequenceType, np_dtype, type_string, value_type_string
from .errors import ModelLoadError, NestingLimitError
from .external_data import external_tensors, load_external_data
from .symbolic import Dim, sym
from .validate import validate_model

__all__ = ["DimSpec", "ValueInfo", "Node", "Graph", "Model", "load_model", "FIXED", "SYMBOLIC", "UNKNOWN"]

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
    """A (sub)graph. ``inputs`` are the real inputs (initializers excluded)."""

    name: str
    nodes: list[Node]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    initializers: dict[str, np.ndarray]
    value_info: dict[str, ValueInfo]
    #: initializers also listed as graph inputs: defaults a feed may override (IR.md)
    overridable: list[ValueInfo] = field(default_factory=list)

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
    graph: Graph
    opsets: dict[str, int]
    ir_version: int
    proto: onnx.ModelProto


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


def model_metadata(proto: onnx.ModelProto) -> ModelMetadata:
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


def type_of(t: onnx.TypeProto) -> Any:
    """The engine's type of an ONNX TypeProto: a numpy dtype for a tensor (None when its
    elem type is undefined), :class:`SequenceType` / :class:`OptionalType` for containers
    (element types nested), None for anything else (maps, opaque, an empty TypeProto)."""
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(t, kind).elem_type
        return np_dtype(elem) if elem else None
    if kind == "sequence_type":
        return SequenceType(type_of(t.sequence_type.elem_type) if t.sequence_type.HasField("elem_type") else None)
    if kind == "optional_type":
        return OptionalType(type_of(t.optional_type.elem_type) if t.optional_type.HasField("elem_type") else None)
    return None


def _value_info(vi: onnx.ValueInfoProto) -> ValueInfo:
    t = vi.type
    if t.HasField("tensor_type"):
        return ValueInfo(vi.name, t.tensor_type.elem_type, _dims(t.tensor_type))
    if t.HasField("sparse_tensor_type"):
        return ValueInfo(vi.name, t.sparse_tensor_type.elem_type, _dims(t.sparse_tensor_type))
    if t.HasField("sequence_type") or t.HasField("optional_type"):
        elem_dims = None
        if t.HasField("optional_type") and t.optional_type.elem_type.HasField("tensor_type"):
            elem_dims = _dims(t.optional_type.elem_type.tensor_type)
        return ValueInfo(vi.name, 0, None, value_type=type_of(t), elem_dims=elem_dims)
    return ValueInfo(vi.name, 0, None)


def _attr_value(a: onnx.AttributeProto) -> Any:
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


def _tensor(t: onnx.TensorProto, what: str = "initializer") -> np.ndarray:
    """The array of a TensorProto; ModelLoadError naming it when its data does not fit its
    dims and type."""
    try:
        return numpy_helper.to_array(t)
    except Exception as exc:  # noqa: BLE001 - numpy's or onnx's message, put in context
        kind = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in _DATA_TYPES else t.data_type
        raise ModelLoadError(f"{what} '{t.name}' ({kind}, dims {list(t.dims)}) cannot be read: its data does not "
                             f"match its type and dims ({type(exc).__name__}: {exc})") from exc


_DATA_TYPES = set(onnx.TensorProto.DataType.values())


def _sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
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


def _graph(g: onnx.GraphProto) -> Graph:
    inits = {t.name: _tensor(t) for t in g.initializer}
    for sp in g.sparse_initializer:
        inits[sp.values.name] = _sparse_to_dense(sp)
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


def load_model(model: Union[str, os.PathLike, bytes, onnx.ModelProto],
               external_data_dir: Optional[Union[str, os.PathLike]] = None) -> Model:
    """Read a model from a path, serialized bytes or a ``ModelProto``, read its external data
    (from the model's directory, or ``external_data_dir`` for bytes and protos; see
    :mod:`dynashape.external_data`) and check it (:mod:`dynashape.validate`). A given
    ``ModelProto`` is never modified.

    Raises:
        ModelLoadError: the file is missing or not a valid ONNX model; its subclasses
            ExternalDataError (an unsafe or missing external-data reference) and those of
            :func:`dynashape.validate.validate_model`.
    """
    base_dir = os.fspath(external_data_dir) if external_data_dir is not None else None
    try:
        if isinstance(model, onnx.ModelProto):
            proto = model
            if next(external_tensors(proto), None) is not None:
                proto = onnx.ModelProto()
                proto.CopyFrom(model)
        elif isinstance(model, (bytes, bytearray, memoryview)):
            proto = onnx.load_from_string(bytes(model))
        elif isinstance(model, (str, os.PathLike)):
            if not os.path.exists(model):
                raise ModelLoadError(f"model file '{model}' does not exist")
            proto = onnx.load(os.fspath(model), load_external_data=False)
            if base_dir is None:
                base_dir = os.path.dirname(os.path.abspath(os.fspath(model)))
        else:
            raise ModelLoadError(f"cannot load a model from {type(model).__name__}; "
                                 "expected a path, bytes or onnx.ModelProto")
    except ModelLoadError:
        raise
    except Exception as exc:
        if "MaxDepth" in str(exc):   # protobuf (upb) stops at 100 nested messages
            raise NestingLimitError("the model nests messages deeper than protobuf parses (100 levels: about 32 "
                                    f"levels of If/Loop/Scan bodies inside each other): {exc}") from exc
        raise ModelLoadError(f"could not parse the ONNX model: {exc}") from exc
    opsets = {}
    for o in proto.opset_import:
        opsets["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    if "" not in opsets and proto.ir_version < 3:
        opsets[""] = 1
    load_external_data(proto, base_dir)
    validate_model(proto, opsets)
    try:
        graph = _graph(proto.graph)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not import graph '{proto.graph.name}': {exc}") from exc
    return Model(graph=graph, opsets=opsets, ir_version=int(proto.ir_version), proto=proto)


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
