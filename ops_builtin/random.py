"""Random generators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike,
Bernoulli and Multinomial.

Every op here is registered ``deterministic=False``: never constant-folded nor computed
once per signature; each run draws anew. Samples come from numpy's ``Generator`` (PCG64):

* without ``seed`` a generator freshly seeded from the OS entropy on each run;
* with ``seed`` a generator made from that seed on each run, so a node with a seed gives
  the same values on every run, in every session and thread (a kernel keeps no state).
  The seed's value selects the stream: an integral seed >= 0 is used as that int, any
  other float by its float64 bit pattern.

The values cannot equal those of other runtimes' generators (onnxruntime's, the ONNX
reference implementation's numpy ``RandomState``): the spec calls these ops
non-deterministic "even if a seed is specified". Only the distribution, shape and dtype
are specified; float16/bfloat16 outputs are drawn in float32 and rounded.

Source: ONNX operator spec (onnx/docs/Operators.md), RandomNormal-1/22, RandomUniform-1/22,
RandomNormalLike-1/22, RandomUniformLike-1/22, Bernoulli-15/22, Multinomial-7/22.
"""
from __future__ import annotations

import numpy as np
from dynashape.dtypes import is_float, is_integer, np_dtype
from dynashape.records import OpLibrary

lib = OpLibrary()

__all__ = ["lib"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)


# shared helpers ---------------------------------------------------------------------------

def _seed(ctx):
    """The seed attribute as a non-negative int for numpy's SeedSequence, or None."""
    seed = ctx.attr("seed")
    if seed is None:
        return None
    seed = float(seed)
    if seed.is_integer() and seed >= 0:
        return int(seed)
    return int(np.array(seed, dtype=np.float64).view(np.uint64))


