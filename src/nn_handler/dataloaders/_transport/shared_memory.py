"""Shared memory for batches that leave a DataLoader worker process, and words for when it is full.

A tensor sent from a worker process to the main process travels as a shared-memory segment
(``/dev/shm`` on Linux). When torch makes that segment while pickling the batch, it does so in
the worker's queue feeder thread, and an error there (``/dev/shm`` full) is only printed: the
batch is dropped, the worker lives on, and a DataLoader with the default ``timeout=0`` waits for
that batch forever (4 runs in 5 hung, once measured). So a batch leaves a worker already in shared
memory, put there by the worker during the DataLoader's fetch, where an error travels to the
main process and is raised there; a full ``/dev/shm`` becomes a ``MemoryError`` that says how
full it is and what to do. Outside worker processes (the main process, worker threads) nothing
here allocates shared memory.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..._io import SHM_FOLDER, off
from ..._validate import format_bytes
from .._tensors.tensors import torch_dtype
from .worker import in_worker_process

__all__ = ["SHM_PATH", "new_shared", "share_batch", "shm_space"]

SHM_PATH = "/dev/shm"
# what torch's shared-memory allocators report when the segment cannot get its pages
_FULL = (os.strerror(errno.ENOSPC), os.strerror(errno.ENOMEM))


def shm_space(path: str | None = SHM_FOLDER) -> tuple[int, int] | None:
    """Return ``(free, size)`` in bytes of the shared-memory file system, or None where absent.

    None also where shared memory lives in no folder (macOS, Windows): nothing tells its room.
    """
    if path is None:
        off("a folder of shared memory (/dev/shm)", "room for shared memory is not checked first")
        return None
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def new_shared(shape: tuple[int, ...], dtype: np.dtype[Any]) -> torch.Tensor:
    """An uninitialised tensor allocated in shared memory (no private copy made first).

    Raises:
        MemoryError: ``/dev/shm`` has no room for it (the message says what to do).
    """
    probe = torch.empty(0, dtype=torch_dtype(dtype))
    numel = math.prod(shape)
    try:  # what default_collate does in workers: allocate the shared storage directly
        storage = probe._typed_storage()._new_shared(numel, device=probe.device)  # type: ignore[no-untyped-call]
    except RuntimeError as exc:
        if _is_full(exc):
            raise _full_error(numel * probe.element_size(), exc) from exc
        raise
    return probe.new(storage).resize_(*shape)


def share_batch(batch: Any) -> Any:
    """In a worker process, move every tensor of ``batch`` into shared memory; return ``batch``.

    Tensors nested in tuples, lists and dicts are moved in place (sparse tensors by their
    index and value tensors); tensors already shared are left alone, as is everything in the
    main process.

    Raises:
        MemoryError: ``/dev/shm`` has no room for the batch (the message says what to do).
    """
    if not in_worker_process():
        return batch
    for tensor in _storage_tensors(batch):
        if tensor.device.type == "cpu" and not tensor.is_shared():  # type: ignore[no-untyped-call]
            try:
                tensor.share_memory_()  # type: ignore[no-untyped-call]
            except RuntimeError as exc:
                if _is_full(exc):
                    raise _full_error(tensor.untyped_storage().nbytes(), exc) from exc
                raise
    return batch


def _storage_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors holding the storages of ``obj``'s tensors (a sparse tensor's components)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.strided:
            yield obj
        elif obj.layout == torch.sparse_coo:
            yield from (obj._indices(), obj._values())
        elif obj.layout in (torch.sparse_csr, torch.sparse_bsr):
            yield from (obj.crow_indices(), obj.col_indices(), obj.values())
        elif obj.layout in (torch.sparse_csc, torch.sparse_bsc):
            yield from (obj.ccol_indices(), obj.row_indices(), obj.values())
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _storage_tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _storage_tensors(item)


def _is_full(exc: RuntimeError) -> bool:
    return any(reason in str(exc) for reason in _FULL)


def _full_error(nbytes: int, exc: RuntimeError) -> MemoryError:
    """A full ``/dev/shm`` (torch's ``exc``) in words: how full, and what to do."""
    text = str(exc)
    space = shm_space()
    room = (
        ""
        if space is None
        else (f"; {SHM_PATH} has {format_bytes(space[0])} free of {format_bytes(space[1])}")
    )
    return MemoryError(
        f"a DataLoader worker process could not put a batch of {format_bytes(nbytes)} in "
        f"shared memory ({text.strip()}){room}. Every batch a worker process sends waits "
        f"in {SHM_PATH} until the main process drops it (up to num_workers x prefetch_factor "
        "batches at once), beside any cache built with share_memory=True. Give it more room "
        "(`docker run --shm-size=2g ...`), keep fewer or smaller batches in flight "
        "(num_workers, prefetch_factor, batch_size), read with worker_mode='thread' (no "
        "shared memory), or build RankMemCachedH5Dataset with share_memory=False and fork "
        "workers. torch.multiprocessing.set_sharing_strategy('file_system') does not help: "
        f"its segments live in {SHM_PATH} too."
    )
