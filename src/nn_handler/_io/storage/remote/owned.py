"""Folders and files of a node's cache that are ours: made private, opened without links.

A cache directory lives where other users of a shared node may write too (``/tmp``, a common
scratch disk), and it outlives jobs. Another user could plant an entry there (bytes of their
choice, with a record that says they are the object's) or a symbolic link that sends our
writes into their files. So, as pip does for its cache, the cache is used only where this
process's user (``os.geteuid()``) owns it:

* the cache folder itself: a folder we own (a symbolic link only when we own the link too),
  writable by us; created ``0o700`` when we create it;
* every entry, record and lock inside it: opened relative to its folder's descriptor with
  ``O_NOFOLLOW`` (a symbolic link is refused, never followed), and used only when ``fstat``
  says it is a regular file (or folder) we own; created ``0o700`` (folders) or ``0o600``
  (files). One of ours that others may read or write (made under a lax umask, or by an older
  version) is made ours alone (``0o700`` / ``0o600``) before it is used: what another user
  wrote into it meanwhile is caught by the owner check (a file renamed in is theirs) or by the
  pieces' checksums (``pieces.py``).

A check that fails raises ``CacheRefusedError`` (an ``OSError``) whose text says why, in the words a
warning then uses (``why``): "is owned by uid 1234, not by you (uid 1000)", "is a symbolic
link". ``reason`` turns any other ``OSError`` of the cache into such words ("has no space
left", "is not writable by you").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from ...platform import OWNERS

__all__ = [
    "FILE_MODE",
    "FOLDER_MODE",
    "CacheRefusedError",
    "is_ours",
    "open_file",
    "open_folder",
    "open_own_root",
    "reason",
]

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC if OWNERS else 0  # (Windows: no node cache)
_OTHERS = stat.S_IRWXG | stat.S_IRWXO
_WORDS = {
    errno.ENOSPC: "has no space left",
    errno.EDQUOT: "is over your disk quota",
    errno.EROFS: "is not writable (a read-only file system)",
    errno.EACCES: "is not writable by you",
    errno.EPERM: "is not writable by you",
    errno.EFBIG: "cannot hold a file that large",
    errno.ELOOP: "is a symbolic link",
}


class CacheRefusedError(OSError):
    """A folder or file of the cache that this process must not use; ``why`` says why.

    Args:
        path: The folder or file.
        why: Why it is refused, as the end of a sentence that begins with its name.
    """

    def __init__(self, path: str, why: str) -> None:
        super().__init__(errno.EPERM, why, path)
        self.why = why


def reason(error: OSError) -> str:
    """Why ``error`` makes the cache unusable, in a few words ("has no space left")."""
    if isinstance(error, CacheRefusedError):
        return error.why
    words = _WORDS.get(error.errno or 0, "cannot be used")
    code = errno.errorcode.get(error.errno or 0, "")
    detail = f"{code}: {error.strerror}" if code and error.strerror else str(error)
    return f"{words} ({detail})"


def is_ours(st: os.stat_result) -> bool:
    """True when ``st`` (a ``stat`` that did not follow a link) belongs to this process's user."""
    return st.st_uid == os.geteuid()


def open_own_root(path: str) -> int:
    """A descriptor of the cache folder ``path``, created (``0o700``) if missing.

    Raises:
        CacheRefusedError: it is not a folder we own and may write (``why`` says which).
        OSError: it cannot be created (``reason`` says why).
    """
    os.makedirs(path, FOLDER_MODE, exist_ok=True)
    me, link = os.geteuid(), os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid != me:
        raise CacheRefusedError(path, f"is a symbolic link owned by uid {link.st_uid}, not by you")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != me:
            raise CacheRefusedError(path, f"is owned by uid {st.st_uid}, not by you (uid {me})")
        if not os.access(path, os.W_OK | os.X_OK):
            raise CacheRefusedError(path, _unwritable(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_folder(name: str, dir_fd: int, where: str) -> int:
    """A descriptor of folder ``name`` inside ``dir_fd``, never through a symbolic link.

    ``where``: its path, for messages.

    Raises:
        CacheRefusedError: it is a symbolic link, not a folder, or not ours (``owned_by_us``).
        FileNotFoundError: it does not exist.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise CacheRefusedError(where, _not_a_folder(name, dir_fd)) from exc
        raise
    return _checked(fd, where, folder=True)


def open_file(name: str, flags: int, dir_fd: int, where: str) -> int:
    """A descriptor of regular file ``name`` inside ``dir_fd`` (``O_NOFOLLOW``; ours).

    Created ``0o600`` when ``flags`` has ``O_CREAT``. ``where``: its path, for messages.

    Raises:
        CacheRefusedError: it is a symbolic link, not a regular file, or not ours.
        OSError: as ``os.open`` (``FileNotFoundError``, ``FileExistsError``, ``ENOSPC``, ...).
    """
    try:
        fd = os.open(name, flags | _NOFOLLOW, FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CacheRefusedError(where, "is a symbolic link") from exc
        raise
    return _checked(fd, where, folder=False)


def _checked(fd: int, where: str, folder: bool) -> int:
    """``fd`` when it is a folder (or a regular file) we own; else closed, and refused."""
    st = os.fstat(fd)
    me = os.geteuid()
    why = None
    if stat.S_ISDIR(st.st_mode) != folder or not (folder or stat.S_ISREG(st.st_mode)):
        why = "is not a folder" if folder else "is not a regular file"
    elif st.st_uid != me:
        why = f"is owned by uid {st.st_uid}, not by you (uid {me})"
    if why is not None:
        os.close(fd)
        raise CacheRefusedError(where, why)
    if st.st_mode & _OTHERS:  # ours, made under a lax umask (or by an older version): ours only
        os.fchmod(fd, FOLDER_MODE if folder else FILE_MODE)
    return fd


def _not_a_folder(name: str, dir_fd: int) -> str:
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            return "is a symbolic link"
    return "is not a folder"


def _unwritable(fd: int) -> str:
    with contextlib.suppress(OSError):
        if os.fstatvfs(fd).f_flag & os.ST_RDONLY:
            return "is not writable (a read-only file system)"
    return "is not writable by you"
