"""Linear algebra: MatMul, Gemm, Einsum, MatMulInteger, QLinearMatMul and Det.

float32/float64 and the integer types are computed natively (float32 products stay
float32, as in ONNX Runtime); float16/bfloat16 are computed in float32 and cast back.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dynashape.dtypes import is_float
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import broadcast_dim, broadcast_shapes, check_dims_equal, check_unidirectional, require

lib = OpLibrary()

_F32 = np.dtype(np.float32)


def _work_dtype(dt) -> np.dtype | None:
    """float32 for float16/bfloat16/float8 inputs (computed in float32), else None."""
    dt = np.dtype(dt)
    if dt == np.float16 or (dt.kind == "V" and "float" in dt.name):
        return _F32
    return None


def _check_same_dtype(ctx, i: int, j: int, what: str) -> None:
    a, b = ctx.dtype(i), ctx.dtype(j)
    if a is not None and b is not None and a != b:
        ctx.fail(f"{what} must have the same dtype, got {a} and {b}", kind="DtypeMismatch")


# MatMul ------------------------------------------------------------------------------

def _matmul_shape(ctx, a, b) -> tuple | None:
    """numpy.matmul's output shape: 1-D operands get a 1 prepended (A) / appended (B) that
    is removed again; batch dims broadcast."""
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        ctx.fail("MatMul operands must have rank >= 1 (got a scalar)", kind="InvalidRank")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    check_dims_equal(ctx, a2[-1], b2[-2], "inner dims (A's last, B's second to last) must match")
    batch = broadcast_shapes(ctx, a2[:-2], b2[:-2])
    return batch + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())


@lib.op("MatMul", since_version=(1, 9, 13), infer_dtype=same_dtype(0))
def _matmul_infer(ctx):
    """MatMul: matrix product with numpy.matmul semantics.

    Shapes: A (..., M, K) or (K,), B (..., K, N) or (K,) -> (broadcast(...), M, N) with the
    1-D operands' dims removed. Dtypes: T (floats and 32/64-bit ints), output T.
    Raises: InvalidRank (scalar operand), DimMismatch (K differs), BroadcastMismatch, DtypeMismatch.
    Source: ONNX operator spec, MatMul-1/9/13.
    """
    _check_same_dtype(ctx, 0, 1, "A and B")
    return [_matmul_shape(ctx, ctx.shape(0), ctx.shape(1))]


def _matmul_prepare(ctx):
    return _work_dtype(ctx.dtype(0))


@lib.kernel("MatMul", prepare=_matmul_prepare)
def _matmul(inputs, outputs, work):
    a, b = inputs
    if work is None:
        np.matmul(a, b, out=outputs[0])
    else:
        np.copyto(outputs[0], np.matmul(a.astype(work), b.astype(work)), casting="unsafe")


# Gemm --------------------------------------------------------------------------------

@lib.op("Gemm", since_version=(1, 6, 7, 9, 11, 13), infer_dtype=same_dtype(0))
def _gemm_infer(ctx):
    """Gemm: Y = alpha * A' @ B' + beta * C, A' = A.T if transA, B' = B.T if transB.

    Shapes: A (M, K) or (K, M), B (K, N) or (N, K), optional C (opset >= 11) unidirectionally
    broadcastable to (M, N) -> Y (M, N). Old versions' ``broadcast`` attribute is accepted
    (C is always broadcast). Dtypes: T, output T.
    Raises: InvalidRank, DimMismatch (K differs), BroadcastMismatch (C), MissingInput (C before
    opset 11), DtypeMismatch.
    Source: ONNX operator spec, Gemm-1/6/7/9/11/13.
    """
    a, b = ctx.shape(0), ctx.shape(1)
    _check_same_dtype(ctx, 0, 1, "A and B")
    if a is None or b is None:
        return [None]
    for name, s in (("A", a), ("B", b)):
        if len(s) != 2:
            ctx.fail(f"{name} must be 2-D, got rank {len(s)}", kind="InvalidRank")
    m, k = (a[1], a[0]) if ctx.attr("transA", 0) else (a[0], a[1])
    k2, n = (b[1], b[0]) if ctx.attr("transB", 0) else (b[0], b[1])
    check_dims_equal(ctx, k, k2, "inner dims of A' and B' (K) must match")
    if not ctx.has_input(2):
        if ctx.opset < 11:
            ctx.fail("C is required before opset 11", kind="MissingInput")
    else:
        _check_same_dtype(ctx, 0, 2, "A and C")
        _check_gemm_c(ctx, ctx.shape(2), (m, n))
    return [(m, n)]


def _check_gemm_c(ctx, c, target) -> None:
    """C must broadcast unidirectionally to (M, N): rank <= 2, each dim 1 or equal to the
    target's (ONNX Broadcasting.md); symbolic dims are checked for every signature."""
    if c is None:
        return
    if len(c) > 2:
        ctx.fail(f"C must have rank <= 2, got rank {len(c)}", kind="InvalidRank")
    check_unidirectional(ctx, c, target, "C")


