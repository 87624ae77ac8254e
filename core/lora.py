"""LoRA adapters: onnxruntime's ``.onnx_adapter`` files, ``AdapterFormat`` and ``LoraAdapter``.

An adapter file holds named tensors (the LoRA parameters) and two version numbers. A run
whose ``RunOptions`` has ``add_active_adapter(adapter)`` feeds the adapter's tensors as the
inputs (or overridable initializers) of those names; a feed the caller gives by the same
name wins.

The file is a FlatBuffer (identifier ``TORT``) of onnxruntime's schema
(onnxruntime/lora/adapter_format/adapter_schema.fbs)::

    table Parameter { name: string; dims: [int64]; data_type: int32; raw_data: [uint8] (force_align: 8); }
    table Adapter { format_version: int32; adapter_version: int32; model_version: int32; parameters: [Parameter]; }

read and written here with ``struct`` (little-endian), so files move between dynashape and
onnxruntime either way.

Source: onnxruntime's Python API reference, "LoRA adapters"
(https://onnxruntime.ai/docs/api/python/api_summary.html), the schema above, and the
FlatBuffers binary format (https://flatbuffers.dev/internals/).
"""
from __future__ import annotations

import os
import struct
from typing import Any, Mapping, Optional

import numpy as np

from .dtypes import np_dtype, onnx_type
from .errors import InvalidArgumentError, ModelParseError
from .ortvalue import OrtValue, c_contiguous

__all__ = ["AdapterFormat", "LoraAdapter", "FORMAT_VERSION", "read_adapter_file", "write_adapter_file",
           "adapter_feeds"]

#: onnxruntime's adapter format version (adapter_format_version.h)
FORMAT_VERSION = 1
_IDENT = b"TORT"


