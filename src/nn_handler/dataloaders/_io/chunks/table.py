"""Raw chunk bytes read with ``pread`` from the offsets in HDF5's chunk table: no h5py, no lock.

``read_direct_chunk`` goes through h5py, which holds its global lock for every call: decode
threads line up behind it. For a dataset whose chunks each hold whole rows, ``ChunkTable``
reads the table once (``chunk_iter``, or ``get_chunk_info`` on older HDF5), checks every
entry against the file's size, and then serves any chunk's raw bytes with one ``os.preadv``
into a reused per-thread buffer (the GIL is released while the kernel copies).

The file descriptor is opened lazily in each process (a forked worker opens its own; pickles
carry none) and the file is checked to still be the one the table was read from (device,
inode, and a size no smaller than every chunk's end) before it is used.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np
from h5py._objects import phil

from ..errors import FileChangedError
from ..process import PerProcess

__all__ = [
    "ChunkTable",
    "ChunkTableError",
    "chunk_address_base",
    "chunk_info_at",
    "read_direct_chunk",
    "visit_chunks",
]

_UNALLOCATED = -1


class ChunkTableError(FileChangedError):
    """The file no longer holds what its chunk table promised (it changed; names the file)."""


class ChunkTable:
    """Offsets, sizes and filter masks of the chunks of one dataset whose chunks hold whole rows.

    Use ``ChunkTable.build``; entry ``b`` is the chunk holding rows
    ``[b * chunk_rows, (b + 1) * chunk_rows)``.
    """

    def __init__(
        self,
        path: str,
        key: str,
        offsets: np.ndarray[Any, Any],
        sizes: np.ndarray[Any, Any],
        masks: np.ndarray[Any, Any],
        identity: tuple[int, int],
    ) -> None:
        self.path, self.key = path, key
        self.offsets, self.sizes, self.masks = offsets, sizes, masks
        self._identity = identity
        self._end = int((offsets + sizes).max()) if offsets.size else 0
        # descriptor, lock and read buffers belong to one process: see _io/process.py
        self._fd: PerProcess[_Descriptor] = PerProcess()
        self._lock: PerProcess[threading.Lock] = PerProcess(threading.Lock)
        self._local: PerProcess[threading.local] = PerProcess(threading.local)

    @classmethod
    def build(cls, dset: h5py.Dataset, path: str) -> ChunkTable | None:
        """Read ``dset``'s chunk table; None when a chunk splits rows or is not written.

        Raises:
            ChunkTableError: a chunk's bytes would lie past the end of the file.
        """
        chunks = tuple(int(c) for c in dset.chunks)
        if chunks[1:] != tuple(int(s) for s in dset.shape[1:]) or dset.shape[0] == 0:
            return None
        rows = chunks[0]
        count = -(-int(dset.shape[0]) // rows)
        offsets = np.full(count, _UNALLOCATED, dtype=np.int64)
        sizes = np.zeros(count, dtype=np.int64)
        masks = np.zeros(count, dtype=np.int64)

        def record(info: Any, address: int) -> None:
            block = info.chunk_offset[0] // rows
            if block < count:
                offsets[block], sizes[block] = address, info.size
                masks[block] = info.filter_mask

        visit_chunks(dset, record)
        if np.any(offsets == _UNALLOCATED):
            return None  # unwritten chunks read as the fill value: leave them to HDF5
        stat = os.stat(path)
        table = cls(path, dset.name, offsets, sizes, masks, (stat.st_dev, stat.st_ino))
        table._check_size(stat.st_size)
        return table

    def read(self, block: int) -> tuple[np.ndarray[Any, Any], int]:
        """Raw bytes of chunk ``block`` (a view of a per-thread buffer) and its filter mask.

        The view is valid until this thread's next ``read``.

        Raises:
            ChunkTableError: the file is shorter than the table says (it changed).
        """
        size, offset = int(self.sizes[block]), int(self.offsets[block])
        local = self._local.get()
        buf: np.ndarray[Any, Any] | None = getattr(local, "buf", None)
        if buf is None or buf.size < size:
            buf = np.empty(max(size, 1), dtype=np.uint8)
            local.buf = buf
        view = buf[:size]
        got = os.preadv(self._descriptor(), [view.data], offset) if size else 0
        if got != size:
            raise ChunkTableError(
                f"{self.path!r}, dataset {self.key!r}: chunk {block} should be {size} bytes at "
                f"offset {offset}, but the file ends before that ({got} bytes read); the file "
                "changed since it was opened"
            )
        return view, int(self.masks[block])

    def _descriptor(self) -> int:
        return self._fd.get_or_make(self._open).fd

    def _open(self) -> _Descriptor:
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self._check_file(fd)
        except BaseException:
            os.close(fd)
            raise
        return _Descriptor(fd)

    def _check_file(self, fd: int) -> None:
        stat = os.fstat(fd)
        if (stat.st_dev, stat.st_ino) != self._identity:
            raise ChunkTableError(
                f"{self.path!r} is no longer the file whose chunk table was read for dataset "
                f"{self.key!r} (it was replaced); open the dataset again"
            )
        self._check_size(stat.st_size)

    def _check_size(self, file_size: int) -> None:
        if self._end > file_size:
            block = int(np.argmax(self.offsets + self.sizes))
            raise ChunkTableError(
                f"{self.path!r}, dataset {self.key!r}: chunk {block} lies at bytes "
                f"[{int(self.offsets[block])}, {self._end}) but the file has {file_size} bytes "
                "(truncated or corrupt file)"
            )

    def close(self) -> None:
        """Close this process's descriptor (the next read reopens it)."""
        with self._lock.get():
            held = self._fd.pop()
        if held is not None:
            held.close()


class _Descriptor:
    """A read-only file descriptor, closed when dropped (in the process that holds it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):  # already closed
                os.close(fd)

    def __del__(self) -> None:
        self.close()


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


def read_direct_chunk(dset_id: Any, offset: tuple[int, ...]) -> tuple[int, bytes]:
    """``dset_id.read_direct_chunk(offset)`` under h5py's global lock.

    h5py before 3.16 (h5py/h5py#2764) called HDF5 here without its lock: two decode threads
    reading raw chunks at once crashed the process (seen with h5py 3.10). The lock is
    re-entrant, so newer h5py, which takes it itself, pays nothing extra.
    """
    with phil:
        mask, raw = dset_id.read_direct_chunk(offset)
    return int(mask), raw


def chunk_info_at(dset_id: Any, offset: tuple[int, ...]) -> Any:
    """``dset_id.get_chunk_info_by_coord(offset)`` under h5py's global lock (see above)."""
    with phil:
        return dset_id.get_chunk_info_by_coord(offset)
