"""What this operating system offers the library: each platform capability, named once.

Linux offers all of them. macOS has no OFD locks (``F_OFD_SETLK``), no ``posix_fadvise``, no
``/dev/shm`` folder and no ``/proc``, and starts processes with spawn by default; Windows has no
``fcntl`` or ``termios``, no fork (so no ``os.register_at_fork``), no ``pread``, no advice to the
kernel and no POSIX owners or ``dir_fd``. The facts are read from the running interpreter once,
at import, by asking for what the library uses (never the platform's name), so a platform that
gains a call gains its fast path, and a simulated platform (``tests/platforms/``) is seen as the
real one would be.

Code asks these facts; where one is off it takes its portable path, which reads the same bytes,
and says so once, at DEBUG level (``off``): a missing capability costs speed or sharing, never
a result. ``storage/node_memory.NAMED`` (regions shared by name) is built from ``OFD`` and
``TMPFILE``.
"""

from __future__ import annotations

import importlib
import logging
import mmap
import multiprocessing
import os
from types import ModuleType

from .notices import say_once

__all__ = [
    "AT_FORK",
    "BINARY",
    "FADVISE",
    "FLOCK",
    "FORK",
    "MADVISE",
    "MEMFD",
    "MMAP_FLAGS",
    "OFD",
    "OWNERS",
    "PIPE_ROOM",
    "PREAD",
    "PREADV",
    "PROC",
    "SHM_FOLDER",
    "TMPFILE",
    "off",
]


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:  # Windows: fcntl, termios
        return None


_fcntl, _termios = _module("fcntl"), _module("termios")

#: processes start by fork (multiprocessing offers it): memory mapped before is shared with them
FORK = "fork" in multiprocessing.get_all_start_methods()
#: hooks run around every fork (``os.register_at_fork``)
AT_FORK = hasattr(os, "register_at_fork")
#: reads at an offset without moving a shared file position (``os.pread``), many buffers at once
PREAD = hasattr(os, "pread")
PREADV = hasattr(os, "preadv")
#: the kernel reads a file's pages ahead when told (``posix_fadvise``, ``madvise``)
FADVISE = hasattr(os, "posix_fadvise")
MADVISE = hasattr(mmap, "MADV_WILLNEED")  # (defined where maps have .madvise)
#: POSIX maps (``flags``, ``prot``): anonymous memory shared with the children forked later
MMAP_FLAGS = hasattr(mmap, "MAP_SHARED") and hasattr(mmap, "MAP_ANONYMOUS")
#: whole-file locks that die with their holder (``fcntl.flock``)
FLOCK = _fcntl is not None and hasattr(_fcntl, "flock")
#: byte-range locks of an open file description (Linux's ``F_OFD_SETLK``): see storage/locks.py
OFD = _fcntl is not None and hasattr(_fcntl, "F_OFD_SETLK")
#: how much a pipe holds and how much is in it (``F_GETPIPE_SZ``, ``FIONREAD``; Linux)
PIPE_ROOM = _fcntl is not None and hasattr(_fcntl, "F_GETPIPE_SZ") and _termios is not None
#: what ``os.open`` needs for bytes as they are (Windows opens files as text unless told)
BINARY = getattr(os, "O_BINARY", 0)
#: files in memory only, with no name anywhere (``memfd_create``; Linux), appended to atomically
MEMFD = hasattr(os, "memfd_create") and _fcntl is not None and hasattr(_fcntl, "F_SETFL")
#: files made nameless, linked to a name once whole (``O_TMPFILE``)
TMPFILE = hasattr(os, "O_TMPFILE")
#: files checked for their owner, opened inside a folder's descriptor without following links
OWNERS = hasattr(os, "geteuid") and hasattr(os, "O_NOFOLLOW") and os.open in os.supports_dir_fd
#: a process is looked up in ``/proc`` (its state, its start time, its threads)
PROC = os.path.isdir("/proc/self")
#: the folder POSIX shared memory lives in, whose free space tells what still fits (Linux)
SHM_FOLDER = "/dev/shm" if hasattr(os, "statvfs") and os.path.isdir("/dev/shm") else None


def off(capability: str, portable: str) -> None:
    """Say once, at DEBUG level, that ``capability`` is missing here and what is done instead.

    Args:
        capability: What the platform lacks, e.g. ``"OFD locks (F_OFD_SETLK)"``.
        portable: The portable path taken instead, and what it costs.
    """
    say_once(
        f"platform: {capability}: {portable}",
        f"{capability} not available on this platform: {portable}",
        logging.DEBUG,
    )
