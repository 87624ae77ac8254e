"""Initializer data as views of the model's bytes, read once (protobuf's wire format).

A serialized ``ModelProto`` is scanned, without parsing it, for the ``raw_data`` of each
initializer of its main graph (ModelProto field 7 ``graph``, GraphProto field 5
``initializer``, TensorProto field 9 ``raw_data``; onnx/onnx.proto): :func:`scan_model`
returns where each lies in the buffer and a copy of the model *without* those fields (the
enclosing messages' lengths re-encoded), small enough that onnx parses it at once. The
arrays are then made from the buffer (:func:`array_from_region`): a read-only view where the
data is aligned for its dtype, else an aligned copy after which the pages of a memory-mapped
file that the tensor covers are released (:func:`release_pages`), so a load holds about one
copy of the weights plus one tensor.

Only plain element types take this path (:func:`plain_dtype`: fixed-size elements, as
``numpy.frombuffer`` reads them); strings, the packed 4-, 2- and 6-bit types, segmented or
external tensors and tensors whose data is in typed fields (``float_data``, ...) keep their
data in the parsed proto and are read by ``onnx.numpy_helper.to_array``.

Sources: https://protobuf.dev/programming-guides/encoding/ (varints, tags, wire types;
the last value of a non-repeated field wins), ONNX IR.md "Tensors" (raw_data is little-endian).
"""
from __future__ import annotations

import mmap
import os
import stat
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Union

import numpy as np
from .onnx_proto import TensorProto

from .dtypes import np_dtype
from .errors import ModelLoadError, ModelParseError

__all__ = ["Scan", "WireFormatError", "scan_model", "plain_dtype", "map_file", "array_from_region",
           "release_pages", "release_view", "aligned_copy", "LITTLE_ENDIAN"]

#: ONNX raw data is little-endian; on a big-endian machine every tensor takes onnx's path
LITTLE_ENDIAN = sys.byteorder == "little"

Buffer = Union[bytes, bytearray, memoryview, mmap.mmap]

# field numbers (onnx.proto) and wire types (protobuf encoding)
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DATA_TYPE, _TENSOR_SEGMENT, _TENSOR_NAME, _TENSOR_RAW_DATA, _TENSOR_DATA_LOCATION = 2, 3, 8, 9, 14
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5

