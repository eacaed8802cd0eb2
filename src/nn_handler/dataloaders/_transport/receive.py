"""The main process's side of a batch sent in ring slots: it is rebuilt while it is unpickled.

torch's DataLoader takes a worker's batch off its result queue by unpickling it, then hands it
to the pin-memory thread or the user; it offers no step of its own between the two. So the
packed batch pickles as a call (``SlotBatch.__reduce__``) that the unpickler makes in the main
process: it keeps the rings the batch announces and turns each reference into its tensor
(``layouts.rebuild``). This module is the only code that runs inside that unpickling hook.
"""

from __future__ import annotations

from typing import Any

from .._tensors.structure import move
from .layouts import REF_TYPES, rebuild
from .ring import Announcement, SlotReader

__all__ = ["SlotBatch"]


class SlotBatch:
    """A batch packed in a worker: unpickles, in the main process, as the batch itself.

    Args:
        announced: The rings this batch is the first to use.
        packed: The batch, its tensors in slots replaced by their layouts' references.
    """

    def __init__(self, announced: list[Announcement], packed: Any):
        self.announced = announced
        self.packed = packed

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpack, (self.announced, self.packed)


def _unpack(announced: list[Announcement], packed: Any) -> Any:
    reader = SlotReader(announced)
    return move(packed, lambda ref: rebuild(ref, reader), REF_TYPES)
