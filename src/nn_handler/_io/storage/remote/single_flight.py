"""One fetch per range per node: processes that miss the same bytes at once take turns.

Before fetching the ranges a cache entry misses, a process locks those byte ranges of the
entry's ``fetching`` file; another process that misses overlapping ranges waits for the lock,
then asks the entry again and fetches only what is still missing (usually nothing). Ranges
that do not overlap are fetched at the same time. 16 ranks of a node starting together then
send about the requests of one.

The locks are open-file-description locks (``F_OFD_SETLK``): the kernel releases them when the
holder's descriptor closes, the holder dying included, so a dead fetcher never leaves the others
waiting. Each thread locks through a descriptor of its own (locks on one description do not
exclude each other), opened by its own process (a forked child shares its parent's). A wait is
bounded (``WAIT_S``): past it the process fetches anyway (the same bytes again; never a hang).
Where the OS has no such locks (macOS, Windows: ``locks.OFD``), every process fetches for
itself, as before (said once, at DEBUG level).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence

from ...platform import off
from .. import locks

__all__ = ["WAIT_S", "RangeLocks"]

#: longest wait for another process's fetch of the same range (a fetch retries within 60 s)
WAIT_S = 90.0
_FIRST_PAUSE_S, _LONGEST_PAUSE_S = 0.001, 0.05


class RangeLocks:
    """Byte-range locks on the file ``path`` that exclude every other process and thread.

    One per process (held through ``PerProcess``: a forked child makes its own, whose
    descriptors are its own).

    Args:
        path: The lock file (created on first use).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._fds: list[int] = []
        self._guard = threading.Lock()
        #: seconds this object's holders waited for other fetches (tests, benchmarks)
        self.waited_s = 0.0

    @contextlib.contextmanager
    def held(self, ranges: Sequence[tuple[int, int]], wait_s: float = WAIT_S) -> Iterator[None]:
        """Hold ``[start, end)`` ``ranges`` while the block runs (at most ``wait_s`` to get them).

        Ranges are taken in ascending order, so two holders never wait for each other.
        """
        if not locks.OFD:
            off("OFD locks (F_OFD_SETLK)", "each process fetches what it misses for itself")
        if not locks.OFD or not ranges:
            yield
            return
        fd, began, got = self._fd(), time.monotonic(), []
        try:
            for start, end in sorted(ranges):
                if end > start and self._take(fd, start, end, began + wait_s):
                    got.append((start, end))
            self.waited_s += time.monotonic() - began
            yield
        finally:
            for start, end in got:
                locks.unlock(fd, start, end - start)

    def close(self) -> None:
        """Close every descriptor (their locks go with them)."""
        with self._guard:
            fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._local = threading.local()

    def _take(self, fd: int, start: int, end: int, deadline: float) -> bool:
        pause = _FIRST_PAUSE_S
        while not locks.lock(fd, locks.WRITE, start, end - start):
            left = deadline - time.monotonic()
            if left <= 0:
                return False  # fetch without it: a repeated request, not a hang
            time.sleep(min(pause, left))
            pause = min(_LONGEST_PAUSE_S, pause * 2)
        return True

    def _fd(self) -> int:
        mine: int | None = getattr(self._local, "fd", None)
        if mine is not None:
            return mine
        # (never through a symbolic link; private to us: see owned.py)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self._local.fd = fd
        with self._guard:
            self._fds.append(fd)
        return fd
