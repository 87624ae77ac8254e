"""Signal-processing operators: DFT, STFT, the Hann/Hamming/Blackman windows, MelWeightMatrix.

Complex values are stored as a trailing axis of 2 (real, imaginary); a real signal has a
trailing axis of 1. Transforms use ``numpy.fft`` over the whole batch at once, in the
input's precision (float32 and the half types in complex64, float64 in complex128), and
STFT frames the signal with a strided view (no copy per frame). Windows and the mel
filter bank are computed in float64 and cast to ``output_datatype``.

Source: ONNX operator spec (Operators.md): DFT-17, DFT-20, STFT-17, HannWindow-17,
HammingWindow-17, BlackmanWindow-17, MelWeightMatrix-17.
"""
from __future__ import annotations

import numpy as np
from dynashape.dtypes import compute_dtype, np_dtype
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_dims_equal, numel
from dynashape.symbolic import Expr

lib = OpLibrary()

_FLOATS = ("float16", "float32", "float64", "bfloat16")
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


# shared helpers ---------------------------------------------------------------------------

def _scalar(ctx, i: int, what: str):
    """Host-known scalar input ``i`` as an int (or a symbolic dim); None when unknown.

    Fails unless the input holds exactly one value (a scalar or a 1-element tensor).
    """
    _scalar_shape(ctx, i, what)
    v = ctx.value(i)
    if v is None:
        return None
    arr = np.asarray(v)
    if arr.size != 1:
        ctx.fail(f"{what} must be a scalar, got {arr.size} values", kind="NonScalarInput")
    x = arr.reshape(-1)[0]
    return x if isinstance(x, Expr) else int(x)


