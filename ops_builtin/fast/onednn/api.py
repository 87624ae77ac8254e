"""A ctypes binding of the part of oneDNN's C API (v3.x, ``dnnl.h``) the kernels use.

oneDNN (https://github.com/oneapi-src/oneDNN) is Intel's library of deep-learning
primitives: matmul and convolution with weights reordered once into the blocked layout its
JIT kernels want, and post-ops (bias, activations, a residual add) applied in the output
pass. The ``onednn-cpu-gomp`` wheel (the ``[fast]`` extra on Linux x86-64) ships
``libdnnl.so.3`` built for CPUs with GNU OpenMP; this module finds it, declares the
functions, and wraps the handles so they are released with their Python objects:

* :class:`MemoryDesc` (``dnnl_memory_desc_t``): dims, data type and layout (strides or a
  format tag such as ``any``, which lets a primitive choose a blocked layout);
* :class:`Primitive`: a primitive descriptor and its primitive, executed on raw pointers
  (:meth:`Primitive.execute`); memory objects are made per calling thread, so one
  primitive runs from several threads at once;
* :func:`reorder`: copy data between two layouts (packing weights);
* :func:`post_ops_attr`: the attribute with eltwise / binary / sum post-ops.

Errors: a oneDNN call that fails raises :class:`OneDNNError` naming the function and
status; ``status == UNIMPLEMENTED`` (no implementation for these shapes or layouts) is the
kernels' signal to keep their numpy path.

Threads: oneDNN parallelises with OpenMP; :func:`set_threads` sets the calling thread's
OpenMP thread count (``omp_set_num_threads`` of the libgomp oneDNN is linked to).
"""
from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import weakref
from functools import lru_cache
from typing import NamedTuple, Optional, Sequence

from dynashape import distributions
from dynashape.threads import intra_op_threads
from dynashape.weight_arena import aligned_empty

from ..common import address

__all__ = ["OneDNNError", "UNIMPLEMENTED", "library", "unavailable_reason", "MemoryDesc", "Primitive",
           "PackedWeights", "make_reorder", "reorder", "post_ops_attr", "set_threads", "F32", "ANY", "dims_of"]

#: the environment variable naming a libdnnl.so to load instead of the wheel's
LIBRARY_VARIABLE = "DYNASHAPE_ONEDNN_LIBRARY"
#: PyPI distributions that ship a CPU libdnnl.so.3 (GNU OpenMP first: numpy's OpenBLAS and
#: numba use pthreads / their own pools, and libgomp is the system's OpenMP)
DISTRIBUTIONS = ("onednn-cpu-gomp", "onednn-cpu-iomp", "onednn-cpu-tbb")

# enums of dnnl_types.h (v3.2)
SUCCESS, UNIMPLEMENTED = 0, 3
_STATUS = {1: "out_of_memory", 2: "invalid_arguments", 3: "unimplemented", 4: "last_impl_reached",
           5: "runtime_error", 6: "not_required"}
F32 = 3                      # dnnl_f32
ANY = 1                      # dnnl_format_tag_any
CPU_ENGINE = 1               # dnnl_cpu
STREAM_DEFAULT = 1           # dnnl_stream_default_flags
FORWARD_INFERENCE = 96       # dnnl_forward_inference
CONVOLUTION_DIRECT = 1       # dnnl_convolution_direct
QUERY_SRC, QUERY_WEIGHTS, QUERY_DST, QUERY_SCRATCHPAD = 129, 131, 133, 136
SCRATCHPAD_USER = 1          # dnnl_scratchpad_mode_user
QUERY_IMPL_INFO = 8          # dnnl_query_impl_info_str
# dnnl_query_t of dnnl_memory_desc_query
QUERY_STRIDES, QUERY_PADDED_DIMS, QUERY_FORMAT_KIND = 14, 260, 262
QUERY_INNER_NBLKS, QUERY_INNER_BLKS, QUERY_INNER_IDXS = 263, 264, 265
BLOCKED = 2                  # dnnl_blocked (dnnl_format_kind_t)
ARG_SRC, ARG_SRC_1, ARG_DST, ARG_WEIGHTS, ARG_BIAS, ARG_SCRATCHPAD = 1, 2, 17, 33, 41, 80
ARG_POST_OP_BASE = 32768     # DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE
MAX_NDIMS = 12

