"""Removing cache entries: least recently used ones over the cap, and those of dead opens.

Every process that uses an entry holds a shared ``flock`` on its ``lock`` file (the kernel
releases it when the process exits or is killed); an entry is removed only by a process that
takes that lock exclusively without waiting, so an entry in use is never removed. It is renamed
away first (gone at once for everyone), then deleted at leisure.

* ``make_room`` removes the least recently used entries not in use until the cache holds at most
  ``limit`` bytes (counted as blocks on disk: sparse holes are free).
* ``sweep_private`` removes the private entries (``private-…``: one open's pieces of an object no
  validator tells apart, ``cache_dir.py``) that no process holds any more: what a killed job
  left is removed by the next process that opens an object in the cache.

Nothing here follows a symbolic link or touches what is not ours (``owned.py``): another
user's entry is neither counted, opened nor removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from ...platform import FLOCK
from .owned import is_ours, open_file, open_folder

if FLOCK:  # (else the node cache is off: see cache_dir.NODE_CACHE)
    import fcntl

__all__ = ["PRIVATE", "evict", "make_room", "sweep_private"]

PRIVATE = "private-"
_TRASH = ".evicted-"
_VERSIONS = ".versions"
#: a private entry without a lock file (its maker died between two system calls) older than
#: this is removed: a live maker adds the lock within microseconds
_LOCKLESS_S = 60.0


def make_room(root: str, needed: int, limit: int) -> bool:
    """Evict unused entries, least recently used first, until ``needed`` more bytes fit.

    Returns whether they fit now (entries in use are never evicted, so they may not).
    """
    entries = []
    for name in _ours(root):
        if name.startswith(_TRASH):
            shutil.rmtree(Path(root) / name, ignore_errors=True)
        elif (found := _usage(Path(root) / name)) is not None:
            entries.append((found[0], name, found[1]))
    total = sum(size for _, _, size in entries)
    for _, name, size in sorted(entries):
        if total + needed <= limit:
            break
        if evict(root, name):
            total -= size
    return total + needed <= limit


def sweep_private(root: str, keep: str) -> None:
    """Remove the private entries no process holds (``keep``, the caller's own, aside)."""
    for name in _ours(root):
        if name.startswith(PRIVATE) and name != keep:
            evict(root, name, lockless_after_s=_LOCKLESS_S)


def evict(root: str, name: str, lockless_after_s: float | None = None) -> bool:
    """Remove entry ``name`` of ``root`` unless a process holds it; True when removed.

    ``lockless_after_s``: remove an entry that has no lock file once it is that old (seconds).
    """
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        folder = open_folder(name, root_fd, str(Path(root) / name))
    except OSError:  # gone meanwhile, or not ours: never touched
        os.close(root_fd)
        return False
    try:
        with _exclusive(folder, str(Path(root) / name), lockless_after_s) as unused:
            return unused and _remove(root_fd, name, folder)
    finally:
        os.close(folder)
        os.close(root_fd)


@contextlib.contextmanager
def _exclusive(folder: int, where: str, lockless_after_s: float | None) -> Iterator[bool]:
    """True while this process holds the entry's lock exclusively (no process uses it)."""
    lock, unused = -1, False
    try:
        lock = open_file("lock", os.O_RDWR, folder, f"{where}/lock")
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while a process holds it
        unused = True
    except FileNotFoundError:
        age = time.time() - os.fstat(folder).st_mtime
        unused = lockless_after_s is not None and age > lockless_after_s
    except OSError:  # held by some process, or not ours
        pass
    try:
        yield unused
    finally:
        if lock >= 0:
            os.close(lock)


def _remove(root_fd: int, name: str, folder: int) -> bool:
    """Rename the locked entry away (if it is still the one at ``name``), then delete it."""
    trash = f"{_TRASH}{uuid.uuid4().hex}"
    try:
        now = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        if not os.path.samestat(now, os.fstat(folder)):
            return False  # evicted and made again meanwhile: the new one is another's
        os.rename(name, trash, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    except OSError:
        return False
    shutil.rmtree(trash, ignore_errors=True, dir_fd=root_fd)
    return True


def _ours(root: str) -> list[str]:
    """The names in ``root`` that are folders of ours (not links), ``.versions`` aside."""
    names = []
    with contextlib.suppress(OSError), os.scandir(root) as found:
        for child in found:
            with contextlib.suppress(OSError):
                st = child.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and is_ours(st) and child.name != _VERSIONS:
                    names.append(child.name)
    return names


def _usage(entry: Path) -> tuple[float, int] | None:
    """When the entry was last used and the bytes its ``data`` holds; None: not an entry."""
    try:
        data = os.stat(entry / "data", follow_symlinks=False)
        lock = os.stat(entry / "lock", follow_symlinks=False)
    except OSError:
        return None
    if not all(stat.S_ISREG(s.st_mode) and is_ours(s) for s in (data, lock)):
        return None
    return max(lock.st_mtime, data.st_mtime), data.st_blocks * 512
