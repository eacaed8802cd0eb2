"""Nothing outlives its job: regions released at exit and on SIGTERM, and swept when unused.

A region of node memory (``node_memory.py``) is in use while some process holds its users' lock
or pins it (``shm_folder.py``); both die with their holders, however they end. What a killed job
leaves is unlinked by ``sweep``, which runs whenever a process of the node opens a dataset
(``sweep_now_and_then``: at most once a second per process), before the budget counts the
user's regions (only live regions count), and at every exit. Each
process also releases what it holds (``hold`` registers it) when it ends: after multiprocessing
has ended its daemonic children (DataLoader workers), and on SIGTERM, what schedulers send
first, before going on to the handler that was there before (a framework's, the user's, or the
default: the process then ends by the signal as it would have). torch's DataLoader workers end
on SIGTERM without running Python, so the process that started them sweeps until they are gone
(a second at most) before it goes on.

``sweep_regions(uid)`` serves ``nn-handler regions --sweep`` (root sweeps every user's folder).
Only named regions and pins are held (Linux: ``node_memory.NAMED``): elsewhere no SIGTERM handler
is set and nothing is swept.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import weakref
from multiprocessing.util import Finalize
from types import FrameType
from typing import Any, Protocol

from ..process import in_forked_child, process_generation
from . import locks
from .shm_folder import (
    RegionError,
    folder,
    open_file,
    region_names,
    unlink_if_unused,
    user_folder,
)

__all__ = [
    "Held",
    "hold",
    "sweep_name",
    "sweep_now_and_then",
    "sweep_regions",
]

_SWEEP_EVERY_S = 1.0
_CHILDREN_WAIT_S = 1.0  # on SIGTERM: how long the children (workers) may take to end too
_held: list[weakref.ref[Held]] = []  # this process's regions and pins
_exit_arranged = -1  # the process generation that arranged its release and sweep at exit
_last_sweep = 0.0
_previous_sigterm: Any = None


class Held(Protocol):
    """A region or a pin this process holds (released at exit and on SIGTERM)."""

    #: pins are released before regions (a region's last user unlinks it only if unpinned)
    releases_first: bool

    def leave(self) -> None:
        """Stop holding it (a map stays readable here); unlink it if nobody else does."""

    def forget_inherited(self) -> None:
        """In a forked child: close the parent's descriptor without touching its locks."""


def hold(held: Held) -> None:
    """Release ``held`` when this process ends (exit or SIGTERM); forget it in forked children."""
    _held[:] = [ref for ref in _held if ref() is not None]
    _held.append(weakref.ref(held))
    _arrange_release()


def sweep_now_and_then() -> None:
    """``sweep``, at most once a second per process (every dataset open calls it)."""
    global _last_sweep
    now = time.monotonic()
    if locks.OFD and now - _last_sweep >= _SWEEP_EVERY_S:
        _last_sweep = now
        with contextlib.suppress(OSError):
            sweep_regions()


def sweep_regions(uid: int | None = None) -> int:
    """Unlink ``uid``'s regions (this user's by default) that no live process uses or pins.

    Returns how many went. A folder that is missing or not the user's is left alone.
    """
    if not locks.OFD:
        return 0
    removed = 0
    with contextlib.suppress(OSError), folder(create=False, uid=uid) as dir_fd:
        for name in region_names(dir_fd):
            fd = open_file(dir_fd, name)
            if fd is not None:
                try:
                    removed += unlink_if_unused(fd, os.path.join(user_folder(uid), name), dir_fd)
                finally:
                    os.close(fd)
    return removed


def sweep_name(path: str) -> int:
    """Unlink the region at ``path`` if no process uses or pins it; 1 if it went."""
    with folder(os.path.dirname(path), create=False) as dir_fd:
        fd = open_file(dir_fd, os.path.basename(path))
        if fd is None:
            return 0
        try:
            return unlink_if_unused(fd, path, dir_fd)
        finally:
            os.close(fd)


def _release_all() -> None:
    """This process drops its pins, then stops using its regions (maps stay readable)."""
    held = [h for h in (ref() for ref in list(_held)) if h is not None]
    for each in sorted(held, key=lambda h: not h.releases_first):
        with contextlib.suppress(OSError, RegionError):
            each.leave()


def _release_and_sweep() -> None:
    _release_all()
    with contextlib.suppress(OSError):
        sweep_regions()


def _arrange_release() -> None:
    """At exit (after multiprocessing ends daemonic children) and on SIGTERM, once each."""
    global _exit_arranged
    if _exit_arranged != process_generation():
        _exit_arranged = process_generation()
        Finalize(None, _release_and_sweep, exitpriority=-2)
        _catch_sigterm()


def _catch_sigterm() -> None:
    """Release this process's regions on SIGTERM, then do what was done before (main thread)."""
    global _previous_sigterm
    if threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError):  # (an interpreter that forbids it)
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm or current == signal.SIG_IGN:
            return  # caught already, or ignored: nothing ends the process
        _previous_sigterm = current
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _release_all()
    _sweep_as_children_end()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # end as the signal would have ended it
    os.kill(os.getpid(), signal.SIGTERM)


def _sweep_as_children_end() -> None:
    """Sweep until this process's children have ended, ``_CHILDREN_WAIT_S`` at most.

    A scheduler's SIGTERM reaches a job's DataLoader workers too, and torch's handler in a
    worker ends it at once, without our release: their regions are unused only once they
    are gone, a moment after the signal.
    """
    deadline = time.monotonic() + _CHILDREN_WAIT_S
    while True:
        done = not multiprocessing.active_children() or time.monotonic() >= deadline
        with contextlib.suppress(OSError):
            sweep_regions()
        if done:
            return
        time.sleep(0.01)


def _forget_inherited() -> None:
    global _last_sweep
    for ref in _held:
        held = ref()
        if held is not None:
            held.forget_inherited()
    _held.clear()
    _last_sweep = 0.0


in_forked_child(_forget_inherited)
