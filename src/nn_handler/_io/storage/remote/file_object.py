"""A read-only binary file object over a ``ByteSource``, for h5py to read metadata through.

h5py reads a file object with many small reads (object headers, B-tree nodes, heaps: hundreds
of bytes to a few kilobytes each, one after another). Sent to a store as they come, each would
cost a round trip. So reads are served from aligned blocks of ``block`` bytes, kept in a small
LRU: one request brings the neighbouring metadata too. When a read is an internal node of a
chunk index (a version-1 B-tree), the blocks of all its children are fetched at once
(``btree.py``): h5py's walk then costs a round trip per internal node, not one per node.
Through a ``CachedFile`` the blocks land in the node's cache, so the next process walks the
metadata from local disk; with ``torch.distributed`` up, each block is fetched by one rank of
the job and handed to the others (``job_blocks.py``).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ...errors import DataFileError
from ...process import pause_collection_until_h5py_returns
from ..byte_source import ByteSource, ReadsMetadata
from .btree import btree_children

__all__ = ["SourceFile"]


class SourceFile(io.RawIOBase):
    """``source`` as a seekable, read-only raw file (see the module docstring).

    Args:
        source: The bytes.
        block: Bytes fetched per miss (aligned to multiples of it).
        blocks: Blocks kept in memory.
    """

    def __init__(self, source: ByteSource, block: int = 32 * 1024, blocks: int = 128) -> None:
        super().__init__()
        self.source = source
        self.block = block
        self.blocks = blocks
        self.name = source.name
        self._size = source.size()
        self._pos = 0
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()
        #: the store's failure that ended a read (h5py reports it as damaged metadata)
        self.failure: DataFileError | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        pause_collection_until_h5py_returns()  # see there: a stall between h5py's reads
        view = memoryview(buffer).cast("B")
        pos = self._pos
        end = min(pos + view.nbytes, self._size)
        if end <= pos:
            return 0
        try:
            if end - pos >= 4 * self.block:  # a large read (a slab of data): straight through
                self.source.read_ranges([(pos, end - pos)], [view[: end - pos]])
            else:
                with self._lock:
                    self._copy_blocks(pos, end, view)
                    self._fetch_children(bytes(view[: end - pos]))
        except DataFileError as exc:
            self.failure = exc
            raise
        self._pos = end
        return end - pos

    def raise_failure(self) -> None:
        """Raise (once) the store's failure that ended a read, if one did.

        For the caller of an h5py call that failed: h5py reports such a failure as damaged
        metadata.
        """
        failure, self.failure = self.failure, None
        if failure is None:
            return
        try:
            raise failure from failure.__cause__
        finally:
            # neither this frame nor the file object may keep the error: each would be a
            # reference cycle through h5py's file-access list, which h5py 3.10 frees after
            # the interpreter when it is still alive at exit (a crash in HDF5's atexit)
            del failure

    def _fetch_children(self, node: bytes) -> None:
        """Fetch the children of a chunk-index B-tree node just read, together (``btree.py``)."""
        children = btree_children(node, self._size)
        numbers = {
            n
            for child in children
            for n in range(child // self.block, (child + len(node) - 1) // self.block + 1)
            if n * self.block < self._size
        }
        self._fetch(sorted(n for n in numbers if n not in self._cache))

    def _copy_blocks(self, pos: int, end: int, view: memoryview) -> None:
        """Copy bytes ``[pos, end)`` into ``view``, fetching missing blocks at once."""
        numbers = range(pos // self.block, (end - 1) // self.block + 1)
        self._fetch([n for n in numbers if n not in self._cache])
        done = 0
        for number in numbers:
            data = self._cache[number]
            self._cache.move_to_end(number)
            skip = max(pos - number * self.block, 0)
            take = min(len(data) - skip, end - pos - done)
            view[done : done + take] = data[skip : skip + take]
            done += take

    def _fetch(self, numbers: list[int]) -> None:
        """Read blocks ``numbers`` in one call (they are requested together, concurrently)."""
        if not numbers:
            return
        ranges = [(n * self.block, min(self.block, self._size - n * self.block)) for n in numbers]
        bufs = [np.empty(length, np.uint8) for _, length in ranges]
        if isinstance(self.source, ReadsMetadata):  # read once per job (a stored object)
            self.source.read_metadata(ranges, bufs)
        else:
            self.source.read_ranges(ranges, bufs)
        for number, buf in zip(numbers, bufs, strict=True):
            self._cache[number] = buf.tobytes()
        while len(self._cache) > max(self.blocks, len(numbers)):
            self._cache.popitem(last=False)

    def __reduce__(self) -> Any:
        return (SourceFile, (self.source, self.block, self.blocks))
