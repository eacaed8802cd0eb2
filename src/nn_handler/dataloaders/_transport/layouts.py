"""Tensor layouts in ring slots: which tensors travel there, how each is taken apart and rebuilt.

A ``TensorLayout`` is registered for one torch layout: ``pack`` (in the worker) turns a CPU
tensor of that layout into a reference to slots, placing its dense parts through a
``SlotWriter``, and ``rebuild`` (in the main process) makes the tensor again from that
reference, viewing the slots through a ``SlotReader``. Where a part finds no slot, ``pack``
returns what travels instead (the tensor itself, which goes to a fresh shared-memory segment,
torch's own way).

A tensor of a layout not registered here (sparse COO, CSC, BSR, ...), or not on the CPU, is left
as it is: it leaves the worker in fresh shared-memory segments and torch rebuilds it. Adding a
layout is one module with a ``pack`` / ``rebuild`` pair and a reference type, and one line in
``LAYOUTS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import csr, dense
from .ring import SlotReader, SlotRef, SlotWriter

__all__ = ["LAYOUTS", "REF_TYPES", "TensorLayout", "layout_of", "rebuild"]


@dataclass(frozen=True)
class TensorLayout:
    """How tensors of one layout travel in ring slots.

    Attributes:
        pack: In a worker, the tensor as an instance of ``ref`` (its parts sent in slots), or
            what travels instead when a part finds no slot.
        ref: The named tuple type ``pack`` returns for a tensor in slots; the main process
            looks for it when rebuilding the batch, so each layout has its own.
        rebuild: In the main process, the tensor again from its ``ref``.
    """

    pack: Callable[[torch.Tensor, SlotWriter], Any]
    ref: type[tuple[Any, ...]]
    rebuild: Callable[[Any, SlotReader], torch.Tensor]


LAYOUTS: dict[torch.layout, TensorLayout] = {
    torch.strided: TensorLayout(dense.pack, SlotRef, dense.rebuild),
    torch.sparse_csr: TensorLayout(csr.pack, csr.CsrRef, csr.rebuild),
}

_BY_REF: dict[type, TensorLayout] = {layout.ref: layout for layout in LAYOUTS.values()}

#: The reference types the main process rebuilds, one per layout.
REF_TYPES: tuple[type, ...] = tuple(_BY_REF)


def layout_of(tensor: torch.Tensor) -> TensorLayout | None:
    """How ``tensor`` travels; None leaves it to torch (layout not registered, or not on CPU)."""
    if tensor.device.type != "cpu":
        return None
    return LAYOUTS.get(tensor.layout)


def rebuild(ref: Any, reader: SlotReader) -> torch.Tensor:
    """The tensor ``ref`` (an instance of one of ``REF_TYPES``) stands for, in the main process."""
    return _BY_REF[type(ref)].rebuild(ref, reader)
