"""What the subcommands share: the feed options (``--dim``, ``--shape``, ``--input``,
``--allocator``, ``--seed``), turning them into feeds (every mistake a one-line click error
naming the option, input or file), and an ONNX Runtime session to compare with."""
from __future__ import annotations

import contextlib

import functools
import inspect
import os
import zipfile
from contextlib import contextmanager
from typing import Optional

import click
import numpy as np

from ..errors import InvalidFeedError, ResourceLimitError
from ..feeds import (check_feeds_fit, check_tensor_inputs, declared_shape, dims_of_given, placeholder_feeds,
                     random_feeds, unbound_dims)
from ..model import FIXED, SYMBOLIC

__all__ = ["FEEDS_HELP", "cli_errors", "describe_feeds", "feed_options", "feeds_from_options", "one_line",
           "ordered_feeds", "ort_session", "parse_pairs"]

#: How feeds are chosen; appended to the help of every command decorated by :func:`feed_options`.
FEEDS_HELP = """\
Feeds: --input files first (NAME=FILE.npy for one input, FILE.npz with arrays named after the
inputs, or a bare FILE.npy for a one-input model; later files win). Every other input is random,
with the shape given by --shape INPUT=AxBxC or else its declared dims: a symbolic dim (dim_param)
by --dim NAME=N, an unknown dim by --dim INPUT:AXIS=N (dim_params also take their size from the
--input arrays). A dim without a value is an error that lists the inputs. Random values
(--seed sets the generator):

\b
  inputs named *mask*                 ones
  *type_ids* / *token_type* integers  zeros
  integers indexing a Gather table    [0, rows of the table along the Gather axis)
  other integers                      [0, 10)
  bools                               random
  floats                              N(0, 1)
"""


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (its lines joined by "; ")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__


class ErrorContext:
    """What :func:`cli_errors` adds to a message: ``random_inputs``, the inputs a command fed
    random values (a failed run then says that real values go in with ``--input``)."""

    def __init__(self) -> None:
        self.random_inputs: list = []

    def hint(self, exc: BaseException) -> str:
        from ..errors import ExecutionError, ShapeInferenceError

        if not self.random_inputs or not isinstance(exc, (ShapeInferenceError, ExecutionError)):
            return ""
        names = ", ".join(self.random_inputs)
        return (f" (the values of {names} were random: a model that reads values from its inputs, such as a "
                f"sample rate or an If's condition, needs real ones: --input NAME=FILE.npy)")


@contextmanager
def cli_errors(model: Optional[str] = None):
    """Turn the errors a user can cause (a model that does not load or run, bad feeds, an
    unreadable or unwritable file) into a one-line :class:`click.ClickException`; a model
    that cannot be loaded is named (``model``). Yields an :class:`ErrorContext`."""
    from ..errors import DynashapeError, ModelLoadError

    context = ErrorContext()
    try:
        yield context
    except ModelLoadError as exc:
        raise click.ClickException(f"cannot load '{model}': {one_line(exc)}" if model else one_line(exc)) from None
    except (DynashapeError, ValueError, OSError) as exc:
        raise click.ClickException(one_line(exc) + context.hint(exc)) from None


def ordered_feeds(sess, feeds: dict) -> dict:
    """``feeds`` in the order of the model's inputs (extra names last)."""
    names = [i.name for i in sess.get_inputs()]
    return {**{n: feeds[n] for n in names if n in feeds}, **feeds}


def describe_feeds(feeds: dict) -> str:
    """``x float32[3, 4], idx int64[3]``."""
    return ", ".join(f"{k} {getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"
                     for k, v in feeds.items())


def ort_session(model, threads: int = 1):
    """An ONNX Runtime session (CPU, ``threads`` intra-op threads) on model bytes or a path, or
    None when onnxruntime is not installed. Raises whatever ONNX Runtime raises for a model it
    cannot load."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _bad(option: str, message: str) -> click.BadParameter:
    return click.BadParameter(message, param_hint=f"'{option}'")


def parse_pairs(items, what: str) -> dict:
    """``{NAME: VALUE}`` from ``NAME=VALUE`` items (split at the last "=").

    Raises:
        click.BadParameter: an item without "=" or with an empty name, naming the option ``what``.
    """
    out = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise _bad(what, f"expected NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def _size(text: str, option: str, item: str) -> int:
    """A dim size: a non-negative integer, else BadParameter naming the option and item."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        hint = "; write a shape's dims joined by x, as 2x4" if option == "--shape" and any(c in text for c in ",; ") \
            else ""
        raise _bad(option, f"{item!r}: {text!r} is not a non-negative integer{hint}")
    return value


def _parse_dims(items) -> dict[str, int]:
    return {k: _size(v, "--dim", f"{k}={v}") for k, v in parse_pairs(items, "--dim").items()}


def _parse_shapes(items) -> dict[str, list[int]]:
    """``--shape INPUT=1x3x32x32`` (``INPUT=`` for a scalar)."""
    return {k: [_size(x, "--shape", f"{k}={v}") for x in v.lower().split("x")] if v else []
            for k, v in parse_pairs(items, "--shape").items()}


