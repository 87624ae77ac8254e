"""MatMul, Gemm and FusedMatMul against a constant 2-D weight as one oneDNN matmul.

* **One GEMM over every leading dim.** ``A (..., K) @ B (K, N)`` is a single
  ``(prod(...), K) x (K, N)`` matmul on a view of A (a copy only where A's leading dims do
  not collapse), batch-first or sequence-first alike: ``numpy.matmul`` runs one small GEMM
  per leading index instead.
* **Weights packed once.** At session creation the weight (and Gemm's ``alpha``, bias and
  ``beta * C``) is reordered into the blocked layout oneDNN's brgemm kernels read
  (``prepack``): the packed copy replaces the initializer, and the per-call re-packing a
  plain BLAS does on a constant B (the cost that dominates at few rows: decode, b1 s16) is
  gone, as with onnxruntime's ``MlasGemmPackB``.
* **Epilogues in the output pass.** Bias and FusedMatMul's activation are oneDNN post-ops:
  no second pass over the output.
* **Column panels where oneDNN has no blocked layout.** On an AVX2-only CPU oneDNN keeps the
  weight row-major and its float32 matmul is a jit SGEMM that packs B again on every call.
  There, where the native loop runs (x86-64 Linux with AVX2 and FMA, llvmlite installed:
  :func:`..native.panels.supported`), the weight is packed once in 16-column panels
  (:func:`_pack_panels`, replacing the initializer) and every row count runs the native
  tile loop :mod:`..native.panels` (registers hold a 6 x 16 tile; MLAS's approach; no numba
  in the process), then the bias and the activation (the post-op's eltwise primitive) in
  place. Elsewhere, up to :data:`BLAS_ROWS` rows at one intra-op thread run numpy's BLAS on
  a view of oneDNN's row-major memory, more rows the primitive.
* **One row natively.** A decode step's single row streams the packed weight, read as
  64-column slabs, through the native loop :mod:`..native.gemv` (twice oneDNN's M = 1
  speed out of the caches, no numba), its bias added in the same pass.
* Primitives are made per row count (and thread count) on first use, a few hundred
  microseconds each (1-2.5 ms for a brgemm with a Gelu post-op), and kept with the packed
  weight; nodes of equal shapes and post-ops (a transformer's blocks), in any session of the
  process, share one (``api.shared``). A weight of at most :data:`KEEP_PLAIN_BYTES` keeps its
  given copy until its first primitive run: a new row count runs numpy's matmul on it while
  the primitive is made off the run path (:mod:`.tiered`; a session that waits for compiled
  kernels makes it first), as the other oneDNN kernels with a numpy path do.

The kernels take float32 nodes whose B is a constant 2-D float32 array of at least
:data:`MIN_WEIGHT` elements (``accepts``), every other node goes to the next kernel by
priority. Source: ONNX MatMul-13 / Gemm-13; oneDNN's matmul primitive
(https://oneapi-src.github.io/oneDNN/dev_guide_matmul.html).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import numpy as np
from dynashape.ops_builtin import fusions
from dynashape.records import OpLibrary
from dynashape.threads import intra_op_threads
from dynashape.weight_arena import aligned_empty

from ..native import gemv as native_gemv
from ..native import panels as native_panels
from . import api, tiered

lib = OpLibrary()

#: above the numba kernels (10) and the numpy ones (0)
PRIORITY = 20
F32 = np.dtype(np.float32)
#: the smallest weight (K * N) the oneDNN kernels take: below, a numpy matmul costs less than
#: the ctypes calls around a primitive
MIN_WEIGHT = 4096
#: row counts kept per packed weight (each a primitive)
MAX_PRIMITIVES = 64
#: a weight up to this size is kept beside its packed copy, for the products too small for oneDNN
KEEP_PLAIN_BYTES = 256 << 10
#: the multiply-adds (M * K * N) from which a product runs oneDNN rather than numpy (where the
#: weight is kept plain too). Measured on an AVX-512 Xeon (numpy's matmul and add against oneDNN's
#: brgemm with the bias fused; one thread): 16 x 64 x 64 2.9 us against 3.8, 16 x 64 x 128 4.6
#: against 5.2, from 2^18 to 2^19 within 5% either way, 128 x 64 x 128 (2^20) 24.0 against 15.2
MIN_WORK = 1 << 18
#: a weight oneDNN keeps row-major (an AVX2-only CPU: no blocked brgemm layout) whose rows are
#: a multiple of this many bytes apart gets PLAIN_ROW_PAD floats of padding per row: such rows
#: fall on the same cache sets, and the product slows down 1.5-2x (16 x 768 @ 768 x 3072 on a
#: Zen 3: 5.1 -> 2.7 ms; 128 rows: 19.8 -> 10.2 ms; rows 9216 or 3072 bytes apart gain nothing)
PLAIN_ROW_CONFLICT = 2048
PLAIN_ROW_PAD = 16
#: on a row-major packed weight (an AVX2-only CPU), the row counts numpy's BLAS runs faster
#: than oneDNN's primitive on the same memory (a strided view, no copy): up to BLAS_ROWS_SMALL
#: rows against any weight, up to BLAS_ROWS rows against a weight of at least BLAS_MIN_BYTES.
#: Measured on a Zen 3 (OpenBLAS 0.3.31 Haswell kernels, one thread, four weights in turn),
#: BLAS / oneDNN time: one row 0.43-0.84 over MiniLM's, gpt2's and a SmolLM's weights, 16 rows
#: 0.68-0.96 from 1.5 MiB up (384 x 384 at 8-16 rows: 1.06-1.10), 32-64 rows 1.06-1.36
#: (``benchmarks/kernels.py`` keeps the GEMM classes of these models). One intra-op thread
#: only: with more, OpenBLAS's threads wait on oneDNN's OpenMP workers, which spin after each
#: parallel region (MiniLM b1 s16 at two threads: 13.9x onnxruntime)
BLAS_ROWS_SMALL = 4
BLAS_ROWS = 16
BLAS_MIN_BYTES = 1 << 20

#: FusedMatMul's activation (fusions.EPILOGUES) -> oneDNN eltwise post-op (alpha, beta from params)
ACTIVATIONS = {
    "Relu": lambda p: ("relu", 0.0, 0.0),
    "LeakyRelu": lambda p: ("relu", p[0], 0.0),
    "Sigmoid": lambda p: ("logistic", 0.0, 0.0),
    "Tanh": lambda p: ("tanh", 0.0, 0.0),
    "HardSigmoid": lambda p: ("hardsigmoid", p[0], p[1]),
    "HardSwish": lambda p: ("hardswish", 1.0 / 6.0, 0.5),
    "Clip": lambda p: ("clip", p[0], p[1]),
    "Gelu": lambda p: ("gelu_erf", 0.0, 0.0),
    "GeluTanh": lambda p: ("gelu_tanh", 0.0, 0.0),
    "Swish": lambda p: ("swish", p[0] if p else 1.0, 0.0),
}


def eltwise_post_ops(name: str, params) -> tuple:
    """The oneDNN post-ops of a fused activation (``()`` for none)."""
    if not name:
        return ()
    alg, alpha, beta = ACTIVATIONS[name]([float(v) for v in params])
    return (("eltwise", alg, alpha, beta),)


class PackedGemm:
    """A constant weight (K, N) in oneDNN's layout, its bias and epilogue, and the
    primitives made for it per (row count, A's strides, threads).

    ``post_ops``: eltwise post-ops only (:func:`eltwise_post_ops`), so a single row's
    activation can run as the same eltwise primitive after the native one-row loop (``slabs``:
    the packed weight as that loop reads it, where its layout is one). ``panels``: the
    weight goes into column panels where oneDNN has no blocked layout and the native loop
    runs (:func:`panels_supported`).

    A small weight (at most :data:`KEEP_PLAIN_BYTES`) without an activation numpy would
    compute in several passes is kept as it is too: a product of fewer than
    :data:`MIN_WORK` multiply-adds runs numpy's matmul on it (a tiny GEMM costs oneDNN more
    in dispatch than in arithmetic); a large one is released and every call runs oneDNN.
    """

    opaque_to_tracing = True
    __slots__ = ("k", "n", "weights", "panels", "bias", "post_ops", "plain", "epilogue", "slabs", "row_major",
                 "blas_rows", "_address", "_primitives", "_given", "__weakref__")

    def __init__(self, weight: np.ndarray, bias: Optional[np.ndarray], post_ops: tuple,
                 epilogue: Optional[fusions.Epilogue] = None, allocate=None, panels: bool = True):
        k, n = weight.shape
        self.k, self.n = int(k), int(n)
        self.post_ops = post_ops
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=F32).reshape(n)
        # an activation numpy computes in several passes (Gelu's erf, Sigmoid) keeps oneDNN's one-pass post-op
        cheap = epilogue is None or epilogue.fn is fusions.EPILOGUES["Relu"][0]
        self.plain = np.ascontiguousarray(weight, dtype=F32) if weight.nbytes <= KEEP_PLAIN_BYTES and cheap else None
        self.epilogue = epilogue
        self._primitives = api.PrimitiveCache(MAX_PRIMITIVES)
        # (the layout depends only on these: a transformer's layers of one width share one probe)
        probe = api.shared(("matmul-probe", self.k, self.n, post_ops, self.bias is not None), self._probe)
        chosen = _padded(probe.mds[1])
        self.weights = self.panels = self.row_major = None
        #: the weight as given, while small, for numpy's matmul while a new row count's primitive
        #: is made off the run path (:meth:`_run_primitive`): dropped at the first primitive run
        #: unless it is ``plain`` (kept for the smallest products)
        self._given: Optional[np.ndarray] = None
        self._address = 0
        self.blas_rows = 0
        if panels and panels_supported() and _row_major_layout(chosen):
            # no blocked layout (an AVX2-only CPU: oneDNN's matmul would be a jit SGEMM packing B
            # on every call): the weight in column panels, for the native loop, at every row count
            self.panels = _pack_panels(np.asarray(weight, dtype=F32), allocate)
            self._address = self.panels.ctypes.data
            self.plain = self.slabs = None     # (every row count runs the panels)
            native_panels.ready()     # (starts loading the loop now, off the first run's path)
            return
        self.weights = api.PackedWeights(api.MemoryDesc((self.k, self.n), strides=(self.n, 1)),
                                         np.ascontiguousarray(weight, dtype=F32), chosen, allocate)
        if weight.nbytes <= KEEP_PLAIN_BYTES:
            self._given = self.plain if self.plain is not None else np.ascontiguousarray(weight, dtype=F32)
        # one row (a decode step) streams the packed weight through the native loop, where it can
        self.slabs = _slabs(self.weights) if gemv_supported() else None
        if self.slabs is not None:
            self._address = self.slabs.ctypes.data
            native_gemv.ready()       # (starts loading the loop now, off the first run's path)
        # a row-major packed weight (no numba for the panels) is also what numpy's BLAS reads: few rows run there
        self.row_major = _row_major(self.weights)
        if self.row_major is not None:
            self.blas_rows = BLAS_ROWS if weight.nbytes >= BLAS_MIN_BYTES else BLAS_ROWS_SMALL

    @property
    def nbytes(self) -> int:
        return self.panels.nbytes if self.panels is not None else self.weights.nbytes

    def _probe(self) -> api.Primitive:
        """A 64-row product with the weight's layout left to oneDNN (never executed: only
        the layout it chose is read)."""
        return self._make(64, self.k, 1, api.MemoryDesc((self.k, self.n), tag=api.ANY))

    def _make(self, m: int, row_stride: int, col_stride: int, weights: api.MemoryDesc) -> api.Primitive:
        src = api.MemoryDesc((m, self.k), strides=(row_stride, col_stride))
        dst = api.MemoryDesc((m, self.n), strides=(self.n, 1))
        bias = None if self.bias is None else api.MemoryDesc((1, self.n), strides=(self.n, 1))
        attr = api.post_ops_attr(self.post_ops)
        args = [api.ARG_SRC, api.ARG_WEIGHTS, api.ARG_DST] + ([api.ARG_BIAS] if bias is not None else [])
        mds = [src, weights, dst] + ([bias] if bias is not None else [])
        prim = api.make_primitive("dnnl_matmul_primitive_desc_create", args, mds, src.handle, weights.handle,
                                  None if bias is None else bias.handle, dst.handle, attr.handle)
        prim.mds = (src, prim.queried(api.QUERY_WEIGHTS, (self.k, self.n)), dst) + tuple(mds[3:])
        return prim

    def primitive(self, m: int, strides: tuple, threads: int) -> tuple:
        """(primitive, pointer of the weights in the layout it reads) for A of ``m`` rows and
        these byte ``strides``."""
        return self._primitives.get((m, strides, threads), self._packed_primitive, m, strides, threads)

    def _packed_primitive(self, m: int, strides: tuple, threads: int) -> tuple:
        row, col = (strides[0] // 4 if m > 1 else self.k), strides[1] // 4

        def make(md: api.MemoryDesc) -> api.Primitive:
            key = ("matmul", m, row, col, self.k, self.n, md, self.post_ops, self.bias is not None, threads)
            return api.shared(key, self._make, m, row, col, md)
        return self.weights.primitive(make)

    def _bias_and_epilogue(self, y2: np.ndarray) -> None:
        if self.bias is not None:
            np.add(y2, self.bias, out=y2)
        if self.epilogue is not None:
            self.epilogue(y2)

    def _row_epilogue(self, y: np.ndarray) -> None:
        """Bias and activation of the rows a native loop or BLAS wrote (C-contiguous), in place."""
        if self.bias is not None:
            np.add(y, self.bias, out=y)
        self._activation(y)

    def _activation(self, y: np.ndarray) -> None:
        """The activation as the oneDNN eltwise primitive of the post-op the primitives fuse, in
        place (the same function, so every row count agrees; numpy's tanh Gelu takes nine passes)."""
        for _, algorithm, alpha, beta in self.post_ops:
            api.eltwise(y, y, algorithm, alpha, beta)

    def _run_panels(self, a2: np.ndarray, y2: np.ndarray) -> None:
        """The weight in column panels: every row count through the native panel GEMM
        (numpy's batched matmul over the panels until it is loaded), then the bias and the
        activation."""
        if a2.strides[1] != F32.itemsize:
            a2 = np.ascontiguousarray(a2)
        if native_panels.ready():
            native_panels.panel_gemm(a2, self.panels, y2, self._address)
        else:
            _panels_matmul(a2, self.panels, y2)
        self._row_epilogue(y2)

    def run(self, a2: np.ndarray, y2: np.ndarray, a=None, y=None) -> None:
        """``y2 (M, N) = epilogue(a2 (M, K) @ W + bias)``; y2 C-contiguous, a2 any strides.
        ``a`` / ``y``: the arrays a2 / y2 are views of with the same data pointer (the planned
        buffers, the same objects run after run: their pointers are looked up once)."""
        m = a2.shape[0]
        if m == 0:
            return
        if self.panels is not None:
            self._run_panels(a2, y2)
            return
        if self.plain is not None and m * self.k * self.n < MIN_WORK:
            np.matmul(a2, self.plain, out=y2)
            self._bias_and_epilogue(y2)
            return
        if m == 1 and self.slabs is not None and native_gemv.ready():
            self._run_one_row(a2, y2)
            return
        threads = intra_op_threads()
        if m <= self.blas_rows and threads == 1:
            np.matmul(a2, self.row_major, out=y2)
            self._row_epilogue(y2)
            return
        self._run_primitive(a2, y2, a, y, threads)

    def _run_one_row(self, a2: np.ndarray, y2: np.ndarray) -> None:
        native_gemv.slab_gemv(np.ascontiguousarray(a2[0]), self.slabs, y2[0], self.bias, self._address)
        self._activation(y2[0])

    def _run_primitive(self, a2: np.ndarray, y2: np.ndarray, a, y, threads: int) -> None:
        api.set_threads(threads)
        given = self._given
        if given is not None and a2.flags.c_contiguous:
            # (a small weight: a new row count runs numpy's matmul while its primitive is made
            # off the run path, as the kernels with a numpy path do: tiered.py)
            made = tiered.primitive((a2.shape[0], a2.strides, threads), self._packed_primitive, a2.shape[0],
                                    a2.strides, threads, threads=threads, cache=self._primitives)
            if made is None:
                np.matmul(a2, given, out=y2)
                self._bias_and_epilogue(y2)
                return
            if given is not self.plain:
                self._given = None
            prim, weights = made
            self._execute(prim, weights, a2 if a is None else a, y2 if y is None else y)
            return
        try:
            prim, weights = self.primitive(a2.shape[0], a2.strides, threads)
        except api.OneDNNError as exc:
            if exc.status != api.UNIMPLEMENTED or a2.flags.c_contiguous:
                raise
            a2 = a = np.ascontiguousarray(a2)     # a layout of A the kernels do not read (a transposed A)
            prim, weights = self.primitive(a2.shape[0], a2.strides, threads)
        self._execute(prim, weights, a2 if a is None else a, y2 if y is None else y)

    def _execute(self, prim: api.Primitive, weights: int, a, y) -> None:
        if self.bias is None:
            prim.execute((a, weights, y), self)
        else:
            prim.execute((a, weights, y, self.bias), self)


def _padded(md: api.MemoryDesc) -> api.MemoryDesc:
    """``md``, or for a row-major (k, n) layout whose rows are a multiple of
    PLAIN_ROW_CONFLICT bytes apart, the same with PLAIN_ROW_PAD floats of padding per row."""
    b = md.blocking()
    if b is None or b.inner_blks or len(b.padded_dims) != 2:
        return md
    k, n = b.padded_dims
    if b.strides != (n, 1) or (n * F32.itemsize) % PLAIN_ROW_CONFLICT:
        return md
    return api.MemoryDesc((k, n), strides=(n + PLAIN_ROW_PAD, 1))


def _row_major_layout(md: api.MemoryDesc) -> bool:
    """Whether ``md`` is a row-major (k, n) layout (rows ``stride`` floats apart, padded or
    not): the layout oneDNN keeps on an AVX2-only CPU."""
    b = md.blocking()
    if b is None or b.inner_blks or len(b.padded_dims) != 2:
        return False
    k, n = md.dims
    return tuple(b.padded_dims) == (k, n) and b.strides[1] == 1 and b.strides[0] >= n


def _pack_panels(weight: np.ndarray, allocate=None) -> np.ndarray:
    """``weight (K, N)`` as column panels ``(ceil(N / 16), K, 16)`` (:mod:`..native.panels`),
    the last one zero-padded, in memory from ``allocate(nbytes)`` (the weight arena) or its own."""
    k, n = weight.shape
    width = 16
    count = -(-n // width)
    nbytes = count * k * width * F32.itemsize
    panels = (aligned_empty if allocate is None else allocate)(nbytes)[:nbytes].view(F32).reshape(count, k, width)
    full = n // width
    panels[:full] = weight[:, :full * width].reshape(k, full, width).transpose(1, 0, 2)
    if full < count:
        panels[full] = 0.0
        panels[full, :, :n - full * width] = weight[:, full * width:]
    return panels


def _panels_matmul(a2: np.ndarray, panels: np.ndarray, y2: np.ndarray) -> None:
    """``y2 = a2 @ W`` from the panels with numpy (one small GEMM per panel): the path of the
    runs before the compiled loops are ready."""
    n = y2.shape[1]
    out = np.matmul(a2, panels)                  # (NP, M, 16)
    y2[...] = out.transpose(1, 0, 2).reshape(a2.shape[0], -1)[:, :n]


def _row_major(weights: api.PackedWeights) -> Optional[np.ndarray]:
    """The packed weight as a (k, n) float32 view, where its layout is row-major."""
    md, buf, pointer = weights.layouts[0]
    if not _row_major_layout(md):
        return None
    b = md.blocking()
    k, n = md.dims
    start, span = pointer - buf.ctypes.data, ((k - 1) * b.strides[0] + n) * 4
    if start % 4 or start + span > buf.nbytes:
        return None
    flat = buf[start:start + span].view(np.float32)
    return np.lib.stride_tricks.as_strided(flat, (k, n), (b.strides[0] * 4, 4), writeable=False)


def _slabs(weights: api.PackedWeights) -> Optional[np.ndarray]:
    """The packed weight as 64-column slabs ``(NB, Kp, 64)`` (:mod:`..native.gemv`), where its
    layout is one: the inner blocks (16 rows x 64 columns, or 64 columns) of a column block
    follow each other down the rows, the column blocks follow each other."""
    md, buf, pointer = weights.layouts[0]
    b = md.blocking()
    if b is None or len(b.padded_dims) != 2:
        return None
    rows, cols = b.padded_dims
    if b.inner_idxs == (0, 1):
        bk, bn = b.inner_blks
    elif b.inner_idxs == (1,):
        bk, bn = 1, b.inner_blks[0]
    else:
        return None
    if bn != native_gemv.WIDTH or rows % bk or cols % bn or b.strides != (bk * bn, rows * bn):
        return None
    start = pointer - buf.ctypes.data
    if start + rows * cols * 4 > buf.nbytes:
        return None
    return buf[start:start + rows * cols * 4].view(np.float32).reshape(cols // bn, rows, bn)


def weight_memory(ctx):
    """Where a prepacked weight goes: the session's weight arena (``ctx.services.weight_buffer``),
    or None (an allocation of its own) where the node runs outside an engine."""
    return None if ctx.services is None else ctx.services.weight_buffer


#: op types whose constants are GEMM weights, and convolution weights
GEMM_OPS = ("MatMul", "Gemm", "FusedMatMul")
CONV_OPS = ("Conv", "FusedConv", "NhwcConv", "ConvTranspose")


@lru_cache(maxsize=1)
def gemv_supported() -> bool:
    """Whether the native one-row loop runs in this process (:func:`..native.gemv.supported`)."""
    return native_gemv.supported()


@lru_cache(maxsize=1)
def panels_supported() -> bool:
    """Whether the native column-panel loop runs in this process (:func:`..native.panels.supported`)."""
    return native_panels.supported()


def panels_pay(ctx) -> bool:
    """Whether the node's weight goes into column panels (an AVX2-only CPU): where the model's
    GEMM weights weigh at least its convolution weights (a transformer, an MLP), not where a
    CNN's classifier head is its only GEMM (mobilenet_v3_large's two: no faster; with the
    panels' loop then in numba, 145 -> 265 MB peak RSS)."""
    s = ctx.services
    return s is None or s.constant_bytes(GEMM_OPS) >= s.constant_bytes(CONV_OPS)


def _weight(ctx, trans_b: bool) -> Optional[np.ndarray]:
    w = ctx.value(1)
    if w is None or w.dtype != F32 or w.ndim != 2:
        return None
    return w.T if trans_b else w


def _big_enough(w: np.ndarray) -> bool:
    return w.size >= MIN_WEIGHT and 0 not in w.shape


def _library_ready() -> bool:
    return api.library() is not None


#: op types around a float node of a QDQ model: there the node keeps the numpy kernel, which
#: sums as onnxruntime's MLAS does (oneDNN's sums differ in the last bits, and an output on
#: an exact rounding tie of the next QuantizeLinear would land one quantization step off)
QDQ_BEFORE = frozenset({"DequantizeLinear"})
QDQ_AFTER = frozenset({"QuantizeLinear", "DynamicQuantizeLinear"})


def beside_qdq(ctx) -> bool:
    """The node reads a DequantizeLinear or feeds a QuantizeLinear."""
    if ctx.services is None:
        return False
    before, after = ctx.services.neighbours(ctx.node)
    return bool(before & QDQ_BEFORE or after & QDQ_AFTER)


# MatMul ------------------------------------------------------------------------------

def _matmul_accepts(ctx) -> bool:
    w = _weight(ctx, False)
    a = ctx.shape(0)
    return (w is not None and _big_enough(w) and ctx.dtype(0) == F32 and a is not None and len(a) >= 1
            and not beside_qdq(ctx) and _library_ready())


def _matmul_prepack(ctx) -> PackedGemm:
    return PackedGemm(_weight(ctx, False), None, (), allocate=weight_memory(ctx), panels=panels_pay(ctx))


def _prepared(ctx, make) -> PackedGemm:
    """The packed weight: the program's (``ctx.prepacked``), or made now (a kernel run
    outside a program: constant folding, ``dynashape.testing``)."""
    return ctx.prepacked if ctx.prepacked is not None else make(ctx)


@lib.kernel("MatMul", since_version=1, dtypes=[np.float32], priority=PRIORITY, accepts=_matmul_accepts,
            prepack=_matmul_prepack, prepack_inputs=(1,), prepare=lambda ctx: _prepared(ctx, _matmul_prepack))
def _matmul(inputs, outputs, packed: PackedGemm):
    _run_rows(inputs[0], outputs[0], packed)


def _run_rows(a: np.ndarray, y: np.ndarray, packed: PackedGemm) -> None:
    """A (..., K) times the packed weight into y (..., N) as one GEMM over the leading dims."""
    k, n = packed.k, packed.n
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    if y.flags.c_contiguous:
        packed.run(a.reshape(-1, k), y.reshape(-1, n), a, y)
    else:
        a2 = a.reshape(-1, k)
        tmp = np.empty((a2.shape[0], n), F32)
        packed.run(a2, tmp)
        y[...] = tmp.reshape(y.shape)


# Gemm --------------------------------------------------------------------------------

def _gemm_bias(ctx, n) -> tuple:
    """(ok, bias or None): Gemm's ``beta * C`` as a bias row when C is absent or a constant
    that broadcasts along rows (a scalar, (N,), (1, N))."""
    if not ctx.has_input(2):
        return True, None
    c = ctx.value(2)
    if c is None or c.dtype != F32 or c.ndim > 2 or c.size not in (1, n) or (c.ndim == 2 and c.shape[0] != 1):
        return False, None
    beta = float(ctx.attr("beta", 1.0))
    return True, np.broadcast_to(c.reshape(-1).astype(np.float64) * beta, (n,)).astype(F32)


def _gemm_accepts(ctx) -> bool:
    w = _weight(ctx, bool(ctx.attr("transB", 0)))
    a = ctx.shape(0)
    if w is None or not _big_enough(w) or ctx.dtype(0) != F32 or a is None or len(a) != 2 or ctx.opset < 7:
        return False
    return _gemm_bias(ctx, w.shape[1])[0] and not beside_qdq(ctx) and _library_ready()


def _gemm_prepack(ctx) -> PackedGemm:
    w = _weight(ctx, bool(ctx.attr("transB", 0)))
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        w = (w.astype(np.float64) * alpha).astype(F32)
    return PackedGemm(w, _gemm_bias(ctx, w.shape[1])[1], (), allocate=weight_memory(ctx), panels=panels_pay(ctx))


@lib.kernel("Gemm", since_version=7, dtypes=[np.float32], priority=PRIORITY, accepts=_gemm_accepts,
            prepack=_gemm_prepack, prepack_inputs=(1, 2), prepare=lambda ctx: (
                _prepared(ctx, _gemm_prepack), bool(ctx.attr("transA", 0))))
def _gemm(inputs, outputs, prepared):
    packed, trans_a = prepared
    a = inputs[0]
    packed.run(a.T if trans_a else a, outputs[0], a)


# FusedMatMul (dynashape domain: MatMul + bias + activation, the builtin rewrites) -----

def _fused_accepts(ctx) -> bool:
    w = _weight(ctx, bool(ctx.attr("transB", 0)))
    a = ctx.shape(0)
    if w is None or not _big_enough(w) or ctx.dtype(0) != F32 or a is None or len(a) < 1:
        return False
    if ctx.attr("activation", "") not in ("",) + tuple(ACTIVATIONS):
        return False
    if ctx.has_input(2):
        b = ctx.value(2)
        if b is None or b.dtype != F32 or b.size != w.shape[1] or (b.ndim > 1 and b.shape[-1] != b.size):
            return False
    return not beside_qdq(ctx) and _library_ready()


def _fused_prepack(ctx) -> PackedGemm:
    w = _weight(ctx, bool(ctx.attr("transB", 0)))
    bias = ctx.value(2) if ctx.has_input(2) else None
    return PackedGemm(w, bias, eltwise_post_ops(ctx.attr("activation", ""), ctx.attr("activation_params", [])),
                      fusions.epilogue(ctx), weight_memory(ctx), panels_pay(ctx))


@lib.kernel("FusedMatMul", domain=fusions.DOMAIN, dtypes=[np.float32], priority=PRIORITY, accepts=_fused_accepts,
            prepack=_fused_prepack, prepack_inputs=(1, 2), prepare=lambda ctx: _prepared(ctx, _fused_prepack))
def _fused_matmul(inputs, outputs, packed: PackedGemm):
    _run_rows(inputs[0], outputs[0], packed)
