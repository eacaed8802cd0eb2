"""Raw bytes of a data file, read so that a file that shrinks under us is an error, not SIGBUS.

Touching a page of a memory map past the end of a file that was truncated after it was mapped
kills the process with SIGBUS: no Python exception, no traceback. So:

* ``MappedFile`` maps the file the dataset was built from, and ``check(end)`` (one ``fstat``
  of the mapped file itself, whatever the path names now) must pass before the bytes below
  ``end`` are touched: the file must still be at least ``end`` bytes long.
* ``read_exact`` reads with ``pread``, which returns short instead of faulting; a short read
  is an error.
"""

from __future__ import annotations

import mmap
import os
import time
from typing import Any

import numpy as np

from ..errors import FileChangedError
from .identity import FileIdentity, check_identity, identity_of_fd

__all__ = ["MappedFile", "read_exact"]

_STAT_EVERY_S = 0.01


class MappedFile:
    """A read-only memory map of one file, checked against the file's size before use.

    The map is made through a descriptor that is checked against ``identity`` first (so it maps
    the file the dataset was built from, not one renamed into its place since). ``check`` then
    compares the path's identity with ``identity`` again (rewritten, replaced or truncated:
    ``FileChangedError``) and asks the map for the mapped file's own size (its duplicate
    descriptor; one descriptor per map, as ``np.memmap``).

    Args:
        path: The file.
        identity: The file as the dataset saw it when built, or None to check only sizes.
        growing: The file may grow (a SWMR writer appends to it).

    Raises:
        FileChangedError: the file is no longer the one ``identity`` describes.
    """

    def __init__(self, path: str, identity: FileIdentity | None, growing: bool = False) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            current = identity_of_fd(fd)
            if identity is not None:
                check_identity(path, identity, current, growing=growing)
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if current.size else None
        finally:
            os.close(fd)  # the map holds its own duplicate: one descriptor per map, as np.memmap
        self.path = path
        self.identity = identity
        self.growing = growing
        self._stat_at = -1.0
        self.data: np.ndarray[Any, np.dtype[np.uint8]] = (
            np.zeros(0, np.uint8) if self._map is None else np.frombuffer(self._map, np.uint8)
        )

    def check(self, end: int, identity: bool = True) -> None:
        """Raise ``FileChangedError`` unless bytes ``[0, end)`` of the map are safe to touch.

        ``identity=False`` skips the path's ``stat`` (the caller just checked the same file
        through another descriptor), and so does a call within ``_STAT_EVERY_S`` of the last
        stat (a ``stat`` costs ~2-3 us, a batch of small rows ~20 us); the mapped file's size,
        which is what keeps SIGBUS away, is checked on every call.
        """
        now = time.monotonic()
        if identity and self.identity is not None and now - self._stat_at >= _STAT_EVERY_S:
            self._stat_at = now
            st = os.stat(self.path)
            if not self.identity.matches(st):
                current = FileIdentity.of_stat(st)
                check_identity(self.path, self.identity, current, growing=self.growing)
        size = 0 if self._map is None else self._map.size()  # fstat of the mapped file
        if size < end or self.data.size < end:
            raise FileChangedError(
                f"{self.path!r} is {size} bytes now, but reading it needs {end}: it was "
                "truncated after the dataset was built. Build the dataset again",
                self.path,
            )


def read_exact(fd: int, out: np.ndarray[Any, Any], offset: int, path: str) -> None:
    """Fill the C-contiguous array ``out`` with the file's bytes from ``offset`` on.

    Raises:
        FileChangedError: the file ended first (it was truncated after the dataset was built).
    """
    view = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    done = 0
    while done < view.nbytes:
        got = _pread_into(fd, view[done:], offset + done)
        if got <= 0:
            raise FileChangedError(
                f"{path!r} ends before byte {offset + view.nbytes} of a dataset recorded in it: "
                "it was truncated after the dataset was built. Build the dataset again",
                path,
            )
        done += got


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    if hasattr(os, "preadv"):
        return int(os.preadv(fd, [view], offset))
    data = os.pread(fd, view.nbytes, offset)  # platforms without preadv: one extra copy
    view[: len(data)] = data
    return len(data)