def _inputs_text(inputs) -> str:
    return ", ".join(f"{vi.name} {declared_shape(vi)}" for vi in inputs)


def _check_dim_names(inputs, dims: dict) -> None:
    """Every ``--dim`` name is a dim_param of an input or ``INPUT:AXIS`` of a non-fixed dim."""
    params = list(dict.fromkeys(d.value for vi in inputs for d in vi.dims or () if d.kind == SYMBOLIC))
    axes = {f"{vi.name}:{axis}": d for vi in inputs for axis, d in enumerate(vi.dims or ())}
    for name in dims:
        if name in params or (name in axes and axes[name].kind != FIXED):
            continue
        if name in axes:
            raise _bad("--dim", f"{name!r}: that axis is fixed to {axes[name].value}; the inputs are "
                       f"{_inputs_text(inputs)}")
        raise _bad("--dim", f"{name!r} is not a dim of the model: its dim_params are "
                   f"{', '.join(params) or '(none)'}, any other non-fixed dim is INPUT:AXIS; the inputs are "
                   f"{_inputs_text(inputs)}")


def _check_shapes(sess, shapes: dict) -> None:
    """Every ``--shape`` names an input and fits its declared rank and fixed dims."""
    by_name = {vi.name: vi for vi in sess.model.graph.inputs}
    for name, shape in shapes.items():
        vi = by_name.get(name)
        if vi is None:
            raise _bad("--shape", f"{name!r} is not an input of the model: its inputs are "
                       f"{_inputs_text(by_name.values())}")
        if vi.dtype is not None:
            try:
                sess._check_feed(vi, np.broadcast_to(np.zeros((), vi.dtype), shape), None)
            except InvalidFeedError as exc:
                raise _bad("--shape", f"{name}={'x'.join(map(str, shape))}: {exc}") from None


def _load_file(path: str):
    """An array (.npy) or ``{key: array}`` (.npz) from ``path``; BadParameter naming the file."""
    if not os.path.isfile(path):
        raise _bad("--input", f"file '{path}' does not exist")
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            return data
        with data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise _bad("--input", f"cannot read '{path}' as .npy / .npz: {one_line(exc)}") from None


def _load_inputs(items, inputs) -> tuple[dict, dict]:
    """``({input: array}, {input: file})`` from ``--input`` items: ``NAME=FILE.npy``,
    ``FILE.npz`` (keys are input names) or a bare ``FILE.npy`` (one-input models)."""
    names = [vi.name for vi in inputs]
    given, sources = {}, {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or os.path.isfile(item):
            name, path = None, item
        if name is not None and name not in names:
            raise _bad("--input", f"{name!r} is not an input of the model: its inputs are {_inputs_text(inputs)}")
        data = _load_file(path)
        if isinstance(data, dict):
            if name is not None:
                raise _bad("--input", f"{name}={path}: '{path}' holds several arrays (.npz); "
                           f"give it without NAME= (its keys are the input names)")
            unknown = sorted(set(data) - set(names))
            if unknown:
                raise _bad("--input", f"'{path}' has arrays {unknown} that are not inputs of the model: "
                           f"its inputs are {_inputs_text(inputs)}")
        else:
            if name is None and len(names) != 1:
                raise _bad("--input", f"a bare '{path}' needs a model with one input, this one has "
                           f"{len(names)}: write --input NAME={path} (inputs: {_inputs_text(inputs)})")
            data = {name or names[0]: data}
        given.update(data)
        sources.update(dict.fromkeys(data, path))
    return given, sources


def _check_given(sess, given: dict, sources: dict) -> None:
    """The arrays read from files fit their inputs' dtype, rank and fixed dims."""
    for vi in sess.model.graph.inputs:
        if vi.name in given:
            try:
                sess._check_feed(vi, given[vi.name], None)
            except InvalidFeedError as exc:
                raise _bad("--input", f"'{sources[vi.name]}': {exc}") from None


def _missing_dims_error(inputs, missing: list[str]) -> click.UsageError:
    """The error for dims without a value: the inputs' declared shapes and the options that fix it."""
    fixes = [f"--shape {m}=AxB" if m in {vi.name for vi in inputs} else f"--dim {m}=N" for m in missing]
    shapes = [f"--shape {vi.name}=" + "x".join(str(d.value) if d.kind == FIXED else "N" for d in vi.dims)
              for vi in inputs if vi.dims is not None and any(d.kind != FIXED for d in vi.dims)]
    return click.UsageError(
        f"no value for the dim(s) {', '.join(missing)}; the inputs are {_inputs_text(inputs)}; give "
        f"{' '.join(fixes)}" + (f" (or whole shapes: {' '.join(shapes)})" if shapes else ""))


def feed_options(command):
    """MODEL plus the options that choose its feeds and allocator (``run``, ``plan``, ...);
    appends :data:`FEEDS_HELP` to the command's help."""
    if command.__doc__ is not None:
        command.__doc__ = inspect.cleandoc(command.__doc__) + "\n\n" + FEEDS_HELP
    for option in reversed([
        click.argument("model", type=click.Path(exists=True, dir_okay=False)),
        click.option("--dim", "dims", multiple=True,
                     help="bind a dim_param: NAME=N, or an unknown dim: INPUT:AXIS=N (repeatable)"),
        click.option("--shape", "shapes", multiple=True, help="an input's whole shape: INPUT=1x3x320x320"),
        click.option("--input", "inputs", multiple=True,
                     help="feeds from files: NAME=FILE.npy, FILE.npz (all inputs by name), "
                          "or FILE.npy for a one-input model (repeatable)"),
        click.option("--allocator", type=click.Choice(["pool", "naive"]), default="pool", show_default=True),
        click.option("--seed", type=int, default=0, show_default=True, help="seed of the random feeds"),
    ]):
        command = option(command)
    return command


def settled(i: int, warmup: int):
    """The context of run ``i`` of a command that warms up: the first run is what a default
    session meets (compiled kernels still starting take their numpy path); the runs after it
    wait for the compiled kernels (``dynashape.ops_builtin.fast.tiering``), so the warm-up brings
    them up and the timed runs time them: the second run loads the compiled code (numba's
    cached loops: up to ~1 s), so a warm-up of two runs or more keeps that out of the timed
    runs (``run``, ``bench`` and ``profile`` default to 2, 3 and 2). Nothing waits with
    ``--no-warmup``."""
    from ..threads import waiting_for_compiled_kernels
    return waiting_for_compiled_kernels() if warmup and i > 0 else contextlib.nullcontext()


def warmup_options(default: int):
    """``--warmup N`` (untimed runs before the timed ones, ``default``) and ``--no-warmup``
    (``--warmup 0``: the timed runs start with the cold first run), passed to the command as
    one ``warmup`` count (``run``, ``bench``, ``profile``)."""
    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, warmup: int, no_warmup: bool, **kwargs):
            return command(*args, warmup=0 if no_warmup else warmup, **kwargs)
        wrapper = click.option("--no-warmup", is_flag=True,
                               help="no warm-up: the timed runs start with the first (cold) run")(wrapper)
        return click.option("--warmup", type=click.IntRange(min=0), default=default, show_default=True,
                            help="untimed runs before the timed ones (the first plans the shape and "
                                 "makes the kernels)")(wrapper)
    return decorate


