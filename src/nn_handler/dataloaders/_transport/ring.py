"""Batch rings: a worker process hands each batch's tensors to the main process as slot numbers.

A tensor that leaves a DataLoader worker process normally travels as a fresh shared-memory
segment: the worker creates it and page-faults it in, its descriptor crosses through a socket,
and the main process maps it and page-faults it again, then unmaps it when the batch is
dropped. On a 2-core machine the main process spent 0.6 of a batch's read just receiving it, so
workers made training slower.

Here each worker process keeps a few *rings*, one per batch size it returns: a shared-memory
region allocated once and cut into page-aligned slots. The worker reads (or copies) each batch
tensor into a free slot; the first batch from a ring carries the ring itself (one descriptor),
every later one only ``(ring, slot, offset, dtype, shape, strides)``. The main process keeps the
rings it received mapped, and rebuilds each tensor as a view of its slot: no copy, no new
mapping, no page fault.

This module knows bytes in slots only: a dense tensor placed (``SlotWriter``) and viewed again
(``SlotReader``). Which tensors of a batch travel in slots, and how a tensor of another layout is
taken apart into dense parts and put together again, is the registered layouts' (``layouts``).

A slot belongs to the main process from the moment its batch is sent until the last tensor
viewing it is freed there (a ``weakref.finalize`` on the slot's array, which every view keeps
alive); only then may the worker write it again. A batch the user keeps is therefore never
overwritten: while all slots are out, the worker sends its batch in a fresh shared-memory segment
(torch's own way),
slower but never wrong and never blocked. A slot a worker filled but did not send (an error
after the read) is freed when the worker drops it.

Rings are sized from what ``/dev/shm`` has free (at most half of it, split between the
workers); where even two slots do not fit, the worker sends batches in fresh segments, whose clear
``MemoryError`` is unchanged. In the main process a ring is pinned in place
(``cudaHostRegister``) when CUDA is initialised there, so copies from a slot to the GPU are
true asynchronous DMA; the ring of a worker that has exited is dropped when a new ring arrives
(its memory is returned once the batches that still view it are freed).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from ..._io import PerProcess, loader_workers, process_stamp, started_process_alive
from .pinned import pin_in_place
from .shared_memory import new_shared, shm_space
from .worker import in_worker_process

__all__ = [
    "RING_SLOTS",
    "Announcement",
    "SlotReader",
    "SlotRef",
    "SlotWriter",
    "ring_buffer",
    "set_ring_slots",
]

_LOG = logging.getLogger(__name__)
RING_SLOTS = 5  # the default: prefetch_factor (2) in flight, the batch in use, two more held
_MAX_SLOTS = 64
_MAX_RINGS = 8  # batch sizes one worker keeps rings for (x, y, a last short batch, ...)
_PAGE = 4096  # slots start on page borders: aligned for any dtype and for DMA
_HEADER = _PAGE  # slot states, one byte a slot
_FREE, _BUSY = 0, 1


def _round_up(n: int) -> int:
    return -(-n // _PAGE) * _PAGE


@dataclass(eq=False)
class _Lease:
    """A slot taken by the worker; ``sent`` once its batch is on its way to the main process."""

    ring: _WorkerRing
    slot: int
    sent: bool = False


def _release_unsent(lease: _Lease) -> None:
    """The worker's last view of a slot is gone: the slot is the main process's alone, or free."""
    if lease.ring.leases.get(lease.slot) is lease:
        del lease.ring.leases[lease.slot]
    if not lease.sent:  # the batch was dropped in the worker: the slot was never handed over
        lease.ring.states[lease.slot] = _FREE


@dataclass(eq=False)
class _WorkerRing:
    """One ring of a worker process: ``slots`` slots of ``slot_nbytes`` in shared memory."""

    key: str
    tensor: torch.Tensor  # uint8, the whole ring
    slot_nbytes: int
    slots: int
    announced: bool = False
    leases: dict[int, _Lease] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.array: np.ndarray[Any, Any] = self.tensor.numpy()
        self.states: np.ndarray[Any, Any] = self.array[: self.slots]
        self.start = self.tensor.data_ptr() + _HEADER

    def fits(self, nbytes: int) -> bool:
        # a slot at most about twice the batch: small tensors do not take big batches' slots
        return nbytes <= self.slot_nbytes <= 2 * nbytes + _PAGE

    def take(self, nbytes: int) -> tuple[_Lease, torch.Tensor] | None:
        """A free slot, now busy: its lease and a uint8 tensor of its first ``nbytes``."""
        # free in the main process, and no view of it left in this one either (a tensor the
        # worker's dataset kept would otherwise see the next batch written under it)
        free = [s for s in np.flatnonzero(self.states == _FREE).tolist() if s not in self.leases]
        if not free:
            return None
        slot = free[0]
        self.states[slot] = _BUSY
        offset = _HEADER + slot * self.slot_nbytes
        view = self.array[offset : offset + nbytes]  # the object every tensor of it keeps alive
        lease = self.leases[slot] = _Lease(self, slot)
        weakref.finalize(view, _release_unsent, lease)
        return lease, torch.from_numpy(view)

    def lease_of(self, tensor: torch.Tensor) -> tuple[_Lease, int] | None:
        """The lease of the slot ``tensor`` lies in, and its byte offset there; None if outside."""
        ptr = tensor.data_ptr()
        slot, offset = divmod(ptr - self.start, self.slot_nbytes)
        if ptr < self.start or slot >= self.slots:
            return None
        lease = self.leases.get(slot)
        return None if lease is None or lease.sent else (lease, offset)


class _WorkerRings:
    """The rings of one worker process."""

    def __init__(self) -> None:
        self.rings: list[_WorkerRing] = []
        self.refused: set[int] = set()  # slot sizes /dev/shm had no room for
        self.slots = RING_SLOTS
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> tuple[_Lease, torch.Tensor] | None:
        """A free slot of ``nbytes`` or a little more (a new ring if none fits), or None."""
        with self.lock:
            fitting = sorted((r for r in self.rings if r.fits(nbytes)), key=lambda r: r.slot_nbytes)
            for ring in fitting:
                found = ring.take(nbytes)
                if found is not None:
                    return found
            if fitting or len(self.rings) >= _MAX_RINGS:
                return None  # every fitting slot is out: this batch goes in a fresh segment
            new = self._new_ring(nbytes)
            return None if new is None else new.take(nbytes)

    def _new_ring(self, nbytes: int) -> _WorkerRing | None:
        slot_nbytes = _round_up(nbytes)
        if any(r.slot_nbytes < nbytes <= 2 * r.slot_nbytes for r in self.rings):
            # a part whose size varies (a sparse batch's entries): room for the next ones too,
            # or every slightly bigger batch would make a ring of its own
            slot_nbytes = _round_up(nbytes + nbytes // 4)
        if slot_nbytes in self.refused:
            return None
        space = shm_space()
        room = self.slots if space is None else space[0] // (2 * loader_workers()) // slot_nbytes
        slots = min(self.slots, room)
        if slots < 2:
            self.refused.add(slot_nbytes)
            return None
        try:
            tensor = new_shared((_HEADER + slots * slot_nbytes,), np.dtype(np.uint8))
        except MemoryError:
            self.refused.add(slot_nbytes)
            return None
        tensor[:_HEADER] = _FREE
        ring = _WorkerRing(f"{self.token}-{len(self.rings)}", tensor, slot_nbytes, slots)
        self.rings.append(ring)
        return ring

    def find(self, tensor: torch.Tensor) -> tuple[_Lease, int] | None:
        """The unsent lease of the slot ``tensor`` lies in and its byte offset there, or None."""
        for ring in self.rings:
            found = ring.lease_of(tensor)
            if found is not None:
                return found
        return None


_worker_rings: PerProcess[_WorkerRings] = PerProcess(_WorkerRings)


def set_ring_slots(slots: int) -> None:
    """Slots of each ring this worker process makes from now on (2 to 64)."""
    _worker_rings.get().slots = max(2, min(_MAX_SLOTS, int(slots)))


def ring_buffer(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    """In a worker process, an uninitialised tensor in a free slot of one of its batch rings.

    None outside worker processes, for empty tensors, and when no slot is free or ``/dev/shm``
    has no room for a ring: the caller then allocates the batch in a fresh segment.
    """
    found = _take(shape, dtype)
    return None if found is None else found[1]


def _take(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[_Lease, torch.Tensor] | None:
    """``ring_buffer``'s slot with its lease."""
    if not in_worker_process():
        return None
    numel = int(np.prod(shape, dtype=np.int64))
    if numel == 0:
        return None
    found = _worker_rings.get().take(numel * dtype.itemsize)
    return None if found is None else (found[0], found[1].view(dtype).view(shape))