_PACKED_TYPES = frozenset(getattr(TensorProto, n) for n in ("UINT4", "INT4", "FLOAT4E2M1", "UINT2", "INT2",
                                                             "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n))


class WireFormatError(Exception):
    """The bytes are not a ModelProto the scanner understands (malformed, or encoded with
    protobuf features it does not read, such as groups): the caller parses them whole."""


@dataclass(frozen=True)
class Scan:
    """What :func:`scan_model` found.

    ``stripped``: the serialized model without the ``raw_data`` fields of ``regions``;
    ``regions``: per initializer of the main graph, in order, ``(offset, length)`` of its
    ``raw_data`` in the scanned buffer (bytes), or None where its data stayed in ``stripped``.
    """

    stripped: bytes
    regions: list


@lru_cache(maxsize=None)
def plain_dtype(elem_type: int) -> Optional[np.dtype]:
    """The numpy dtype of an element type whose raw_data is an array of fixed-size elements
    (float32/64/16, bfloat16, the float8 types, ints, bools, complex), None for the others
    (undefined, string, packed 4/2/6-bit types, types this onnx or ml_dtypes does not know)."""
    if elem_type in (TensorProto.UNDEFINED, TensorProto.STRING) or elem_type in _PACKED_TYPES:
        return None
    try:
        dt = np_dtype(elem_type)
    except TypeError:
        return None
    return dt if dt.kind != "O" and dt.itemsize > 0 else None


def _varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WireFormatError("a varint runs past the end of its message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireFormatError("a varint is longer than 10 bytes")


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _skip(buf: Buffer, pos: int, end: int, wire_type: int) -> int:
    """The position after a field's value that starts at ``pos``."""
    if wire_type == _VARINT:
        return _varint(buf, pos, end)[1]
    if wire_type == _I64:
        pos += 8
    elif wire_type == _I32:
        pos += 4
    elif wire_type == _LEN:
        n, pos = _varint(buf, pos, end)
        pos += n
    else:
        raise WireFormatError(f"wire type {wire_type} (groups are not scanned)")
    if pos > end:
        raise WireFormatError("a field runs past the end of its message")
    return pos


def _tag(buf: Buffer, pos: int, end: int) -> tuple[int, int, int]:
    tag, pos = _varint(buf, pos, end)
    if tag >> 3 == 0:
        raise WireFormatError("field number 0")
    return tag >> 3, tag & 7, pos


class _Scanner:
    def __init__(self, buf: Buffer):
        self.buf = buf
        self.size = len(buf)
        self.regions: list = []

    def model(self) -> bytes:
        buf, n = self.buf, self.size
        parts: list = []
        pos = copied = 0
        while pos < n:
            field, wire_type, p = _tag(buf, pos, n)
            if field != _MODEL_GRAPH or wire_type != _LEN:
                pos = _skip(buf, p, n, wire_type)
                continue
            length, p = _varint(buf, p, n)
            if p + length > n:          # the file ends inside the graph: name the tensor it cut, if any
                self.graph(p, n, clipped=True)
                raise WireFormatError("the graph runs past the end of the file")
            body = self.graph(p, p + length)
            parts += [buf[copied:pos], _encode_varint(field << 3 | _LEN), _encode_varint(len(body)), body]
            pos = copied = p + length
        parts.append(buf[copied:n])
        return b"".join(parts)

    def graph(self, start: int, end: int, clipped: bool = False) -> bytes:
        buf = self.buf
        parts: list = []
        pos = copied = start
        while pos < end:
            field, wire_type, p = _tag(buf, pos, end)
            if field != _GRAPH_INITIALIZER or wire_type != _LEN:
                pos = _skip(buf, p, end, wire_type)
                continue
            length, p = _varint(buf, p, end)
            if p + length > end:
                if clipped:
                    self.tensor(p, end, clipped=True)
                raise WireFormatError("an initializer runs past the end of its graph")
            body = self.tensor(p, p + length)
            if body is not None:
                parts += [buf[copied:pos], _encode_varint(field << 3 | _LEN), _encode_varint(len(body)), body]
                copied = p + length
            pos = p + length
        parts.append(buf[copied:end])
        return b"".join(parts)

    def tensor(self, start: int, end: int, clipped: bool = False) -> Optional[bytes]:
        """The tensor without its raw_data (None: keep it as it is); records its region."""
        buf = self.buf
        raw: list = []                  # (field start, field end, data offset, data length)
        data_type, name, external, segment = 0, None, False, False
        pos = start
        while pos < end:
            field_start = pos
            field, wire_type, p = _tag(buf, pos, end)
            if wire_type == _LEN:
                length, p = _varint(buf, p, end)
                if p + length > end:
                    if field == _TENSOR_RAW_DATA:
                        raise self._truncated(name, p, length, end, clipped)
                    raise WireFormatError("a tensor field runs past the end of its message")
                if field == _TENSOR_RAW_DATA:
                    raw.append((field_start, p + length, p, length))
                elif field == _TENSOR_NAME:
                    name = bytes(buf[p:p + length]).decode("utf-8", errors="replace")
                elif field == _TENSOR_SEGMENT:
                    segment = True
                pos = p + length
            elif wire_type == _VARINT and field in (_TENSOR_DATA_TYPE, _TENSOR_DATA_LOCATION):
                value, pos = _varint(buf, p, end)
                if field == _TENSOR_DATA_TYPE:
                    data_type = value
                else:
                    external = value == TensorProto.EXTERNAL
            else:
                pos = _skip(buf, p, end, wire_type)
        if clipped:
            raise WireFormatError("the file ends inside a tensor")
        if not raw or external or segment or plain_dtype(data_type) is None:
            self.regions.append(None)
            return None
        self.regions.append(raw[-1][2:])        # the last raw_data wins, as protobuf parses it
        parts, copied = [], start
        for field_start, field_end, _, _ in raw:
            parts.append(buf[copied:field_start])
            copied = field_end
        parts.append(buf[copied:end])
        return b"".join(parts)

    def _truncated(self, name: Optional[str], offset: int, length: int, end: int, clipped: bool) -> ModelLoadError:
        which = f"'{name}'" if name is not None else f"number {len(self.regions)} (0-based; its name comes later)"
        where = f"the end of the file ({self.size} bytes)" if clipped or end >= self.size else \
            f"the end of its TensorProto (byte {end})"
        return ModelParseError(f"could not parse the ONNX model: initializer {which} is cut off: its raw_data of "
                               f"{length} bytes at byte {offset} runs past {where}")


def scan_model(buf: Buffer) -> Scan:
    """Find the raw_data of every initializer of the main graph of the serialized model ``buf``.

    Raises:
        ModelLoadError: an initializer's raw_data runs past the end of the file or of its
            TensorProto (a truncated or corrupt file), naming the tensor.
        WireFormatError: anything else the scanner does not read (the caller parses ``buf``
            with onnx, which accepts it or reports its own error).
    """
    scanner = _Scanner(buf)
    stripped = scanner.model()
    return Scan(stripped, scanner.regions)


def map_file(path: str) -> Buffer:
    """The file's bytes: a read-only memory map of a regular, non-empty file, else its
    contents read (an empty file, a pipe, a device).

    Raises:
        OSError: it cannot be opened or read.
    """
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            try:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):   # a file system without mmap: read it
                pass
        return f.read()


def release_pages(buf: Buffer, offset: int, length: int) -> None:
    """Drop the pages of a memory map that lie wholly inside ``[offset, offset + length)``
    from this process (``MADV_DONTNEED``; a read-only file mapping reads them from the file
    again if they are touched). Nothing for other buffers or where madvise is missing."""
    if not isinstance(buf, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    start = -(-offset // page) * page
    stop = (offset + length) // page * page
    if stop > start:
        try:
            buf.madvise(mmap.MADV_DONTNEED, start, stop - start)
        except (OSError, ValueError):   # advice only: the pages stay until the map is closed
            pass


def release_view(arr: np.ndarray) -> None:
    """Drop the mapped pages wholly under ``arr`` when it is a view of a memory map (a
    constant a kernel's packed copy replaced: its bytes need not stay resident; they are
    read from the file again if anything touches them). Nothing for other arrays."""
    base = arr.base
    while base is not None and not isinstance(base, memoryview):
        base = getattr(base, "base", None)
    buf = getattr(base, "obj", None)
    if not isinstance(buf, mmap.mmap) or buf.closed or not arr.size:
        return
    start = np.frombuffer(buf, np.uint8, count=1).ctypes.data
    release_pages(buf, arr.ctypes.data - start, arr.nbytes)


#: bytes an aligned copy of a mapped view takes at a time (the source pages it read are released after each)
COPY_CHUNK_BYTES = 8 << 20


def aligned_copy(arr: np.ndarray) -> np.ndarray:
    """A read-only, aligned, C-contiguous copy of ``arr`` (C-contiguous). Where ``arr`` is a
    view of a memory map, the copy goes in chunks of :data:`COPY_CHUNK_BYTES` and the mapped
    pages each chunk read are released after it (:func:`release_view`): the process holds the
    copy and at most a chunk of the file's pages, not both whole."""
    out = np.empty(arr.shape, arr.dtype)
    src, dst = arr.reshape(-1), out.reshape(-1)
    step = max(1, COPY_CHUNK_BYTES // max(1, arr.itemsize))
    for start in range(0, src.size, step):
        dst[start:start + step] = src[start:start + step]
        release_view(src[start:start + step])
    release_view(arr)
    out.flags.writeable = False
    return out


#: tensors below this size are copied out of a mapped file rather than viewed
VIEW_MIN_BYTES = 1 << 20


def array_from_region(buf: Buffer, offset: int, length: int, dtype: np.dtype, dims: tuple,
                      copy: bool = False) -> np.ndarray:
    """The read-only array of ``length`` bytes of little-endian ``dtype`` elements at
    ``offset`` of ``buf``, reshaped to ``dims``: a view of ``buf`` where ``copy`` is False and
    the tensor is at least :data:`VIEW_MIN_BYTES` (a small tensor is copied: a read of a view
    maps the page-cache folio around it, up to 2 MB where the file system caches in huge
    pages), else an aligned copy (then the mapped pages it covered are released,
    :func:`release_pages`). The view may be unaligned for ``dtype`` (protobuf puts raw data at
    any offset; ``flags.aligned`` says): the program makes its aligned copy where a kernel
    first needs it (``core.program.Program``), after the packed forms that replace others.

    Raises:
        ValueError: ``length`` is not a multiple of the element size, or the elements do not
            fill ``dims`` (numpy's messages, as ``onnx.numpy_helper.to_array`` gives them).
    """
    if length % dtype.itemsize:
        raise ValueError("buffer size must be a multiple of element size")
    arr = np.frombuffer(buf, dtype=dtype, count=length // dtype.itemsize, offset=offset).reshape(dims)
    if copy or length < VIEW_MIN_BYTES:
        arr = arr.copy()
        release_pages(buf, offset, length)
    arr.flags.writeable = False
    return arr
