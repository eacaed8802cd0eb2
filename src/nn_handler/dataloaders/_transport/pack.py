"""The worker's side of a batch's hand-over: its tensors packed into ring slots by their layouts."""

from __future__ import annotations

from typing import Any

import torch

from .._tensors.structure import move
from .layouts import layout_of
from .receive import SlotBatch
from .ring import SlotWriter
from .shared_memory import share_batch
from .worker import in_worker_process

__all__ = ["pack_batch"]


def pack_batch(batch: Any) -> Any:
    """In a worker process, the batch with its tensors moved into ring slots, ready to send.

    Each tensor travels as its layout (``layouts``) packs it: tensors already in a slot (written
    there through ``output_buffer``) stay where they are, other dense CPU tensors are copied
    into a free slot, a sparse CSR tensor's parts likewise. Whatever does not go in a slot (a
    layout not registered, a ring with no free slot) is moved into a fresh shared-memory
    segment. Outside worker processes ``batch`` is returned as it is.

    Raises:
        MemoryError: a tensor going into a fresh segment finds ``/dev/shm`` full.
    """
    if not in_worker_process():
        return batch
    writer = SlotWriter()
    packed = move(batch, lambda tensor: _pack(tensor, writer))
    if not writer.sent:
        return share_batch(packed)
    return SlotBatch(writer.announced, share_batch(packed))


def _pack(tensor: torch.Tensor, writer: SlotWriter) -> Any:
    layout = layout_of(tensor)
    return tensor if layout is None else layout.pack(tensor, writer)