# dnnl_alg_kind_t of the eltwise post-ops, binary ops and pools
ELTWISE = {"relu": 32, "tanh": 33, "elu": 34, "abs": 36, "linear": 38, "soft_relu": 39, "hardsigmoid": 40,
           "logistic": 41, "exp": 42, "gelu_tanh": 43, "swish": 44, "clip": 46, "clip_v2": 47,
           "gelu_erf": 49, "mish": 51, "hardswish": 52}
BINARY = {"add": 131056, "mul": 131057, "max": 131058, "min": 131059, "div": 131060, "sub": 131061}
POOLING = {"max": 511, "avg_include_padding": 767, "avg_exclude_padding": 1023}

Dims = ctypes.c_int64 * MAX_NDIMS
_vp = ctypes.c_void_p


class OneDNNError(RuntimeError):
    """A oneDNN call failed: ``function`` and ``status`` (``UNIMPLEMENTED``: no implementation
    for these shapes, layouts or attributes)."""

    def __init__(self, function: str, status: int):
        super().__init__(f"oneDNN {function} failed: {_STATUS.get(status, status)}")
        self.function = function
        self.status = status


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _vp)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


# name -> (argtypes) of functions returning dnnl_status_t
_STATUS_FUNCTIONS = {
    "dnnl_engine_create": [ctypes.POINTER(_vp), ctypes.c_int, ctypes.c_size_t],
    "dnnl_stream_create": [ctypes.POINTER(_vp), _vp, ctypes.c_uint],
    "dnnl_stream_destroy": [_vp],
    "dnnl_memory_desc_create_with_tag": [ctypes.POINTER(_vp), ctypes.c_int, Dims, ctypes.c_int, ctypes.c_int],
    "dnnl_memory_desc_create_with_strides": [ctypes.POINTER(_vp), ctypes.c_int, Dims, ctypes.c_int, Dims],
    "dnnl_memory_desc_query": [_vp, ctypes.c_int, _vp],
    "dnnl_memory_desc_clone": [ctypes.POINTER(_vp), _vp],
    "dnnl_memory_desc_destroy": [_vp],
    "dnnl_memory_create": [ctypes.POINTER(_vp), _vp, _vp, _vp],
    "dnnl_memory_set_data_handle": [_vp, _vp],
    "dnnl_memory_destroy": [_vp],
    "dnnl_primitive_attr_create": [ctypes.POINTER(_vp)],
    "dnnl_primitive_attr_destroy": [_vp],
    "dnnl_primitive_attr_set_post_ops": [_vp, _vp],
    "dnnl_primitive_attr_set_scratchpad_mode": [_vp, ctypes.c_int],
    "dnnl_post_ops_create": [ctypes.POINTER(_vp)],
    "dnnl_post_ops_destroy": [_vp],
    "dnnl_post_ops_append_eltwise": [_vp, ctypes.c_int, ctypes.c_float, ctypes.c_float],
    "dnnl_post_ops_append_binary": [_vp, ctypes.c_int, _vp],
    "dnnl_post_ops_append_sum": [_vp, ctypes.c_float, ctypes.c_int32, ctypes.c_int],
    "dnnl_primitive_desc_destroy": [_vp],
    "dnnl_primitive_desc_query": [_vp, ctypes.c_int, ctypes.c_int, _vp],
    "dnnl_primitive_create": [ctypes.POINTER(_vp), _vp],
    "dnnl_primitive_destroy": [_vp],
    "dnnl_primitive_execute": [_vp, _vp, ctypes.c_int, ctypes.POINTER(_ExecArg)],
    "dnnl_matmul_primitive_desc_create": [ctypes.POINTER(_vp), _vp, _vp, _vp, _vp, _vp, _vp],
    "dnnl_convolution_forward_primitive_desc_create": [ctypes.POINTER(_vp), _vp, ctypes.c_int, ctypes.c_int,
                                                       _vp, _vp, _vp, _vp, Dims, Dims, Dims, Dims, _vp],
    "dnnl_pooling_forward_primitive_desc_create": [ctypes.POINTER(_vp), _vp, ctypes.c_int, ctypes.c_int, _vp, _vp,
                                                   Dims, Dims, Dims, Dims, Dims, _vp],
    "dnnl_reorder_primitive_desc_create": [ctypes.POINTER(_vp), _vp, _vp, _vp, _vp, _vp],
    "dnnl_layer_normalization_forward_primitive_desc_create": [ctypes.POINTER(_vp), _vp, ctypes.c_int, _vp, _vp,
                                                               _vp, ctypes.c_float, ctypes.c_uint, _vp],
    "dnnl_softmax_forward_primitive_desc_create": [ctypes.POINTER(_vp), _vp, ctypes.c_int, ctypes.c_int, _vp, _vp,
                                                   ctypes.c_int, _vp],
    "dnnl_eltwise_forward_primitive_desc_create": [ctypes.POINTER(_vp), _vp, ctypes.c_int, ctypes.c_int, _vp, _vp,
                                                   ctypes.c_float, ctypes.c_float, _vp],
}