class _GemmPlan(NamedTuple):
    trans_a: bool
    trans_b: bool
    alpha: object    # None when 1
    beta: object     # None when 1
    work: np.dtype | None


def _gemm_prepare(ctx):
    dt = np.dtype(ctx.dtype(0))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    work = _work_dtype(dt)
    if work is None and dt.kind in "iu" and (alpha != 1.0 or beta != 1.0):
        work = np.dtype(np.float64)  # integer Gemm with real scales: compute in float, truncate
    scalar = (work or dt).type
    return _GemmPlan(bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0)),
                     None if alpha == 1.0 else scalar(alpha),
                     None if beta == 1.0 else scalar(beta), work)


@lib.kernel("Gemm", prepare=_gemm_prepare)
def _gemm(inputs, outputs, plan: _GemmPlan):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if plan.work is not None:
        a, b = a.astype(plan.work), b.astype(plan.work)
        c = None if c is None else c.astype(plan.work)
    if plan.trans_a:
        a = a.T
    if plan.trans_b:
        b = b.T
    out = outputs[0] if plan.work is None else np.empty(outputs[0].shape, dtype=plan.work)
    np.matmul(a, b, out=out)
    if plan.alpha is not None:
        np.multiply(out, plan.alpha, out=out)
    if c is not None:
        np.add(out, c if plan.beta is None else c * plan.beta, out=out)
    if plan.work is not None:
        np.copyto(outputs[0], out, casting="unsafe")


# Einsum ------------------------------------------------------------------------------

class _Einsum(NamedTuple):
    equation: str          # spaces removed, explicit "->" form
    inputs: tuple          # per operand: tuple of labels, "..." as one entry
    output: tuple


def _parse_einsum(ctx, equation: str, ranks) -> _Einsum:
    eq = equation.replace(" ", "")
    lhs, explicit, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        ctx.fail(f"equation '{equation}' has {len(terms)} operand terms but the node has "
                 f"{len(ranks)} inputs", kind="EinsumMismatch")
    parsed = tuple(_einsum_term(ctx, t, equation) for t in terms)
    for term, labels in zip(terms, parsed):
        if "..." in labels and labels.count("...") > 1:
            ctx.fail(f"term '{term}' of '{equation}' has more than one ellipsis", kind="EinsumSyntax")
    if explicit:
        out = _einsum_term(ctx, rhs, equation)
        if out.count("...") > 1:
            ctx.fail(f"the output of '{equation}' has more than one ellipsis", kind="EinsumSyntax")
        seen = {x for labels in parsed for x in labels if x != "..."}
        for x in out:
            if x != "..." and (x not in seen or out.count(x) > 1):
                ctx.fail(f"output label '{x}' of '{equation}' must appear once in the output and "
                         f"in some input", kind="EinsumSyntax")
    else:
        counts: dict = {}
        for labels in parsed:
            for x in labels:
                if x != "...":
                    counts[x] = counts.get(x, 0) + 1
        ellipsis = ("...",) if any("..." in labels for labels in parsed) else ()
        out = ellipsis + tuple(sorted(x for x, n in counts.items() if n == 1))
    canon = ",".join("".join(p) for p in parsed) + "->" + "".join(out)
    return _Einsum(canon, parsed, out)