# a ring's first batch carries the ring: (key, worker's (pid, start time), ring tensor, slot
# bytes, slots)
Announcement = tuple[str, tuple[int, int], torch.Tensor, int, int]


class SlotRef(NamedTuple):
    """Where one tensor of a batch lies: its ring, slot, byte offset, dtype, shape and strides.

    A named tuple: it pickles as a tuple (a dataclass' state costs the main process ~20 us a
    batch), and the walkers that rebuild the batch look for this type before tuples.
    """

    ring: str
    slot: int
    offset: int
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]


_Placed = tuple[_Lease, int, torch.Tensor]  # a tensor in a slot: lease, byte offset, tensor


class SlotWriter:
    """One batch being packed in a worker: places dense tensors in slots and sends them.

    ``announced`` lists the rings the main process first hears of with this batch; ``sent`` is
    true once any tensor of the batch travels in a slot.
    """

    def __init__(self) -> None:
        self.rings = _worker_rings.get()
        self.announced: list[Announcement] = []
        self.sent = False

    def place(self, tensor: torch.Tensor) -> _Placed | None:
        """``tensor`` in a slot (where it was read, or copied there), not yet sent; None: no slot.

        Only dense CPU tensors with elements are placed. A placed tensor that is never sent
        frees its slot when the worker drops it.
        """
        if tensor.device.type != "cpu" or tensor.layout != torch.strided or tensor.numel() == 0:
            return None
        found = self.rings.find(tensor)
        if found is not None:
            return found[0], found[1], tensor
        copied = _copy_into_slot(tensor)
        return None if copied is None else (copied[0], 0, copied[1])

    def send(self, placed: _Placed) -> SlotRef:
        """The reference that sends a placed tensor; its slot is the main process's from here."""
        lease, offset, tensor = placed
        ring = lease.ring
        lease.sent = True  # from here on the main process frees the slot
        if not ring.announced:
            ring.announced = True
            self.announced.append(
                (ring.key, process_stamp(), ring.tensor, ring.slot_nbytes, ring.slots)
            )
        self.sent = True
        return SlotRef(
            ring.key, lease.slot, offset, tensor.dtype, tuple(tensor.shape), tensor.stride()
        )


