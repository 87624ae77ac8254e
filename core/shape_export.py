"""Symbolic shapes written into a model: every tensor of the main graph gets its shape in
``value_info``, as dynashape's symbolic inference finds it.

This is what onnxruntime's ``symbolic_shape_infer.py`` does for TensorRT users before they
build an engine, from the inference a session runs anyway: a dim is a ``dim_value`` where it
is a number, a ``dim_param`` named after its expression where it follows from the input dims
(``batch``, ``sequence + past_sequence``, ``2*sequence``), and an ``unk__N`` ``dim_param``
only where it depends on data (NonZero's count, a Reshape of computed values). Graph outputs
keep the dims they declare and get the inferred ones where they declare none (or no shape).

Source: ONNX IR.md ("Static tensor shapes", ``dim_param``); onnxruntime's
``onnxruntime/python/tools/symbolic_shape_infer.py`` (the job, not the code).
"""
from __future__ import annotations

import os
from typing import Any, Union

import numpy as np

from . import onnx_proto
from .dtypes import ValueType, onnx_type
from .symbolic import dim_str, free_symbols

__all__ = ["infer_shapes", "ShapeReport"]


class ShapeReport:
    """What :func:`infer_shapes` wrote: ``tensors`` with a full shape, ``symbolic`` dims named
    after an expression of the input dims, ``data_dependent`` dims (``unk__N``); the tensors
    left without a shape (``unknown``: their rank is not known, such as a SequenceAt of a
    sequence graph input, whose elements' rank nothing proves) and the sequences, optionals
    and maps (``containers``: they have no tensor shape)."""

    def __init__(self) -> None:
        self.tensors = 0
        self.symbolic = 0
        self.data_dependent = 0
        self.unknown: list = []
        self.containers: list = []

    def __repr__(self) -> str:
        return (f"ShapeReport(tensors={self.tensors}, symbolic={self.symbolic}, data_dependent={self.data_dependent}, "
                f"unknown={len(self.unknown)}, containers={len(self.containers)})")


def infer_shapes(model: Union[str, os.PathLike, bytes, Any], output: Union[str, os.PathLike, None] = None
                 ) -> tuple:
    """The model with every main-graph tensor's symbolic shape in ``value_info``.

    Args:
        model: a path, serialized bytes or an ``onnx.ModelProto`` (not changed).
        output: where to write the result (a path); None: only returned. External-data
            references are written as they are (relative to the model's directory).

    Returns:
        ``(ModelProto, ShapeReport)``.

    Raises:
        ModelLoadError, UnsupportedOperatorError, ShapeInferenceError: as a session of the
            model raises them (a model dynashape cannot load has no inferred shapes).
    """
    from .session import InferenceSession

    if isinstance(model, onnx_proto.ModelProto):
        model = model.SerializeToString()
    source = str(model) if isinstance(model, (str, os.PathLike)) else bytes(model)
    sess = InferenceSession(source, optimize=False)     # (first: a file that is no model is its error)
    proto = _proto_of(source)
    report = ShapeReport()
    pg, sg = sess.graph, sess.symbolic
    graph = proto.graph
    declared = {vi.name: vi for vi in graph.value_info}
    outputs = {vi.name: vi for vi in graph.output}
    inputs = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        for name in node.output:
            if not name or name in inputs:
                continue
            slot = pg.slot.get(name)
            dims, dtype = (None, None) if slot is None else _typed_dims(pg, sg, slot, report)
            if isinstance(dtype, ValueType):
                report.containers.append(name)
                continue
            if dims is None or dtype is None:
                report.unknown.append(name)
                continue
            report.tensors += 1
            if name in outputs:
                _fill_output(outputs[name], dims, dtype)
                continue
            vi = declared.get(name)
            if vi is None:
                vi = graph.value_info.add()
                vi.name = name
            _write(vi, dims, dtype)
    if output is not None:
        with open(output, "wb") as f:
            f.write(proto.SerializeToString())
    return proto, report


def _proto_of(source: Union[str, bytes]) -> "onnx_proto.ModelProto":
    if isinstance(source, bytes):
        return onnx_proto.load_from_string(source)
    with open(source, "rb") as f:
        return onnx_proto.load_from_string(f.read())


def _typed_dims(pg, sg, slot: int, report: ShapeReport) -> tuple:
    """(each dim as an int or a dim_param name, dtype); (None, ...) when the rank is not
    known, or the value is a sequence, optional or map (its container type as the dtype).
    A constant no node reads any more (released after folding) has its own."""
    shape, dtype = sg.shapes[slot], sg.dtypes[slot]
    if shape is None and not isinstance(dtype, ValueType):
        shape, dtype = pg.constant_type(slot)
    if shape is None:
        return None, dtype
    fresh = sg.fresh_symbols
    out: list = []
    for d in shape:
        if isinstance(d, (int, np.integer)):
            out.append(int(d))
            continue
        if free_symbols(d) & fresh:
            report.data_dependent += 1
        else:
            report.symbolic += 1
        out.append(dim_str(d))
    return out, dtype


def _write(vi, dims: list, dtype=None) -> None:
    """``vi``'s tensor type with these dims (its elem type set from ``dtype`` when given)."""
    t = vi.type.tensor_type
    if dtype is not None:
        t.elem_type = onnx_type(dtype)
    t.ClearField("shape")
    t.shape.SetInParent()
    for d in dims:
        dim = t.shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        else:
            dim.dim_param = d


def _fill_output(vi, dims: list, dtype) -> None:
    """A graph output keeps what it declares; an absent shape (or one of another rank), or a
    dim declared neither as a value nor a name, takes the inferred one."""
    t = vi.type.tensor_type
    if not t.elem_type:
        t.elem_type = onnx_type(dtype)
    if not t.HasField("shape") or len(t.shape.dim) != len(dims):
        _write(vi, dims)
        return
    for dim, d in zip(t.shape.dim, dims):
        if not dim.HasField("dim_value") and not dim.dim_param:
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = d
