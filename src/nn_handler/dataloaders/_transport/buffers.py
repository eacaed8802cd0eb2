"""Output buffers: where a dataset writes a batch it returns, so that it leaves without a copy."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._tensors.tensors import torch_dtype
from .ring import ring_buffer
from .shared_memory import new_shared
from .worker import in_worker_process

__all__ = ["output_buffer"]


def output_buffer(shape: tuple[int, ...], dtype: np.dtype[Any]) -> torch.Tensor | None:
    """An uninitialised tensor for a dataset to write one part of its batch output into.

    In a DataLoader worker process it is a free slot of one of the worker's batch rings, so
    the batch reaches the main process as a slot number, without a copy; where no slot is
    free (or the tensor is empty) it is a fresh tensor in shared memory, as
    ``default_collate`` allocates the batches it stacks in workers. Elsewhere (the main
    process, worker threads) None: nothing leaves the process, so the caller reads into
    private memory as it would anyway.

    Args:
        shape: The tensor's shape.
        dtype: Its NumPy dtype (the dtype its ``.numpy()`` view has).

    Raises:
        MemoryError: in a worker process, ``/dev/shm`` has no room for a fresh tensor.
        TypeError: torch has no such dtype.
    """
    if not in_worker_process():
        return None
    slot = ring_buffer(shape, torch_dtype(dtype))
    return new_shared(shape, dtype) if slot is None else slot
