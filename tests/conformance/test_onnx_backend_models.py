"""ONNX's other shipped backend suites through ``dynashape.backend``: ``simple``,
``pytorch-converted``, ``pytorch-operator`` and ``real`` (the model-zoo architectures of
``onnx/backend/test/data/light``, whose expected outputs ship with onnx).

Every model of those suites runs; none is skipped as "not compatible": an operator dynashape
lacks is a failure here. The only exclusions are ``simple``'s ``test_gradient_*`` models,
which use the training-only ``Gradient`` operator (``ai.onnx.preview.training``) that
neither onnx.reference nor ONNX Runtime runs; and, where the numpy Conv kernel runs on a BLAS
that does not sum like MLAS, ``test_squeezenet_cpu`` (see ``_ill_conditioned``).
"""
from __future__ import annotations

import os
import tempfile

import onnx.backend.test

from dynashape.backend import DynashapeBackend
from tests.conftest import BLAS_SUMS_LIKE_MLAS
from tests.conformance import node_cases

#: test name pattern -> why it does not run
EXCLUDED: dict[str, str] = {
    r"^test_gradient_of_add_cpu$": "Gradient (training-only) is run by neither onnx.reference nor ONNX Runtime",
    r"^test_gradient_of_add_and_mul_cpu$": "Gradient (training-only), as above",
}


def _onednn_runs_the_convs() -> bool:
    """Whether oneDNN's prepacked Conv kernel takes light_squeezenet's convs: it needs the
    weights folded into initializers (the rewrites on) and the plugin on with its library."""
    if os.environ.get("DYNASHAPE_OPTIMIZE") in ("0", "false", "off"):
        return False
    try:
        from dynashape.ops_builtin.fast import onednn
        from dynashape.ops_builtin.fast.onednn import api
    except ImportError:
        return False
    return onednn.enabled() and api.library() is not None


def _ill_conditioned() -> dict[str, str]:
    """``light_squeezenet`` makes its weights at run time (ConstantOfShape 0.02): every output
    channel of every Conv is mathematically the same, and the logits reach 9.5e9, where one
    float32 ulp is 1024, so the expected uniform Softmax (0.001 each) holds only if every
    channel of the 26 Convs rounds alike. oneDNN's prepacked kernels sum each channel in one
    order. Without them (the rewrites off, so the weights are not folded; or the compiled
    kernels off), the numpy kernel's im2col + BLAS runs, and OpenBLAS's Haswell/Zen SGEMM
    rounds rows 6-11 of every 12 differently from rows 0-5 (measured: a 48x8 matrix of equal
    rows times any 8xN gives 24 rows that differ from row 0): some channels end 1024 above the
    others and take the whole Softmax. MLAS (onnxruntime) and OpenBLAS's SkylakeX kernels sum
    every row in one fused multiply-add chain: there the test runs in every configuration."""
    if not BLAS_SUMS_LIKE_MLAS and not _onednn_runs_the_convs():
        return {r"^test_squeezenet_cpu$": "ill-conditioned under this BLAS (see _ill_conditioned)"}
    return {}


EXCLUDED.update(_ill_conditioned())

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


node_cases.install()
backend_test = onnx.backend.test.BackendTest(_EveryModelBackend, __name__)
for pattern in EXCLUDED:
    backend_test.exclude(pattern)
globals().update({name: case for name, case in backend_test.test_cases.items() if "NodeModel" not in name})
