"""Byte-range locks that die with their holder: Linux's open-file-description (OFD) locks.

Shared state between processes (a decoded region's users and fillers, a cache entry's fetches)
needs liveness the kernel vouches for: a pid can be reused by an unrelated process, a lock
cannot outlive the last descriptor of the open file it was taken through, so a killed holder
releases it at once. OFD locks belong to an open file description, not to a process (unlike
``fcntl``'s POSIX locks, which a process loses when it closes *any* descriptor of the file), so
each holder opens the file itself; two threads sharing one description do not exclude each
other. A lock may lie past the end of the file: each idea gets a byte of its own.

Where the OS has no OFD locks (macOS, Windows) ``OFD`` (``platform.OFD``, the one switch) is
False and callers take their portable path: nothing here is called then.
"""

from __future__ import annotations

import errno
import os
import struct
import time

from ..platform import OFD

if OFD:
    import fcntl

__all__ = ["OFD", "READ", "WRITE", "held_elsewhere", "lock", "lock_within", "unlock"]

READ, WRITE, _UNLOCK = (fcntl.F_RDLCK, fcntl.F_WRLCK, fcntl.F_UNLCK) if OFD else (0, 1, 2)
_FLOCK = "hhqqi4x"  # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD), padded
_FIRST_PAUSE_S, _LONGEST_PAUSE_S = 0.001, 0.05


def lock(fd: int, kind: int, start: int, length: int = 1, *, wait: bool = False) -> bool:
    """Take a ``kind`` (``READ`` / ``WRITE``) lock on ``[start, start + length)`` of ``fd``.

    Returns False when another description holds a conflicting lock (never with ``wait``,
    which blocks until it is free). Taking a lock over one this description holds converts it.
    """
    command = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
    try:
        fcntl.fcntl(fd, command, struct.pack(_FLOCK, kind, os.SEEK_SET, start, length, 0))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def lock_within(fd: int, kind: int, start: int, length: int, seconds: float) -> bool:
    """``lock``, retried for at most ``seconds``; False when still held by another then."""
    deadline, pause = time.monotonic() + seconds, _FIRST_PAUSE_S
    while not lock(fd, kind, start, length):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(_LONGEST_PAUSE_S, pause * 2)
    return True


def unlock(fd: int, start: int, length: int = 1) -> None:
    """Release what this description holds on ``[start, start + length)``."""
    lock(fd, _UNLOCK, start, length)


def held_elsewhere(fd: int, start: int, length: int = 1) -> bool:
    """True when another open file description holds any lock on the range."""
    probe = struct.pack(_FLOCK, WRITE, os.SEEK_SET, start, length, 0)
    answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe)
    return bool(struct.unpack(_FLOCK, answer)[0] != _UNLOCK)
