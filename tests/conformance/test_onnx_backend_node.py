"""ONNX's backend node tests (from the installed ``onnx`` package) through ``dynashape.backend``.

Every node test whose operators are all registered in dynashape runs, except those
listed in ``EXCLUDED`` (random outputs no runtime can reproduce, and one test that contradicts
the spec's description; each with its reason). Training-mode Dropout with a ``seed`` draws its
mask from ``numpy.random.RandomState(seed)`` as onnx's test generator did, so those tests run. Graph inputs and
outputs may be tensors, sequences (lists of arrays) or optionals (None or the element), as in
``test_identity_sequence``, ``test_identity_opt``, ``test_if_seq`` or ``test_loop16_seq_none``.
"""
from __future__ import annotations

import importlib.util
import re

import numpy as np
import onnx
import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

from dynashape import get_registry
from dynashape.backend import DynashapeBackend
from dynashape.errors import UnsupportedOperatorError
from tests.conformance import node_cases

#: test name -> why it does not run.
EXCLUDED: dict[str, str] = {
    **{name: "Bernoulli draws random values: the expected outputs came from numpy's global random state when onnx "
             "generated the test (non-deterministic per the spec; onnx.reference fails them too)"
       for name in ("test_bernoulli", "test_bernoulli_double", "test_bernoulli_seed", "test_bernoulli_expanded",
                    "test_bernoulli_double_expanded", "test_bernoulli_seed_expanded")},
    "test_maxunpool_export_with_output_shape": "the test reads MaxUnpool's indices in the attribute-derived shape; "
        "the spec's description of I and onnxruntime read them as flat positions in output_shape, which a real "
        "MaxPool -> MaxUnpool model needs (onnx/onnx#2398; onnxruntime excludes this test too)",
}


#: ImageDecoder needs Pillow (the ``image`` extra; ``plot`` brings it with matplotlib): without
#: it the ImageDecoder node tests do not run (dynashape raises an ImportError naming the extra)
HAS_PILLOW = importlib.util.find_spec("PIL") is not None


def _ops(graph: onnx.GraphProto):
    for node in graph.node:
        yield node.domain, node.op_type
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _ops(attr.g)
            for g in attr.graphs:
                yield from _ops(g)


def _supported(model: onnx.ModelProto) -> bool:
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
        if case.name in EXCLUDED or (not HAS_PILLOW and case.name.startswith("test_image_decoder")):
            continue
        model = case.model if case.model is not None else onnx.load(f"{case.model_dir}/model.onnx")
        if _supported(model):
            names.append(case.name)
    return names


class _BackendTest(onnx.backend.test.BackendTest):
    """onnx's runner, whose comparison of sequence outputs is fixed: onnx recurses into a
    sequence with each element as a list of outputs, so a 0-d element (``test_loop16_seq_none``'s
    first one) fails ``len()``; here each element is compared as an output of its own, and an
    empty optional (None) must be None."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None) -> None:
        np.testing.assert_equal(len(outputs), len(ref_outputs))
        for i, (ref, out) in enumerate(zip(ref_outputs, outputs)):
            if isinstance(ref, (list, tuple)) or isinstance(out, (list, tuple)):
                assert isinstance(ref, (list, tuple)) and isinstance(out, list), \
                    f"output {i}: expected {type(ref).__name__}, got {type(out).__name__}"
                cls.assert_similar_outputs(list(ref), out, rtol, atol, model_dir)
            elif ref is None or out is None:
                assert ref is None and out is None, f"output {i}: expected {ref!r}, got {out!r}"
            else:
                super().assert_similar_outputs([ref], [out], rtol, atol, model_dir)


node_cases.install()
backend_test = _BackendTest(DynashapeBackend, __name__)
_names = covered_tests()
if _names:
    backend_test.include("^(" + "|".join(re.escape(n) for n in _names) + ")_cpu$")
else:  # nothing registered yet: include a pattern that matches nothing
    backend_test.include("^$")

globals().update(backend_test.test_cases)
