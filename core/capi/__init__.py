"""onnxruntime's ``onnxruntime.capi`` package on dynashape: the module names scripts and
onnxruntime's own tests import (``onnxruntime_pybind11_state``, ``_pybind_state``,
``onnxruntime_inference_collection``), each a thin re-export of dynashape's modules
(:mod:`dynashape.errors`, :mod:`dynashape.ortvalue`, :mod:`dynashape.iobinding`, ...).
"""
