"""Kernels backed by oneDNN (``libdnnl.so.3``, the ``onednn-cpu-gomp`` wheel of the
``[fast]`` extra on Linux x86-64), loaded through ctypes on first use.

* :mod:`.api`: the binding (library discovery, memory descriptors, primitives, post-ops,
  threads);
* :mod:`.gemm`: MatMul / Gemm / FusedMatMul against a constant 2-D weight: one GEMM over
  the leading dims, the weight packed once into oneDNN's layout, bias and activation as
  post-ops;
* :mod:`.conv`: ``NhwcConv``, 2-D convolution channels-last, weights reordered once, bias,
  residual and activation as post-ops;
* :mod:`.pool`: ``NhwcMaxPool`` / ``NhwcAveragePool``;
* :mod:`.reorder`: Transpose (float32) as a oneDNN reorder;
* :mod:`.layout`: the graph pass that puts regions of convolutions in NHWC.

Each kernel has priority 20 (over the numba loops' 10) and takes only the nodes it
covers (``KernelDef.accepts``); without the library every node goes to the next kernel
and the layout pass does nothing. ``DYNASHAPE_ONEDNN=0`` leaves all of it out of the
registry (read when the registry is built).
"""
from __future__ import annotations

import os

__all__ = ["enabled", "all_ops", "all_kernels", "all_rewrites"]


def enabled() -> bool:
    """``DYNASHAPE_ONEDNN`` does not switch the oneDNN kernels off (the library itself is
    looked for only when a node could take one)."""
    return os.environ.get("DYNASHAPE_ONEDNN", "1") not in ("0", "false", "off")


def _families() -> tuple:
    from . import conv, gemm, pool, reorder
    return gemm, conv, pool, reorder


def all_ops() -> list:
    """The OpDefs of the layout pass's ops (NhwcConv, NhwcMaxPool, NhwcAveragePool)."""
    return [op for family in _families() for op in family.lib.ops]


def all_kernels() -> list:
    """Every oneDNN-backed KernelDef (and the numpy reference kernels of the NHWC ops)."""
    return [k for family in _families() for k in family.lib.kernels]


def all_rewrites() -> list:
    """The channels-last layout pass."""
    from .layout import CHANNELS_LAST
    return [CHANNELS_LAST]
