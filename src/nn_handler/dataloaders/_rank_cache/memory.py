"""Host buffers for in-memory caches: fit checks, shared-memory allocation and in-place pinning.

Checks come first because the failures they prevent are brutal: a process that allocates more
than the machine has is killed by the OOM killer, and a write past the end of a full
``/dev/shm`` (64 MB in a default Docker container) kills it with SIGBUS. Both checks read what
the kernel reports (``MemAvailable`` in ``/proc/meminfo``, ``os.statvfs("/dev/shm")``); where a
probe is unavailable (not Linux) the check is skipped rather than guessed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..._host import MEMINFO, available_ram_bytes
from ..._validate import format_bytes
from .._tensors.tensors import torch_dtype
from .._transport import SHM_PATH, log_once, pin_in_place, shm_space

__all__ = [
    "SHM_PATH",
    "allocate",
    "available_ram_bytes",
    "check_fits",
    "check_shm_fits",
    "log_once",
    "pin_in_place",
    "shm_space",
    "unshared_nbytes",
]


def check_fits(nbytes: int, what: str, *, shared: bool) -> None:
    """Raise ``MemoryError`` unless ``nbytes`` fit in available RAM (and ``/dev/shm`` if shared).

    Args:
        nbytes: Bytes about to be allocated.
        what: What needs them, for the message (e.g. ``"rank 1's shard of 'data.h5'"``).
        shared: The buffer goes to shared memory: check ``/dev/shm`` as well.
    """
    if shared:
        check_shm_fits(nbytes, what)
    free = available_ram_bytes()
    if free is not None and nbytes > free:
        raise MemoryError(
            f"{what} needs {format_bytes(nbytes)} of RAM but only {format_bytes(free)} is "
            f"available (MemAvailable in {MEMINFO}). Each rank caches its own shard, so run "
            "fewer ranks per node, cache a smaller dtype (e.g. dtype_x=np.float16), or read "
            "lazily with H5LazyDataset, which keeps nothing in memory."
        )


def check_shm_fits(nbytes: int, what: str) -> None:
    """Raise ``MemoryError`` unless ``nbytes`` fit in the free space of ``/dev/shm``."""
    space = shm_space()
    if space is None:
        return
    free, size = space
    if nbytes <= free:
        return
    wanted_gib = -(-(size - free + nbytes) // 1024**3) + 1  # round up, plus headroom
    raise MemoryError(
        f"{what} needs {format_bytes(nbytes)} of shared memory but {SHM_PATH} has only "
        f"{format_bytes(free)} free (size {format_bytes(size)}); writing past it would kill "
        f"the process with SIGBUS. Give it more: `docker run --shm-size={wanted_gib}g ...` "
        "(Docker's default is 64 MB; every rank on the node needs its own shard), or run "
        "fewer ranks per node, or pass share_memory=False with num_workers=0 or fork "
        "workers, or read lazily with H5LazyDataset."
    )


def allocate(shape: tuple[int, ...], dtype: np.dtype[Any], *, shared: bool) -> torch.Tensor:
    """Return an uninitialized tensor; in shared memory from the start when ``shared``.

    A shared buffer is created directly in shared memory (no allocate-then-move copy), so
    DataLoader workers started with spawn or forkserver map the same pages instead of copying.
    A private buffer comes from NumPy, which asks the kernel for transparent huge pages on
    large arrays: filling it is faster than filling a fresh ``torch.empty``, and random gathers
    from it miss the TLB less.
    """
    if not shared:
        return torch.from_numpy(np.empty(shape, dtype=dtype))
    itemsize = np.dtype(dtype).itemsize
    layout = torch.empty(shape, dtype=torch.uint8, device="meta")  # shape and strides only
    storage: torch.UntypedStorage = torch.UntypedStorage._new_shared(layout.numel() * itemsize)  # type: ignore[no-untyped-call]
    tensor = torch.empty(0, dtype=torch_dtype(dtype))
    return tensor.set_(storage, 0, layout.shape, layout.stride())


def unshared_nbytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the storages of ``tensors`` that are not in shared memory."""
    total = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if not storage.is_shared():
            total += storage.nbytes()
    return total
