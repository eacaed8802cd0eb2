"""One object's entry in a node-local cache directory, and evicting entries over the cap.

An entry is a directory named by a hash of the URL and the object's version (size, ETag,
version id, date), so pieces of an old version are never served for a new one:

* ``data``: a sparse file of the object's size; every byte cached lies at its own offset;
* ``filled.npy``: the ranges of ``data`` that hold the object's bytes (``intervals.py``),
  replaced atomically (written aside, then renamed) after the bytes are written;
* ``object.json``: the URL and version, for people looking at the directory;
* ``lock``: every process using the entry holds a shared ``flock`` on it; eviction takes it
  exclusively (without waiting), so an entry in use is never evicted; ``filled.lock``
  serialises the read-modify-write of ``filled.npy`` between processes.

Eviction (``make_room``) removes the least recently used entries not in use until the cache
holds at most ``limit`` bytes (counted as blocks on disk: sparse holes are free).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..identity import ObjectVersion
from .intervals import Intervals, empty, union

__all__ = ["CacheEntry", "entry_name", "make_room"]

_TRASH = ".evicted-"


def entry_name(url: str, version: ObjectVersion) -> str:
    """The entry's directory name: a hash of the URL and the version."""
    key = json.dumps([url, version.as_record()], sort_keys=True).encode()
    return hashlib.sha256(key).hexdigest()[:40]


class CacheEntry:
    """One object's entry in this process: its lock held shared, its files opened."""

    def __init__(self, root: str, url: str, version: ObjectVersion) -> None:
        self.root = root
        self.path = Path(root) / entry_name(url, version)
        self.size = version.size
        self._lock_fd = self._join(url, version)
        self.data_path = str(self.path / "data")
        self._data_fd = os.open(self.data_path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        self._record = self.path / "filled.npy"
        self._seen: tuple[int, int] = (-1, -1)
        self._filled = empty()

    def _join(self, url: str, version: ObjectVersion) -> int:
        """Create the entry if needed and hold its lock shared (retried if evicted meanwhile)."""
        for _ in range(10):
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                if os.path.samestat(os.fstat(fd), os.stat(self.path / "lock")):
                    with self._locked():
                        self._create(url, version)
                    os.utime(fd)  # "used now", for LRU eviction
                    return fd
            except FileNotFoundError:
                pass  # evicted between our mkdir and our lock: make it again
            os.close(fd)
        raise OSError(f"cache entry {str(self.path)!r} keeps disappearing (evicted under us)")

    def _create(self, url: str, version: ObjectVersion) -> None:
        data = self.path / "data"
        if not data.exists():
            with open(data, "wb") as f:
                f.truncate(version.size)
            about = {"url": url, "version": version.as_record()}
            (self.path / "object.json").write_text(json.dumps(about, indent=1))

    def filled(self) -> Intervals:
        """The ranges of ``data`` that hold the object's bytes (re-read when another wrote)."""
        if self.complete:
            return self._filled
        try:
            st = os.stat(self._record)
        except FileNotFoundError:
            return self._filled
        if (st.st_mtime_ns, st.st_ino) != self._seen:
            self._filled = np.load(self._record, allow_pickle=False)
            self._seen = (st.st_mtime_ns, st.st_ino)
        return self._filled

    @property
    def complete(self) -> bool:
        """True when every byte of the object is cached (``data`` is then a local copy)."""
        held = self._filled
        return held.shape[0] == 1 and int(held[0, 0]) == 0 and int(held[0, 1]) == self.size

    def store(self, pieces: list[tuple[int, bytes]]) -> None:
        """Write ``(offset, bytes)`` pieces into ``data``, then record them as filled."""
        for offset, data in pieces:
            view, done = memoryview(data), 0
            while done < view.nbytes:
                done += os.pwrite(self._data_fd, view[done:], offset + done)
        with self._locked():
            held = union(self.filled(), [(o, o + len(d)) for o, d in pieces])
            spare = self.path / f".filled-{uuid.uuid4().hex}.npy"
            np.save(spare, held)
            os.replace(spare, self._record)
            self._filled = held

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.path / "filled.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close the files and release the shared lock (the entry may then be evicted)."""
        for fd in (self._data_fd, self._lock_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._data_fd = self._lock_fd = -1


def make_room(root: str, needed: int, limit: int) -> bool:
    """Evict unused entries, least recently used first, until ``needed`` more bytes fit.

    Returns whether they fit now (entries in use are never evicted, so they may not).
    """
    entries = []
    for child in Path(root).iterdir():
        if child.name.startswith(_TRASH):
            shutil.rmtree(child, ignore_errors=True)
        elif (child / "data").exists():
            with contextlib.suppress(FileNotFoundError):
                used = max(os.stat(child / "lock").st_mtime, os.stat(child / "data").st_mtime)
                entries.append((used, child, os.stat(child / "data").st_blocks * 512))
    total = sum(size for _, _, size in entries)
    for _, child, size in sorted(entries):
        if total + needed <= limit:
            break
        if _evict(root, child):
            total -= size
    return total + needed <= limit


def _evict(root: str, entry: Path) -> bool:
    try:
        fd = os.open(entry / "lock", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # in use by some process
        os.close(fd)
        return False
    trash = Path(root) / f"{_TRASH}{uuid.uuid4().hex}"
    try:
        os.rename(entry, trash)  # gone at once for everyone; then deleted at leisure
    finally:
        os.close(fd)
    shutil.rmtree(trash, ignore_errors=True)
    return True
