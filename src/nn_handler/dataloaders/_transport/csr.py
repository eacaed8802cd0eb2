"""The sparse CSR kind: a CSR tensor travels as its three dense parts, each in a slot.

torch rebuilds a CSR tensor it receives without its invariant checks and warns about that
("Sparse invariant checks are implicitly disabled") in the user's loop; the parts are made
valid by ``H5SparseDataset``, so the main process builds the tensor itself, unchecked, whether
its parts came in slots (``CsrRef``) or in fresh segments (``_CsrParts``).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import torch

from .ring import SlotReader, SlotRef, SlotWriter

__all__ = ["CsrRef", "pack", "rebuild"]


class CsrRef(NamedTuple):
    """A sparse CSR tensor whose three parts lie in ring slots; rebuilt in the main process."""

    crow: SlotRef
    col: SlotRef
    values: SlotRef
    size: tuple[int, ...]


class _CsrParts(NamedTuple):
    """A sparse CSR tensor sent in fresh segments, as its three parts: rebuilt by us, not torch."""

    crow: torch.Tensor
    col: torch.Tensor
    values: torch.Tensor
    size: tuple[int, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return _csr_from_parts, tuple(self)


def _csr_from_parts(
    crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size: tuple[int, ...]
) -> torch.Tensor:
    with warnings.catch_warnings():  # torch says once per process that sparse CSR is "beta"
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def pack(tensor: torch.Tensor, writer: SlotWriter) -> Any:
    """A CSR tensor's three parts in slots (sparse single-cell batches), or in fresh segments.

    Where a part finds no slot (a short last batch, no ring left), each part is moved into a
    fresh shared-memory segment, and ``_CsrParts`` has the main process rebuild the tensor.
    """
    parts = [tensor.crow_indices(), tensor.col_indices(), tensor.values()]
    placed = [writer.place(part) for part in parts]
    if any(p is None for p in placed):  # the parts placed are dropped unsent: slots free again
        return _CsrParts(parts[0], parts[1], parts[2], tuple(tensor.shape))
    crow, col, values = (writer.send(p) for p in placed if p is not None)
    return CsrRef(crow, col, values, tuple(tensor.shape))


def rebuild(ref: CsrRef, reader: SlotReader) -> torch.Tensor:
    """The CSR tensor again, its parts views of their slots."""
    return _csr_from_parts(
        reader.view(ref.crow), reader.view(ref.col), reader.view(ref.values), ref.size
    )
