"""Which axis of each model input and output holds the rows, and which follow a row's length.

Batch inference stacks rows along one axis and pads variable lengths; both are decided from
the session's symbolic shapes (:attr:`~dynashape.session.InferenceSession.symbolic`), never
guessed from names or sizes:

* inputs: axis 0 of every input is the *batch* axis and must carry one symbol shared by all
  inputs (``batch``); every other non-fixed axis is a *length*: a ``dim_param``
  (``sequence``), or an unknown dim (shown as ``INPUT:AXIS``). One length symbol may appear
  on several inputs (``input_ids`` and ``attention_mask`` share ``sequence``); a row binds it
  to one value.
* outputs: each axis is fixed (an int), the batch axis (exactly the batch symbol), an axis
  that *follows* a length (its expression equals the length symbol wherever it is defined:
  ``sequence``, or ``broadcast(sequence, min(sequence, 512))`` as a BERT export writes it), or
  one that *varies* with a length some other way (``sequence*2``, ``sequence // 4``), or is
  data-dependent / unknown. Only an axis that follows a length can be cut back to a row's
  true length after padding; padding with any other kind is refused (:class:`BatchAxisError`).

What the shapes decide is *where* to cut, not whether padding changes the values at the real
positions: that holds for models that mask padded positions (``attention_mask``) or are
causal / position-wise (see docs/SCALE.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Union

import numpy as np

from ..errors import InvalidArgumentError
from ..symbolic import BroadcastError, Expr, evaluate, free_symbols, sym

if TYPE_CHECKING:
    from ..session import InferenceSession

__all__ = ["BatchAxisError", "InputLayout", "OutputLayout", "ModelLayout", "model_layout", "follows_symbol"]

#: lengths at which an output dim is evaluated to decide whether it equals a length symbol
SAMPLE_LENGTHS = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257,
                  511, 512, 513, 1000, 1023, 1024, 1025, 2048, 4096)


class BatchAxisError(InvalidArgumentError):
    """A model input or output has no batch axis, or no length axis, that ``dynashape.batch``
    can decide from the symbolic shapes (a fixed batch dim, an output whose rows cannot be told
    apart, an output axis that depends on a padded length in a way that cannot be cut back)."""


@dataclass(frozen=True)
class InputLayout:
    """One model input as rows see it.

    ``row_dims``: one entry per axis after the batch axis: an ``int`` for a fixed dim, or the
    name of the length symbol the axis carries. ``dtype``: the declared numpy dtype.
    """

    name: str
    dtype: np.dtype
    row_dims: tuple[Union[int, str], ...]

    @property
    def length_axes(self) -> tuple[tuple[int, str], ...]:
        """(row axis, length symbol) for every variable row axis."""
        return tuple((a, d) for a, d in enumerate(self.row_dims) if isinstance(d, str))


@dataclass(frozen=True)
class OutputLayout:
    """One requested model output and how its rows are cut out of a batch.

    ``batch_axis``: the axis that holds the rows (None when there is none: ``problem`` says why).
    ``follows``: (output axis, length symbol) pairs: the axis is as long as that length, so a
    padded batch is cut back to each row's length there. ``varies``: axes whose size depends on
    a length in another way, or is data-dependent (kept whole per row; refused with padding).
    ``problem``: "" or why the output cannot be split into rows at all.
    """

    name: str
    rank: Optional[int]
    batch_axis: Optional[int]
    follows: tuple[tuple[int, str], ...]
    varies: tuple[tuple[int, str], ...]
    problem: str = ""

    @property
    def ragged(self) -> bool:
        """Whether rows of this output may differ in shape (some axis follows or varies with a length)."""
        return bool(self.follows or self.varies)


@dataclass(frozen=True)
class ModelLayout:
    """The batch symbol, the length symbols and every input's and requested output's layout.

    ``labels`` maps each symbol to how messages show it (the dim_param, or ``INPUT:AXIS`` for
    an unknown dim).
    """

    batch_symbol: str
    lengths: tuple[str, ...]
    labels: dict
    inputs: tuple[InputLayout, ...]
    outputs: tuple[OutputLayout, ...]

    def label(self, symbol: str) -> str:
        return self.labels.get(symbol, symbol)

    def check_splittable(self) -> None:
        """Raises BatchAxisError naming the first requested output whose rows cannot be told apart."""
        for out in self.outputs:
            if out.problem:
                raise BatchAxisError(f"output '{out.name}': {out.problem}; leave it out (output_names=[...]) "
                                     f"to batch the others")

    def check_padding(self) -> None:
        """Raises BatchAxisError when some requested output has an axis that depends on a length
        but does not follow it: padded rows could not be cut back to their true length."""
        self.check_splittable()
        for out in self.outputs:
            if out.varies:
                axis, why = out.varies[0]
                raise BatchAxisError(
                    f"output '{out.name}' axis {axis} is {why}: it does not follow a padded length, so padded "
                    f"rows cannot be cut back to their true length; run without padding (buckets='exact') or "
                    f"leave the output out (output_names=[...])")


def follows_symbol(d, symbol: str, samples: Sequence[int] = SAMPLE_LENGTHS) -> bool:
    """Whether the dim expression ``d`` equals the symbol ``symbol`` wherever it is defined.

    ``d`` may hold only ``symbol``; it is evaluated at ``samples`` (values where it is undefined,
    such as ``broadcast(513, 512)``, are skipped) and must equal the value at each and be defined
    at one at least.
    """
    if free_symbols(d) != {symbol}:
        return False
    defined = 0
    for v in samples:
        try:
            got = evaluate(d, {symbol: v})
        except (BroadcastError, ZeroDivisionError, ValueError):
            continue
        if got != v:
            return False
        defined += 1
    return defined > 0


def _plain_symbol(d) -> Optional[str]:
    """The name of ``d`` when it is exactly one symbol, else None."""
    names = free_symbols(d)
    if isinstance(d, Expr) and len(names) == 1:
        (name,) = names
        if d == sym(name):
            return name
    return None


def _input_layouts(sess: "InferenceSession") -> tuple[str, tuple[InputLayout, ...], dict]:
    inputs: list[InputLayout] = []
    batch: Optional[str] = None
    labels: dict[str, str] = {}
    for vi in sess.model.graph.inputs:
        if vi.is_container:
            raise BatchAxisError(f"input '{vi.name}' is a {vi.type}: dynashape.batch takes tensor inputs only")
        dims = sess.engine.input_dims.get(sess.graph.slot[vi.name])
        declared = vi.dims or ()
        if dims is None or len(dims) == 0:
            what = "has no declared shape" if dims is None else "is a scalar"
            raise BatchAxisError(f"input '{vi.name}' {what}: rows need a batch axis (axis 0, symbolic)")
        first = _plain_symbol(dims[0])
        if first is None:
            raise BatchAxisError(f"input '{vi.name}' has a fixed batch dim {dims[0]} (axis 0): rows cannot be "
                                 f"batched; export the model with a symbolic batch dim")
        if batch is None:
            batch = first
        elif first != batch:
            raise BatchAxisError(f"input '{vi.name}' axis 0 is '{labels.get(first, first)}', input "
                                 f"'{inputs[0].name}' axis 0 is '{labels.get(batch, batch)}': every input needs "
                                 f"the same batch dim")
        labels.setdefault(first, declared[0].value if isinstance(declared[0].value, str) else f"{vi.name}:0")
        row: list = []
        for axis, d in enumerate(dims[1:], start=1):
            if isinstance(d, int):
                row.append(d)
                continue
            name = _plain_symbol(d)
            if name is None or name == batch:
                raise BatchAxisError(f"input '{vi.name}' axis {axis} is '{d}': a row axis must be fixed or one "
                                     f"symbol other than the batch dim")
            param = declared[axis].value
            labels.setdefault(name, param if isinstance(param, str) else f"{vi.name}:{axis}")
            row.append(name)
        inputs.append(InputLayout(vi.name, np.dtype(vi.dtype), tuple(row)))
    if batch is None:
        raise BatchAxisError("the model has no inputs: there are no rows to batch")
    return batch, tuple(inputs), labels


def _output_layout(sess: "InferenceSession", name: str, batch: str, lengths: set, labels: dict) -> OutputLayout:
    slot = sess.graph.slot[name]
    shape = sess.symbolic.shapes[slot]
    if shape is None or sess.symbolic.is_data_dependent(slot):
        return OutputLayout(name, None if shape is None else len(shape), None, (), (),
                            "its shape is data-dependent or unknown, so its batch axis cannot be decided")
    batch_axes, follows, varies = [], [], []
    for axis, d in enumerate(shape):
        if isinstance(d, int):
            continue
        names = free_symbols(d)
        if batch in names:
            if _plain_symbol(d) == batch:
                batch_axes.append(axis)
                continue
            return OutputLayout(name, len(shape), None, (), (),
                                f"axis {axis} is '{d}': the rows of a batch cannot be told apart there")
        own = names & lengths
        if len(own) == 1 and names == own and follows_symbol(d, next(iter(own))):
            follows.append((axis, next(iter(own))))
        else:
            shown = str(d)
            for s in names:   # unknown input dims show as INPUT:AXIS, not as their internal symbol
                if s.startswith("unk__") and s in labels:
                    shown = shown.replace(s, labels[s])
            varies.append((axis, f"'{shown}'" if names <= lengths else f"'{shown}' (data-dependent)"))
    if len(batch_axes) != 1:
        why = "no axis is the batch dim" if not batch_axes else f"axes {batch_axes} are all the batch dim"
        return OutputLayout(name, len(shape), None, (), (),
                            f"{why} (shape {sess.symbolic.display_shape(slot)}), so its rows cannot be told apart")
    return OutputLayout(name, len(shape), batch_axes[0], tuple(follows), tuple(varies))


def model_layout(sess: "InferenceSession", output_names: Optional[Sequence[str]] = None) -> ModelLayout:
    """The layout of ``sess``'s inputs and of the outputs ``output_names`` (all when None).

    Raises:
        BatchAxisError: an input without a symbolic batch axis (axis 0), inputs with different
            batch symbols, a scalar or container input, a row axis that is an expression.
        OutputNameError (an InputNameError): an unknown output name.
    """
    from ..errors import OutputNameError

    batch, inputs, labels = _input_layouts(sess)
    lengths = tuple(dict.fromkeys(s for i in inputs for _, s in i.length_axes))
    known = [o.name for o in sess.get_outputs()]
    names = list(output_names) if output_names else known
    for n in names:
        if n not in known:
            raise OutputNameError(f"unknown output name '{n}'; the model's outputs are {known}")
    outputs = tuple(_output_layout(sess, n, batch, set(lengths), labels) for n in names)
    return ModelLayout(batch, lengths, labels, inputs, outputs)