def _candidates() -> list:
    """Paths to try for libdnnl.so.3: the environment variable, then the wheels' files,
    then ``<prefix>/lib``."""
    out = []
    if os.environ.get(LIBRARY_VARIABLE):
        out.append(os.environ[LIBRARY_VARIABLE])
    # (the oneDNN wheels' RECORD, read from their .dist-info folders: no importlib.metadata)
    out.extend(f for name in DISTRIBUTIONS for f in distributions.files(name) or () if f.endswith("libdnnl.so.3"))
    out.append(os.path.join(sys.prefix, "lib", "libdnnl.so.3"))
    return list(dict.fromkeys(out))     # (a wheel's RECORD may name the prefix's own lib)


_reason = ""


@lru_cache(maxsize=None)
def library() -> Optional[ctypes.CDLL]:
    """The loaded libdnnl with its functions declared, or None (:func:`unavailable_reason`
    says why: not installed, not loadable, or not oneDNN 3.x). Loaded once per process."""
    global _reason
    if not sys.platform.startswith("linux"):
        _reason = f"the oneDNN wheel is for Linux x86-64 (this is {sys.platform})"
        return None
    errors = []
    for path in _candidates():
        if not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            continue
        lib.dnnl_version.restype = ctypes.POINTER(_Version)
        version = lib.dnnl_version().contents
        if version.major != 3:
            errors.append(f"{path}: oneDNN {version.major}.{version.minor}, the kernels need 3.x")
            continue
        _declare(lib)
        return lib
    _reason = "; ".join(errors) or ("libdnnl.so.3 not found (pip install onednn-cpu-gomp, or set "
                                    f"{LIBRARY_VARIABLE})")
    return None


def unavailable_reason() -> str:
    """Why :func:`library` is None ("" when it loaded)."""
    return "" if library() is not None else _reason


def _declare(lib: ctypes.CDLL) -> None:
    for name, argtypes in _STATUS_FUNCTIONS.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    lib.dnnl_primitive_desc_query_md.argtypes = [_vp, ctypes.c_int, ctypes.c_int]
    lib.dnnl_primitive_desc_query_md.restype = _vp
    lib.dnnl_memory_desc_get_size.argtypes = [_vp]
    lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
    lib.dnnl_memory_desc_equal.argtypes = [_vp, _vp]
    lib.dnnl_memory_desc_equal.restype = ctypes.c_int


def _call(name: str, *args) -> None:
    status = getattr(library(), name)(*args)
    if status != SUCCESS:
        raise OneDNNError(name, status)


def _new(name: str, *args) -> _vp:
    """Call a ``dnnl_*_create`` function; the handle it made."""
    handle = _vp()
    _call(name, ctypes.byref(handle), *args)
    return handle


@lru_cache(maxsize=None)
def _engine() -> _vp:
    return _new("dnnl_engine_create", CPU_ENGINE, 0)


_local = threading.local()


def _stream() -> _vp:
    """The calling thread's stream (oneDNN streams are not shared between threads)."""
    s = getattr(_local, "stream", None)
    if s is None:
        s = _local.stream = _Handle(_new("dnnl_stream_create", _engine(), STREAM_DEFAULT), "dnnl_stream_destroy")
    return s.handle


class _Handle:
    """An owned oneDNN handle, destroyed with this object."""

    __slots__ = ("handle", "_destroy")

    def __init__(self, handle: _vp, destroy: str):
        self.handle, self._destroy = handle, destroy

    def __del__(self):
        try:
            if self.handle:
                getattr(library(), self._destroy)(self.handle)
                self.handle = None
        except Exception:  # noqa: BLE001 - interpreter shutdown: the library may be gone
            pass


def dims_of(values: Sequence[int]) -> "ctypes.Array":
    """A ``dnnl_dims_t`` holding ``values``."""
    return Dims(*[int(v) for v in values])