def _einsum_term(ctx, term: str, equation: str) -> tuple:
    labels, i = [], 0
    while i < len(term):
        if term.startswith("...", i):
            labels.append("...")
            i += 3
        elif term[i].isascii() and term[i].isalpha():
            labels.append(term[i])
            i += 1
        else:
            ctx.fail(f"invalid character '{term[i]}' in einsum equation '{equation}' (expected "
                     f"letters, ',', '->' or '...')", kind="EinsumSyntax")
    return tuple(labels)


@lib.op("Einsum", since_version=(12, 28), infer_dtype=same_dtype(0))
def _einsum_infer(ctx):
    """Einsum: Einstein summation of the inputs as the ``equation`` attribute says.

    Shapes: each operand's rank matches its term (``...`` covers the rest, broadcast across
    operands); the output dims follow the right-hand side (or the implicit form: ellipsis
    dims, then labels appearing once, in ASCII order). Dtypes: all inputs T, output T.
    Raises: EinsumSyntax, EinsumMismatch (term/rank/operand count), DimMismatch (a label's
    sizes differ), BroadcastMismatch (ellipsis dims), DtypeMismatch.
    Source: ONNX operator spec, Einsum-12/28.
    """
    for i in range(1, ctx.num_inputs):
        _check_same_dtype(ctx, 0, i, "all Einsum inputs")
    equation = ctx.attr("equation")
    if equation is None:
        ctx.fail("the 'equation' attribute is required", kind="MissingAttribute")
    shapes = [ctx.shape(i) for i in range(ctx.num_inputs)]
    if any(s is None for s in shapes):
        spec = _parse_einsum(ctx, equation, shapes)
        return [None if "..." in spec.output else tuple(ctx.new_dim() for _ in spec.output)]
    spec = _parse_einsum(ctx, equation, shapes)
    sizes, ell = _einsum_dims(ctx, spec, shapes)
    out = []
    for x in spec.output:
        out.extend(ell if x == "..." else (sizes[x],))
    return [tuple(out)]


def _einsum_dims(ctx, spec: _Einsum, shapes) -> tuple[dict, tuple]:
    """(size of every label, broadcast ellipsis dims), checking ranks, that a label's sizes
    agree across operands and that the ellipsis dims broadcast."""
    sizes: dict = {}
    ellipses = []
    for labels, shape in zip(spec.inputs, shapes):
        n_ell = len(shape) - (len(labels) - (1 if "..." in labels else 0))
        if n_ell < 0 or (n_ell and "..." not in labels):
            ctx.fail(f"operand of rank {len(shape)} does not match its term '{''.join(labels)}'",
                     kind="EinsumMismatch")
        pos = 0
        for x in labels:
            if x == "...":
                ellipses.append(tuple(shape[pos:pos + n_ell]))
                pos += n_ell
                continue
            d = shape[pos]
            pos += 1
            sizes[x] = d if x not in sizes else _merge_label(ctx, x, sizes[x], d)
    if len({len(e) for e in ellipses}) > 1:
        ctx.fail(f"every ellipsis in '{ctx.attr('equation')}' must stand for the same number of dims, got "
                 f"{sorted({len(e) for e in ellipses})}", kind="EinsumMismatch")
    return sizes, (broadcast_shapes(ctx, *ellipses) if ellipses else ())


def _merge_label(ctx, label: str, a, b):
    """A label's size across operands: equal, or 1 broadcast against the other (numpy, and
    ONNX Runtime), so 0 against 1 is 0."""
    if a == b:
        return a
    if isinstance(a, int) and isinstance(b, int) and a != 1 and b != 1:
        ctx.fail(f"label '{label}' has sizes {a} and {b}", kind="DimMismatch")
    merged = broadcast_dim(ctx, a, b)
    ctx.assume(merged, ">=", 0)  # evaluated for every signature, also when the label is summed away
    return merged


