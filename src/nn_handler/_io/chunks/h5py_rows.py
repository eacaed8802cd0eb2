"""h5py behind the chunk engine: one dataset, opened per process, called as ``read_with_h5py``.

The engine and its block sources read and decode raw chunks themselves where they can; h5py
serves the rest (filters only h5py decodes, a filter variant we do not decode, chunks never
written, which hold HDF5's fill value), and ``read_direct_chunk`` hands ``DirectChunks`` its raw
chunks. ``H5pyDataset`` is that dataset, made once when the engine is built from the file and
the key: each process opens its own handle through the file (``H5Source.dataset``, with HDF5's
chunk cache off: the engine's window is the cache), only when h5py is first needed. It pickles
with the engine, so a worker process gets its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..file.chunk_walk import WrittenChunks, read_direct_chunk
from ..file.source import H5Source

__all__ = ["H5pyDataset", "ReadWithH5py", "row_span"]

#: Fill ``out`` (the selection's shape) with the dataset's values at the selection.
ReadWithH5py = Callable[[tuple[slice, ...], np.ndarray[Any, Any]], None]


@dataclass(frozen=True)
class H5pyDataset:
    """Dataset ``key`` of ``file`` as h5py reads it (see the module docstring).

    Args:
        file: The file (it opens the dataset once per process).
        key: The dataset's key.
    """

    file: H5Source
    key: str

    def dataset(self) -> h5py.Dataset:
        """This process's handle (HDF5's chunk cache off)."""
        return self.file.dataset(self.key, chunk_cache=False)

    def __call__(self, selection: tuple[slice, ...], out: np.ndarray[Any, Any]) -> None:
        """``read_with_h5py``: fill ``out`` with the values at ``selection`` (h5py decodes)."""
        dset = self.dataset()
        if out.flags.c_contiguous:
            dset.read_direct(out, selection)
        else:  # (read_direct refuses a strided destination)
            out[...] = dset[selection]

    def raw_chunk(
        self, offset: tuple[int, ...], written: WrittenChunks
    ) -> tuple[int, bytes] | None:
        """The filter mask and raw bytes of the chunk at ``offset``; None when never written."""
        return read_direct_chunk(self.dataset().id, offset, written)


def row_span(lo: int, hi: int) -> tuple[slice, ...]:
    """The selection of rows ``[lo, hi)`` (every other axis whole)."""
    return (slice(lo, hi),)
