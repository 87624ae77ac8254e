"""numpy's floating-point error state during runs: errors ignored, as
``np.errstate(all="ignore")``, so kernels give IEEE results (inf, nan) quietly as ONNX
Runtime does, and the caller's own state is back after the run, failed or not.

Every path that runs a kernel or folds a value is quiet: ``Engine.run`` (plans, plan nodes,
steps, subgraphs, the validation interpreter), ``node.run_once`` (folding, data-dependent
steps, ``testing.run_node``) and ``node.fold``'s value propagation. So kernels need no
``np.errstate`` of their own (it costs ~1 µs a call).

numpy 2 keeps that state in a context variable; setting it directly costs ~0.2 µs against
~1 µs for ``np.errstate`` (numpy 1.x falls back to it). The engine's hot path uses
:func:`quiet_on`/:func:`quiet_off` (no context-manager object); other code the
``quiet_floating_point()`` context.
"""
from __future__ import annotations

import numpy as np

__all__ = ["quiet_floating_point", "quiet_on", "quiet_off"]

try:
    from numpy._core import _ufunc_config
    from numpy._core.umath import _make_extobj

    IGNORE_ALL = _make_extobj(all="ignore")
    ERRSTATE = _ufunc_config._extobj_contextvar
except (ImportError, AttributeError, TypeError):
    IGNORE_ALL = ERRSTATE = None


def quiet_on():
    """Ignore floating-point errors from now on; returns the token for :func:`quiet_off`."""
    if ERRSTATE is not None:
        return ERRSTATE.set(IGNORE_ALL)
    state = np.errstate(all="ignore")
    state.__enter__()
    return state


def quiet_off(token) -> None:
    """Put back the state ``token`` (from :func:`quiet_on`) replaced."""
    if ERRSTATE is not None:
        ERRSTATE.reset(token)
    else:
        token.__exit__(None, None, None)


class quiet_floating_point:  # noqa: N801 - used like np.errstate
    """``with quiet_floating_point():`` floating-point errors ignored inside."""

    __slots__ = ("_token",)

    def __enter__(self):
        self._token = quiet_on()
        return self

    def __exit__(self, *exc):
        quiet_off(self._token)
        return False
