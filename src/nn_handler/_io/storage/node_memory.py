"""Memory the processes of a node map by name: files in the user's own folder of ``/dev/shm``.

A decoded dataset (``chunks/decoded.py``) lives in a ``Region``, so that the DataLoader workers
and the ranks of a node share one copy. On a shared node a region is trusted only when it
proves what it is:

* **Only the user's own**, in a folder only the user can enter (``shm_folder.py``).
* **Made whole, then named.** A region is made nameless (``O_TMPFILE``), given its header and
  the memory of its first ``reserve`` bytes, and only then linked to its name. The rest is given
  memory as it is filled (``Region.reserve`` before each write: a tmpfs without room fails
  there, cleanly, never later with SIGBUS on a write), so that making a 2 GB region costs no
  more than a small one. The header holds
  what the region is for (a *description*: the source file's identity, the dataset, the
  layout); a region whose header is not exactly what the opener expects is never used.
* **Users the kernel vouches for.** Each process that maps a region holds a shared lock on its
  byte ``USERS`` (an OFD lock, ``locks.py``: it dies with the process, whatever kills it, and
  means the same across pid namespaces, where a pid does not). The process that builds a
  dataset *pins* its region's name while the dataset lives there (``pin``), so DataLoader
  workers that end with each epoch find it again the next. A region that no one uses or pins
  is unlinked by its last user, or by a sweep (``region_sweep.py``); tmpfs frees its memory
  once the last map goes too.
* **One maker.** Makers of one name take turns (``shm_folder.turn``), so two processes starting
  together share one region instead of each giving up for lack of room.

Each region's byte ``_MUTEX`` is its lock for the state its users keep in it (``Region.lock``);
the bytes from ``_FILLS`` on say who fills what (``Region.hold_fill``).

Named regions need Linux (``O_TMPFILE``, OFD locks). Elsewhere, and where the user's folder is
missing, not the user's or too small (a container's 64 MiB), ``anonymous_region`` gives memory
shared only with processes forked afterwards (this process's own where nothing forks: Windows).
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validate import format_bytes
from ..platform import FORK, off
from ..process import process_generation, started_process_alive
from . import locks
from .byte_source import shared_file_memory, shared_memory
from .region_sweep import hold, sweep_name, sweep_regions
from .shm_folder import (
    NAMED,
    PINS,
    USERS,
    NoRoomError,
    RegionError,
    folder,
    open_file,
    open_locks,
    region_names,
    same_file,
    shm_dir,
    shm_room,
    turn,
    unlink_if_unused,
    user_folder,
)

__all__ = [
    "NAMED",
    "Pin",
    "Region",
    "RegionInfo",
    "anonymous_region",
    "list_regions",
    "node_regions_bytes",
    "open_region",
    "pin",
]

_MAGIC = b"NNHREG02"
_HEAD = struct.Struct("<8sQI")  # magic, payload bytes, description bytes; then the description
_PAYLOAD_AT = 64 * 1024  # past the header, page-aligned for every page size
_DESCRIPTION_MAX = _PAYLOAD_AT - _HEAD.size
_MUTEX, _FILLS = 1, 1 << 32  # lock bytes past ``USERS`` (a lock may lie past a file's end)
_MAKE_WAIT_S = 120.0  # longest wait for another maker of the same region (allocating GBs)
_FORK = multiprocessing.get_context("fork") if FORK else None
_NO_ROOM = (errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EDQUOT)


class Region:
    """A named region of node memory, mapped and joined by this process (module docstring).

    Args:
        path: Its name, for messages.
        fd: This process's open file description of it (holding the users' lock).
        data: The map of the whole file.
    """

    node_wide = True
    releases_first = False

    def __init__(self, path: str, fd: int, data: Any, *, made: bool = False) -> None:
        self.path = self.where = path
        self.made = made  # this process made it (not joined it)
        self._fd = fd
        self._data = data
        self._thread_lock = threading.Lock()
        self._filling: set[int] = set()  # segments this process's threads fill now
        self.payload: np.ndarray[Any, Any] = np.frombuffer(
            data, np.uint8, len(data) - _PAYLOAD_AT, _PAYLOAD_AT
        )
        self.born = process_generation()
        self._joined = True
        hold(self)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the region's lock (every process, every thread); it dies with its holder."""
        with self._thread_lock:
            locks.lock(self._fd, locks.WRITE, _MUTEX, wait=True)
            try:
                yield
            finally:
                locks.unlock(self._fd, _MUTEX)

    def reserve(self, offset: int, length: int) -> None:
        """Give payload bytes ``[offset, offset + length)`` their memory before they are written.

        Raises:
            NoRoomError: the shared memory has no room for them (nothing was written).
        """
        try:
            os.posix_fallocate(self._fd, _PAYLOAD_AT + offset, length)
        except OSError as exc:
            if exc.errno in _NO_ROOM:
                raise NoRoomError(_no_room(length, "more of a region")) from exc
            raise

    def hold_fill(self, segment: int) -> None:
        """Say that this process fills ``segment`` (under ``lock``), until ``drop_fill``."""
        self._filling.add(segment)
        locks.lock(self._fd, locks.WRITE, _FILLS + segment)  # (held still by a stalled filler)

    def drop_fill(self, segment: int) -> None:
        """This process no longer fills ``segment`` (under ``lock``)."""
        if segment in self._filling:
            self._filling.discard(segment)
            locks.unlock(self._fd, _FILLS + segment)

    def filler_alive(self, segment: int, pid: int, started: int) -> bool:
        """Whether the filler of ``segment`` still runs: its lock says (under ``lock``)."""
        return segment in self._filling or locks.held_elsewhere(self._fd, _FILLS + segment)

    def release(self) -> None:
        """This process no longer uses the region; the last user unlinks its name.

        Nothing in a forked child (an inherited map is not the child's to release).
        """
        if process_generation() != self.born or self._fd < 0:
            return
        self.leave()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1

    def leave(self) -> None:
        """Stop being a user (the map stays readable here); unlink the name if the last one."""
        if not self._joined or process_generation() != self.born or self._fd < 0:
            return
        self._joined = False
        locks.unlock(self._fd, USERS)
        unlink_if_unused(self._fd, self.path)

    def forget_inherited(self) -> None:
        """In a forked child: the descriptor is the parent's (its locks are the parent's)."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd, self._joined = -1, False


class _TreeRegion:
    """Anonymous memory shared with processes forked later (``anonymous_region``)."""

    node_wide = False
    made = True  # by the process that built the dataset; its forked children join it
    where = "memory shared with forked workers"

    def __init__(self, nbytes: int) -> None:
        self.born = process_generation()
        self._data = shared_memory(nbytes)
        self.payload: np.ndarray[Any, Any] = np.frombuffer(self._data, np.uint8, nbytes)
        # (fork's semaphores are unlinked at once: no tracker); no fork: this process's alone
        self._lock: Any = threading.Lock() if _FORK is None else _FORK.Lock()

    def lock(self) -> Any:
        """The lock every forked process shares."""
        return self._lock

    def reserve(self, offset: int, length: int) -> None:
        """Nothing to reserve: anonymous memory is allocated where it is written."""

    def hold_fill(self, segment: int) -> None:
        """Nothing to hold: the filler is known by its pid and start time."""

    def drop_fill(self, segment: int) -> None:
        """Nothing to drop (see ``hold_fill``)."""

    def filler_alive(self, segment: int, pid: int, started: int) -> bool:
        """Whether the process that started at ``started`` as ``pid`` still runs."""
        return started_process_alive(pid, started or None)

    def release(self) -> None:
        """Nothing to do: the memory goes with the last process that maps it."""


def anonymous_region(nbytes: int) -> _TreeRegion:
    """``nbytes`` of zeroed memory shared with processes forked after this call."""
    if not FORK:
        off("fork", "a decoded copy serves this process and its threads, not worker processes")
    return _TreeRegion(nbytes)


class Pin:
    """This process keeps region ``path`` while it holds this (``pin``; ``release`` when done).

    Args:
        path: The region's path (it need not exist yet).
        fd: This process's own open file description of the folder's ``.locks``.
    """

    releases_first = True

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._born = process_generation()
        hold(self)

    def release(self) -> None:
        """Let the region go; unlink it if no process uses it (nothing in a forked child)."""
        if self._fd < 0 or process_generation() != self._born:
            return
        self.leave()
        with contextlib.suppress(OSError):
            sweep_name(self.path)

    def leave(self) -> None:
        """Drop the pin (closing the descriptor drops its lock)."""
        if self._fd >= 0 and process_generation() == self._born:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def forget_inherited(self) -> None:
        """In a forked child: the descriptor is the parent's (so is the pin)."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1


