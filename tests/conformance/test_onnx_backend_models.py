"""ONNX's other shipped backend suites through ``dynashape.backend``: ``simple``,
``pytorch-converted``, ``pytorch-operator`` and ``real`` (the model-zoo architectures of
``onnx/backend/test/data/light``, whose expected outputs ship with onnx).

Every model of those suites runs; none is skipped as "not compatible": an operator dynashape
lacks is a failure here. The only exclusions are ``simple``'s ``test_gradient_*`` models,
which use the training-only ``Gradient`` operator (``ai.onnx.preview.training``) that
neither onnx.reference nor ONNX Runtime runs.
"""
from __future__ import annotations

import os
import tempfile

import onnx.backend.test

from dynashape.backend import DynashapeBackend

#: test name pattern -> why it does not run
EXCLUDED: dict[str, str] = {
    r"^test_gradient_of_add_cpu$": "Gradient (training-only) is run by neither onnx.reference nor ONNX Runtime",
    r"^test_gradient_of_add_and_mul_cpu$": "Gradient (training-only), as above",
}

# the runner keeps the light models' generated feeds in $ONNX_HOME/models/light: keep them out of
# $HOME, one folder per pytest-xdist worker (two processes writing one model's feeds at once
# left one of them a half-written folder)
os.environ.setdefault("ONNX_HOME", os.path.join(tempfile.gettempdir(),
                                                "dynashape-onnx-home" + os.environ.get("PYTEST_XDIST_WORKER", "")))


class _EveryModelBackend(DynashapeBackend):
    """The backend, claiming every model: an unsupported operator fails its test instead of skipping it."""

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        return True


backend_test = onnx.backend.test.BackendTest(_EveryModelBackend, __name__)
for pattern in EXCLUDED:
    backend_test.exclude(pattern)
globals().update({name: case for name, case in backend_test.test_cases.items() if "NodeModel" not in name})