def _check_dtype(ctx, i: int, allowed, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and np.dtype(dt).name not in allowed:
        ctx.fail(f"{what} has dtype {np.dtype(dt).name}, expected one of {', '.join(allowed)}",
                 kind="InvalidDtype")


def _int_input(ctx, i: int, what: str) -> None:
    _check_dtype(ctx, i, ("int32", "int64"), what)


def _scalar_shape(ctx, i: int, what: str) -> None:
    """Fail unless input ``i`` holds one element (symbolic dims: assumed, checked per signature)."""
    shape = ctx.shape(i)
    if shape is not None and not ctx.assume(numel(shape), "==", 1):
        ctx.fail(f"{what} must be a scalar, got a tensor of shape {tuple(shape)}", kind="NonScalarInput")


def _positive(ctx, value, what: str, minimum: int = 1) -> None:
    """Fail when a (possibly symbolic) value is below ``minimum``."""
    if value is not None and not ctx.assume(value, ">=", minimum):
        ctx.fail(f"{what} is {value}, expected >= {minimum}", kind="InvalidValue")


def _check_complex_axis(ctx, last, what: str, complex_only: bool = False) -> None:
    """The last axis is 1 (real) or 2 (complex); only 2 when ``complex_only``."""
    lowest = 2 if complex_only else 1
    if not (ctx.assume(last, ">=", lowest) and ctx.assume(2, ">=", last)):
        want = "2 (complex values)" if complex_only else "1 (real) or 2 (complex)"
        ctx.fail(f"the last axis of {what} is {last}, expected {want}", kind="InvalidComplexAxis")


def _as_complex(x: np.ndarray) -> np.ndarray:
    """The signal of a [..., 1] (real) or [..., 2] (complex) tensor, without the last axis."""
    work = compute_dtype(x.dtype)
    if x.shape[-1] == 1:
        return x[..., 0].astype(work, copy=False)
    out = np.empty(x.shape[:-1], dtype=np.complex128 if work == _F64 else np.complex64)
    out.real = x[..., 0]
    out.imag = x[..., 1]
    return out


def _emit(outputs, k: int, value: np.ndarray, dtype, complex_out: bool):
    """Write ``value`` (complex, or real when not ``complex_out``) into output ``k`` with a
    trailing axis of 2 (1); returns the fresh array when the output was not planned."""
    out = outputs[k]
    fresh = out is None
    if fresh:
        out = np.empty(value.shape + (2 if complex_out else 1,), dtype=dtype)
    if complex_out:
        np.copyto(out[..., 0], value.real, casting="unsafe")
        np.copyto(out[..., 1], value.imag, casting="unsafe")
    else:
        np.copyto(out[..., 0], value, casting="unsafe")
    return out if fresh else None


# DFT ------------------------------------------------------------------------------------

def _dft_axis(ctx, rank: int):
    """The normalised DFT axis, or None when it is a runtime input not known yet."""
    if ctx.opset >= 20:
        if ctx.has_input(2):
            _check_dtype(ctx, 2, ("int64",), "axis")
            axis = _scalar(ctx, 2, "axis")
            if axis is None or isinstance(axis, Expr):
                return None
        else:
            axis = -2
    else:
        axis = int(ctx.attr("axis", 1))
    a = axis + rank if axis < 0 else axis
    if not 0 <= a <= rank - 2:
        ctx.fail(f"axis {axis} is out of range for an input of rank {rank}: expected [{-rank}, -2] or "
                 f"[0, {rank - 2}] (the last axis holds the real and imaginary parts)", kind="AxisOutOfRange")
    return a


def _dft_shape(ctx):
    """DFT: the transform of the signal along ``axis``; the last axis is 1 (real) or 2 (complex).

    Output: the input's shape with the last axis 2 (1 for IRFFT: ``onesided=1, inverse=1``)
    and the transformed axis ``dft_length`` (``dft_length // 2 + 1`` for RFFT: ``onesided=1,
    inverse=0``). ``dft_length`` defaults to the axis length, ``2 * (length - 1)`` for IRFFT.
    RFFT takes real input only, IRFFT complex input only.
    Opset 17: ``axis`` attribute (default 1); opset 20: ``axis`` optional int64 input
    (default -2). Raises: ShapeInferenceError kinds InvalidRank, InvalidComplexAxis,
    DFTOnesidedInput, AxisOutOfRange, NonScalarInput, InvalidValue, InvalidDtype.
    Source: ONNX operator spec, DFT-17 and DFT-20.
    """
    shape = ctx.shape(0)
    rank = len(shape)
    if rank < 2:
        ctx.fail(f"input must have rank >= 2 (signal axes, then a last axis of 1 for real or 2 for "
                 f"complex values), got rank {rank}", kind="InvalidRank")
    _check_dtype(ctx, 0, _FLOATS, "input")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    last = shape[-1]
    _check_complex_axis(ctx, last, "the input (IRFFT: onesided=1, inverse=1 takes a one-sided complex "
                        "spectrum)" if onesided and inverse else "the input", complex_only=onesided and inverse)
    if onesided and not inverse and not ctx.assume(last, "==", 1):
        ctx.fail("onesided=1 with inverse=0 (RFFT) takes a real input (last axis 1), got a complex one (2)",
                 kind="DFTOnesidedInput")
    length = None
    if ctx.has_input(1):
        _int_input(ctx, 1, "dft_length")
        length = _scalar(ctx, 1, "dft_length")
        _positive(ctx, length, "dft_length")
    axis = _dft_axis(ctx, rank)
    out = list(shape)
    out[-1] = 1 if onesided and inverse else 2
    if axis is None:
        if onesided or ctx.has_input(1):
            out[:-1] = [ctx.new_dim() for _ in out[:-1]]
        return [tuple(out)]
    if ctx.has_input(1):
        if length is None:
            out[axis] = ctx.new_dim()
            return [tuple(out)]
        n = length
    elif onesided and inverse:
        n = 2 * (shape[axis] - 1)
        _positive(ctx, n, f"the default dft_length 2 * (dim {axis} - 1) of IRFFT")
    else:
        n = shape[axis]
    out[axis] = n // 2 + 1 if onesided and not inverse else n
    return [tuple(out)]


lib.op("DFT", since_version=(17, 20), infer_dtype=same_dtype(0), value_inputs=(1, 2))(_dft_shape)


def _dft_prepare(ctx):
    axis_input = ctx.opset >= 20
    axis = -2 if axis_input else int(ctx.attr("axis", 1))
    return bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0)), axis, axis_input