def pin(name: str) -> Pin | None:
    """Keep region ``name`` (made or not) while this process holds the returned ``Pin``.

    None where no named region can be shared (see ``shm_folder.usable_folder``).
    """
    if not NAMED:
        return None
    try:
        with folder(create=True) as dir_fd:
            fd = open_locks(dir_fd)
    except OSError:
        return None
    locks.lock(fd, locks.READ, PINS + turn(name), wait=True)
    return Pin(os.path.join(user_folder(), name), fd)


def open_region(name: str, nbytes: int, description: bytes, reserve: int = 0) -> Region:
    """The region ``name`` of ``nbytes`` payload bytes for ``description``, made if needed.

    This process is a user of it from now on (``Region.release`` when done). A region made
    here has memory for its first ``reserve`` payload bytes; the rest is reserved as it is
    written (``Region.reserve``).

    Raises:
        RegionError: no region can be shared here; the message says why (no room, a folder
            that is not the user's, a region of that name holding something else, not Linux).
    """
    if not NAMED:
        raise RegionError("named regions need Linux (nameless files and OFD locks)")
    if len(description) > _DESCRIPTION_MAX:
        raise ValueError(f"a region's description holds at most {_DESCRIPTION_MAX} bytes")
    with folder(create=True) as dir_fd:
        region = _join(dir_fd, name, nbytes, description)
        if region is None:
            region = _make_or_join(dir_fd, name, nbytes, description, reserve)
        return region


