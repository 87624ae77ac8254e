"""A per-node profiler writing onnxruntime's profile format (a Chrome trace).

With ``SessionOptions.enable_profiling`` a session times every run (``model_run``), every
plan made for a new signature (``plan``) and every node (``<node>_kernel_time``), and
``end_profiling()`` writes them as a JSON array of trace events: complete events
(``"ph": "X"``) with ``ts``/``dur`` in microseconds since the session started profiling,
``cat`` ``"Session"`` or ``"Node"`` and, for nodes, ``args.op_name``, ``args.provider``,
``args.node_index`` and the input/output ``[{dtype: shape}]`` lists, as onnxruntime's
profiler writes them. The nodes of If/Loop/Scan bodies are recorded too, named after the
node that ran them (``If_0/Add_3``, ``args.parent`` = ``If_0``): the body's engine takes the
profiler of the run it is part of (:data:`ACTIVE`). Open the file in https://ui.perfetto.dev or chrome://tracing.

Source: the Trace Event Format (Google, "Trace Event Format" document) and
onnxruntime's ``core/common/profiler.cc`` output.
"""
from __future__ import annotations

import json
import os
import threading
import time
from contextvars import ContextVar
from datetime import datetime
from typing import Optional, Sequence

import numpy as np

from .dtypes import onnx_type
from .onnx_proto import TensorProto

__all__ = ["Profiler", "ACTIVE", "running_node"]

#: the profiler of the run in progress in this thread (a subgraph's engine, which has none
#: of its own, records into it)
ACTIVE: ContextVar = ContextVar("dynashape_profiler", default=None)
#: the qualified name of the node running now ("" at the top): a body's nodes are named under it
_NODE: ContextVar = ContextVar("dynashape_profiled_node", default="")


class running_node:
    """``with running_node(node):`` while a profiled kernel of ``node`` runs: nodes its
    subgraphs run are named under it."""

    __slots__ = ("name", "_token")

    def __init__(self, node):
        parent = _NODE.get()
        self.name = f"{parent}/{node.name}" if parent else node.name

    def __enter__(self):
        self._token = _NODE.set(self.name)
        return self

    def __exit__(self, *exc) -> None:
        _NODE.reset(self._token)

PROVIDER = "CPUExecutionProvider"


_TYPE_NAMES: dict = {}


def _type_name(dtype: np.dtype) -> str:
    """ONNX's element type name as onnxruntime's profiler writes it (``float``, ``int64``)."""
    name = _TYPE_NAMES.get(dtype)
    if name is None:
        try:
            name = TensorProto.DataType.Name(onnx_type(dtype)).lower()
        except (KeyError, TypeError, ValueError):
            name = str(dtype)
        _TYPE_NAMES[dtype] = name
    return name


class Profiler:
    """Collects trace events of one session until :meth:`write`.

    Args:
        prefix: the file name prefix; the file is ``<prefix><YYYY-MM-DD_HH-MM-SS>.json``.
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.start_ns = time.perf_counter_ns()
        self.start_time_ns = time.time_ns()
        self._stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        self._pid = os.getpid()
        self._events: list = []
        self._nodes: list = []
        self._tids: dict = {}

    def _tid(self) -> int:
        ident = threading.get_ident()
        return self._tids.setdefault(ident, len(self._tids))

    def _us(self, t: float) -> int:
        return max(0, (int(t * 1e9) - self.start_ns) // 1000)

    def session_event(self, name: str, t0: float, t1: float, **args) -> None:
        """A session-level span; ``t0``/``t1`` are ``time.perf_counter()`` seconds."""
        self._events.append({"cat": "Session", "pid": self._pid, "tid": self._tid(), "dur": self._us(t1) - self._us(t0),
                             "ts": self._us(t0), "ph": "X", "name": name, "args": args})

    def node_event(self, node, index: int, t0: float, t1: float, inputs: Sequence, outputs: Sequence) -> None:
        """One kernel call of ``node`` (a model node: ``name``, ``op_type``); kept raw, made
        into a trace event only when read, so profiling adds little to each step."""
        self._nodes.append((node, _NODE.get(), index, t0, t1, self._tid(),
                            [(a.dtype, a.shape) for a in inputs if isinstance(a, np.ndarray)],
                            [(a.dtype, a.shape, a.nbytes) for a in outputs if isinstance(a, np.ndarray)]))

    def _node_events(self) -> list:
        return [{"cat": "Node", "pid": self._pid, "tid": tid, "dur": self._us(t1) - self._us(t0), "ts": self._us(t0),
                 "ph": "X", "name": f"{parent}/{node.name}_kernel_time" if parent else f"{node.name}_kernel_time",
                 "args": {"op_name": node.op_type, "provider": PROVIDER, "node_index": str(index),
                          "input_type_shape": [{_type_name(d): list(s)} for d, s in ins],
                          "output_type_shape": [{_type_name(d): list(s)} for d, s, _ in outs],
                          "output_size": str(sum(n for _, _, n in outs)), **({"parent": parent} if parent else {})}}
                for node, parent, index, t0, t1, tid, ins, outs in list(self._nodes)]

    @property
    def events(self) -> list:
        """Every event so far, in time order."""
        return sorted(self._events + self._node_events(), key=lambda e: e["ts"])

    def write(self, folder: Optional[str] = None) -> str:
        """Write the events; returns the file's path.

        Raises:
            OSError: the file cannot be written.
        """
        path = f"{self.prefix}{self._stamp}.json"
        if folder:
            path = os.path.join(folder, path)
        with open(path, "w") as f:
            json.dump(self.events, f, separators=(",", ":"))
        return path
