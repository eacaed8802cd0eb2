"""CachedFile: a remote object read through a node-local cache; a ``ByteSource``.

Every rank and DataLoader worker on a node that is given the same ``cache_dir`` shares one
entry per object version (``cache_dir.py``): a range already cached is read from the local
sparse file (through ``LocalFile``: ``preadv``, page cache); the missing parts of a request are
fetched from the store in one ``RemoteFile.read_ranges`` call (merged, concurrent), written at
their own offsets and recorded, and the whole request is then read locally. Processes that miss
the same piece at the same moment take turns (``single_flight.py``): one fetches it, the others
then find it cached, so the node sends one request where its ranks and workers would send one
each. Nothing is ever served from a piece that was not recorded as written.

The entry also keeps the chunk indexes walked from the object (``metadata.py``): the next
process loads them instead of walking the object's B-trees again. The metadata a node misses
is fetched once per job where ranks share a process group (``job_blocks.py``).

With ``cache_limit`` set, unused entries are evicted (least recently used first) to make room;
when the cap cannot be kept (the entries in use fill it), the request is read from the store
without caching it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...process import PerProcess
from ..byte_source import Buffer, LocalFile
from ..chunk_index import ChunkIndex
from ..identity import ObjectVersion
from .cache_dir import CacheEntry, make_room
from .intervals import Intervals, covered, missing
from .metadata import MetadataStore
from .object_file import RemoteFile
from .single_flight import RangeLocks

__all__ = ["CachedFile"]

_Fetch = Callable[[Sequence[tuple[int, int]], Sequence[Buffer]], None]  # a read from the store
_Gaps = Callable[[Intervals, Sequence[tuple[int, int]]], list[tuple[int, int]]]  # what to fetch


class CachedFile:
    """``remote``'s bytes, cached under ``cache_dir`` (see the module docstring).

    Args:
        remote: The object.
        cache_dir: The node-local directory shared by every process on the node (created).
        cache_limit: Most bytes the whole directory may hold (None: no cap).
    """

    def __init__(self, remote: RemoteFile, cache_dir: str, cache_limit: int | None = None) -> None:
        self.remote = remote
        self.cache_dir = cache_dir
        self.cache_limit = cache_limit
        self._entry: PerProcess[CacheEntry] = PerProcess()
        self._local: PerProcess[LocalFile] = PerProcess()
        self._flights: PerProcess[RangeLocks] = PerProcess()
        #: bytes fetched from the store by this object in this process (for tests and docs)
        self.fetched = 0

    @property
    def name(self) -> str:
        """The object's URL."""
        return self.remote.name

    @property
    def identity(self) -> ObjectVersion:
        """The object version the cache entry belongs to."""
        return self.remote.identity

    def size(self) -> int:
        """Bytes in the object."""
        return self.remote.size()

    def read_ranges(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """Fill each buffer with its range of the object, from the cache where it has it.

        Raises:
            ValueError, FileChangedError, RemoteReadError, RemoteAccessError: as
                ``RemoteFile.read_ranges``.
        """
        self._read(ranges, buffers, self.remote.read_ranges, _gaps)

    def read_metadata(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """As ``read_ranges``; what the node misses is fetched once per job (``job_blocks.py``).

        A range the node holds only in part is fetched whole: the job's ranks then ask for the
        same ranges (metadata blocks), whatever else each node's cache happens to hold.
        """
        self._read(ranges, buffers, self.remote.read_metadata, _whole_ranges)

    def load_index(
        self, key: str, shape: tuple[int, ...], chunks: tuple[int, ...]
    ) -> ChunkIndex | None:
        """The chunk index of dataset ``key`` saved in the entry, checked; None: walk it."""
        return MetadataStore(self.entry().path, self.size()).load_index(key, shape, chunks)

    def save_index(
        self, key: str, shape: tuple[int, ...], chunks: tuple[int, ...], index: ChunkIndex
    ) -> None:
        """Keep dataset ``key``'s walked chunk index in the entry for the next process."""
        MetadataStore(self.entry().path, self.size()).save_index(key, shape, chunks, index)

    def local_copy(self) -> str | None:
        """The cached file's path once it holds the whole object (a local copy), else None."""
        entry = self.entry()
        entry.filled()
        return entry.data_path if entry.complete else None

    def cached_bytes(self) -> int:
        """Bytes of the object held by the cache now."""
        return covered(self.entry().filled())

    def flights(self) -> RangeLocks:
        """This process's locks on the ranges it fetches into the entry (``single_flight``)."""
        return self._flights.get_or_make(lambda: RangeLocks(str(self.entry().path / "fetching")))

    def entry(self) -> CacheEntry:
        """This process's hold on the cache entry (joined on first use)."""
        return self._entry.get_or_make(
            lambda: CacheEntry(self.cache_dir, self.remote.url, self.remote.identity)
        )

    def close(self) -> None:
        """Release this process's hold on the entry and the store's connections."""
        local, entry, flights = self._local.pop(), self._entry.pop(), self._flights.pop()
        if local is not None:
            local.close()
        if flights is not None:
            flights.close()
        if entry is not None:
            entry.close()
        self.remote.close()

    def _read(
        self,
        ranges: Sequence[tuple[int, int]],
        buffers: Sequence[Buffer],
        fetch: _Fetch,
        to_fetch: _Gaps,
    ) -> None:
        """Read the ranges from the entry, ``fetch``-ing the ``to_fetch`` it misses first."""
        entry = self.entry()
        gaps = to_fetch(entry.filled(), ranges) if not entry.complete else []
        if gaps:
            with self.flights().held(gaps):  # another process may be fetching them: wait
                gaps = to_fetch(entry.filled(), ranges) if not entry.complete else []
                if gaps and not self._fill(entry, gaps, fetch):
                    fetch(ranges, buffers)  # no room: read through
                    return
        self._local.get_or_make(lambda: LocalFile(entry.data_path)).read_ranges(ranges, buffers)

    def _fill(self, entry: CacheEntry, gaps: list[tuple[int, int]], fetch: _Fetch) -> bool:
        """Fetch the ``[start, end)`` gaps and store them; False when the cap leaves no room."""
        needed = sum(end - start for start, end in gaps)
        if self.cache_limit is not None and not make_room(self.cache_dir, needed, self.cache_limit):
            return False
        buffers = [np.empty(end - start, np.uint8) for start, end in gaps]
        fetch([(s, e - s) for s, e in gaps], buffers)
        self.fetched += needed
        entry.store([(s, b.tobytes()) for (s, _), b in zip(gaps, buffers, strict=True)])
        return True

    def __repr__(self) -> str:
        return f"CachedFile({self.name!r}, cache_dir={self.cache_dir!r})"


def _gaps(held: Intervals, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``[start, end)`` parts of ``ranges`` not held."""
    return missing(held, ranges)


def _whole_ranges(held: Intervals, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """As ``[start, end)``, each of ``ranges`` not wholly held."""
    return [(o, o + n) for o, n in ranges if n > 0 and missing(held, [(o, n)])]