@lib.kernel("DFT", prepare=_dft_prepare, dtypes=_FLOATS)
def _dft(inputs, outputs, prepared):
    """DFT: numpy.fft (fft / ifft / rfft / irfft) along the axis, all batches at once."""
    inverse, onesided, axis, axis_input = prepared
    x = inputs[0]
    if axis_input and len(inputs) > 2 and inputs[2] is not None:
        axis = int(np.asarray(inputs[2]).reshape(-1)[0])
    axis = axis + x.ndim if axis < 0 else axis
    signal = _as_complex(x)
    if len(inputs) > 1 and inputs[1] is not None:
        n = int(np.asarray(inputs[1]).reshape(-1)[0])
    elif onesided and inverse:
        n = 2 * (x.shape[axis] - 1)
    else:
        n = x.shape[axis]
    if onesided and inverse:
        return _list(_emit(outputs, 0, np.fft.irfft(signal, n=n, axis=axis), x.dtype, False))
    if onesided:
        y = np.fft.rfft(signal, n=n, axis=axis)
    elif inverse:
        y = np.fft.ifft(signal, n=n, axis=axis)
    else:
        y = np.fft.fft(signal, n=n, axis=axis)
    return _list(_emit(outputs, 0, y, x.dtype, True))


def _list(fresh):
    return None if fresh is None else [fresh]


# STFT -----------------------------------------------------------------------------------

def _stft_frame_length(ctx, length):
    """The frame length: input 3, else the window's length, else the signal length."""
    if ctx.has_input(3):
        _int_input(ctx, 3, "frame_length")
        fl = _scalar(ctx, 3, "frame_length")
        _positive(ctx, fl, "frame_length")
        if ctx.has_input(2) and fl is not None:
            check_dims_equal(ctx, ctx.shape(2)[0], fl, "window length must equal frame_length")
        return fl
    if ctx.has_input(2):
        return ctx.shape(2)[0]
    return length


def _stft_shape(ctx):
    """STFT: [batch, frames, bins, 2] spectra of windowed frames of a [batch, length, 1|2] signal.

    ``frames = (length - frame_length) // frame_step + 1``; ``bins = frame_length // 2 + 1``
    when ``onesided`` (default 1; of a complex signal the first half of the full spectrum,
    as onnxruntime), else ``frame_length``. The frame length
    is input 3, else the window's length, else the signal length; the window (1-D, default
    all ones) must be as long as the frame. Raises: ShapeInferenceError kinds InvalidRank,
    InvalidComplexAxis, STFTFrameTooLong, DimMismatch, NonScalarInput,
    InvalidValue, InvalidDtype. Source: ONNX operator spec, STFT-17.
    """
    shape = ctx.shape(0)
    if len(shape) != 3:
        ctx.fail(f"signal must have rank 3 [batch, signal_length, 1 or 2], got rank {len(shape)}",
                 kind="InvalidRank")
    _check_dtype(ctx, 0, _FLOATS, "signal")
    batch, length, last = shape
    _check_complex_axis(ctx, last, "the signal")
    onesided = bool(ctx.attr("onesided", 1))
    _int_input(ctx, 1, "frame_step")
    step = _scalar(ctx, 1, "frame_step")
    _positive(ctx, step, "frame_step")
    if ctx.has_input(2):
        _check_dtype(ctx, 2, _FLOATS, "window")
        if len(ctx.shape(2)) != 1:
            ctx.fail(f"window must be 1-D, got rank {len(ctx.shape(2))}", kind="InvalidRank")
    fl = _stft_frame_length(ctx, length)
    if fl is None:
        return [(batch, ctx.new_dim(), ctx.new_dim(), 2)]
    _positive(ctx, fl, "the frame length")
    if not ctx.assume(length, ">=", fl):
        ctx.fail(f"frame_length {fl} is longer than the signal ({length} samples)", kind="STFTFrameTooLong")
    frames = ctx.new_dim() if step is None else (length - fl) // step + 1
    bins = fl // 2 + 1 if onesided else fl
    return [(batch, frames, bins, 2)]


lib.op("STFT", since_version=17, infer_dtype=same_dtype(0), value_inputs=(1, 3))(_stft_shape)


