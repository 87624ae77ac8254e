"""``SessionOptions.optimized_model_filepath``: the model as dynashape runs it, written as ONNX.

What is written is the model as loaded with its constants folded, as the session folds them
(:mod:`dynashape.inference`: every deterministic node whose inputs are all constants becomes
an initializer; Constant nodes too) and the initializers no remaining node reads dropped.
Every remaining node is the model's own NodeProto (attributes and subgraphs as they were),
so the file is plain ONNX of the model's opsets, which dynashape and onnxruntime load.
dynashape's fusions (:mod:`dynashape.rewrite`) are not written: they are a session's
compilation, redone when the file is loaded. With ``optimization level ORT_DISABLE_ALL``
nothing is folded. Initializers the session was given (``add_initializer``) are written
with their given values; the IR version is raised to 4 where it is lower (initializers
that are not graph inputs need IR 4).

Session config entries (onnxruntime's names):
``session.optimized_model_external_initializers_file_name`` puts every initializer of at least
``session.optimized_model_external_initializers_min_size_in_bytes`` bytes (default 1024;
strings never) into that file, in the directory of the model file (IR.md "External Tensor
Data": ``location`` relative to the model). Both files are written to temporary names and
renamed into place, so a session whose weights are mapped from an old file of that name
keeps reading the old one.

Source: onnxruntime's SessionOptions reference, ``optimized_model_filepath``
(https://onnxruntime.ai/docs/api/python/api_summary.html#sessionoptions) and
onnxruntime/core/session/onnxruntime_session_options_config_keys.h.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

import numpy as np

from .errors import InvalidArgumentError
from .graph import prepare_graph
from .inference import fold_constants
from .model import Model
from .registry import Registry

__all__ = ["write_optimized_model", "EXTERNAL_FILE_KEY", "EXTERNAL_MIN_SIZE_KEY"]

EXTERNAL_FILE_KEY = "session.optimized_model_external_initializers_file_name"
EXTERNAL_MIN_SIZE_KEY = "session.optimized_model_external_initializers_min_size_in_bytes"
_ALIGN = 64


def write_optimized_model(model: Model, registry: Registry, path: str, config: Mapping[str, str], fold: bool,
                          memory_limit: Optional[int] = None) -> None:
    """Write ``model`` with its constants folded (see the module) to ``path``.

    Raises:
        InvalidArgumentError: a malformed min-size config entry, or an external file name that
            is not a plain file name.
        OSError: a file cannot be written.
    """
    from onnx import numpy_helper      # (only this option pays for importing onnx)

    overridable = {vi.name for vi in model.graph.overridable}
    pg = prepare_graph(model, registry)
    if fold:
        fold_constants(pg, registry, memory_limit=memory_limit, exclude={pg.slot[n] for n in overridable})
    proto = type(model.proto)()
    proto.CopyFrom(model.proto)
    if proto.ir_version < 4:
        proto.ir_version = 4
    by_outputs = {tuple(n.output): n for n in model.proto.graph.node}
    nodes = [by_outputs[tuple(pn.node.outputs)] for pn in pg.nodes]
    graph = proto.graph
    del graph.node[:]
    for n in nodes:
        graph.node.add().CopyFrom(n)
    del graph.initializer[:]
    del graph.sparse_initializer[:]     # (imported as dense initializers: written back as such)
    read = pg.read_slots() | {pg.slot[n] for n in overridable if n in pg.slot}
    tensors = []
    for slot in sorted(read):
        arr = pg.constants.get(slot)
        if arr is not None:
            tensors.append(numpy_helper.from_array(np.asarray(arr), pg.names[slot]))
    external = config.get(EXTERNAL_FILE_KEY, "")
    if external:
        _externalize(tensors, os.path.dirname(os.path.abspath(path)), external, _min_size(config))
    graph.initializer.extend(tensors)
    _replace(path, proto.SerializeToString())


def _min_size(config: Mapping[str, str]) -> int:
    text = config.get(EXTERNAL_MIN_SIZE_KEY, "1024")
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"session config entry '{EXTERNAL_MIN_SIZE_KEY}' must be an int, got "
                                   f"{text!r}") from None


def _externalize(tensors: list, directory: str, name: str, min_size: int) -> None:
    """Move the raw data of the tensors of at least ``min_size`` bytes to ``directory/name``."""
    if os.path.basename(name) != name or name in ("", ".", ".."):
        raise InvalidArgumentError(f"session config entry '{EXTERNAL_FILE_KEY}' must be a file name (written next "
                                   f"to the model), got {name!r}")
    from onnx import TensorProto

    chunks: list[bytes] = []
    offset = 0
    for t in tensors:
        if t.data_type == TensorProto.STRING or not t.HasField("raw_data") or len(t.raw_data) < min_size:
            continue
        pad = -offset % _ALIGN
        chunks.append(b"\0" * pad)
        offset += pad
        data = t.raw_data
        for key, value in (("location", name), ("offset", str(offset)), ("length", str(len(data)))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        chunks.append(data)
        offset += len(data)
    _replace(os.path.join(directory, name), b"".join(chunks))


def _replace(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` by a rename (a mapped old file keeps its bytes)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
