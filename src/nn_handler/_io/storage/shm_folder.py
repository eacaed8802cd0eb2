"""The user's own folder of node-shared regions, and the checks that make it trustworthy.

On a shared node, ``/dev/shm`` belongs to every user: anything in it may have been planted by
another one. A user's regions (``node_memory.py``) therefore live in ``<shm>/nn_handler-<uid>/``
(``user_folder``), made with mode 0700, and are used only when that folder is a real directory
(reached without following a link) that belongs to the user and that no one else may enter
(``folder``). Inside it, every file is looked at before it is opened (a FIFO or a device is
never opened), opened without following a link, and checked again once open (``open_file``).
Nothing else in ``/dev/shm`` is ever read, counted or opened.

The folder's ``.locks`` file carries two kinds of byte-range locks (``locks.py``), each on a
byte chosen by a region's name (``turn``): a maker's turn (two processes making one region at
once take turns) and, from ``PINS`` on, the pins of the processes that keep a region while
their dataset lives (``pinned``). Each region file's byte ``USERS`` is read-locked by every
process that uses it; ``unlink_if_unused`` removes a region that nobody uses or pins.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator

from ..platform import TMPFILE
from . import locks

__all__ = [
    "NAMED",
    "PINS",
    "SHM_DIR_ENV",
    "USERS",
    "NoRoomError",
    "RegionError",
    "folder",
    "folder_owners",
    "open_file",
    "open_locks",
    "pinned",
    "region_exists",
    "region_names",
    "same_file",
    "shm_dir",
    "shm_room",
    "turn",
    "unlink_if_unused",
    "usable_folder",
    "user_folder",
]

#: named regions work here (Linux: nameless files, OFD locks); ``node_memory.NAMED``
NAMED = locks.OFD and TMPFILE
SHM_DIR_ENV = "NN_HANDLER_SHM_DIR"
USERS = 0  # the byte of a region file its users hold a shared lock on
PINS = 1 << 41  # where pins start in ``.locks`` (past the makers' turns: a 40-bit hash)
_PREFIX = "nn_handler-"
_LOCKS = ".locks"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class RegionError(OSError):
    """No shared region for this dataset; the message says why, truthfully, for the user."""


class NoRoomError(RegionError):
    """The shared memory has no room for the region (the remedy: give the node more)."""


def shm_dir() -> str:
    """Where the per-user folders of regions live: ``NN_HANDLER_SHM_DIR``, else ``/dev/shm``."""
    return os.environ.get(SHM_DIR_ENV, "").strip() or "/dev/shm"


def user_folder(uid: int | None = None) -> str:
    """The folder of ``uid``'s regions (this process's user by default)."""
    return os.path.join(shm_dir(), f"{_PREFIX}{os.geteuid() if uid is None else uid}")


def shm_room() -> int:
    """Bytes a new region may take in ``shm_dir()`` now (0 when it is missing or read-only)."""
    root = shm_dir()
    if not os.path.isdir(root) or not os.access(root, os.W_OK):
        return 0
    st = os.statvfs(root)
    return int(st.f_bavail * st.f_frsize)


@contextlib.contextmanager
def folder(path: str | None = None, *, create: bool, uid: int | None = None) -> Iterator[int]:
    """A checked descriptor of ``uid``'s folder (``path``, else where it is now).

    Checked: a directory reached without a link, ``uid``'s, with no access for others.

    Raises:
        RegionError: it is missing (unless ``create``), cannot be made, or is not the user's.
    """
    path = user_folder(uid) if path is None else path
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RegionError(f"{path} cannot be made ({exc.strerror or exc})") from exc
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError as exc:
        why = exc.strerror or exc
        raise RegionError(f"{path} is not a folder of this user's regions ({why})") from exc
    try:
        _check(path, os.fstat(fd), os.geteuid() if uid is None else uid)
        yield fd
    finally:
        os.close(fd)


def _check(path: str, st: os.stat_result, uid: int) -> None:
    if st.st_uid != uid:
        raise RegionError(
            f"{path} belongs to uid {st.st_uid}, not to uid {uid}: another user made it, so "
            "nothing in it is trusted (an administrator can remove it)"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise RegionError(
            f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o}, expected "
            f"700): nothing in it is trusted; remove it or run chmod 700 {path}"
        )


def usable_folder() -> str | None:
    """None when this user's regions can be shared by name here; else why not, for a message."""
    if not NAMED:
        return "named regions need Linux (nameless files and OFD locks)"
    if not os.path.isdir(shm_dir()):
        return None  # (no room there: the caller says that)
    try:
        with folder(create=True):
            return None
    except RegionError as exc:
        return str(exc)


