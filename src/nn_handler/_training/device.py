"""The training device and the mixed-precision setup that follows from it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .._devices import check_device

_PRECISIONS: dict[Any, str | None] = {
    False: None,
    True: "auto",
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
}


def parse_device(device: Any) -> torch.device:
    """Return ``torch.device(device)`` after checking that a CUDA device exists.

    Raises:
        TypeError / ValueError: not a device name.
        RuntimeError: a CUDA device is asked for but CUDA is not available.
    """
    return check_device("device", device)


def bind_local_device(device: torch.device, local_rank: int) -> torch.device:
    """Return the device of this DDP process: ``cuda`` becomes ``cuda:<local_rank>``.

    An explicit index (``cuda:1``) is kept. CUDA's current device is set, as NCCL expects.
    """
    if device.type != "cuda":
        return device
    bound = device if device.index is not None else torch.device("cuda", local_rank)
    check_device("device", bound)
    torch.cuda.set_device(bound)
    return bound


@dataclass(frozen=True)
class Precision:
    """Autocast dtype (None: full precision) for a device type, and whether to scale losses."""

    device_type: str
    dtype: torch.dtype | None = None

    @property
    def uses_scaler(self) -> bool:
        """float16 gradients underflow without loss scaling; bfloat16 ones do not."""
        return self.dtype == torch.float16

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """Run the enclosed forward pass (and loss) in the autocast dtype, if any."""
        if self.dtype is None:
            yield
            return
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            yield

    def make_scaler(self) -> torch.amp.GradScaler | None:
        """A ``GradScaler`` for float16, else None."""
        return torch.amp.GradScaler(self.device_type) if self.uses_scaler else None

    def __str__(self) -> str:
        return "fp32" if self.dtype is None else str(self.dtype).replace("torch.", "")


def resolve_precision(mixed_precision: Any, device: torch.device) -> Precision:
    """Turn ``mixed_precision`` into a ``Precision`` for ``device``.

    ``True`` picks float16 with a grad scaler on CUDA and bfloat16 elsewhere (CPU autocast
    supports bfloat16); ``"fp16"`` needs CUDA.
    """
    if not isinstance(mixed_precision, bool | str) or mixed_precision not in _PRECISIONS:
        choices = ", ".join(repr(choice) for choice in _PRECISIONS)
        raise ValueError(f"mixed_precision must be one of {choices}; got {mixed_precision!r}")
    mode = _PRECISIONS[mixed_precision]
    if mode is None:
        return Precision(device.type)
    if mode == "auto":
        mode = "fp16" if device.type == "cuda" else "bf16"
    if mode == "fp16" and device.type != "cuda":
        raise ValueError(
            f"mixed_precision={mixed_precision!r} needs a CUDA device, but device is "
            f"{str(device)!r}; use mixed_precision='bf16' (or True) on the CPU"
        )
    return Precision(device.type, torch.float16 if mode == "fp16" else torch.bfloat16)