def _generator(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def _attr_dtype(ctx, default):
    """The output dtype: attribute ``dtype`` (an ONNX elem type) or ``default``."""
    dt = ctx.attr("dtype")
    if dt is None or int(dt) == 0:   # 0 (UNDEFINED): not given
        return None if default is None else np.dtype(default)
    try:
        return np_dtype(int(dt))
    except TypeError:
        ctx.fail(f"dtype {dt} is not an ONNX element type", kind="InvalidAttribute")


def _float_output(ctx, default):
    dt = _attr_dtype(ctx, default)
    if dt is not None and not is_float(dt):
        ctx.fail(f"the output element type {dt} is not a floating-point type (float16, float, double, "
                 "bfloat16)", kind="InvalidAttribute")
    return dt


def _draw_into(out: np.ndarray, rng: np.random.Generator, normal: bool, a: float, b: float) -> None:
    """Fill ``out`` with normal(mean=a, scale=b) or uniform[a, b) samples."""
    if out.size == 0:
        return
    direct = out.dtype in (_F32, _F64) and out.flags.c_contiguous
    work = out if direct else np.empty(out.shape, _F64 if out.dtype == _F64 else _F32)
    if normal:
        rng.standard_normal(dtype=work.dtype, out=work)
        work *= b
        work += a
    else:
        rng.random(dtype=work.dtype, out=work)
        work *= b - a
        work += a
    if work is not out:
        np.copyto(out, work, casting="unsafe")


def _params(normal: bool):
    return ("mean", 0.0, "scale", 1.0) if normal else ("low", 0.0, "high", 1.0)


def _dist_prepare(normal: bool):
    na, da, nb, db = _params(normal)

    def prepare(ctx):
        return _seed(ctx), normal, float(ctx.attr(na, da)), float(ctx.attr(nb, db))
    return prepare


def _draw(inputs, outputs, prepared):
    """RandomNormal/RandomUniform(Like): draw straight into the output buffer."""
    seed, normal, a, b = prepared
    _draw_into(outputs[0], _generator(seed), normal, a, b)


# RandomNormal / RandomUniform -----------------------------------------------------------

def _fixed_shape(ctx) -> tuple:
    shape = ctx.attr("shape")
    if shape is None:
        ctx.fail("attribute 'shape' is required", kind="MissingAttribute")
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {list(shape)} must not have negative dims", kind="InvalidAttribute")
    return shape


def _fixed_dtype(ctx):
    return [_float_output(ctx, np.float32)]


def _fixed_infer(ctx):
    """RandomNormal/RandomUniform: the output shape is attribute ``shape``; dtype attribute
    ``dtype`` (default float). Raises MissingAttribute, InvalidAttribute."""
    _float_output(ctx, np.float32)
    return [_fixed_shape(ctx)]


def _like_dtype(ctx):
    return [_float_output(ctx, ctx.dtype(0))]


def _like_infer(ctx):
    """Random*Like: the output has the input's shape; dtype attribute ``dtype`` or the
    input's (a floating-point type). Raises InvalidAttribute."""
    _float_output(ctx, ctx.dtype(0))
    x = ctx.shape(0)
    return [None if x is None else tuple(x)]


for _normal, _name in ((True, "Normal"), (False, "Uniform")):
    lib.op(f"Random{_name}", since_version=(1, 22), infer_dtype=_fixed_dtype, deterministic=False)(_fixed_infer)
    lib.kernel(f"Random{_name}", prepare=_dist_prepare(_normal), reads=())(_draw)
    lib.op(f"Random{_name}Like", since_version=(1, 22), infer_dtype=_like_dtype, deterministic=False,
           shape_only_inputs=(0,))(_like_infer)
    lib.kernel(f"Random{_name}Like", prepare=_dist_prepare(_normal), reads=())(_draw)


# Bernoulli ---------------------------------------------------------------------------------

def _bernoulli_dtype(ctx):
    dt = _attr_dtype(ctx, ctx.dtype(0))
    if dt is not None and not (is_float(dt) or is_integer(dt) or dt == _BOOL):
        ctx.fail(f"the output element type {dt} is not numeric or bool", kind="InvalidAttribute")
    return dt


@lib.op("Bernoulli", since_version=(15, 22), infer_dtype=lambda ctx: [_bernoulli_dtype(ctx)],
        deterministic=False)
def _bernoulli_shape(ctx):
    """Bernoulli: 1 with probability input[i], else 0; output shaped like the input.

    input holds probabilities (float); the output type is attribute ``dtype`` or the
    input's (any numeric type or bool). Raises InvalidAttribute, UnsupportedDtype.
    Source: ONNX operator spec, Bernoulli-22 (-15: the same without bfloat16).
    """
    dt = ctx.dtype(0)
    if dt is not None and not is_float(dt):
        ctx.fail(f"input has element type {dt}, expected a floating-point type (probabilities)",
                 kind="UnsupportedDtype")
    _bernoulli_dtype(ctx)
    x = ctx.shape(0)
    return [None if x is None else tuple(x)]


@lib.kernel("Bernoulli", prepare=_seed)
def _bernoulli(inputs, outputs, seed):
    """uniform[0, 1) < p, cast into the output type."""
    p, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    u = _generator(seed).random(p.shape)
    np.copyto(out, np.less(u, p.astype(_F64, copy=False)), casting="unsafe")


# Multinomial -------------------------------------------------------------------------------

def _multinomial_dtype(ctx):
    dt = _attr_dtype(ctx, np.int32)
    if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        ctx.fail(f"the output element type {dt} must be int32 or int64", kind="InvalidAttribute")
    return [dt]


def _sample_size(ctx) -> int:
    n = int(ctx.attr("sample_size", 1))
    if n < 1:
        ctx.fail(f"sample_size {n} must be >= 1", kind="InvalidAttribute")
    return n


@lib.op("Multinomial", since_version=(7, 22), infer_dtype=_multinomial_dtype, deterministic=False)
def _multinomial_shape(ctx):
    """Multinomial: ``sample_size`` class indices per row drawn from softmax(input row).

    input (batch_size, class_size) of unnormalised log-probabilities (float); output
    (batch_size, sample_size), int32 (default) or int64. Raises InvalidRank,
    InvalidAttribute, UnsupportedDtype. Source: ONNX operator spec, Multinomial-22 (-7: the
    same without bfloat16).
    """
    dt = ctx.dtype(0)
    if dt is not None and not is_float(dt):
        ctx.fail(f"input has element type {dt}, expected a floating-point type", kind="UnsupportedDtype")
    n = _sample_size(ctx)
    x = ctx.shape(0)
    if x is None:
        return [None]
    if len(x) != 2:
        ctx.fail(f"input must be 2-D (batch_size, class_size), got rank {len(x)}", kind="InvalidRank")
    return [(x[0], n)]


@lib.kernel("Multinomial", prepare=_seed)
def _multinomial(inputs, outputs, seed):
    """Inverse-CDF sampling of all rows at once: each row's CDF is offset by its row index so
    one searchsorted over the flattened CDFs serves every row."""
    x, out = inputs[0].astype(_F64), outputs[0]
    b, c = x.shape
    if out.size == 0:
        return
    if c == 0:
        out.fill(0)
        return
    x -= x.max(axis=1, keepdims=True)
    np.exp(x, out=x)
    cdf = np.cumsum(x, axis=1, out=x)
    cdf /= cdf[:, -1:]
    rows = np.arange(b, dtype=np.float64)[:, None]
    u = _generator(seed).random(out.shape)
    pos = np.searchsorted((cdf + rows).reshape(-1), (u + rows).reshape(-1), side="right").reshape(out.shape)
    pos -= np.arange(b, dtype=np.int64)[:, None] * c
    np.clip(pos, 0, c - 1, out=pos)
    np.copyto(out, pos, casting="unsafe")
