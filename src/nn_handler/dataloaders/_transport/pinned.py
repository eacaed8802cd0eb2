"""Page-locking host memory where it lies (``cudaHostRegister``), for fast GPU copies.

A buffer in shared memory (a rank cache, a worker's batch ring) cannot be handed to
``Tensor.pin_memory()``: that copies it into a new pinned buffer, which is neither shared nor
free. Registering the memory with CUDA instead pins it in place, so copies from it to the GPU
are true asynchronous DMA and the buffer stays what it was.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from ..._validate import format_bytes

__all__ = ["log_once", "pin_in_place"]

_LOGGED: set[str] = set()


def log_once(message: str, log_fn: Callable[[str], None]) -> None:
    """Call ``log_fn(message)`` the first time this process sees ``message``."""
    if message not in _LOGGED:
        _LOGGED.add(message)
        log_fn(message)


def pin_in_place(tensor: torch.Tensor, log_fn: Callable[[str], None]) -> bool:
    """Page-lock ``tensor``'s memory for fast GPU copies, without moving it; return success.

    The memory is registered with CUDA (``cudaHostRegister``) where it lies, so a buffer in
    shared memory stays shared. Without CUDA this logs once per process and returns False.
    The registration is dropped when ``tensor`` is garbage collected.
    """
    if not torch.cuda.is_available():
        log_once(
            "nn_handler: CUDA is not available, so host memory is not pinned "
            "(pin_host_memory=True has no effect on this machine)",
            log_fn,
        )
        return False
    nbytes = tensor.untyped_storage().nbytes()
    if nbytes == 0:
        return False
    cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
    ptr = tensor.data_ptr()
    result = cudart.cudaHostRegister(ptr, nbytes, 0)
    if result != cudart.cudaError.success:
        log_fn(f"nn_handler: could not pin {format_bytes(nbytes)} ({result}); continuing unpinned")
        return False
    weakref.finalize(tensor, cudart.cudaHostUnregister, ptr)
    return True
