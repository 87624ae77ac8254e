"""The compiled kernels: KernelDefs of priority 10 over the builtin numpy ones, one module per
family of ops (each holds its KernelDefs; their loops are in :mod:`.loops`, one module per
family too, imported by the first call of one of them: importing this imports no numba).

Each kernel prepares what its numpy kernel prepares (the same ``prepare`` and ``scratch``,
so the planned buffers are the same) plus what its loop needs, runs the compiled loop where
the loop's assumptions hold (float32/float64, contiguous arrays, the axis or layout it
handles) and the numpy kernel otherwise, so a node never fails here that would run there.

* :mod:`.activations`: Erf, Gelu (erf form), FusedMatMul's bias and Relu/Gelu after BLAS;
* :mod:`.normalization`: LayerNormalization (trailing axes, one output), RMSNormalization (onnxruntime's forms);
* :mod:`.softmax`: Softmax (last axis), FusedAttention's scale / mask / max and normalisation,
  ReduceLogSumExp over trailing axes;
* :mod:`.conv`: Conv / FusedConv (2-D) as direct loops where they beat im2col + BLAS;
* :mod:`.conv_transpose`: ConvTranspose (2-D);
* :mod:`.pool`: the 2-D pools;
* :mod:`.resize`: Resize;
* :mod:`.recurrent`: LSTM, GRU, RNN: the whole time loop of a node in one compiled call (BLAS
  per step through cblas, MLAS's rational sigmoid / tanh for float32);
* :mod:`.trees`: TreeEnsembleClassifier / TreeEnsembleRegressor (ai.onnx.ml): every sample's
  trees walked and their leaves' weights added in one pass (the numpy kernel's sums exactly),
  and the finish (base values, top class, post transforms);
* :mod:`.svm`: SVMClassifier's class probabilities (libsvm's coupling, one sample at a time);
* :mod:`.ml_linear`: LinearClassifier (scores, labels and post transform in one pass) and
  Normalizer (ai.onnx.ml).
"""
from __future__ import annotations

#: the family modules, in the order their kernels are listed (their index: :mod:`.index`)
FAMILIES = ("activations", "normalization", "softmax", "conv", "conv_transpose", "pool", "resize", "recurrent",
            "trees", "svm", "ml_linear")
#: the command that regenerates :mod:`.index` (both plugins' indexes)
INDEX_COMMAND = "python -m dynashape.ops_builtin.fast"


def family_modules() -> list[str]:
    return [f"dynashape.ops_builtin.fast.{name}" for name in FAMILIES]