@dataclass(frozen=True)
class RegionInfo:
    """One region of a user's folder, for ``list_regions`` and the ``regions`` command."""

    path: str
    nbytes: int  # memory it holds now
    size: int  # memory it holds once filled
    in_use: bool
    description: str


def list_regions(uid: int | None = None) -> list[RegionInfo]:
    """``uid``'s regions on this node (this user's by default), in use or not (none: not Linux)."""
    found: list[RegionInfo] = []
    if not NAMED:
        return found
    with contextlib.suppress(OSError), folder(create=False, uid=uid) as dir_fd:
        for name in region_names(dir_fd):
            info = _info(dir_fd, name, os.path.join(user_folder(uid), name))
            if info is not None:
                found.append(info)
    return found


def node_regions_bytes() -> int:
    """Bytes of memory this user's live regions on the node hold once filled.

    Dead ones are swept first: they never count.
    """
    sweep_regions()
    return sum(info.size for info in list_regions())


def _info(dir_fd: int, name: str, path: str) -> RegionInfo | None:
    fd = open_file(dir_fd, name)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        text = ""
        if st.st_size >= _PAYLOAD_AT:
            with shared_file_memory(fd, _PAYLOAD_AT, writable=False) as head:
                magic, _, size = _HEAD.unpack_from(head)
                if magic == _MAGIC and size <= _DESCRIPTION_MAX:
                    text = head[_HEAD.size : _HEAD.size + size].decode("utf-8", "replace")
        held = st.st_blocks * 512
        return RegionInfo(path, held, st.st_size, locks.held_elsewhere(fd, USERS), text)
    finally:
        os.close(fd)


def _join(dir_fd: int, name: str, nbytes: int, description: bytes) -> Region | None:
    """The existing region ``name`` joined, or None when there is none (or it just went)."""
    fd = open_file(dir_fd, name)
    if fd is None:
        return None
    path = os.path.join(user_folder(), name)
    try:
        locks.lock(fd, locks.READ, USERS, wait=True)  # (a sweep holds it for a moment only)
        data = _checked_map(fd, name, nbytes, description) if same_file(fd, dir_fd, name) else None
    except RegionError:
        locks.unlock(fd, USERS)  # not what its name says: replaced if nobody uses it
        if not unlink_if_unused(fd, path, dir_fd):
            os.close(fd)
            raise
        data = None
    except BaseException:
        os.close(fd)
        raise
    if data is None:  # swept meanwhile, or replaced: make it anew
        os.close(fd)
        return None
    return Region(path, fd, data)


def _checked_map(fd: int, name: str, nbytes: int, description: bytes) -> Any:
    """The region's map, when its size and header are exactly what ``description`` expects."""
    size = os.fstat(fd).st_size
    data = shared_file_memory(fd, size) if size == _PAYLOAD_AT + nbytes else None
    header = _header(nbytes, description)
    if data is None or data[: len(header)] != header:
        raise RegionError(
            f"the region {name} holds something other than this dataset (another version of "
            "the file, or a damaged region): it is not used"
        )
    return data


def _no_room(length: int, what: str) -> str:
    """The words for a region that found no room: what was free, what was asked (now)."""
    return (
        f"{shm_dir()} had {format_bytes(shm_room())} free and could not give "
        f"{format_bytes(length)} to {what}"
    )


def _header(nbytes: int, description: bytes) -> bytes:
    return _HEAD.pack(_MAGIC, nbytes, len(description)) + description


def _make_or_join(dir_fd: int, name: str, nbytes: int, description: bytes, reserve: int) -> Region:
    """Make the region, unless another maker of it (waited for) made it meanwhile."""
    maker = open_locks(dir_fd)
    try:
        if not locks.lock_within(maker, locks.WRITE, turn(name), 1, _MAKE_WAIT_S):
            raise RegionError(f"another process kept making region {name} for {_MAKE_WAIT_S} s")
        region = _join(dir_fd, name, nbytes, description)
        return region if region is not None else _make(dir_fd, name, nbytes, description, reserve)
    finally:
        os.close(maker)  # (and with it the maker's turn)


def _make(dir_fd: int, name: str, nbytes: int, description: bytes, reserve: int) -> Region:
    """Make the region nameless, with its header, joined; then link it to ``name``."""
    size = _PAYLOAD_AT + nbytes
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise RegionError(f"{user_folder()} cannot hold a new region ({exc.strerror})") from exc
    try:
        locks.lock(fd, locks.READ, USERS)  # a user before it has a name: no sweep takes it
        os.ftruncate(fd, size)
        try:
            os.posix_fallocate(fd, 0, _PAYLOAD_AT + reserve)
        except OSError as exc:
            if exc.errno in _NO_ROOM:
                raise NoRoomError(_no_room(_PAYLOAD_AT + reserve, "a new region")) from exc
            raise
        data = shared_file_memory(fd, size)
        data[: _HEAD.size + len(description)] = _header(nbytes, description)
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)
    except BaseException:
        os.close(fd)
        raise
    return Region(os.path.join(user_folder(), name), fd, data, made=True)
