"""CachedFile: a remote object read through a node-local cache; a ``ByteSource``.

Every rank and DataLoader worker on a node that is given the same ``cache_dir`` shares one
entry per object version (``cache_dir.py``): a range already cached is read from the local
sparse file (``pread``, page cache); the missing parts of a request are fetched from the store
in one ``RemoteFile.read_ranges`` call (merged, concurrent), written at their own offsets and
recorded, and the whole request is then read locally. Processes that miss the same piece at
the same moment take turns (``single_flight.py``): one fetches it, the others then find it
cached, so the node sends one request where its ranks and workers would send one each. Nothing
is ever served from a piece that was not recorded as written.

The entry also keeps the chunk indexes walked from the object (``metadata.py``): the next
process loads them instead of walking the object's B-trees again. The metadata a node misses
is fetched once per job where ranks share a process group (``job_blocks.py``).

With ``cache_limit`` set, unused entries are evicted (least recently used first) to make room;
when the cap cannot be kept (the entries in use fill it), the request is read from the store
without caching it.

What is cached is checked before it is served, and the cache never fails a read:

* **Checksums.** Before this process serves bytes of a piece another process stored, it checks
  the piece's CRC-32 (once per piece; what it stored itself it trusts). A damaged piece is
  dropped from the entry, fetched again, and one warning names the entry: the cached copy was
  damaged, not the object.
* **A cache that cannot be used** (a folder or entry not ours or a symbolic link, a full or
  read-only disk, any failure to write or read it) turns the cache off for this object in this
  process: the read is served from the store (what was fetched already is used, not fetched
  again) and one warning names the folder and why.
* **No validator.** An object whose store gives no ETag, version id or Last-Modified cannot be
  told apart from a same-size replacement: its entry is private to this open (a nonce made
  here, which pickled copies and forked workers share), so its pieces serve every epoch of
  this open and no other open; one warning per URL says so.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from ...notices import say_once
from ...process import PerProcess
from ..byte_source import Buffer
from ..chunk_index import ChunkIndex
from ..identity import ObjectVersion
from .cache_dir import CacheEntry
from .eviction import make_room
from .fallback import CacheFailedError, Fetch, cache_side, serve_fetched
from .intervals import Intervals, covered, missing
from .metadata import MetadataStore
from .object_file import RemoteFile
from .owned import CacheRefusedError, reason
from .pieces import Row
from .single_flight import RangeLocks

__all__ = ["CachedFile"]

T = TypeVar("T")

_Gaps = Callable[[Intervals, Sequence[tuple[int, int]]], list[tuple[int, int]]]  # what to fetch
#: rounds of "check, drop what is damaged, fetch it again" before a read goes to the store
_TRIES = 3


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
        #: makes the entry private to this open when no validator tells versions apart
        self.nonce = None if _validated(remote.identity) else uuid.uuid4().hex
        self._entry: PerProcess[CacheEntry] = PerProcess()
        self._flights: PerProcess[RangeLocks] = PerProcess()
        self._off: PerProcess[str] = PerProcess()  # why the cache is off in this process
        #: bytes fetched from the store by this object in this process (for tests and docs)
        self.fetched = 0
        if self.nonce is not None:
            say_once(
                f"no validator: {self.name}",
                f"the server gives no ETag or Last-Modified for {self.name}: nothing tells a "
                "same-size replacement apart, so its cached pieces are not reused across opens",
            )

    @property
    def name(self) -> str:
        """The object's URL."""
        return self.remote.name

    @property
    def identity(self) -> ObjectVersion:
        """The object version the cache entry belongs to."""
        return self.remote.identity

    @property
    def cache_off(self) -> str | None:
        """Why the cache is off for this object in this process (None: it is on)."""
        return self._off.peek()

    def size(self) -> int:
        """Bytes in the object."""
        return self.remote.size()

    def read_ranges(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """Fill each buffer with its range of the object, from the cache where it has it.

        Raises:
            ValueError, FileChangedError, RemoteReadError, RemoteAccessError: as
                ``RemoteFile.read_ranges`` (never an error of the cache: see the module).
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
        entry = self.entry()
        if entry is None:
            return None
        return MetadataStore(entry.path, self.size()).load_index(key, shape, chunks)

    def save_index(
        self, key: str, shape: tuple[int, ...], chunks: tuple[int, ...], index: ChunkIndex
    ) -> None:
        """Keep dataset ``key``'s walked chunk index in the entry for the next process."""
        entry = self.entry()
        if entry is not None:
            MetadataStore(entry.path, self.size()).save_index(key, shape, chunks, index)

    def local_copy(self) -> str | None:
        """The cached file's path once it holds the whole object, checked; else None."""

        def whole(entry: CacheEntry) -> str | None:
            entry.filled()
            if not entry.complete or self._damaged(entry, [(0, self.size())]):  # (dropped)
                return None
            return entry.data_path

        return self._on_entry(whole, None)

    def cached_bytes(self) -> int:
        """Bytes of the object held by the cache now (0 when it is off in this process)."""
        return self._on_entry(lambda entry: covered(entry.filled()), 0)

    def entry(self) -> CacheEntry | None:
        """This process's hold on the cache entry (joined on first use); None: cache off."""
        if self._off.peek() is not None:
            return None
        try:
            return self._entry.get_or_make(
                lambda: CacheEntry(self.cache_dir, self.remote.url, self.identity, self.nonce)
            )
        except OSError as exc:  # not ours, not writable, full, ...: read from the store
            self._turn_off(exc)
            return None

    def close(self) -> None:
        """Release this process's hold on the entry and the store's connections."""
        self._release()
        self.remote.close()

    def _release(self) -> None:
        flights, entry = self._flights.pop(), self._entry.pop()
        if flights is not None:
            flights.close()
        if entry is not None:
            entry.close()

    def _read(
        self,
        ranges: Sequence[tuple[int, int]],
        buffers: Sequence[Buffer],
        fetch: Fetch,
        to_fetch: _Gaps,
    ) -> None:
        """Read the ranges through the entry; from the store when the cache cannot serve them."""
        dropped: list[tuple[int, int]] = []
        for _ in range(_TRIES):
            entry = self.entry()
            if entry is None:
                break
            try:
                again = self._read_through(entry, ranges, buffers, fetch, to_fetch, dropped)
            except CacheFailedError as failed:
                self._turn_off(failed.error)
                if failed.fetched:
                    serve_fetched(failed.fetched, ranges, buffers, fetch)
                    return
                break
            if again is None:
                return
            dropped = again
        fetch(ranges, buffers)  # off, or damaged again and again: the store's bytes

    def _read_through(
        self,
        entry: CacheEntry,
        ranges: Sequence[tuple[int, int]],
        buffers: Sequence[Buffer],
        fetch: Fetch,
        to_fetch: _Gaps,
        dropped: list[tuple[int, int]],
    ) -> list[tuple[int, int]] | None:
        """Serve the ranges from ``entry``, fetching what it misses (and ``dropped``) first.

        None when served; else the ``(offset, length)`` of the damaged pieces dropped instead
        (the caller tries again, and they are fetched whole).
        """
        with cache_side():
            gaps = _missing(entry, [*ranges, *dropped], to_fetch)
            flights = self._flights.get_or_make(lambda: RangeLocks(str(entry.path / "fetching")))
        if gaps:
            with flights.held(gaps):  # another process may be fetching them: wait
                with cache_side():
                    gaps = _missing(entry, [*ranges, *dropped], to_fetch)
                    room = self._room(gaps)
                if not room:
                    fetch(ranges, buffers)  # no room: read through
                    return None
                if gaps:
                    self._fill(entry, gaps, fetch)
        with cache_side():
            damaged = self._damaged(entry, ranges)
            if not damaged:
                entry.read(ranges, buffers)
        return [(start, end - start) for start, end, _ in damaged] or None

    def _fill(self, entry: CacheEntry, gaps: list[tuple[int, int]], fetch: Fetch) -> None:
        """Fetch the ``[start, end)`` gaps and store them in the entry."""
        buffers = [np.empty(end - start, np.uint8) for start, end in gaps]
        fetch([(s, e - s) for s, e in gaps], buffers)
        self.fetched += sum(end - start for start, end in gaps)
        fetched = [(start, b) for (start, _), b in zip(gaps, buffers, strict=True)]
        try:
            entry.store(fetched)
        except OSError as exc:  # full, not writable, ...: serve what was fetched, uncached
            raise CacheFailedError(exc, fetched) from exc

    def _room(self, gaps: list[tuple[int, int]]) -> bool:
        """Whether the gaps fit under the cap (evicting unused entries to make room)."""
        needed = sum(end - start for start, end in gaps)
        if not gaps or self.cache_limit is None:
            return True
        return make_room(self.cache_dir, needed, self.cache_limit)

    def _damaged(self, entry: CacheEntry, ranges: Sequence[tuple[int, int]]) -> list[Row]:
        """Check the pieces under ``ranges``; the damaged ones, dropped (and said once)."""
        damaged = entry.check(ranges)
        if damaged:
            start, end, _ = damaged[0]
            say_once(
                f"damaged: {entry.path}",
                f"the cached copy of {self.name} in cache entry {str(entry.path)!r} was "
                f"damaged: {len(damaged)} piece(s) (the first: bytes [{start}, {end})) no "
                "longer match the checksum stored with them, and are fetched again from the "
                "store. The object itself is not at fault; check the disk of the cache folder",
            )
        return damaged

    def _on_entry(self, use: Callable[[CacheEntry], T], otherwise: T) -> T:
        """``use(entry)``, or ``otherwise`` when the cache is off (or fails: then it is off)."""
        entry = self.entry()
        if entry is None:
            return otherwise
        try:
            return use(entry)
        except OSError as exc:
            self._turn_off(exc)
            return otherwise

    def _turn_off(self, error: OSError) -> None:
        """Read this object from the store in this process from now on; say why, once."""
        why = reason(error)
        self._off.set(why)
        path = error.filename if isinstance(error, CacheRefusedError) else self.cache_dir
        what = f"the cache folder {self.cache_dir!r}"
        if str(path) != self.cache_dir:
            what += f" holds {str(path)!r}, which"
        say_once(
            f"off: {path}: {why}",
            f"{what} {why}: {self.name} is read from the store, not cached, in this process",
        )
        # (the entry's files stay open until close: another thread may be reading through
        # them now, and a descriptor closed under it could be reused for another file)

    def __repr__(self) -> str:
        return f"CachedFile({self.name!r}, cache_dir={self.cache_dir!r})"


def _validated(version: ObjectVersion) -> bool:
    """Whether the store gave something that tells this version from a same-size one."""
    return bool(version.etag or version.version or version.modified)


def _missing(
    entry: CacheEntry, ranges: Sequence[tuple[int, int]], to_fetch: _Gaps
) -> list[tuple[int, int]]:
    """The ``[start, end)`` parts of ``ranges`` the entry must fetch."""
    return to_fetch(entry.filled(), ranges) if not entry.complete else []


def _gaps(held: Intervals, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``[start, end)`` parts of ``ranges`` not held."""
    return missing(held, ranges)


def _whole_ranges(held: Intervals, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """As ``[start, end)``, each of ``ranges`` not wholly held."""
    return [(o, o + n) for o, n in ranges if n > 0 and missing(held, [(o, n)])]