def folder_owners() -> list[int]:
    """The uids whose folders of regions lie in ``shm_dir()`` (named after them, theirs)."""
    if not NAMED:
        return []
    try:
        names = os.listdir(shm_dir())
    except OSError:
        return []
    owners = []
    for name in names:
        uid = name.removeprefix(_PREFIX)
        if name.startswith(_PREFIX) and uid.isdigit():
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(shm_dir(), name), follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == int(uid):
                    owners.append(int(uid))
    return sorted(owners)


def region_names(fd: int) -> list[str]:
    """The names of the regions in the folder ``fd`` (not its lock file)."""
    return [n for n in os.listdir(fd) if not n.startswith(".")]


def region_exists(name: str) -> bool:
    """True when this user's folder holds a region ``name`` (whether it can be joined or not)."""
    if not NAMED:
        return False
    try:
        with folder(create=False) as fd:
            return stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_file(dir_fd: int, name: str) -> int | None:
    """A descriptor of the regular file ``name`` in ``dir_fd``, or None for anything else.

    Looked at before it is opened (a FIFO or a device is never opened), opened without
    following a link, and checked again once open (it may have been replaced in between).
    """
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(before.st_mode):
            return None
        fd = os.open(name, os.O_RDWR | os.O_NONBLOCK | _NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    if not os.path.samestat(before, os.fstat(fd)):
        os.close(fd)
        return None
    return fd


def same_file(fd: int, dir_fd: int, name: str) -> bool:
    """True when ``name`` in ``dir_fd`` is still the file open as ``fd``."""
    try:
        named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return os.path.samestat(named, os.fstat(fd))


def open_locks(dir_fd: int) -> int:
    """A new open file description of the folder's ``.locks`` (made if needed)."""
    return os.open(_LOCKS, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600, dir_fd=dir_fd)


def turn(name: str) -> int:
    """The byte of ``.locks`` that ``name``'s makers take turns on (its pin: ``PINS`` past)."""
    return int(hashlib.blake2b(name.encode(), digest_size=5).hexdigest(), 16)


def pinned(dir_fd: int, name: str) -> bool:
    """True when some process pins region ``name`` (its dataset lives there)."""
    fd = open_locks(dir_fd)
    try:
        return locks.held_elsewhere(fd, PINS + turn(name))
    finally:
        os.close(fd)


def unlink_if_unused(fd: int, path: str, dir_fd: int | None = None) -> int:
    """Unlink ``path`` (the file open as ``fd``) when no other description uses or pins it.

    Taking the users' byte exclusively first means no process can join meanwhile: a joiner
    waits for it and then finds the name gone (and makes the region anew). Returns 1 if
    unlinked.
    """
    if not locks.lock(fd, locks.WRITE, USERS):
        return 0
    try:
        name = os.path.basename(path)
        with contextlib.ExitStack() as stack:
            if dir_fd is None:
                dir_fd = stack.enter_context(folder(os.path.dirname(path), create=False))
            if same_file(fd, dir_fd, name) and not pinned(dir_fd, name):
                os.unlink(name, dir_fd=dir_fd)
                return 1
        return 0
    except RegionError:
        return 0
    finally:
        locks.unlock(fd, USERS)
