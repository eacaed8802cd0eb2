"""The dense kind: a strided tensor travels in one slot, its strides kept."""

from __future__ import annotations

from typing import Any

import torch

from .ring import SlotReader, SlotRef, SlotWriter

__all__ = ["pack", "rebuild"]


def pack(tensor: torch.Tensor, writer: SlotWriter) -> Any:
    """``tensor``'s slot reference; the tensor itself where it finds no slot (or is empty)."""
    placed = writer.place(tensor)
    return tensor if placed is None else writer.send(placed)


def rebuild(ref: SlotRef, reader: SlotReader) -> torch.Tensor:
    """The tensor again: a view of its slot."""
    return reader.view(ref)