@lib.kernel("STFT", prepare=lambda ctx: bool(ctx.attr("onesided", 1)), dtypes=_FLOATS)
def _stft(inputs, outputs, onesided):
    """STFT: a strided view of every frame, times the window, one fft/rfft over all frames."""
    x = inputs[0]
    step = int(np.asarray(inputs[1]).reshape(-1)[0])
    window = inputs[2] if len(inputs) > 2 else None
    if len(inputs) > 3 and inputs[3] is not None:
        fl = int(np.asarray(inputs[3]).reshape(-1)[0])
    else:
        fl = window.shape[0] if window is not None else x.shape[1]
    signal = _as_complex(x)
    frames = (x.shape[1] - fl) // step + 1
    view = np.lib.stride_tricks.sliding_window_view(signal, fl, axis=1)[:, ::step][:, :frames]
    if window is not None:
        view = view * window.astype(compute_dtype(x.dtype), copy=False)
    if not onesided:
        y = np.fft.fft(view, axis=-1)
    elif np.iscomplexobj(view):
        y = np.fft.fft(view, axis=-1)[..., :fl // 2 + 1]
    else:
        y = np.fft.rfft(view, axis=-1)
    return _list(_emit(outputs, 0, y, x.dtype, True))


# Hann, Hamming, Blackman windows --------------------------------------------------------

_WINDOW_OUT = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
               "float16", "float32", "float64", "bfloat16")

#: generalised cosine windows: w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)
_WINDOWS = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25.0 / 46.0, 21.0 / 46.0, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


def _output_datatype(ctx) -> np.dtype:
    code = int(ctx.attr("output_datatype", 1))
    try:
        dt = np_dtype(code)
    except TypeError:
        ctx.fail(f"output_datatype {code} is not an ONNX element type", kind="InvalidAttribute")
    if dt.name not in _WINDOW_OUT:
        ctx.fail(f"output_datatype {code} ({dt.name}) is not allowed; expected one of {', '.join(_WINDOW_OUT)}",
                 kind="InvalidAttribute")
    return dt


def _window_shape(ctx):
    """Hann/Hamming/Blackman window: a 1-D tensor of ``size`` (scalar int32/int64 input) values.

    ``w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)`` with ``N = size`` when
    ``periodic`` (default 1), ``size - 1`` otherwise; Hann (0.5, 0.5, 0), Hamming (25/46,
    21/46, 0), Blackman (0.42, 0.5, 0.08). Output dtype ``output_datatype`` (default float).
    Raises: ShapeInferenceError kinds NonScalarInput, InvalidValue, InvalidAttribute,
    InvalidDtype. Source: ONNX operator spec, HannWindow-17, HammingWindow-17, BlackmanWindow-17.
    """
    _int_input(ctx, 0, "size")
    _output_datatype(ctx)
    size = _scalar(ctx, 0, "size")
    _positive(ctx, size, "size", minimum=0)
    return [(ctx.new_dim() if size is None else size,)]


def _window_prepare(ctx):
    return _WINDOWS[ctx.node.op_type], bool(ctx.attr("periodic", 1)), _output_datatype(ctx)


def _window(inputs, outputs, prepared):
    """The window in float64, cast into the output buffer."""
    (a0, a1, a2), periodic, dtype = prepared
    size = int(np.asarray(inputs[0]).reshape(-1)[0])
    denom = size if periodic else size - 1
    phase = np.arange(size, dtype=np.float64) * (2.0 * np.pi / denom) if denom else \
        np.full(size, np.nan)   # a symmetric window of one sample: 0/0, as the spec's formula
    w = a0 - a1 * np.cos(phase)
    if a2:
        w += a2 * np.cos(2.0 * phase)
    if outputs[0] is None:
        return [w.astype(dtype)]
    np.copyto(outputs[0], w, casting="unsafe")
    return None


for _name in _WINDOWS:
    lib.op(_name, since_version=17, infer_dtype=lambda ctx: [_output_datatype(ctx)],
           value_inputs=(0,))(_window_shape)
    lib.kernel(_name, prepare=_window_prepare, dtypes=("int32", "int64"))(_window)