# reading ----------------------------------------------------------------------------
class _Table:
    """A FlatBuffers table at ``pos`` of ``buf``: its fields by index."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vt_size = struct.unpack_from("<H", buf, self.vtable)[0]

    def _field(self, index: int) -> int:
        slot = 4 + 2 * index
        if slot >= self.vt_size:
            return 0
        off = struct.unpack_from("<H", self.buf, self.vtable + slot)[0]
        return self.pos + off if off else 0

    def int32(self, index: int, default: int = 0) -> int:
        at = self._field(index)
        return struct.unpack_from("<i", self.buf, at)[0] if at else default

    def _target(self, index: int) -> int:
        at = self._field(index)
        return at + struct.unpack_from("<I", self.buf, at)[0] if at else 0

    def vector(self, index: int) -> tuple[int, int]:
        """(position of the first element, element count); (0, 0) when absent."""
        at = self._target(index)
        return (at + 4, struct.unpack_from("<I", self.buf, at)[0]) if at else (0, 0)

    def string(self, index: int) -> str:
        start, n = self.vector(index)
        return self.buf[start:start + n].decode("utf-8")

    def tables(self, index: int) -> list["_Table"]:
        start, n = self.vector(index)
        return [_Table(self.buf, start + 4 * k + struct.unpack_from("<I", self.buf, start + 4 * k)[0])
                for k in range(n)]


def read_adapter_file(data: bytes) -> tuple[int, int, int, dict[str, np.ndarray]]:
    """``(format_version, adapter_version, model_version, {name: array})`` of an adapter
    file's bytes (each array a copy, of its dims and element type).

    Raises:
        ModelParseError: not an adapter file (identifier, offsets or sizes that do not fit).
    """
    try:
        if len(data) < 8 or data[4:8] != _IDENT:
            raise ValueError("the file identifier is not 'TORT'")
        root = _Table(data, struct.unpack_from("<I", data, 0)[0])
        versions = (root.int32(0), root.int32(1), root.int32(2))
        params = {}
        for p in root.tables(3):
            name = p.string(0)
            dstart, ndims = p.vector(1)
            dims = struct.unpack_from(f"<{ndims}q", data, dstart) if ndims else ()
            dtype = np_dtype(p.int32(2))
            rstart, nbytes = p.vector(3)
            count = int(np.prod(dims, dtype=np.int64))
            if nbytes != count * dtype.itemsize or rstart + nbytes > len(data):
                raise ValueError(f"parameter '{name}': {nbytes} bytes of data for {list(dims)} x {dtype}")
            params[name] = np.frombuffer(data, dtype=dtype, count=count, offset=rstart).reshape(dims).copy()
        return versions[0], versions[1], versions[2], params
    except (struct.error, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise ModelParseError(f"not a valid onnx_adapter file: {exc}") from None


# writing ----------------------------------------------------------------------------
class _Writer:
    """A FlatBuffer written front to back: every table's children after it (unsigned
    offsets point forward), its vtable right after its slots."""

    def __init__(self) -> None:
        self.buf = bytearray(8)

    def _pad(self, align: int, extra: int = 0) -> None:
        self.buf.extend(b"\0" * (-(len(self.buf) + extra) % align))

    def _patch_offset(self, slot: int, target: int) -> None:
        struct.pack_into("<I", self.buf, slot, target - slot)

    def table(self, fields: list) -> int:
        """Write a table of 4-byte fields: ints as they are, callables as children (each
        called after the table to write itself, returning its position)."""
        self._pad(4)
        pos = len(self.buf)
        self.buf.extend(b"\0" * (4 + 4 * len(fields)))
        vtable = len(self.buf)
        self.buf.extend(struct.pack(f"<HH{len(fields)}H", 4 + 2 * len(fields), 4 + 4 * len(fields),
                                    *(4 + 4 * k for k in range(len(fields)))))
        struct.pack_into("<i", self.buf, pos, pos - vtable)
        for k, value in enumerate(fields):
            if not callable(value):
                struct.pack_into("<i", self.buf, pos + 4 + 4 * k, int(value))
        for k, value in enumerate(fields):
            if callable(value):
                self._patch_offset(pos + 4 + 4 * k, value())
        return pos

    def blob(self, data: bytes, align: int, count: Optional[int] = None, terminate: bool = False) -> int:
        """A vector (its ``count`` elements of ``data``) with elements aligned to ``align``."""
        self._pad(max(align, 4), 4)
        pos = len(self.buf)
        self.buf.extend(struct.pack("<I", len(data) if count is None else count))
        self.buf.extend(data)
        if terminate:
            self.buf.append(0)
        return pos

    def tables(self, items: list[list]) -> int:
        self._pad(4)
        pos = len(self.buf)
        self.buf.extend(struct.pack("<I", len(items)) + b"\0" * (4 * len(items)))
        for k, fields in enumerate(items):
            self._patch_offset(pos + 4 + 4 * k, self.table(fields))
        return pos


def write_adapter_file(adapter_version: int, model_version: int, params: Mapping[str, np.ndarray]) -> bytes:
    """The bytes of an adapter file holding ``params`` (numeric arrays; names in order).

    Raises:
        InvalidArgumentError: a string or object array (adapters hold numeric tensors).
    """
    w = _Writer()
    items = []
    for name, arr in params.items():
        a = c_contiguous(np.asarray(arr))
        if a.dtype.kind in "OUS":
            raise InvalidArgumentError(f"adapter parameter '{name}': string tensors cannot be stored in an adapter")
        elem = onnx_type(a.dtype)
        items.append([lambda n=name: w.blob(n.encode("utf-8"), 1, terminate=True),
                      lambda a=a: w.blob(struct.pack(f"<{a.ndim}q", *a.shape), 8, a.ndim),
                      elem,
                      lambda a=a: w.blob(a.tobytes(), 8)])
    root = w.table([FORMAT_VERSION, adapter_version, model_version, lambda: w.tables(items)])
    struct.pack_into("<I", w.buf, 0, root)
    w.buf[4:8] = _IDENT
    return bytes(w.buf)


# the API -----------------------------------------------------------------------------
class AdapterFormat:
    """An adapter's contents: versions and named parameters (OrtValues), read from or
    exported to a ``.onnx_adapter`` file."""

    def __init__(self, adapter: Optional["AdapterFormat"] = None) -> None:
        self._format_version = FORMAT_VERSION
        self._adapter_version = 0
        self._model_version = 0
        self._params: dict[str, OrtValue] = {}
        if adapter is not None:
            self._format_version, self._adapter_version, self._model_version, self._params = (
                adapter._format_version, adapter._adapter_version, adapter._model_version, dict(adapter._params))

    @staticmethod
    def read_adapter(file_path: "os.PathLike | str") -> "AdapterFormat":
        """The adapter stored at ``file_path``.

        Raises:
            OSError: the file cannot be read. ModelParseError: not an adapter file.
        """
        with open(file_path, "rb") as f:
            fmt, adapter_version, model_version, params = read_adapter_file(f.read())
        out = AdapterFormat()
        out._format_version, out._adapter_version, out._model_version = fmt, adapter_version, model_version
        out._params = {name: OrtValue.ortvalue_from_numpy(arr) for name, arr in params.items()}
        return out

    def export_adapter(self, file_path: "os.PathLike | str") -> None:
        """Write the adapter to ``file_path``.

        Raises:
            OSError: the file cannot be written. InvalidArgumentError: a string parameter.
        """
        data = write_adapter_file(self._adapter_version, self._model_version,
                                  {name: v.numpy() for name, v in self._params.items()})
        with open(file_path, "wb") as f:
            f.write(data)

    def get_format_version(self) -> int:
        return self._format_version

    def set_adapter_version(self, adapter_version: int) -> None:
        self._adapter_version = int(adapter_version)

    def get_adapter_version(self) -> int:
        return self._adapter_version

    def set_model_version(self, model_version: int) -> None:
        self._model_version = int(model_version)

    def get_model_version(self) -> int:
        return self._model_version

    def set_parameters(self, params: Mapping[str, OrtValue]) -> None:
        """Set the parameters (name -> tensor OrtValue).

        Raises:
            InvalidArgumentError: a value that is not a tensor OrtValue.
        """
        for name, value in params.items():
            if not isinstance(value, OrtValue) or not value.is_tensor():
                raise InvalidArgumentError(f"adapter parameter '{name}' must be a tensor OrtValue, got {value!r}")
        self._params = dict(params)

    def get_parameters(self) -> dict[str, OrtValue]:
        return dict(self._params)


class LoraAdapter:
    """A LoRA adapter loaded for runs: ``adapter.Load(path)`` (or ``LoraAdapter.create_from_file``),
    then ``run_options.add_active_adapter(adapter)``."""

    def __init__(self) -> None:
        self._params: dict[str, np.ndarray] = {}

    def Load(self, file_path: "os.PathLike | str") -> None:  # noqa: N802 (onnxruntime's name)
        """Read the adapter at ``file_path`` (replacing what was loaded).

        Raises:
            OSError: the file cannot be read. ModelParseError: not an adapter file.
        """
        with open(file_path, "rb") as f:
            self._params = read_adapter_file(f.read())[3]
        for arr in self._params.values():
            arr.flags.writeable = False

    @staticmethod
    def create_from_file(file_path: "os.PathLike | str") -> "LoraAdapter":
        adapter = LoraAdapter()
        adapter.Load(file_path)
        return adapter

    def parameters(self) -> dict[str, np.ndarray]:
        """The adapter's tensors by name (read-only arrays)."""
        return dict(self._params)


def adapter_feeds(adapters: list, input_feed: Mapping[str, Any]) -> dict:
    """``input_feed`` with the active adapters' parameters added: a later adapter's value wins
    over an earlier one's, the caller's feed over both. A parameter the model has no input (or
    overridable initializer) of is then an unknown input name, as in onnxruntime."""
    feeds: dict = {}
    for adapter in adapters:
        feeds.update(adapter.parameters())
    feeds.update(input_feed)
    return feeds