def _copy_into_slot(tensor: torch.Tensor) -> tuple[_Lease, torch.Tensor] | None:
    """``tensor`` copied to the start of a free slot (its strides kept when it is dense)."""
    dense = tensor.is_contiguous() or (
        tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)
    )
    if not dense:
        tensor = tensor.contiguous()
    found = _take((tensor.numel(),), tensor.dtype)
    if found is None:
        return None
    lease, slot = found
    out = slot.as_strided(tensor.shape, tensor.stride())
    out.copy_(tensor)
    return lease, out


# ---- the main process ----------------------------------------------------------------------


@dataclass(eq=False)
class _MainRing:
    """A worker's ring as the main process keeps it."""

    tensor: torch.Tensor
    slot_nbytes: int
    slots: int
    worker: tuple[int, int]  # (pid, start time): a reused pid is another process

    def __post_init__(self) -> None:
        self.array: np.ndarray[Any, Any] = self.tensor.numpy()
        self.states: np.ndarray[Any, Any] = self.array[: self.slots]


_received: PerProcess[dict[str, _MainRing]] = PerProcess(dict)


def _free_slot(states: np.ndarray[Any, Any], slot: int) -> None:
    states[slot] = _FREE  # the last view of the slot is gone: the worker may write it again


class SlotReader:
    """One batch being received in the main process: views of its slots.

    Args:
        announced: The rings the batch announces (kept from now on, beside those received
            before).
    """

    def __init__(self, announced: list[Announcement]) -> None:
        self.rings = _received.get()
        for key, worker, tensor, slot_nbytes, slots in announced:
            _register(self.rings, key, _MainRing(tensor, slot_nbytes, slots, worker))
        self.bases: dict[tuple[str, int], torch.Tensor] = {}

    def view(self, ref: SlotRef) -> torch.Tensor:
        """The tensor ``ref`` names, as a view of its slot; the slot is freed with its last view.

        Raises:
            RuntimeError: ``ref`` names a ring this process never received.
        """
        ring = self.rings.get(ref.ring)
        if ring is None:
            raise RuntimeError(
                f"a DataLoader worker sent a batch in ring {ref.ring!r}, which this process "
                "never received; batches from worker processes must be unpickled in the process "
                "that started the workers, in the order they were sent"
            )
        base = self.bases.get((ref.ring, ref.slot))
        if base is None:
            start = _HEADER + ref.slot * ring.slot_nbytes
            array = ring.array[start : start + ring.slot_nbytes]
            weakref.finalize(array, _free_slot, ring.states, ref.slot)
            base = self.bases[(ref.ring, ref.slot)] = torch.from_numpy(array)
        typed = base.view(ref.dtype)
        return typed.as_strided(ref.size, ref.stride, ref.offset // ref.dtype.itemsize)


def _register(rings: dict[str, _MainRing], key: str, ring: _MainRing) -> None:
    for old, held in list(rings.items()):
        if not started_process_alive(*held.worker):  # its worker is gone: no batch will name it
            del rings[old]
    rings[key] = ring
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        pin_in_place(ring.tensor, _LOG.debug)  # copies from its slots to the GPU are then DMA