class TooLarge(click.ClickException):
    """A request (dims, shapes) whose feeds or plan exceed the memory limit: one ``Error:``
    line and exit code 2, as a usage error (the sizes asked for are the user's input)."""

    exit_code = 2


def feeds_from_options(sess, dims, shapes, inputs, seed: int, placeholders: bool = False,
                       errors: Optional[ErrorContext] = None) -> dict:
    """Feeds ``{input name: np.ndarray}`` for ``sess``: arrays of the ``--input`` files, the
    other inputs random (see :data:`FEEDS_HELP`), shaped by ``--shape`` / ``--dim``. The
    request is checked against the session's ``memory_limit`` (the feeds, then the plan)
    before any random feed is made; ``placeholders``: no random feeds at all, zero-stride
    views of their shapes and dtypes (what ``plan`` needs). ``errors`` (the command's
    :func:`cli_errors` context) learns which inputs are random.

    Raises:
        click.BadParameter: a malformed item, a bad number, an unknown dim or input name, a
            missing or unreadable file, an array that does not fit its input (names the option).
        click.UsageError: a dim of some input has no value (lists the inputs and the fixes).
        TooLarge: the feeds or their plan exceed the memory limit (exit code 2, nothing allocated).
    """
    graph_inputs = sess.model.graph.inputs
    dim_values, shape_values = _parse_dims(dims), _parse_shapes(shapes)
    try:   # before any shape check: .npy/.npz files and --shape only make tensors
        check_tensor_inputs(graph_inputs)
    except InvalidFeedError as exc:
        raise click.UsageError(str(exc)) from None
    _check_dim_names(graph_inputs, dim_values)
    _check_shapes(sess, shape_values)
    given, sources = _load_inputs(inputs, graph_inputs)
    _check_given(sess, given, sources)
    missing = unbound_dims(graph_inputs, {**dims_of_given(graph_inputs, given), **dim_values}, shape_values, given)
    if missing:
        raise _missing_dims_error(graph_inputs, missing)
    stand_ins = placeholder_feeds(sess, dim_values, shape_values, given)
    try:
        check_feeds_fit(sess, stand_ins)
    except ResourceLimitError as exc:
        raise TooLarge(f"{one_line(exc)} (set DYNASHAPE_MEMORY_LIMIT to allow more)") from None
    if placeholders:
        return stand_ins
    if errors is not None:
        errors.random_inputs = [vi.name for vi in graph_inputs if vi.name not in given]
    return random_feeds(sess, dim_values, shape_values, given, seed=seed)
