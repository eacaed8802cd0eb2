"""One object's entry in a node-local cache directory: its pieces, checked before use.

An entry is a folder named by a hash of the URL and the object's version (size, ETag, version
id, date), so pieces of an old version are never served for a new one:

* ``data``: a sparse file of the object's size; every byte cached lies at its own offset;
* ``pieces.npy``: the pieces of ``data`` that hold the object's bytes, each with the CRC-32 of
  its bytes (``pieces.py``), replaced atomically after the bytes are written;
* ``object.json``: the URL and version, for people looking at the directory;
* ``lock``: every process using the entry holds a shared ``flock`` on it; eviction takes it
  exclusively (without waiting), so an entry in use is never removed (``eviction.py``);
  ``filled.lock`` serialises the read-modify-write of ``pieces.npy`` between processes.

**Checked before use.** Before bytes of a piece are served, this process checks the piece's
checksum, once per piece (a piece it wrote itself counts as checked): a damaged piece (a bad
disk, a byte flipped by anything) is dropped from the record under the lock and reported to
the caller, who fetches it again. The entry, its files and the cache folder are used only if
they are ours (``owned.py``): opened without following symbolic links, created private.

**Private entries.** An object whose store gives no validator (no ETag, version id or date)
cannot be told apart from a same-size replacement, so its pieces must not outlive one open:
it gets an entry of its own (``private-<hash of the URL, version and a nonce>``; the nonce is
made by the ``CachedFile``, so its forked and spawned workers share it). It is removed when
its last holder closes it, or by the next process that opens an object in the cache once no
process holds it (its holders killed, ``eviction.sweep_private``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...notices import say_once
from ...platform import FLOCK, OWNERS
from ..byte_source import Buffer, read_at
from ..identity import ObjectVersion
from . import pieces
from .eviction import PRIVATE, evict, sweep_private
from .intervals import Intervals, empty
from .owned import FOLDER_MODE, open_file, open_folder, open_own_root
from .pieces import Pieces, Row

if FLOCK:
    import fcntl

__all__ = ["NODE_CACHE", "CacheEntry", "entry_name"]

#: a node cache works here: locks that die with their holder (``flock``) and files checked for
#: their owner, opened inside their folder without following links (POSIX; not Windows)
NODE_CACHE = FLOCK and OWNERS

_MAKE_TRIES = 10


def entry_name(url: str, version: ObjectVersion, nonce: str | None = None) -> str:
    """The entry's folder name: a hash of the URL and the version (and a private nonce)."""
    key = json.dumps([url, version.as_record(), nonce], sort_keys=True).encode()
    digest = hashlib.sha256(key).hexdigest()[:40]
    return digest if nonce is None else f"{PRIVATE}{digest}"


