"""dynashape's oneDNN plugin (entry point ``onednn``): kernels backed by oneDNN
(``libdnnl.so.3`` of the ``onednn-cpu-gomp`` wheel, in the ``[fast]`` extra on Linux
x86-64), called through ctypes, the library loaded on first use.

* :mod:`.api`: the binding (library discovery, memory descriptors, primitives, post-ops,
  threads);
* :mod:`.gemm`: MatMul / Gemm / FusedMatMul against a constant 2-D weight: one GEMM over
  the leading dims, the weight packed once into oneDNN's layout, bias and activation as
  post-ops;
* :mod:`.conv`: ``NhwcConv``, 2-D convolution channels-last, weights reordered once, bias,
  residual and activation as post-ops;
* :mod:`.pool`: ``NhwcMaxPool`` / ``NhwcAveragePool``;
* :mod:`.reorder`: Transpose (float32) as a oneDNN reorder;
* :mod:`.rowwise`: LayerNormalization, Softmax, the attention core (FusedAttention) and Gelu;
* :mod:`.layout`: the graph pass that puts regions of convolutions in NHWC;
* :mod:`.tiered`: a new shape's primitive made in a background thread while the kernel
  runs its numpy path.

Each kernel has priority 20 (over the numba loops' 10) and takes only the nodes it
covers (``KernelDef.accepts``); without the library every node goes to the next kernel
and the layout pass does nothing. Off: ``DYNASHAPE_ONEDNN=0`` (this plugin only),
``DYNASHAPE_FAST=0`` (every compiled kernel, numba's too), both read when the registry is
built, or ``InferenceSession(..., compiled_kernels=False)`` for one session.
"""
from __future__ import annotations

import os

from dynashape.hookspecs import hookimpl

__all__ = ["PLUGIN_NAME", "enabled"]

#: the entry-point name the registry knows this plugin by
PLUGIN_NAME = "onednn"


def enabled() -> bool:
    """Neither ``DYNASHAPE_ONEDNN`` nor ``DYNASHAPE_FAST`` switches the plugin off (the
    library itself is looked for only when a node could take one of its kernels)."""
    off = ("0", "false", "off")
    return os.environ.get("DYNASHAPE_ONEDNN", "1") not in off and os.environ.get("DYNASHAPE_FAST", "1") not in off


#: the kernel modules (their index: :mod:`.index`)
FAMILIES = ("gemm", "conv", "pool", "reorder", "rowwise", "layout")


def family_modules() -> list[str]:
    return [f"{__name__}.{name}" for name in FAMILIES]


@hookimpl
def dynashape_register_libraries():
    """The oneDNN-backed KernelDefs and the numpy reference kernels of the NHWC ops (with the
    ops of the layout pass: NhwcConv, NhwcMaxPool, NhwcAveragePool), one library per module,
    each imported when a model first has one of its ops; the channels-last layout pass
    (:mod:`.layout`) when the rewrites first run."""
    if not enabled():
        return []
    from dynashape.libindex import libraries

    from .index import INDEX
    return libraries(INDEX)
