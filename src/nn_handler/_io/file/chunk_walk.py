"""A chunked dataset's chunk index, walked once: every written chunk's place in the file.

HDF5 keeps the index (a B-tree, extensible array, …) in the file's metadata; h5py walks it with
``chunk_iter`` (``get_chunk_info`` on older HDF5). The layout check (``layout.py``) walks it once
per dataset, checks every entry against the file and hands the ``ChunkIndex`` on: the memory map
and the raw-chunk table (``chunks/table.py``) are built from it, not from another walk. A URL
with a node-local cache keeps the walked index in its cache entry (``ChunkIndexStore``), so the
next process on the node loads it instead of walking again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
from h5py._objects import phil

from ..errors import CorruptFileError, DataFileError
from ..storage.chunk_index import ChunkIndex

__all__ = [
    "ASK_HDF5",
    "WrittenChunks",
    "chunk_address_base",
    "chunk_info_at",
    "read_chunk_index",
    "read_direct_chunk",
    "visit_chunks",
]


def read_chunk_index(dset: h5py.Dataset, where: str, file_size: int | None = None) -> ChunkIndex:
    """Walk ``dset``'s chunk index once (offsets are not checked here: see ``layout.py``).

    Args:
        dset: A chunked dataset.
        where: The dataset and its file, for messages.
        file_size: The file's size in bytes, for messages (None: not known).

    Raises:
        CorruptFileError: the index cannot be read, or holds an address no file can have.
    """
    rank = len(dset.shape)
    found: list[tuple[int, ...]] = []

    def record(info: Any, address: int) -> None:
        found.append((*info.chunk_offset, address, info.size, info.filter_mask))

    try:
        visit_chunks(dset, record)
    except DataFileError:
        raise  # the store failed or the object changed under the walk: not a damaged file
    except (RuntimeError, OSError, KeyError, ValueError) as exc:
        raise CorruptFileError(
            f"{where}: its chunk index cannot be read ({exc}); the file is damaged", None
        ) from exc
    _check_addresses(found, rank, where, file_size)
    rows = np.array(found, dtype=np.int64).reshape(len(found), rank + 3)
    return ChunkIndex(rows[:, :rank], rows[:, rank], rows[:, rank + 1], rows[:, rank + 2])


def _check_addresses(
    found: list[tuple[int, ...]], rank: int, where: str, file_size: int | None
) -> None:
    """Refuse an entry whose address (or size) no file can have, naming the chunk.

    HDF5 stores addresses as unsigned 64-bit numbers: a forged one (``0xffff…``) would not fit
    the index's int64 table and, as a Python int, would fail with words about C longs.
    """
    limit = int(np.iinfo(np.int64).max)
    for entry in found:
        address, nbytes = int(entry[rank]), int(entry[rank + 1])
        if 0 <= address <= limit and 0 <= nbytes <= limit:
            continue
        coords = tuple(int(c) for c in entry[:rank])
        beyond = "any file's size" if file_size is None else f"the file's {file_size:,} bytes"
        raise CorruptFileError(
            f"{where}: chunk {coords} records address {address:#x} (size {nbytes:,} bytes), "
            f"beyond {beyond}; its chunk index is damaged",
            None,
        )


def visit_chunks(dset: h5py.Dataset, visit: Callable[[Any, int], None]) -> None:
    """Call ``visit(info, address)`` for every written chunk of ``dset``.

    ``info`` is h5py's ``StoreInfo`` (``chunk_offset``, ``filter_mask``, ``size``); ``address``
    is the chunk's byte offset in the file, user block included (``chunk_address_base``).
    """
    base = chunk_address_base(dset)

    def record(info: Any) -> None:
        if info.byte_offset is not None:
            visit(info, base + int(info.byte_offset))

    with phil:  # h5py before 3.16 left some chunk queries outside its lock
        if hasattr(dset.id, "chunk_iter"):
            dset.id.chunk_iter(record)
        else:  # h5py built against HDF5 < 1.12.3
            for i in range(dset.id.get_num_chunks()):
                record(dset.id.get_chunk_info(i))


def chunk_address_base(dset: h5py.Dataset) -> int:
    """What to add to the chunk addresses HDF5 reports to get file offsets.

    HDF5 before 1.14.4 reported chunk addresses (``get_chunk_info``, ``chunk_iter``) relative
    to the end of the user block (HDFGroup/hdf5#3003, fixed by #4236); contiguous offsets
    (``get_offset``) always included it.
    """
    if h5py.version.hdf5_version_tuple >= (1, 14, 4):
        return 0
    return int(dset.file.userblock_size)


@dataclass(frozen=True)
class WrittenChunks:
    """Which chunks of a dataset hold bytes (the others are HDF5's fill value).

    ``index``: the walked chunk index (None: ask HDF5 about each chunk, whose lookup by
    coordinates walks the whole index, O(chunks) a call: for one-off reads only).
    ``may_grow``: a SWMR writer may have written chunks since the walk, so a chunk the index
    does not list is asked of HDF5 before it is served as the fill value.
    """

    index: ChunkIndex | None
    may_grow: bool = False

    def __call__(self, dset_id: Any, offset: tuple[int, ...]) -> bool:
        """True when the chunk whose first element is ``offset`` was written."""
        if self.index is not None:
            if self.index.holds(offset):
                return True
            if not self.may_grow:
                return False
        return chunk_info_at(dset_id, offset).byte_offset is not None


ASK_HDF5 = WrittenChunks(None)


def read_direct_chunk(
    dset_id: Any, offset: tuple[int, ...], written: WrittenChunks
) -> tuple[int, bytes] | None:
    """The raw chunk at ``offset`` and its filter mask; None when it was never written.

    h5py's ``read_direct_chunk`` sizes its buffer with ``H5Dget_chunk_storage_size``, which
    leaves the size unset for a chunk never written: h5py then allocates whatever number its
    stack held, and fails with ``MemoryError``, or ``SystemError`` ("Negative size passed to
    PyBytes_FromStringAndSize"), by chance (more often on a thread of a busy process). So h5py
    is asked only for a chunk that ``written`` says holds bytes.

    h5py before 3.16 (h5py/h5py#2764) called HDF5 here without its lock: two decode threads
    reading raw chunks at once crashed the process (seen with h5py 3.10). The lock is
    re-entrant, so newer h5py, which takes it itself, pays nothing extra.
    """
    if not written(dset_id, offset):
        return None
    with phil:
        mask, raw = _h5py_read_direct_chunk(dset_id, offset)
    return int(mask), raw


def _h5py_read_direct_chunk(dset_id: Any, offset: tuple[int, ...]) -> tuple[int, bytes]:
    # the one call of h5py's read_direct_chunk (tests replace it with a strict stand-in)
    mask, raw = dset_id.read_direct_chunk(offset)
    return int(mask), raw


def chunk_info_at(dset_id: Any, offset: tuple[int, ...]) -> Any:
    """``dset_id.get_chunk_info_by_coord(offset)`` under h5py's global lock (see above)."""
    with phil:
        return dset_id.get_chunk_info_by_coord(offset)
