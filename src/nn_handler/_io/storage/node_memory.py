"""Memory every process of a node maps by name: a file in ``/dev/shm``, freed by its last user.

A decoded dataset (``chunks/decoded.py``) lives in a ``Region``, so that the DataLoader workers
and the ranks of a node share one copy. A region is made whole before anyone sees it: its file
is created under a temporary name, given all its memory at once (``posix_fallocate``: a tmpfs
without room fails there, cleanly, never later with SIGBUS on a write), and then linked to its
name. A process that opens a region by name therefore finds it whole, or not at all.

Each map of a region records its process's pid in the region's table of users (under the
region's lock, ``flock`` on a descriptor of its own); ``release`` takes that entry out, and the
last live user unlinks the name (its memory goes when the last map of it goes). A region whose users
were all killed is unlinked by the next process that makes a region (``_collect_dead``), and by
every process that used a region, or built a dataset that may use one, when it ends (DataLoader
workers end without releasing theirs; the process that started them outlives them).

Where ``/dev/shm`` (``NN_HANDLER_SHM_DIR``) is missing, not writable or too small (a container's
64 MiB), ``anonymous_region`` gives memory shared only with processes forked afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import multiprocessing
import os
import threading
from collections.abc import Iterator
from multiprocessing.util import Finalize
from typing import Any

import numpy as np

from ..process import process_alive, process_generation
from .byte_source import shared_file_memory, shared_memory

__all__ = [
    "SHM_DIR_ENV",
    "Region",
    "anonymous_region",
    "node_regions_bytes",
    "open_region",
    "shm_dir",
    "shm_room",
    "sweep_at_exit",
]

SHM_DIR_ENV = "NN_HANDLER_SHM_DIR"
_PREFIX = "nn_handler-"
_MAGIC = b"NNHREG01"
_USERS = 1024  # pids a region records (a node's workers and ranks that map it)
_HEADER = 8 + 8 + 4 * _USERS  # magic, payload bytes, users
_FORK = multiprocessing.get_context("fork")
_PAYLOAD_AT = 64 * 1024  # past the header, page-aligned for every page size
_sweep_arranged = -1  # the process generation that arranged its sweep at exit


def shm_dir() -> str:
    """Where node-shared regions live: ``NN_HANDLER_SHM_DIR``, else ``/dev/shm``."""
    return os.environ.get(SHM_DIR_ENV, "").strip() or "/dev/shm"


def shm_room() -> int:
    """Bytes a new region may take in ``shm_dir()`` now (0 when it is missing or read-only)."""
    folder = shm_dir()
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        return 0
    st = os.statvfs(folder)
    return int(st.f_bavail * st.f_frsize)


def node_regions_bytes() -> int:
    """Bytes held by this node's regions (every live region of every process)."""
    total = 0
    for path in _region_paths():
        with contextlib.suppress(OSError):
            total += os.stat(path).st_size
    return total


class Region:
    """A named region of node memory, mapped by this process (see the module docstring).

    Args:
        path: Its file.
        data: The map of the whole file.
    """

    node_wide = True

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        self._data = data
        self._thread_lock = threading.Lock()
        self.payload: np.ndarray[Any, Any] = np.frombuffer(
            data, np.uint8, len(data) - _PAYLOAD_AT, _PAYLOAD_AT
        )
        self._users = np.frombuffer(data, np.int32, _USERS, 16)
        self._pid = os.getpid()  # the user this map records (each process maps a region itself)
        self._born = process_generation()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the region's lock (every process, every thread); it dies with its holder."""
        with self._thread_lock, _flocked(self.path) as _:
            yield

    def join(self) -> None:
        """Record this process as a user (before it first reads the region)."""
        with self.lock():
            _add_user(self._users, self._pid)

    def release(self) -> None:
        """This process no longer uses the region; the last live user unlinks its name.

        Nothing in a forked child (an inherited map is not the child's entry to take out).
        """
        if process_generation() != self._born:
            return
        with contextlib.suppress(OSError), self.lock():
            users = self._users
            mine = np.flatnonzero(users == self._pid)
            if mine.size:
                users[mine[0]] = 0  # one entry per map of it: this process may hold others
            if not any(process_alive(int(p)) for p in users[users != 0].tolist()):
                os.unlink(self.path)


