"""Check a fast path against h5py once, before it is trusted.

Our own byte-level reads (a memory map, ``pread`` of contiguous data or of raw chunks) serve what
the file's metadata says lies at some offset. HDF5 also checks what it reads against things we
do not (the end of the file its superblock records, for one), so a damaged file can make the
two disagree. Each fast path therefore reads a few probe rows both ways once, and is used only
when the bytes are the same; otherwise h5py's reads (with h5py's errors) take over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from ..errors import DataFileError
from ..indices import IndexArray
from .chunk_walk import WrittenChunks, read_direct_chunk

__all__ = ["agrees_with_hdf5", "probe_rows", "raw_chunk_agrees"]

#: What a fast path may raise for rows it cannot serve (offsets past its view, an HDF5 refusal):
#: "disagrees". Our own errors (the file changed, is corrupt) are raised, not hidden.
_CANNOT_SERVE = (ValueError, IndexError, OSError, RuntimeError)


def probe_rows(length: int) -> IndexArray:
    """The rows to compare: the first and the last (the ends of the data's byte range)."""
    return np.array(sorted({0, length - 1}), dtype=np.int64)


def agrees_with_hdf5(
    dset: h5py.Dataset,
    read: Callable[[IndexArray | None], np.ndarray[Any, Any]],
    rows: IndexArray | None = None,
) -> tuple[bool, np.ndarray[Any, Any]]:
    """Read ``rows`` (the whole dataset when None) through ``read`` and through h5py.

    Args:
        dset: The dataset, read by h5py for the reference.
        read: The fast path: ``read(rows)`` returns those rows (or the whole dataset for None).
        rows: Row numbers along axis 0, increasing (``probe_rows``), or None.

    Returns:
        Whether the fast path gave the same bytes, and h5py's array (to serve instead).
    """
    # np.asarray keeps a 0-d dataset 0-d (np.ascontiguousarray would make it 1-d)
    expected = np.asarray(dset[()] if rows is None else dset[rows.tolist()], order="C")
    try:
        ours = read(rows)
    except DataFileError:
        raise
    except _CANNOT_SERVE:
        return False, expected
    return ours.tobytes() == expected.tobytes(), expected


def raw_chunk_agrees(
    dset: h5py.Dataset,
    coords: tuple[int, ...],
    read: Callable[[], tuple[np.ndarray[Any, Any], int]],
    written: WrittenChunks,
) -> bool:
    """Whether our raw read of the chunk at ``coords`` gives HDF5's raw bytes and filter mask.

    For raw-chunk fast paths (``pread`` at the chunk index's offsets), compared before any
    decoding: the chunk that lies furthest into the file is the one a damaged superblock's
    end-of-file makes HDF5 refuse.

    Args:
        dset: The dataset, whose raw chunk h5py reads for the reference.
        coords: The chunk's first element.
        read: The fast path: returns the chunk's raw bytes (uint8) and its filter mask.
        written: Which chunks hold bytes (a chunk never written has no raw bytes to compare).
    """
    try:
        found = read_direct_chunk(dset.id, coords, written)
        if found is None:
            return False
        mask, raw = found
        ours, our_mask = read()
    except DataFileError:
        raise
    except _CANNOT_SERVE:
        return False
    return bool(mask == our_mask and ours.tobytes() == bytes(raw))
