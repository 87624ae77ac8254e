"""Free dimension overrides: ``SessionOptions.add_free_dimension_override_by_name`` /
``_by_denotation`` pin symbolic dims of the graph inputs (and outputs) to fixed values.

A graph-input or -output dim whose ``dim_param`` is an overridden name, or whose
``denotation`` is an overridden denotation (``"DATA_BATCH"``, ONNX's DimensionDenotation.md),
becomes a fixed dim of that value before the session compiles: ``get_inputs()`` and
``get_outputs()`` show it (as onnxruntime's, whose shape inference carries the pinned value
to the outputs), the compiled program
computes with it, and a feed of another size raises
:class:`~dynashape.errors.InputFixedDimMismatch` naming the input and axis. A negative value
leaves the dim free (onnxruntime shows -1 there and binds it per run); a name or denotation
no input has is ignored, as in onnxruntime.

Source: onnxruntime's ``FreeDimensionOverrideTransformer``
(onnxruntime/core/optimizer/free_dim_override_transformer.cc).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from .errors import InvalidArgumentError
from .model import FIXED, DimSpec, Model

__all__ = ["apply_free_dimension_overrides"]


def _denotations(model: Model) -> dict[str, list[str]]:
    """Each graph input's and output's dim denotations (``""`` where none), from the model's proto."""
    out = {}
    for vi in list(model.proto.graph.input) + list(model.proto.graph.output):
        t = vi.type
        if t.HasField("tensor_type") and t.tensor_type.HasField("shape"):
            out[vi.name] = [d.denotation for d in t.tensor_type.shape.dim]
    return out


def apply_free_dimension_overrides(model: Model, by_name: Mapping[str, int], by_denotation: Mapping[str, int]) -> Model:
    """``model`` with the overridden graph-input dims fixed (a new Model sharing everything
    else; ``model`` is not changed). No overrides: ``model`` itself.

    Raises:
        InvalidArgumentError: one dim is given two different values by its name and its
            denotation ("Conflicting free dimension overrides", as onnxruntime).
    """
    if not by_name and not by_denotation:
        return model
    denotations = _denotations(model) if by_denotation else {}
    inputs, pinned_in = _pinned(model.graph.inputs, denotations, by_name, by_denotation, "input")
    # (an input dim pinned by its denotation pins the outputs' dims of its dim_param too)
    names = {**{old.value: new.value for vi, pinned in zip(model.graph.inputs, inputs) if vi.dims
                for old, new in zip(vi.dims, pinned.dims) if old.kind != FIXED and new.kind == FIXED},
             **by_name}
    outputs, pinned_out = _pinned(model.graph.outputs, denotations, names, by_denotation, "output")
    if not pinned_in and not pinned_out:
        return model
    return dataclasses.replace(model, graph=dataclasses.replace(model.graph, inputs=inputs, outputs=outputs))


def _pinned(values: list, denotations: dict, by_name: Mapping[str, int], by_denotation: Mapping[str, int],
            what: str) -> tuple[list, bool]:
    """(the ValueInfos with their overridden dims fixed, whether any was)."""
    out = []
    changed = False
    for vi in values:
        if vi.dims is None:
            out.append(vi)
            continue
        dims = list(vi.dims)
        marks = denotations.get(vi.name, [])
        for axis, d in enumerate(dims):
            if d.kind == FIXED:
                continue
            found = set()
            if d.value in by_name:
                found.add(by_name[d.value])    # type: ignore[index]
            if axis < len(marks) and marks[axis] in by_denotation:
                found.add(by_denotation[marks[axis]])
            if len(found) > 1:
                raise InvalidArgumentError(f"Conflicting free dimension overrides: {what} '{vi.name}', axis {axis} "
                                           f"({d.value or 'unnamed'}) is given {sorted(found)}")
            if found and (value := found.pop()) >= 0:
                dims[axis] = DimSpec(FIXED, int(value))
                changed = True
        out.append(dataclasses.replace(vi, dims=tuple(dims)))
    return out, changed