class _TreeRegion:
    """Anonymous memory shared with processes forked later (``anonymous_region``)."""

    node_wide = False

    def __init__(self, nbytes: int) -> None:
        self._data = shared_memory(nbytes)
        self.payload: np.ndarray[Any, Any] = np.frombuffer(self._data, np.uint8, nbytes)
        self._lock = _FORK.Lock()  # (fork's semaphores are unlinked at once: no tracker)

    def lock(self) -> Any:
        """The lock every forked process shares."""
        return self._lock

    def join(self) -> None:
        """Nothing to record: the memory goes with the last process that maps it."""

    def release(self) -> None:
        """Nothing to do (see ``join``)."""


def anonymous_region(nbytes: int) -> _TreeRegion:
    """``nbytes`` of zeroed memory shared with processes forked after this call."""
    return _TreeRegion(nbytes)


def open_region(name: str, nbytes: int) -> Region | None:
    """The region ``name`` of ``nbytes`` payload bytes, made if needed; None when no room.

    This process is recorded as a user (``Region.release`` when done).

    Raises:
        OSError: the region exists with another size (a different dataset under its name).
    """
    path = os.path.join(shm_dir(), f"{_PREFIX}{name}")
    region = _open_existing(path, nbytes)
    if region is None:
        _collect_dead()
        region = _create(path, nbytes)
    if region is not None:
        region.join()
        sweep_at_exit()
    return region


def sweep_at_exit() -> None:
    """Unlink the regions no live process uses when this process ends (arranged once each).

    Runs after multiprocessing has ended the process's daemonic children (DataLoader workers:
    they end without releasing what they mapped) and after this process's own releases: a run
    that closed nothing leaves no region behind.
    """
    global _sweep_arranged
    if _sweep_arranged != process_generation():
        _sweep_arranged = process_generation()
        Finalize(None, _collect_dead, exitpriority=-2)


def _open_existing(path: str, nbytes: int) -> Region | None:
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        data = shared_file_memory(fd, size) if size == _PAYLOAD_AT + nbytes else None
        if data is None or data[:16] != _MAGIC + nbytes.to_bytes(8, "little"):
            raise OSError(errno.EEXIST, f"{path} is not a region of {nbytes} bytes")
        return Region(path, data)
    finally:
        os.close(fd)


def _create(path: str, nbytes: int) -> Region | None:
    """Make the region under a temporary name, whole, and link it to ``path``."""
    temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    size = _PAYLOAD_AT + nbytes
    try:
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return None  # not writable
    try:
        os.posix_fallocate(fd, 0, size)
        data = shared_file_memory(fd, size)
        data[:16] = _MAGIC + nbytes.to_bytes(8, "little")
        os.link(temp, path)
    except FileExistsError:  # another process made it meanwhile: use theirs
        return _open_existing(path, nbytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EOPNOTSUPP):
            return None
        raise
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
    return Region(path, data)


def _add_user(users: np.ndarray[Any, Any], pid: int) -> None:
    free = np.flatnonzero(users == 0)
    if free.size == 0:  # a full table: reuse the slot of a process that is gone
        gone = [k for k, p in enumerate(users.tolist()) if not process_alive(p)]
        if not gone:
            return  # every slot alive: this process just never unlinks the name
        free = np.array(gone)
    users[int(free[0])] = pid


def _region_paths() -> list[str]:
    folder = shm_dir()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if n.startswith(_PREFIX) and "." not in n]


def _collect_dead() -> None:
    """Unlink regions whose recorded users are all gone, and temporary files of dead makers."""
    for path in _region_paths():
        with contextlib.suppress(OSError, ValueError), _flocked(path) as fd:
            with shared_file_memory(fd, _HEADER, writable=False) as head:
                if head[:8] != _MAGIC:
                    continue
                users = np.frombuffer(head, np.int32, _USERS, 16).tolist()
            if not any(process_alive(p) for p in users if p):
                os.unlink(path)
    folder = shm_dir()
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            parts = name.split(".")
            ours = name.startswith(_PREFIX) and name.endswith(".tmp") and len(parts) == 4
            if ours and parts[1].isdigit() and not process_alive(int(parts[1])):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


@contextlib.contextmanager
def _flocked(path: str) -> Iterator[int]:
    """A new descriptor of ``path`` holding ``flock(LOCK_EX)`` (released when closed)."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)
