"""Every operator the issues list is registered for every ONNX version from opset 11 on
(so the backend node tests for it are included, never silently dropped)."""
from __future__ import annotations

import pytest

from dynashape import get_registry

from tests.conftest import spec_versions

ISSUE_2_OPS = """Shape Gather Squeeze Unsqueeze Concat Cast Identity Reshape Constant Slice Add Sub Mul Div
MatMul Gemm Relu""".split()
ISSUE_3_OPS = """Abs Add And ArgMax AveragePool BatchNormalization Cast Ceil Clip Concat Constant ConstantOfShape
Conv ConvTranspose Cos CumSum Div Equal Erf Expand Flatten GRU Gather GatherElements GatherND Gemm
GlobalAveragePool Greater GreaterOrEqual HardSigmoid Identity If InstanceNormalization IsNaN LSTM
LayerNormalization Less LessOrEqual Log MatMul Max MaxPool Min Mod Mul Neg Not Pad Pow Range Reciprocal
ReduceL2 ReduceMax ReduceMean Relu Reshape Resize Shape Sigmoid Sign Sin Size Slice Softmax Split Sqrt
Squeeze Sub Tanh Tile Transpose Unsqueeze Where ArgMin Dropout Einsum Elu Exp Floor Gelu GlobalMaxPool
HardSwish LeakyRelu Mish NonZero OneHot Or PRelu ReduceMin ReduceProd ReduceSum ReduceSumSquare Round
ScatterElements ScatterND Selu Softplus Sum Mean TopK Trilu Xor DepthToSpace SpaceToDepth Loop""".split()


@pytest.mark.parametrize("op_type", sorted(set(ISSUE_2_OPS + ISSUE_3_OPS)))
def test_every_spec_version_is_registered(op_type):
    registered = {o.since_version for o in get_registry().schemas("", op_type)}
    missing = [v for v in spec_versions(op_type) if v not in registered]
    assert not missing, f"{op_type}: spec versions {missing} are not registered"
    assert get_registry().kernels("", op_type), f"{op_type} has no kernel"
