"""The compiled loops of the accelerated kernels: numba code, one module per op family
(the family's kernel module, :mod:`dynashape.ops_builtin.fast.<family>`, holds the KernelDefs that
call them), and :mod:`.common` (numba's compile flags) and :mod:`.threaded` (:class:`.threaded.ThreadedLoop`).

Each kernel module reaches its loops module through
:func:`dynashape.ops_builtin.fast.common.lazy_import`: a loops module, and numba with it, is
imported by the first call of one of its loops. This package itself imports nothing.
"""