# MelWeightMatrix ------------------------------------------------------------------------

def _mel_shape(ctx):
    """MelWeightMatrix: [dft_length // 2 + 1, num_mel_bins] triangular mel filter bank.

    ``num_mel_bins + 2`` edges are spaced evenly on the mel scale ``2595 log10(1 + f/700)``
    between ``lower_edge_hertz`` and ``upper_edge_hertz`` (step ``(high - low) / (bins + 2)``,
    as the spec's reference), mapped to spectrogram bins ``floor((dft_length + 1) f /
    sample_rate)``; filter ``i`` rises from edge i to i+1 and falls to i+2, peak 1.
    Output dtype ``output_datatype`` (default float). Raises: ShapeInferenceError kinds
    NonScalarInput, InvalidValue, InvalidAttribute, InvalidDtype, and (when run)
    MelEdgesOutOfRange for edges outside the spectrogram (as onnxruntime).
    Source: ONNX operator spec, MelWeightMatrix-17.
    """
    for i, what in enumerate(("num_mel_bins", "dft_length", "sample_rate")):
        _int_input(ctx, i, what)
    for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")):
        _check_dtype(ctx, i, _FLOATS, what)
        _scalar_shape(ctx, i, what)
    _output_datatype(ctx)
    bins = _scalar(ctx, 0, "num_mel_bins")
    length = _scalar(ctx, 1, "dft_length")
    rate = _scalar(ctx, 2, "sample_rate")
    _positive(ctx, bins, "num_mel_bins")
    _positive(ctx, length, "dft_length")
    _positive(ctx, rate, "sample_rate")
    return [(ctx.new_dim() if length is None else length // 2 + 1, ctx.new_dim() if bins is None else bins)]


lib.op("MelWeightMatrix", since_version=17, infer_dtype=lambda ctx: [_output_datatype(ctx)],
       value_inputs=(0, 1, 2))(_mel_shape)


@lib.kernel("MelWeightMatrix", dtypes=("int32", "int64"))
def _mel(inputs, outputs, ctx):
    """The filter bank as three masks over a [spectrogram bin, mel bin] grid."""
    bins, length, rate = (int(np.asarray(v).reshape(-1)[0]) for v in inputs[:3])
    low, high = (float(np.asarray(v, dtype=np.float64).reshape(-1)[0]) for v in inputs[3:5])
    low_mel = 2595.0 * np.log10(1.0 + low / 700.0)
    high_mel = 2595.0 * np.log10(1.0 + high / 700.0)
    step = (high_mel - low_mel) / (bins + 2)
    hz = 700.0 * (10.0 ** ((np.arange(bins + 2) * step + low_mel) / 2595.0) - 1.0)
    edges = np.floor((length + 1) * hz / rate).astype(np.int64)
    n_spec = length // 2 + 1
    lowest, highest = (int(np.floor((length + 1) * f / rate)) for f in (low, high))
    if not (0 <= lowest < n_spec and 0 <= highest < n_spec):
        ctx.fail(f"lower_edge_hertz {low:g} and upper_edge_hertz {high:g} fall at spectrogram bins {lowest} and "
                 f"{highest}, outside the {n_spec} bins of dft_length {length} at sample_rate {rate} "
                 "(expected 0 <= lower_edge_hertz, upper_edge_hertz < about sample_rate / 2)",
                 kind="MelEdgesOutOfRange")
    left, center, right = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    j = np.arange(n_spec, dtype=np.int64)[:, None]
    rise = (j >= left) & (j <= center)          # empty unless left <= center; j == center when equal
    fall = (j >= center) & (j < right)
    up = np.where(center > left, (j - left) / np.maximum(center - left, 1), 1.0)
    down = (right - j) / np.maximum(right - center, 1)
    w = np.where(fall, down, np.where(rise, up, 0.0))
    if outputs[0] is None:
        return [w.astype(_mel_dtype(ctx))]
    np.copyto(outputs[0], w, casting="unsafe")
    return None


def _mel_dtype(ctx) -> np.dtype:
    return ctx.output_dtypes[0] if ctx.output_dtypes else _F32
