"""onnxruntime's ``onnxruntime.capi.onnxruntime_inference_collection`` (its Python wrappers) on
dynashape: the classes are dynashape's (imported on first use), and
:func:`check_and_normalize_provider_args` normalizes provider arguments as onnxruntime does.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional, Sequence

__all__ = ["check_and_normalize_provider_args", "InferenceSession", "IOBinding", "OrtValue",  # noqa: F822
           "SparseTensor", "OrtDevice", "OrtDeviceVendorId", "AdapterFormat"]

def __getattr__(name: str) -> Any:
    if name in __all__[1:]:
        from .. import devices, iobinding, lora, ortvalue, session, sparse
        for module in (session, iobinding, ortvalue, sparse, devices, lora):
            if hasattr(module, name):
                return getattr(module, name)
    raise AttributeError(f"module 'dynashape.capi.onnxruntime_inference_collection' has no attribute '{name}'")


def check_and_normalize_provider_args(providers: Optional[Sequence[Any]], provider_options: Optional[Sequence[Any]],
                                      available_provider_names: Sequence[str]) -> tuple[list[str], list[dict]]:
    """Providers as ``(names, options dicts)``: ``providers`` holds names or ``(name, options)``
    pairs, ``provider_options`` (when given, and then no pairs) one dict per provider; option
    keys and values become strings. A name listed twice is warned about (``UserWarning``) and
    kept once, a name not in ``available_provider_names`` is warned about and kept.

    Raises:
        ValueError: ``providers`` or ``provider_options`` not a sequence, an entry of the wrong
            type, lengths that differ, or pairs together with ``provider_options``.
    """
    if providers is None:
        return [], []
    if isinstance(providers, str) or not isinstance(providers, Sequence):
        raise ValueError("'providers' should be a sequence.")
    names: list[str] = []
    options: list[dict] = []
    seen: set[str] = set()

    def add(name: Any, opts: Any) -> None:
        if not isinstance(name, str):
            raise ValueError(f"Provider names should be strings, got {name!r}.")
        if not isinstance(opts, dict):
            raise ValueError(f"Provider options should be a dict, got {opts!r}.")
        if name in seen:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", UserWarning, stacklevel=3)
            return
        if name not in available_provider_names:
            warnings.warn(f"Specified provider '{name}' is not in available provider names."
                          f"Available providers: '{', '.join(available_provider_names)}'", UserWarning, stacklevel=3)
        seen.add(name)
        names.append(name)
        options.append({str(k): str(v) for k, v in opts.items()})

    if provider_options is not None:
        if isinstance(provider_options, str) or not isinstance(provider_options, Sequence):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if 'provider_options' is given.")
        for name, opts in zip(providers, provider_options):
            add(name, opts)
    else:
        for p in providers:
            if isinstance(p, str):
                add(p, {})
            elif isinstance(p, tuple) and len(p) == 2:
                add(p[0], p[1])
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
    return names, options
