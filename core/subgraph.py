"""Running a subgraph (the branches of If, the body of Loop/Scan) with outer-scope values.

Shapes inside a subgraph are resolved like the main graph's: per input signature, with
its own small plan cache (naive buffers; outputs handed out as fresh arrays).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Mapping, Sequence

import numpy as np

from .executor import build_plan, execute
from .graph import prepare_graph
from .inference import resolve
from .model import Graph
from .registry import get_registry

__all__ = ["SubgraphRunner"]


class SubgraphRunner:
    """Executes one subgraph; ``run(feeds)`` takes its formal inputs and outer-scope values by name.

    Args:
        graph: the subgraph (a ``Graph`` attribute of an If/Loop/Scan node).
        opsets: the model's opset imports.
    """

    def __init__(self, graph: Graph, opsets: Mapping[str, int], plan_cache_size: int = 16):
        self.graph = graph
        self.outer = tuple(sorted(graph.outer_names()))
        self.registry = get_registry()
        self.prepared = prepare_graph(graph, self.registry, dict(opsets), outer=self.outer)
        self.input_names = [v.name for v in graph.inputs] + list(self.outer)
        self.output_names = [v.name for v in graph.outputs]
        self._plans: "OrderedDict[tuple, object]" = OrderedDict()
        self._cache_size = plan_cache_size

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs of the subgraph, in its output order, as arrays the caller owns."""
        pg = self.prepared
        slot_feeds = {}
        key = []
        for name in self.input_names:
            arr = feeds.get(name)
            if arr is None:
                raise KeyError(f"subgraph '{self.graph.name}' needs '{name}'")
            arr = arr if isinstance(arr, np.ndarray) else np.asarray(arr)
            s = pg.slot[name]
            slot_feeds[s] = arr
            key.append((arr.shape, arr.dtype.str))
            if s in pg.value_inputs:
                key.append(arr.tobytes())
        key_t = tuple(key)
        plan = self._plans.get(key_t)
        if plan is None:
            res = resolve(pg, self.registry, {s: tuple(a.shape) for s, a in slot_feeds.items()},
                          {s: a.dtype for s, a in slot_feeds.items()},
                          {s: a for s, a in slot_feeds.items() if s in pg.value_inputs}, runtime=self)
            plan = build_plan(pg, res, "naive")
            self._plans[key_t] = plan
            if len(self._plans) > self._cache_size:
                self._plans.popitem(last=False)
        vals, fresh = execute(pg, plan, self.registry, slot_feeds, runtime=self)
        out = []
        for s in pg.output_slots:
            v = vals[s]
            out.append(v if id(v) in fresh else np.array(v, copy=True))
        return out

    def run_list(self, inputs: Sequence[np.ndarray], outer: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Formal inputs positionally, outer-scope values by name."""
        feeds = dict(zip((v.name for v in self.graph.inputs), inputs))
        feeds.update({k: outer[k] for k in self.outer})
        return self.run(feeds)
