"""The object's version, asked for once by the processes of a node that open it together.

Every process that opens a URL records the object's version (a one-byte range request: size
and ETag), and conditions each of its reads on it. When the 8 ranks and their workers of a node
open the object at the same moment, those are as many requests for one answer. With a
node-local cache they take turns on a lock in the cache directory (``.versions/<hash of the
URL>.lock``; a ``flock``, released by the kernel when its holder dies): the holder asks the
store and writes the answer down with the moment it came; a process that was already waiting
for the lock when that answer came uses it instead of asking again.

Only an answer that came after this process began to open the object is used, so the version
was asked for during its own open, as if it had asked itself: a script that replaces an object
and opens it again asks again. (The moments are the node's monotonic clock, and a record names
the machine it was written on: a cache directory on a shared file system is shared by nothing
here.) A record that does not parse, names another URL, or says it was answered later than now
(a clock that is not this boot's monotonic clock, or a forged record) is not used; nothing
waits without a bound: a holder stuck past the store's own time limit is waited for no longer.

Records and locks are trusted only as far as their owner: the cache folder and ``.versions``
must be ours, and each lock or record is opened without following symbolic links and used only
when it is a regular file of ours (``owned.py``); else the process asks the store itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from ...platform import FLOCK
from ..identity import ObjectVersion
from .owned import FOLDER_MODE, open_file, open_folder, open_own_root

if FLOCK:  # (else the node cache is off: see cache_dir.NODE_CACHE)
    import fcntl

__all__ = ["open_checked"]

_POLL_S = 0.005
_FOLDER = ".versions"
_MAX_RECORD = 64 * 1024  # a record is a few hundred bytes; more is not one of ours


class _Versioned(Protocol):
    @property
    def identity(self) -> ObjectVersion:
        """The version recorded at open."""


R = TypeVar("R", bound=_Versioned)


def open_checked(
    root: str, url: str, make: Callable[[ObjectVersion | None], R], wait_s: float
) -> R:
    """``make(version)``, with the version another process of the node got meanwhile, if one did.

    ``make(None)`` asks the store itself (its answer is then written down for the others).
    ``wait_s``: the longest wait for another process that is asking (then this one asks too).
    """
    began = time.monotonic()
    name = hashlib.sha256(url.encode()).hexdigest()[:40]
    try:
        folder = _folder(root)
    except OSError:  # a cache folder not ours, read-only or full: every process asks itself
        return make(None)
    try:
        fd = open_file(f"{name}.lock", os.O_RDWR | os.O_CREAT, folder, f"{root}/{_FOLDER}")
    except OSError:
        os.close(folder)
        return make(None)
    try:
        _lock(fd, wait_s)
        recent = _answered_since(folder, f"{name}.json", url, began)
        opened = make(recent)
        if recent is None:
            _write(folder, f"{name}.json", url, opened.identity)
        return opened
    finally:
        os.close(fd)  # (and with it the lock)
        os.close(folder)


def _folder(root: str) -> int:
    """``.versions`` in the cache folder ``root`` (both made if needed; ours, not links)."""
    top = open_own_root(root)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(_FOLDER, FOLDER_MODE, dir_fd=top)
        return open_folder(_FOLDER, top, f"{root}/{_FOLDER}")
    finally:
        os.close(top)


def _lock(fd: int, wait_s: float) -> bool:
    """Take the exclusive lock on ``fd``, polling for at most ``wait_s``; False if not taken."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)


def _answered_since(folder: int, record: str, url: str, began: float) -> ObjectVersion | None:
    """The version written down for ``url`` on this machine after ``began``, if one was.

    A record from the future (answered after now: not this boot's clock, or forged) is not.
    """
    try:
        with os.fdopen(open_file(record, os.O_RDONLY, folder, record), "rb") as f:
            saved = json.loads(f.read(_MAX_RECORD))
        answered = float(saved["answered_at"])
        fresh = saved["machine"] == _machine() and began <= answered <= time.monotonic()
        if saved["url"] != url or not fresh:
            return None
        fields = saved["version"]
        version = ObjectVersion(
            size=int(fields["size"]),
            etag=_text(fields.get("etag")),
            version=_text(fields.get("version")),
            modified=_text(fields.get("modified")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return version if version.size >= 0 else None


def _machine() -> str:
    """This machine since it booted (the monotonic clock's reach)."""
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return socket.gethostname()


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"not a text: {value!r}")


def _write(folder: int, record: str, url: str, version: ObjectVersion) -> None:
    """Write the version down (aside, then renamed into place); a failure is ignored."""
    spare = f".{uuid.uuid4().hex}.json"
    answered = {"url": url, "version": version.as_record(), "answered_at": time.monotonic()}
    text = json.dumps({**answered, "machine": _machine()})
    try:
        fd = open_file(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL, folder, spare)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(spare, record, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(spare, dir_fd=folder)
