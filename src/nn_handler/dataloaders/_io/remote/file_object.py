"""A read-only binary file object over a ``ByteSource``, for h5py to read metadata through.

h5py reads a file object with many small reads (object headers, B-tree nodes, heaps: hundreds
of bytes to a few kilobytes each, one after another). Sent to a store as they come, each would
cost a round trip. So reads are served from aligned blocks of ``block`` bytes, kept in a small
LRU: one request brings the neighbouring metadata too. Through a ``CachedFile`` the blocks land
in the node's cache, so the next process walks the metadata from local disk.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..file.byte_source import ByteSource

__all__ = ["SourceFile"]


class SourceFile(io.RawIOBase):
    """``source`` as a seekable, read-only raw file (see the module docstring).

    Args:
        source: The bytes.
        block: Bytes fetched per miss (aligned to multiples of it).
        blocks: Blocks kept in memory.
    """

    def __init__(self, source: ByteSource, block: int = 256 * 1024, blocks: int = 64) -> None:
        super().__init__()
        self.source = source
        self.block = block
        self.blocks = blocks
        self.name = source.name
        self._size = source.size()
        self._pos = 0
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

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
        view = memoryview(buffer).cast("B")
        end = min(self._pos + view.nbytes, self._size)
        done = 0
        with self._lock:
            while self._pos + done < end:
                pos = self._pos + done
                first = pos // self.block
                data = self._block(first)
                skip = pos - first * self.block
                take = min(len(data) - skip, end - pos)
                view[done : done + take] = data[skip : skip + take]
                done += take
        self._pos += done
        return done

    def _block(self, number: int) -> bytes:
        data = self._cache.get(number)
        if data is not None:
            self._cache.move_to_end(number)
            return data
        start = number * self.block
        buf = np.empty(min(self.block, self._size - start), np.uint8)
        self.source.read_ranges([(start, buf.size)], [buf])
        data = buf.tobytes()
        self._cache[number] = data
        if len(self._cache) > self.blocks:
            self._cache.popitem(last=False)
        return data

    def __reduce__(self) -> Any:
        return (SourceFile, (self.source, self.block, self.blocks))
