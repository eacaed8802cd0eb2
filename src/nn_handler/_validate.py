"""Argument checks that produce the library's error messages.

Every message names the argument, shows the value with ``!r`` and says what is allowed, so a user
can fix the call without reading our source.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

__all__ = [
    "check_callable",
    "check_choice",
    "check_device",
    "check_int",
    "check_int_at_most",
    "check_key",
    "check_non_negative_int",
    "check_positive_int",
    "check_probability",
    "format_bytes",
    "format_names",
    "numpy_dtype",
]

_MAX_LISTED = 20


def format_bytes(n: int | float) -> str:
    """Return ``n`` bytes as a short human string (``"1.5 GiB"``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_names(names: Iterable[str]) -> str:
    """Return names as a short, sorted, readable list (truncated past 20 entries)."""
    items = sorted(names)
    if not items:
        return "(none)"
    shown = ", ".join(repr(n) for n in items[:_MAX_LISTED])
    extra = len(items) - _MAX_LISTED
    return shown + (f", … ({extra} more)" if extra > 0 else "")


def check_int(name: str, value: Any) -> int:
    """Return ``value`` as an int, or raise ``TypeError`` for non-integers (bools included)."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError as exc:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from exc


def check_non_negative_int(name: str, value: Any) -> int:
    """Return ``value`` as an int ``>= 0`` or raise ``ValueError`` / ``TypeError``."""
    result = check_int(name, value)
    if result < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return result


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int ``>= 1`` or raise ``ValueError`` / ``TypeError``."""
    result = check_int(name, value)
    if result < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return result


def check_int_at_most(name: str, value: int, limit: int, why: str) -> int:
    """Return ``value`` when it is ``<= limit``, else raise ``ValueError`` naming ``why``.

    For integers that reach a C API of fixed width (HDF5's ``size_t`` / ``int``), which would
    otherwise fail with a bare ``OverflowError`` far from the call that set them.
    """
    if value > limit:
        raise ValueError(
            f"{name}={value!r} is larger than {limit:,}, the largest value {why} takes"
        )
    return value


def check_probability(name: str, value: Any) -> float:
    """Return ``value`` as a float in ``[0, 1]`` or raise ``ValueError``."""
    try:
        result = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a number in [0, 1], got {value!r}") from exc
    if not 0.0 <= result <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return result


def check_callable(name: str, value: Any, *, optional: bool = True) -> None:
    """Raise ``TypeError`` unless ``value`` is callable (or None when ``optional``)."""
    if not (callable(value) or (optional and value is None)):
        raise TypeError(f"{name} must be callable{' or None' if optional else ''}, got {value!r}")


def check_key(name: str, value: Any, *, optional: bool) -> None:
    """Raise ``TypeError`` unless ``value`` is a non-empty dataset path (or None if optional)."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        allowed = "a non-empty string or None" if optional else "a non-empty string"
        raise TypeError(f"{name} must be {allowed} (a dataset path in the file), got {value!r}")


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``allowed``, else raise ``ValueError`` listing them."""
    options = tuple(allowed)
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def numpy_dtype(name: str, value: Any) -> np.dtype[Any] | None:
    """Return ``np.dtype(value)`` (``None`` passes through) or raise naming the argument."""
    if value is None:
        return None
    try:
        dtype: np.dtype[Any] = np.dtype(value)
        return dtype
    except TypeError as exc:
        raise TypeError(
            f"{name} must be a NumPy dtype (e.g. np.float32 or 'int64') or None, got {value!r}"
        ) from exc


def check_device(name: str, value: Any) -> torch.device:
    """Return ``value`` as a ``torch.device``; a CUDA device must exist in this process.

    Raises:
        TypeError: ``value`` is neither a string nor a ``torch.device``.
        ValueError: ``value`` is not a device name.
        RuntimeError: a CUDA device is asked for but CUDA (or that device index) is missing.
    """
    if not isinstance(value, str | torch.device):
        raise TypeError(f"{name} must be a string or torch.device, got {value!r}")
    try:
        device = torch.device(value)
    except RuntimeError as exc:
        raise ValueError(f"{name}={value!r} is not a device name (e.g. 'cpu', 'cuda')") from exc
    if device.type == "cuda":
        _check_cuda(name, value, device)
    return device


def _check_cuda(name: str, value: Any, device: torch.device) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{name}={value!r} but CUDA is not available (torch.cuda.is_available() is False); "
            f"pass {name}='cuda' if torch.cuda.is_available() else 'cpu'"
        )
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise RuntimeError(f"{name}={value!r} but only {count} CUDA device(s) are visible")