class MemoryDesc:
    """An owned ``dnnl_memory_desc_t``: ``MemoryDesc(dims, strides=...)`` (in elements),
    ``MemoryDesc(dims, tag=ANY)``, or :meth:`copy_of` a descriptor a primitive reports."""

    __slots__ = ("_h", "dims")

    def __init__(self, dims: Sequence[int], strides: Optional[Sequence[int]] = None, tag: Optional[int] = None,
                 handle: Optional[_vp] = None):
        self.dims = tuple(int(d) for d in dims)
        if handle is None:
            if strides is not None:
                handle = _new("dnnl_memory_desc_create_with_strides", len(self.dims), dims_of(self.dims), F32,
                              dims_of(strides))
            else:
                handle = _new("dnnl_memory_desc_create_with_tag", len(self.dims), dims_of(self.dims), F32,
                              ANY if tag is None else tag)
        self._h = _Handle(handle, "dnnl_memory_desc_destroy")

    @classmethod
    def copy_of(cls, md: int, dims: Sequence[int]) -> "MemoryDesc":
        """An owned copy of a descriptor owned by someone else (a primitive descriptor)."""
        return cls(dims, handle=_new("dnnl_memory_desc_clone", _vp(md)))

    @classmethod
    def of_array(cls, shape: Sequence[int], strides_bytes: Sequence[int], itemsize: int = 4) -> "MemoryDesc":
        """The descriptor of a numpy array's view (strides in bytes)."""
        return cls(shape, strides=[s // itemsize for s in strides_bytes])

    @property
    def handle(self) -> _vp:
        return self._h.handle

    @property
    def nbytes(self) -> int:
        return int(library().dnnl_memory_desc_get_size(self.handle))

    def blocking(self) -> Optional["Blocking"]:
        """How the layout places elements (None: not a blocked layout)."""
        kind = ctypes.c_int()
        _call("dnnl_memory_desc_query", self.handle, QUERY_FORMAT_KIND, ctypes.byref(kind))
        if kind.value != BLOCKED:
            return None
        nblks = ctypes.c_int()
        _call("dnnl_memory_desc_query", self.handle, QUERY_INNER_NBLKS, ctypes.byref(nblks))
        ndims = len(self.dims)

        def dims(what: int, count: int) -> tuple:
            pointer = ctypes.POINTER(Dims)()
            _call("dnnl_memory_desc_query", self.handle, what, ctypes.byref(pointer))
            return tuple(int(v) for v in pointer.contents[:count])
        return Blocking(dims(QUERY_PADDED_DIMS, ndims), dims(QUERY_STRIDES, ndims),
                        dims(QUERY_INNER_BLKS, nblks.value), dims(QUERY_INNER_IDXS, nblks.value))

    def __eq__(self, other) -> bool:
        return isinstance(other, MemoryDesc) and bool(library().dnnl_memory_desc_equal(self.handle, other.handle))

    def __hash__(self) -> int:
        return hash(self.dims)


class Blocking(NamedTuple):
    """A blocked layout (oneDNN's ``dnnl_blocking_desc_t``): element ``(i0, i1, ...)`` of
    the padded dims sits at ``sum((i_d // block_d) * strides[d]) + (offset within the inner
    blocks)``, the inner blocks ``inner_blks`` of dims ``inner_idxs`` nested in that order,
    all in elements."""

    padded_dims: tuple
    strides: tuple
    inner_blks: tuple
    inner_idxs: tuple

    def plain_copy(self, data, dims: Sequence[int]):
        """The elements of ``data`` (a float32 array holding this layout) as a C-contiguous
        array of ``dims``, copied by numpy through a strided view: each dim an outer axis
        (its stride) and an axis per inner block (the blocks' own strides), regrouped per
        dim and merged, the padding cut off. No oneDNN reorder (whose JIT code, made per
        pair of layouts, costs more than the copy for a small weight)."""
        import numpy as np
        ndims = len(self.padded_dims)
        per_dim = [[] for _ in range(ndims)]            # (size, stride) of each inner block, outermost first
        inner = 1
        for blk, idx in zip(reversed(self.inner_blks), reversed(self.inner_idxs)):
            per_dim[idx].insert(0, (blk, inner))
            inner *= blk
        shape, strides = [], []
        for d in range(ndims):
            block = math.prod(size for size, _ in per_dim[d])
            shape += [self.padded_dims[d] // block] + [size for size, _ in per_dim[d]]
            strides += [self.strides[d]] + [stride for _, stride in per_dim[d]]
        view = np.lib.stride_tricks.as_strided(data, shape, [s * data.itemsize for s in strides], writeable=False)
        full = np.ascontiguousarray(view).reshape(self.padded_dims)
        return np.ascontiguousarray(full[tuple(slice(0, n) for n in dims)])


#: one primitive's kernel made at a time (two threads executing a new primitive make it once)
_MAKING = threading.Lock()

#: call sites (see :meth:`Primitive.execute`) a primitive keeps memory objects for, per thread
MAX_SITES = 256


class Primitive:
    """A primitive made from a primitive descriptor, with the descriptor of each argument.

    ``args`` are the oneDNN argument ids in the order :meth:`execute` takes pointers for
    them; ``mds`` their descriptors (None: asked from the primitive descriptor with
    ``dnnl_query_exec_arg_md``).

    The primitive itself (oneDNN's JIT-generated kernel, ~0.1-0.5 ms to make) is made when
    it first executes: a primitive only asked which layouts it reads (the probe a packed
    weight's layout is chosen with, the alternatives :meth:`PackedWeights.primitive`
    weighs) never is. An implementation missing for the arguments is reported when the
    descriptor is made, here; only a failure to make the kernel (out of memory) is
    reported by the first :meth:`execute`.
    """

    __slots__ = ("_pd", "_prim", "args", "mds", "impl", "scratchpad", "_local", "__weakref__")

    def __init__(self, pd: _vp, args: Sequence[int], mds: Sequence[MemoryDesc]):
        self._pd = _Handle(pd, "dnnl_primitive_desc_destroy")
        self._prim: Optional[_Handle] = None
        self.args = tuple(args)
        self.mds = tuple(mds)
        lib = library()
        info = ctypes.c_char_p()
        lib.dnnl_primitive_desc_query(pd, QUERY_IMPL_INFO, 0, ctypes.byref(info))
        self.impl = (info.value or b"").decode()
        md = lib.dnnl_primitive_desc_query_md(pd, QUERY_SCRATCHPAD, 0)
        #: the scratchpad's descriptor where the primitive needs one (the calling thread's
        #: buffer is passed: :func:`_scratchpad`)
        self.scratchpad = MemoryDesc.copy_of(md, ()) if md and lib.dnnl_memory_desc_get_size(md) else None
        self._local = threading.local()

    @property
    def made(self) -> bool:
        """Whether the kernel has been made (the primitive executed once)."""
        return self._prim is not None

    def make(self) -> _vp:
        """Make the kernel now if it is not made (the first execute does otherwise)."""
        with _MAKING:
            if self._prim is None:
                self._prim = _Handle(_new("dnnl_primitive_create", self._pd.handle), "dnnl_primitive_destroy")
        return self._prim.handle

    def queried(self, what: int, dims: Sequence[int]) -> MemoryDesc:
        """A copy of the descriptor the primitive chose for ``what`` (QUERY_WEIGHTS, ...)."""
        return MemoryDesc.copy_of(library().dnnl_primitive_desc_query_md(self._pd.handle, what, 0), dims)

    def _bound(self, site: int) -> "_Bound":
        """The calling thread's memory objects and argument array for ``site``, made on its
        first call (at most :data:`MAX_SITES` per thread: the oldest dropped first)."""
        sites = self._local.__dict__.get("sites")
        if sites is None:
            sites = self._local.sites = {}
        mine = sites.get(site)
        if mine is None:
            if len(sites) >= MAX_SITES:
                sites.pop(next(iter(sites)))
            mine = sites[site] = _Bound(self)
        return mine

    def execute(self, values: Sequence, site: object = None) -> None:
        """Run on ``values``, one per argument in ``args`` order: a pointer (int) or a numpy
        array (its data pointer). Memory handles are set only where the data moved since the
        last call on this thread from the same ``site``: a caller that passes the same arrays
        run after run (a node's planned buffers and weights) names itself (its prepared
        plan), so that a primitive shared by several nodes (a transformer's equal blocks)
        keeps each node's pointers apart instead of setting all of them on every call."""
        sites = self._local.__dict__.get("sites")
        b = sites.get(id(site)) if sites is not None else None
        if b is None:
            b = self._bound(id(site))
        last, handles, set_handle = b.last, b.handles, b.set_handle
        for k, v in enumerate(values):
            entry = last[k]
            if type(v) is int:
                if entry[1] != v:
                    set_handle(handles[k], v)
                    entry[1] = v
                continue
            ref = entry[0]
            if ref is not None and ref() is v:
                continue
            pointer = address(v)
            entry[0] = weakref.ref(v)
            if entry[1] != pointer:
                set_handle(handles[k], pointer)
                entry[1] = pointer
        if b.scratchpad is not None:
            pointer = _scratchpad(b.scratchpad_bytes)
            if pointer != b.scratchpad_at:
                set_handle(b.scratchpad, pointer)
                b.scratchpad_at = pointer
        prim = self._prim
        status = b.run(prim.handle if prim is not None else self.make(), b.stream, b.n, b.array)
        if status != SUCCESS:
            raise OneDNNError("dnnl_primitive_execute", status)


class _Bound:
    """One thread's memory objects of a primitive: the argument array, the handles, and per
    argument the array (a weak reference) and pointer last set; the scratchpad's memory
    object last in the array, where the primitive has one."""

    __slots__ = ("mems", "handles", "array", "n", "last", "stream", "set_handle", "run", "scratchpad",
                 "scratchpad_bytes", "scratchpad_at")

    def __init__(self, prim: Primitive):
        lib = library()
        engine = _engine()
        self.mems = [_Handle(_new("dnnl_memory_create", md.handle, engine, None), "dnnl_memory_destroy")
                     for md in prim.mds]
        self.handles = [m.handle for m in self.mems]
        pairs = list(zip(prim.args, self.handles))
        self.scratchpad = self.scratchpad_at = None
        if prim.scratchpad is not None:
            mem = _Handle(_new("dnnl_memory_create", prim.scratchpad.handle, engine, None), "dnnl_memory_destroy")
            self.mems.append(mem)
            self.scratchpad, self.scratchpad_bytes = mem.handle, prim.scratchpad.nbytes
            pairs.append((ARG_SCRATCHPAD, mem.handle))
        self.array = (_ExecArg * len(pairs))(*[_ExecArg(a, h) for a, h in pairs])
        self.n = len(pairs)
        self.last = [[None, None] for _ in self.mems]
        self.stream = _stream()
        self.set_handle = lib.dnnl_memory_set_data_handle
        self.run = lib.dnnl_primitive_execute


def _scratchpad(nbytes: int) -> int:
    """The address of the calling thread's scratchpad buffer of at least ``nbytes``: one per
    thread, grown to the largest a primitive run on it needs (as oneDNN's own per-thread
    scratchpad; each primitive is made with a user scratchpad so that one made on a thread
    runs on any other: oneDNN 3.2's gemm-based convolution made on one thread crashes on
    another with its own)."""
    if getattr(_local, "scratchpad_bytes", 0) < nbytes:
        buf = aligned_empty(nbytes)
        _local.scratchpad, _local.scratchpad_bytes, _local.scratchpad_at = buf, nbytes, buf.ctypes.data
    return _local.scratchpad_at


def release_scratchpad() -> None:
    """Free the calling thread's scratchpad buffer (made again when next needed)."""
    _local.scratchpad, _local.scratchpad_bytes, _local.scratchpad_at = None, 0, None


@lru_cache(maxsize=None)
def _plain_attr() -> "Attr":
    return Attr()


def make_primitive(create: str, args: Sequence[int], mds: Sequence[MemoryDesc], *create_args) -> Primitive:
    """``Primitive`` from ``dnnl_<kind>_primitive_desc_create(&pd, engine, *create_args)``; the
    last of ``create_args`` is the attribute (None: one with nothing but the user
    scratchpad mode every primitive here is made with)."""
    if create_args and create_args[-1] is None:
        create_args = create_args[:-1] + (_plain_attr().handle,)
    pd = _new(create, _engine(), *create_args)
    return Primitive(pd, args, mds)


def make_eltwise(size: int, algorithm: str, alpha: float = 0.0, beta: float = 0.0) -> Primitive:
    """The forward-inference eltwise primitive ``algorithm`` (a key of :data:`ELTWISE`, with
    oneDNN's ``alpha`` / ``beta``) over ``size`` contiguous float32 elements; execute with the
    source and destination pointers (the same one: in place)."""
    data = MemoryDesc((size,), strides=(1,))
    return make_primitive("dnnl_eltwise_forward_primitive_desc_create", (ARG_SRC, ARG_DST), (data, data),
                          FORWARD_INFERENCE, ELTWISE[algorithm], data.handle, data.handle, float(alpha),
                          float(beta), None)


def make_reorder(src: MemoryDesc, dst: MemoryDesc) -> Primitive:
    """The primitive copying data of layout ``src`` into layout ``dst`` (execute with the
    source and destination pointers)."""
    engine = _engine()
    pd = _new("dnnl_reorder_primitive_desc_create", src.handle, engine, dst.handle, engine, _plain_attr().handle)
    return Primitive(pd, (ARG_SRC, ARG_DST), (src, dst))


def reorder(src: MemoryDesc, dst: MemoryDesc, src_pointer: int, dst_pointer: int) -> None:
    """Copy the data of layout ``src`` at ``src_pointer`` into layout ``dst`` at ``dst_pointer``."""
    make_reorder(src, dst).execute((src_pointer, dst_pointer))


def relayout(src: MemoryDesc, dst: MemoryDesc, src_pointer: int, dst_pointer: int) -> None:
    """:func:`reorder` between two blocked layouts of a weight. Where oneDNN has no JIT reorder
    between the two it takes ``simple:any``, an element-by-element loop (~110 ns an element on
    an AVX2 EPYC: 5.9 ms for a 128 x 64 x 3 x 3 weight); two JIT reorders through the plain
    row-major layout cost a fraction of that, so the copy goes that way."""
    direct = make_reorder(src, dst)
    if not direct.impl.startswith("simple"):
        direct.execute((src_pointer, dst_pointer))
        return
    plain = MemoryDesc(src.dims, strides=[math.prod(src.dims[i + 1:]) for i in range(len(src.dims))])
    scratch = aligned_empty(plain.nbytes)
    make_reorder(src, plain).execute((src_pointer, scratch.ctypes.data))
    make_reorder(plain, dst).execute((scratch.ctypes.data, dst_pointer))


class PrimitiveCache:
    """What a node made per key (shape, strides, threads: a primitive, or a primitive and
    its weights' pointer), made on first use by ``make(*args)``, at most ``capacity`` of them
    (the oldest dropped first); one maker at a time, and a key made once even when two
    threads ask for it together."""

    __slots__ = ("capacity", "_made", "_lock")

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._made: dict = {}
        self._lock = threading.Lock()

    def peek(self, key):
        """What is made for ``key``, None if nothing."""
        return self._made.get(key)

    def put(self, key, made) -> None:
        """Keep ``made`` for ``key`` (made elsewhere: :mod:`.tiered`'s background thread)."""
        with self._lock:
            if key not in self._made and len(self._made) >= self.capacity:
                self._made.pop(next(iter(self._made)))
            self._made[key] = made

    def get(self, key, make, *args):
        found = self._made.get(key)
        if found is None:
            with self._lock:
                found = self._made.get(key)
                if found is None:
                    if len(self._made) >= self.capacity:
                        self._made.pop(next(iter(self._made)))
                    found = self._made[key] = make(*args)
        return found


#: primitives by what defines them, shared by every node and session of the process (see :func:`shared`)
SHARED_CAPACITY = 1024
SHARED = PrimitiveCache(SHARED_CAPACITY)


def shared(key, make, *args):
    """``make(*args)``, made once per ``key`` in the process and then shared: the blocks of a
    transformer or a ResNet repeat their shapes, so each block's nodes would otherwise make
    equal primitives, at every new shape (a new sequence or past length) again, each a
    primitive-descriptor search of ~0.1-0.5 ms even when oneDNN's own cache holds the kernel.
    ``key`` names everything the primitive depends on (the op, shapes, strides, layouts,
    attributes, post-ops and the thread count). Sharing is safe: each thread binds a
    primitive's arguments in its own memory objects (``Primitive.execute``), the weights
    are passed on every call."""
    return SHARED.get(key, make, *args)


def eltwise(x, y, algorithm: str, alpha: float = 0.0, beta: float = 0.0) -> None:
    """``y = algorithm(x)`` over contiguous float32 arrays of one size (``y`` may be ``x``), on
    the intra-op threads, with the process's shared primitive for it (:func:`make_eltwise`)."""
    threads = intra_op_threads()
    set_threads(threads)
    shared(("eltwise", x.size, algorithm, alpha, beta, threads), make_eltwise, x.size, algorithm, alpha,
           beta).execute((x, y))


class PackedWeights:
    """A constant weight reordered into the layout(s) oneDNN's primitives read.

    Made from the plain array and the layout a first primitive chose; the plain array is
    not kept. A primitive for new shapes is made for the packed layout first; where only
    oneDNN's reference implementation takes that layout (the best kernel for these shapes
    wants another one: a 1 x 1 image, a single row), the layout it wants is made once
    from the packed one and kept beside it. ``allocate(nbytes)`` gives the memory of each
    layout (64-byte aligned ``uint8``: the session's weight arena, ``ctx.services.weight_buffer``);
    without it each layout is an allocation of its own (``aligned_empty``).
    """

    __slots__ = ("layouts", "_lock", "_allocate")

    def __init__(self, plain: MemoryDesc, data, packed: MemoryDesc, allocate=None):
        self.layouts: list = []       # (MemoryDesc, aligned buffer, pointer)
        self._lock = threading.Lock()
        self._allocate = aligned_empty if allocate is None else allocate
        self._add(packed, lambda dst: reorder(plain, packed, data.ctypes.data, dst))

    def _add(self, md: MemoryDesc, fill) -> int:
        buf = self._allocate(md.nbytes)
        pointer = buf.ctypes.data
        fill(pointer)
        self.layouts.append((md, buf, pointer))
        return pointer

    @property
    def nbytes(self) -> int:
        return sum(int(buf.nbytes) for _, buf, _ in self.layouts)

    def primitive(self, make) -> tuple:
        """``(primitive, pointer of the weights it reads)`` from ``make(weights_md)``."""
        md, _, pointer = self.layouts[0]
        prim = make(md)
        if not prim.impl.startswith("ref"):
            return prim, pointer
        best = make(MemoryDesc(md.dims, tag=ANY))
        if best.impl.startswith("ref"):
            return prim, pointer
        wanted = best.mds[1]
        with self._lock:
            for have, _, p in self.layouts:
                if have == wanted:
                    return best, p
            return best, self._add(wanted, lambda dst: relayout(md, wanted, pointer, dst))


class Attr:
    """An owned ``dnnl_primitive_attr_t`` (and its post-ops); ``binary_mds`` lists the
    (execute argument id, descriptor) of each binary post-op's second input."""

    __slots__ = ("_h", "_po", "binary_mds")

    def __init__(self, post_ops: Sequence[tuple] = ()):
        self._h = _Handle(_new("dnnl_primitive_attr_create"), "dnnl_primitive_attr_destroy")
        _call("dnnl_primitive_attr_set_scratchpad_mode", self._h.handle, SCRATCHPAD_USER)
        self._po = None
        self.binary_mds: list = []
        if not post_ops:
            return
        self._po = _Handle(_new("dnnl_post_ops_create"), "dnnl_post_ops_destroy")
        for position, op in enumerate(post_ops):
            kind = op[0]
            if kind == "eltwise":
                _call("dnnl_post_ops_append_eltwise", self._po.handle, ELTWISE[op[1]], float(op[2]), float(op[3]))
            elif kind == "binary":
                _call("dnnl_post_ops_append_binary", self._po.handle, BINARY[op[1]], op[2].handle)
                self.binary_mds.append((binary_arg(position), op[2]))
            elif kind == "sum":
                _call("dnnl_post_ops_append_sum", self._po.handle, float(op[1]), 0, F32)
            else:
                raise ValueError(f"unknown post-op {op!r}")
        _call("dnnl_primitive_attr_set_post_ops", self._h.handle, self._po.handle)

    @property
    def handle(self) -> _vp:
        return self._h.handle


def post_ops_attr(post_ops: Sequence[tuple] = ()) -> Attr:
    """The attribute with ``post_ops``: ``("eltwise", name, alpha, beta)`` (``name`` a key of
    :data:`ELTWISE`), ``("binary", name, MemoryDesc of the second input)``, ``("sum", scale)``
    (add the destination's previous contents), applied in order."""
    return Attr(post_ops)


def binary_arg(index: int) -> int:
    """The execute argument id of the second input of the ``index``-th binary post-op
    (``DNNL_ARG_ATTR_MULTIPLE_POST_OP(k) | DNNL_ARG_SRC_1``, k counting every post-op)."""
    return ARG_POST_OP_BASE * (index + 1) | ARG_SRC_1


@lru_cache(maxsize=None)
def _omp_set_num_threads():
    try:
        fn = ctypes.CDLL("libgomp.so.1").omp_set_num_threads
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return fn


def set_threads(n: int) -> None:
    """Let oneDNN calls on this thread use ``n`` OpenMP threads (cached: a call with the
    thread's current count costs an attribute lookup)."""
    if getattr(_local, "threads", None) == n:
        return
    fn = _omp_set_num_threads()
    if fn is not None:
        fn(int(n))
    _local.threads = n
