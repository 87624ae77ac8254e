"""External data read from inside one directory only (ONNX IR.md "External Tensor Data").

A tensor stored outside the model names its file by ``location``, relative to the model's
directory. A model is untrusted input, so every reference — dense initializers, both parts
of a sparse initializer, tensors in node attributes (``Constant``'s ``value``, ``TENSORS``
lists, sparse attributes), in any subgraph and in the model's functions — must resolve to a
regular file inside that directory (or inside the ``external_data_dir`` given for a model
loaded from bytes): an absolute path, a ``..`` component, or a symlink whose target lies
outside raises :class:`~dynashape.errors.ExternalDataError`, as does a missing file or an
``offset``/``length`` past its end.

The main graph's initializers are not read here: :func:`load_external_data` returns where
their bytes lie (:func:`external_region`, every check above made) and the import makes each
array from a read-only memory map of its file (:mod:`dynashape.weights`: a view where the
data is aligned, else a copy). The other external tensors (sparse initializers, attributes,
subgraphs, functions; small) are read into the tensor (``raw_data``) at load. A file must
therefore not be rewritten in place while a session made from it lives (replacing it by a
rename is safe), as with onnxruntime's memory-mapped external data.
"""
from __future__ import annotations

import os
from typing import Iterator, Optional

from . import onnx_proto
from .onnx_proto import AttributeProto, TensorProto

from .errors import ExternalDataError

__all__ = ["external_tensors", "load_external_data", "resolve_location", "external_region", "Region"]

#: where a tensor's external bytes lie: (real path, offset, length)
Region = tuple[str, int, int]


def external_tensors(model: onnx_proto.ModelProto, main_initializers: bool = True) -> Iterator[TensorProto]:
    """Every TensorProto of the model whose data is external (graphs walked iteratively);
    ``main_initializers=False`` leaves out the dense initializers of the main graph."""
    graphs: list = []
    for fn in model.functions:
        yield from _node_tensors(fn.node, graphs)
    yield from _graph_tensors(model.graph, graphs, main_initializers)
    while graphs:
        yield from _graph_tensors(graphs.pop(), graphs, True)


def _graph_tensors(g: onnx_proto.GraphProto, graphs: list, initializers: bool) -> Iterator[TensorProto]:
    """The external tensors of ``g`` itself; its subgraphs are appended to ``graphs``."""
    for t in g.initializer if initializers else ():
        if _is_external(t):
            yield t
    for sp in g.sparse_initializer:
        for t in (sp.values, sp.indices):
            if _is_external(t):
                yield t
    yield from _node_tensors(g.node, graphs)


def _node_tensors(nodes, graphs: list) -> Iterator[TensorProto]:
    for node in nodes:
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR:
                tensors = [a.t]
            elif a.type == AttributeProto.TENSORS:
                tensors = list(a.tensors)
            elif a.type == AttributeProto.SPARSE_TENSOR:
                tensors = [a.sparse_tensor.values, a.sparse_tensor.indices]
            elif a.type == AttributeProto.SPARSE_TENSORS:
                tensors = [t for sp in a.sparse_tensors for t in (sp.values, sp.indices)]
            else:
                tensors = []
                if a.type == AttributeProto.GRAPH:
                    graphs.append(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    graphs.extend(a.graphs)
            yield from (t for t in tensors if _is_external(t))


def _is_external(t: TensorProto) -> bool:
    return t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL


def resolve_location(base_dir: str, location: str, tensor: str) -> str:
    """The real path of ``location`` under ``base_dir``.

    Raises:
        ExternalDataError: empty, absolute, with a ``..`` component, leaving ``base_dir``
            through a symlink, or not a regular file.
    """
    where = f"external data of tensor '{tensor}' (location '{location}')"
    if not location:
        raise ExternalDataError(f"{where}: the location is empty")
    parts = location.replace("\\", "/").split("/")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or os.path.splitdrive(location)[0]:
        raise ExternalDataError(f"{where}: an absolute path is not allowed; locations are relative to the "
                                "model's directory")
    if ".." in parts:
        raise ExternalDataError(f"{where}: '..' is not allowed; the file must lie in the model's directory")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise ExternalDataError(f"{where}: the path leaves the model's directory '{root}' through a symlink "
                                f"(it resolves to '{path}')")
    if not os.path.isfile(path):
        raise ExternalDataError(f"{where}: no such file '{path}'")
    return path


def load_external_data(model: onnx_proto.ModelProto, base_dir: Optional[str]) -> dict[int, Region]:
    """Check every external reference of ``model`` and read the external tensors other than
    the main graph's initializers (in place) from under ``base_dir``.

    Returns:
        ``{index in model.graph.initializer: (path, offset, length)}`` for the main graph's
        external initializers, checked but not read (their ``raw_data`` stays empty).

    Raises:
        ExternalDataError: a reference is unsafe, missing or out of its file's bounds, or
            the model has external data and ``base_dir`` is None (bytes given alone).
    """
    regions = {k: external_region(t, base_dir) for k, t in enumerate(model.graph.initializer) if _is_external(t)}
    for t in external_tensors(model, main_initializers=False):
        path, offset, length = external_region(t, base_dir)
        t.raw_data = _read(path, offset, length)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
    return regions


def external_region(t: TensorProto, base_dir: Optional[str]) -> Region:
    """Where the external bytes of ``t`` lie: ``(real path, offset, length)``, length the
    rest of the file when the reference gives none.

    Raises:
        ExternalDataError: ``base_dir`` is None, or the location is unsafe or missing
            (:func:`resolve_location`), or the bytes lie outside the file.
    """
    location, offset, length = _reference(t)
    if base_dir is None:
        raise ExternalDataError(f"tensor '{t.name}' has external data ('{location}') but the model was "
                                "given as bytes or a ModelProto: pass external_data_dir= (the directory of "
                                "its data files), or load it from its path")
    path = resolve_location(base_dir, location, t.name)
    size = os.path.getsize(path)
    if offset < 0 or (length is not None and length < 0):
        raise ExternalDataError(f"external data of tensor '{t.name}': negative offset {offset} or length {length}")
    end = size if length is None else offset + length
    if end > size or offset > size:
        raise ExternalDataError(f"external data of tensor '{t.name}': bytes [{offset}, {end}) lie past the end "
                                f"of '{path}' ({size} bytes)")
    return path, offset, end - offset


def _reference(t: TensorProto) -> tuple[str, int, Optional[int]]:
    """``(location, offset, length)`` of a tensor's ``external_data`` entries (onnx.proto,
    TensorProto.external_data: ``location``, ``offset``, ``length``; offset 0 and length None,
    the rest of the file, where absent or empty)."""
    entries = {e.key: e.value for e in t.external_data}
    try:
        offset = int(entries.get("offset") or 0)
        length = int(entries["length"]) if entries.get("length") else None
    except ValueError as exc:
        raise ExternalDataError(f"external data of tensor '{t.name}': offset {entries.get('offset')!r} or length "
                                f"{entries.get('length')!r} is not an integer") from exc
    return entries.get("location", ""), offset, length


def _read(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)
