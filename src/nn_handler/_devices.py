"""Checking a device argument: a ``torch.device``, and a CUDA one only where CUDA is.

Kept apart from ``_validate`` so that the argument checks the I/O layer uses import no torch.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_device"]


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
