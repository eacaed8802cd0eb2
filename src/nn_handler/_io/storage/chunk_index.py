"""Where a chunked dataset's chunks lie in its file's bytes: the chunk index, as data.

``file/chunk_walk.py`` walks HDF5's index (through h5py) into a ``ChunkIndex``; the byte
sources keep one (a URL with a node-local cache saves the walked index beside its bytes:
``ChunkIndexStore``), and the chunk engine and the memory map are built from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["ChunkIndex", "ChunkIndexStore", "RowBlocks"]


@dataclass(frozen=True)
class ChunkIndex:
    """Every written chunk of a dataset: first index per axis, byte offset, size, filter mask."""

    coords: np.ndarray[Any, np.dtype[np.int64]]  # (n, ndim)
    offsets: np.ndarray[Any, np.dtype[np.int64]]
    sizes: np.ndarray[Any, np.dtype[np.int64]]
    masks: np.ndarray[Any, np.dtype[np.int64]]

    def __len__(self) -> int:
        return len(self.offsets)

    def holds(self, offset: tuple[int, ...]) -> bool:
        """True when the chunk whose first element is ``offset`` is in the index (written)."""
        keys = self._sorted_keys
        probe = _as_keys(np.array([offset], dtype=np.int64))
        if len(keys) == 0 or probe.dtype != keys.dtype:
            return False
        at = int(np.searchsorted(keys, probe)[0])
        return at < len(keys) and bool(keys[at] == probe[0])

    @cached_property
    def _sorted_keys(self) -> np.ndarray[Any, Any]:
        # each entry's coordinates as one opaque key, sorted: a lookup is a binary search in
        # NumPy, with no per-chunk Python objects (a dict of tuples would cost ~150 bytes a
        # chunk, copied into every forked worker as its refcounts are written)
        return np.sort(_as_keys(self.coords))

    def row_blocks(self, shape: tuple[int, ...], chunks: tuple[int, ...]) -> RowBlocks | None:
        """The chunks as blocks of rows: entry ``b`` holds rows ``[b * rows, (b + 1) * rows)``.

        None when a chunk splits rows (a row's bytes are not consecutive), when there are no
        rows, or when a chunk is not written (HDF5 serves the fill value there). Chunks past
        ``shape[0]`` (a SWMR writer appending) are left out: they are not ours to serve.
        """
        if tuple(chunks[1:]) != tuple(shape[1:]) or shape[0] == 0:
            return None
        rows = int(chunks[0])
        count = -(-int(shape[0]) // rows)
        block = self.coords[:, 0] // rows
        keep = block < count
        offsets = np.full(count, -1, dtype=np.int64)
        sizes = np.zeros(count, dtype=np.int64)
        masks = np.zeros(count, dtype=np.int64)
        offsets[block[keep]] = self.offsets[keep]
        sizes[block[keep]] = self.sizes[keep]
        masks[block[keep]] = self.masks[keep]
        if np.any(offsets < 0):
            return None
        return RowBlocks(rows, offsets, sizes, masks)


def _as_keys(coords: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Rows of ``coords`` (n, ndim) as n opaque keys (ordered bytewise, compared exactly)."""
    rows = np.ascontiguousarray(coords, dtype=np.int64)
    return rows.view(np.dtype((np.void, 8 * rows.shape[1]))).reshape(-1)


@runtime_checkable
class ChunkIndexStore(Protocol):
    """Bytes that keep the chunk indexes walked from them (a URL with a node-local cache).

    ``load_index`` returns a saved index only after checking it (None: walk it again);
    ``save_index`` keeps a walked one for the next process.
    """

    def load_index(
        self, key: str, shape: tuple[int, ...], chunks: tuple[int, ...]
    ) -> ChunkIndex | None: ...

    def save_index(
        self, key: str, shape: tuple[int, ...], chunks: tuple[int, ...], index: ChunkIndex
    ) -> None: ...


@dataclass(frozen=True)
class RowBlocks:
    """Chunks that hold whole rows, one per block of ``rows`` rows (``ChunkIndex.row_blocks``)."""

    rows: int
    offsets: np.ndarray[Any, np.dtype[np.int64]]
    sizes: np.ndarray[Any, np.dtype[np.int64]]
    masks: np.ndarray[Any, np.dtype[np.int64]]
