"""ONNX's backend node tests (from the installed ``onnx`` package) through ``dynashape.backend``.

Every node test whose operators are all registered in dynashape runs, except those
listed in ``EXCLUDED`` (non-deterministic per the spec) and those whose graph inputs or
outputs are sequences/optionals (``test_identity_opt``, ``test_identity_sequence``):
dynashape's values are tensors only.
"""
from __future__ import annotations

import re

import onnx
import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

from dynashape import get_registry
from dynashape.backend import DynashapeBackend
from dynashape.errors import UnsupportedOperatorError

#: test name -> why it does not run (only tests the spec marks non-deterministic).
EXCLUDED: dict[str, str] = {
    "test_dropout_random_old": "random mask: the spec's output is one sample of a random process",
    "test_training_dropout": "training-mode Dropout draws a random mask (non-deterministic per the spec)",
    "test_training_dropout_default": "training-mode Dropout draws a random mask",
    "test_training_dropout_mask": "training-mode Dropout draws a random mask",
    "test_training_dropout_default_mask": "training-mode Dropout draws a random mask",
}


def _ops(graph: onnx.GraphProto):
    for node in graph.node:
        yield node.domain, node.op_type
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _ops(attr.g)
            for g in attr.graphs:
                yield from _ops(g)


def _tensor_typed(model: onnx.ModelProto) -> bool:
    """True when every graph input and output is a tensor (sequence/optional/map values
    are not supported by dynashape's runtime; such tests are listed by ``non_tensor_tests``)."""
    return all(v.type.HasField("tensor_type") for v in [*model.graph.input, *model.graph.output])


def _supported(model: onnx.ModelProto) -> bool:
    if not _tensor_typed(model):
        return False
    reg = get_registry()
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    for domain, op_type in _ops(model.graph):
        domain = "" if domain == "ai.onnx" else domain
        try:
            reg.resolve_op(domain, op_type, opsets.get(domain, 1))
        except UnsupportedOperatorError:
            return False
    return True


def covered_tests() -> list[str]:
    """Names of the node tests whose operators are all registered (minus ``EXCLUDED``).

    The onnx wheel ships the node tests as generators (``onnx.backend.test.case.node``);
    ``load_model_tests`` builds them in memory, which is what ``BackendTest`` runs too.
    """
    names = []
    for case in load_model_tests(kind="node"):
        if case.name in EXCLUDED:
            continue
        model = case.model if case.model is not None else onnx.load(f"{case.model_dir}/model.onnx")
        if _supported(model):
            names.append(case.name)
    return names


backend_test = onnx.backend.test.BackendTest(DynashapeBackend, __name__)
_names = covered_tests()
if _names:
    backend_test.include("^(" + "|".join(re.escape(n) for n in _names) + ")_cpu$")
else:  # nothing registered yet: include a pattern that matches nothing
    backend_test.include("^$")

globals().update(backend_test.test_cases)