def _einsum_prepare(ctx):
    shapes = [ctx.shape(i) for i in range(ctx.num_inputs)]
    spec = _parse_einsum(ctx, ctx.attr("equation"), shapes)
    work = _work_dtype(ctx.dtype(0))
    dummies = [np.broadcast_to(np.zeros((), dtype=work or ctx.dtype(0)), s) for s in shapes]
    path = np.einsum_path(spec.equation, *dummies, optimize="greedy")[0] if len(shapes) > 1 else False
    return spec.equation, path, work


@lib.kernel("Einsum", prepare=_einsum_prepare)
def _einsum(inputs, outputs, prepared):
    equation, path, work = prepared
    xs = inputs if work is None else [x.astype(work) for x in inputs]
    np.copyto(outputs[0], np.einsum(equation, *xs, optimize=path), casting="unsafe")


# MatMulInteger / QLinearMatMul ------------------------------------------------------------

def _check_int8(ctx, i: int, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and dt not in (np.int8, np.uint8):
        ctx.fail(f"{what} must be int8 or uint8, got {dt}", kind="InvalidDtype")


def _check_quant_param(ctx, i: int, what: str, size) -> None:
    """A scale/zero point: a scalar, or 1-D per row of A / per column of B (``size``)."""
    s = ctx.shape(i)
    if s is None or not ctx.has_input(i):
        return
    message = f"{what} must be a scalar or 1-D of size {size}, got shape {tuple(s)}"
    if len(s) > 1:
        ctx.fail(message, kind="InvalidQuantParam")
    if len(s) == 1:   # 1 or size: the product of the differences is 0 (exact for symbolic dims too)
        require(ctx, (s[0] - 1) * (s[0] - size), "==", 0, message, "InvalidQuantParam")


def _rows(ctx, i: int):
    s = ctx.shape(i)
    return None if s is None or not s else (s[-2] if len(s) > 1 else 1)


def _cols(ctx, i: int):
    s = ctx.shape(i)
    return None if s is None or not s else s[-1]


@lib.op("MatMulInteger", since_version=10, infer_dtype=fixed_dtype(np.int32))
def _matmul_integer_infer(ctx):
    """MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) with int32 accumulation.

    Shapes: as MatMul; a_zero_point scalar or (M,), b_zero_point scalar or (N,).
    Dtypes: A, B int8/uint8 (zero points of the same dtype) -> int32.
    Raises: InvalidDtype, DtypeMismatch, InvalidQuantParam, plus MatMul's shape errors.
    Source: ONNX operator spec, MatMulInteger-10.
    """
    _check_int8(ctx, 0, "A")
    _check_int8(ctx, 1, "B")
    for zp, x, name in ((2, 0, "a_zero_point and A"), (3, 1, "b_zero_point and B")):
        if ctx.has_input(zp):
            _check_same_dtype(ctx, zp, x, name)
    _check_quant_param(ctx, 2, "a_zero_point", _rows(ctx, 0))
    _check_quant_param(ctx, 3, "b_zero_point", _cols(ctx, 1))
    return [_matmul_shape(ctx, ctx.shape(0), ctx.shape(1))]


def _centered(x: np.ndarray, zero_point, per_row: bool, dtype=np.int32) -> np.ndarray:
    """x as ``dtype`` minus its zero point (per row of A: reshaped to a column)."""
    x = x.astype(dtype)
    if zero_point is None:
        return x
    zp = zero_point.astype(dtype)
    if per_row and zp.ndim == 1 and x.ndim > 1:
        zp = zp.reshape(-1, 1)
    return np.subtract(x, zp, out=x)


#: the longest K for which every int32 sum of K products of centered 8-bit values (|x| <= 255)
#: cannot overflow; float64 sums of such integers are exact, so BLAS gives the int32 result
_EXACT_K = (2**31 - 1) // (255 * 255)


@lib.kernel("MatMulInteger")
def _matmul_integer(inputs, outputs, ctx):
    # numpy's integer matmul has no BLAS (about 20x slower than float64 at BERT sizes)
    dtype = np.float64 if inputs[0].shape[-1] <= _EXACT_K else np.int32
    a = _centered(inputs[0], inputs[2] if len(inputs) > 2 else None, True, dtype)
    b = _centered(inputs[1], inputs[3] if len(inputs) > 3 else None, False, dtype)
    if dtype is np.int32:
        np.matmul(a, b, out=outputs[0])
    else:
        np.copyto(outputs[0], np.matmul(a, b), casting="unsafe")


def _qlinear_dtype(ctx):
    return [ctx.dtype(7)]


@lib.op("QLinearMatMul", since_version=(10, 21), infer_dtype=_qlinear_dtype)
def _qlinear_matmul_infer(ctx):
    """QLinearMatMul: quantized MatMul, y = saturate(rint((a-azp)@(b-bzp) * as*bs/ys) + yzp).

    Shapes: a, b as MatMul; scales/zero points scalar or 1-D per row of a / per column of b;
    y_scale, y_zero_point scalars. Dtypes: a, b, y int8/uint8 (float8 types are not
    implemented), scales float. Output dtype: y_zero_point's.
    Raises: InvalidDtype, DtypeMismatch, InvalidQuantParam, plus MatMul's shape errors.
    Source: ONNX operator spec, QLinearMatMul-10/21.
    """
    for i, name in ((0, "a"), (3, "b"), (7, "y_zero_point")):
        _check_int8(ctx, i, name)
    _check_same_dtype(ctx, 2, 0, "a_zero_point and a")
    _check_same_dtype(ctx, 5, 3, "b_zero_point and b")
    m, n = _rows(ctx, 0), _cols(ctx, 3)
    for i, name, size in ((1, "a_scale", m), (2, "a_zero_point", m), (4, "b_scale", n),
                          (5, "b_zero_point", n), (6, "y_scale", 1), (7, "y_zero_point", 1)):
        _check_quant_param(ctx, i, name, size)
    return [_matmul_shape(ctx, ctx.shape(0), ctx.shape(3))]


def _per_row(x: np.ndarray, ndim: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x.reshape(-1, 1) if x.ndim == 1 and x.size > 1 and ndim > 1 else x


@lib.kernel("QLinearMatMul", dtypes=("int8", "uint8"))
def _qlinear_matmul(inputs, outputs, ctx):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs
    acc = np.matmul(_centered(a, a_zp, True), _centered(b, b_zp, False))
    scale = (_per_row(a_scale, a.ndim) * np.asarray(b_scale, dtype=np.float32)
             / np.asarray(y_scale, dtype=np.float32))
    y = acc.astype(np.float32) * scale
    np.rint(y, out=y)
    y += np.asarray(y_zp, dtype=np.float32)
    info = np.iinfo(outputs[0].dtype)
    np.clip(y, info.min, info.max, out=y)
    np.copyto(outputs[0], y, casting="unsafe")


# Det ----------------------------------------------------------------------------------

@lib.op("Det", since_version=(11, 22), infer_dtype=same_dtype(0))
def _det_infer(ctx):
    """Det: determinants of the square matrices in the last two axes: (*, M, M) -> (*).

    A 2-D input gives a scalar. Dtypes: float types. Raises InvalidRank (rank < 2),
    DimMismatch (not square), UnsupportedDtype. Source: ONNX operator spec, Det-22 (-11:
    the same without bfloat16).
    """
    x, dt = ctx.shape(0), ctx.dtype(0)
    if dt is not None and not is_float(dt):
        ctx.fail(f"input has element type {dt}, expected a floating-point type", kind="UnsupportedDtype")
    if x is None:
        return [None]
    if len(x) < 2:
        ctx.fail(f"input must have rank >= 2 (*, M, M), got rank {len(x)}", kind="InvalidRank")
    check_dims_equal(ctx, x[-2], x[-1], "the last two dims (square matrices)")
    return [tuple(x[:-2])]


@lib.kernel("Det", prepare=_matmul_prepare)
def _det(inputs, outputs, work):
    """Det: np.linalg.det (LU), in float32 for 16-bit floats."""
    x = inputs[0] if work is None else inputs[0].astype(work)
    np.copyto(outputs[0], np.linalg.det(x), casting="unsafe")