class CacheEntry:
    """One object's entry in this process: its lock held shared, its files opened.

    Args:
        root: The cache folder (created ``0o700`` if missing).
        url: The object.
        version: The object's version (the entry holds its bytes only).
        nonce: Makes the entry private to the open that made the nonce (None: shared).

    Raises:
        CacheRefusedError: the cache folder or the entry is not ours (a link, another user's).
        OSError: the entry cannot be made (no space left, not writable, ...).
    """

    def __init__(
        self, root: str, url: str, version: ObjectVersion, nonce: str | None = None
    ) -> None:
        self.root = root
        self.name = entry_name(url, version, nonce)
        self.path = Path(root) / self.name
        self.size = version.size
        self.private = nonce is not None
        self._dir_fd = self._lock_fd = self._data_fd = -1
        try:
            self._open(url, version)
        except BaseException:
            self.close()  # (a private entry no one else holds goes with it)
            raise
        self._pieces, self._held = pieces.no_pieces(), empty()
        self._seen: tuple[int, int] = (-1, -1)
        self._checked: set[Row] = set()  # pieces whose checksum this process has checked

    @property
    def data_path(self) -> str:
        """The sparse file of the object's bytes."""
        return str(self.path / "data")

    def _open(self, url: str, version: ObjectVersion) -> None:
        root_fd = open_own_root(self.root)
        try:
            sweep_private(self.root, keep=self.name)
            self._dir_fd, self._lock_fd = self._join(root_fd)
        finally:
            os.close(root_fd)
        with self._locked():
            self._data_fd = self._make_data(url, version)
        os.close(self._file("fetching", os.O_RDWR | os.O_CREAT))  # (single_flight's locks)
        os.utime(self._lock_fd)  # "used now", for LRU eviction

    def _join(self, root_fd: int) -> tuple[int, int]:
        """Make the entry if needed and hold its lock shared (again if evicted meanwhile)."""
        for _ in range(_MAKE_TRIES):
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.name, FOLDER_MODE, dir_fd=root_fd)
            folder = open_folder(self.name, root_fd, str(self.path))
            try:
                lock = open_file("lock", os.O_RDWR | os.O_CREAT, folder, f"{self.path}/lock")
            except BaseException:
                os.close(folder)
                raise
            fcntl.flock(lock, fcntl.LOCK_SH)
            with contextlib.suppress(FileNotFoundError):
                now = os.stat(self.name, dir_fd=root_fd, follow_symlinks=False)
                if os.path.samestat(now, os.fstat(folder)):
                    return folder, lock
            os.close(lock)  # evicted between our mkdir and our lock: make it again
            os.close(folder)
        raise OSError(f"cache entry {str(self.path)!r} keeps disappearing (evicted under us)")

    def _make_data(self, url: str, version: ObjectVersion) -> int:
        try:
            fd = self._file("data", os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            fd = self._file("data", os.O_RDWR)
            if os.fstat(fd).st_size != version.size:  # cut short: what is gone fails its check
                os.ftruncate(fd, version.size)
            return fd
        try:
            os.ftruncate(fd, version.size)  # sparse: holes take no room
            about = json.dumps({"url": url, "version": version.as_record()}, indent=1)
            info = self._file("object.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            with os.fdopen(info, "w") as f:
                f.write(about)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def filled(self) -> Intervals:
        """The ranges of ``data`` that hold the object's bytes (re-read when another wrote)."""
        if not self.complete:
            self._reload()
        return self._held

    def held_pieces(self) -> Pieces:
        """The pieces recorded (as last read): ``[start, end, crc32]`` rows."""
        return self._pieces

    @property
    def complete(self) -> bool:
        """True when every byte of the object is cached (``data`` is then a local copy)."""
        held = self._held
        return held.shape[0] == 1 and int(held[0, 0]) == 0 and int(held[0, 1]) == self.size

    def store(self, written: Sequence[tuple[int, Buffer]]) -> None:
        """Write ``(offset, bytes)`` pieces into ``data``, then record them with checksums.

        Raises:
            OSError: writing failed (no space left, ...): nothing new is recorded.
        """
        rows: list[Row] = []
        for offset, data in written:
            view, done = _bytes_of(data), 0
            while done < view.nbytes:
                done += os.pwrite(self._data_fd, view[done:], offset + done)
            rows += pieces.cut(offset, view)
        with self._locked():
            self._reload(force=True)
            self._record(pieces.with_added(self._pieces, rows))
        self._checked.update(rows)  # written by us: nothing to check

    def check(self, ranges: Sequence[tuple[int, int]]) -> list[Row]:
        """Check the pieces under ``ranges`` not checked yet; drop and return the damaged ones.

        A piece whose bytes no longer match its checksum is removed from the record (under
        the lock, after a second look), so this and every other process fetches it again.
        """
        suspects = [
            row
            for row in map(tuple, pieces.touching(self._pieces, ranges).tolist())
            if row not in self._checked and not self._intact(row)
        ]
        if not suspects:
            return []
        with self._locked():
            self._reload(force=True)
            damaged = [row for row in suspects if not self._intact(row)]
            if damaged:
                self._record(pieces.removed(self._pieces, damaged))
        return damaged

    def read(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """Fill each buffer with its range of ``data`` (check the pieces first: ``check``).

        Raises:
            OSError: the file could not be read, or ends early (it was cut short under us).
        """
        read_at(self._data_fd, self.data_path, ranges, buffers)

    def close(self, remove: bool = True) -> None:
        """Close the files and release the lock; a private entry no one holds is removed."""
        for fd in (self._data_fd, self._dir_fd, self._lock_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._data_fd = self._dir_fd = self._lock_fd = -1
        if remove and self.private:
            evict(self.root, self.name)

    def _intact(self, row: Row) -> bool:
        """True when piece ``row``'s bytes match its checksum (remembered when they do)."""
        start, end, crc = row
        data = bytearray(end - start)
        try:
            read_at(self._data_fd, self.data_path, [(start, end - start)], [data])
        except OSError:  # cut short: as damaged
            return False
        if zlib.crc32(data) != crc:
            return False
        self._checked.add(row)
        return True

    def _reload(self, force: bool = False) -> None:
        """Read the record again when another process replaced it (or when ``force``)."""
        try:
            st = os.stat(pieces.RECORD, dir_fd=self._dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if (st.st_mtime_ns, st.st_ino) == self._seen and not force:
            return
        fd = self._file(pieces.RECORD, os.O_RDONLY)
        st = os.fstat(fd)
        loaded = pieces.load(fd, self.size)  # (closes fd)
        if loaded is None:
            say_once(
                f"record:{self.path}",
                f"the record of cached pieces in cache entry {str(self.path)!r} was damaged "
                "(it does not load as a record of this object): its pieces are fetched again "
                "from the store",
            )
        self._pieces = pieces.no_pieces() if loaded is None else loaded
        self._held = pieces.holdings(self._pieces)
        self._seen = (st.st_mtime_ns, st.st_ino)

    def _record(self, held: Pieces) -> None:
        """Replace the record with ``held`` (the lock held)."""
        pieces.save(self._dir_fd, str(self.path), held)
        st = os.stat(pieces.RECORD, dir_fd=self._dir_fd, follow_symlinks=False)
        self._pieces, self._held = held, pieces.holdings(held)
        self._seen = (st.st_mtime_ns, st.st_ino)

    def _file(self, name: str, flags: int) -> int:
        return open_file(name, flags, self._dir_fd, f"{self.path}/{name}")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = self._file("filled.lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _bytes_of(buffer: Buffer) -> memoryview:
    """``buffer`` as a flat view of bytes (C-contiguous buffers only)."""
    target: Any = buffer  # (numpy arrays export the buffer protocol; the stubs do not say so)
    return memoryview(target).cast("B")
