"""PerProcess: state that belongs to the process that made it.

File handles, memory maps, decoded-chunk caches, thread pools and locks must never be used by
another process: a forked DataLoader worker that reads through its parent's h5py handle can get
wrong data, a lock that a parent thread held at ``fork`` time stays locked in the child forever,
and h5py objects cannot be pickled for spawn / forkserver workers. Every holder of such state
keeps it in a ``PerProcess`` slot, which gives one rule for all of them:

* after ``fork`` the child finds every slot empty (a generation counter is bumped in the child
  by ``os.register_at_fork``; one integer compare per access, no system call; where processes
  never fork (Windows) the generation never changes);
* a pickled slot (spawn, forkserver, ``copy.copy``) travels empty;
* the value is made on first use in each process, by the slot's factory or the caller.

A value inherited from the parent is never returned by ``get``; ``pop`` hands it over once so
its holder can release it (close a handle, drop a map) without using it for reads.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .platform import AT_FORK, PROC, off

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "PerProcess",
    "around_fork",
    "collection_paused",
    "holds_h5py_lock",
    "in_forked_child",
    "join_threads",
    "loop_may_wait_for_h5py",
    "pause_collection_until_h5py_returns",
    "process_alive",
    "process_generation",
    "process_stamp",
    "process_started",
    "started_process_alive",
]

T = TypeVar("T")

_generation = 0
_stamp: tuple[int, tuple[int, int]] = (-1, (0, 0))  # (generation, this process's stamp)
_make_lock = threading.Lock()
_paused_lock = threading.Lock()
_paused = 0  # pauses now in force (threads inside collection_paused(), handed-over pauses)
_was_enabled = False
_STOP = 0  # told to a watcher thread instead of a thread ident (never 0) to make it exit
_tracking = False  # _collection_tracker() is in gc.callbacks
# the event loop run by the thread that is in a collection now (one at a time in a process)
_collecting_loop: asyncio.AbstractEventLoop | None = None


def process_generation() -> int:
    """A number that changes in every forked child (and never in the process itself)."""
    return _generation


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: it exists and has not exited (not a zombie).

    A zombie (exited, not yet reaped by its parent: a DataLoader worker its loader has not
    joined yet) will never use a region or finish a claim again, so it counts as gone; where
    there is no ``/proc`` (macOS) a zombie counts as alive until it is reaped.
    """
    if sys.platform == "win32":  # pragma: no cover - os.kill(pid, 0) there sends CTRL_C_EVENT
        return _windows_process_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process of that pid
        return True
    if not PROC:
        off("/proc", "a process is alive while it has a pid, zombies included")
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:  # it ended meanwhile: what kill said
        return True
    return state not in ([b"Z"], [b"X"])


if sys.platform == "win32":  # pragma: no cover - Windows
    import _winapi

    _QUERY_LIMITED_INFORMATION = 0x1000  # PROCESS_QUERY_LIMITED_INFORMATION
    _ACCESS_DENIED = 5  # ERROR_ACCESS_DENIED: the process exists, another user's

    def _windows_process_alive(pid: int) -> bool:
        """Ask Windows whether ``pid`` runs (what multiprocessing's ``_winapi`` offers)."""
        try:
            handle = _winapi.OpenProcess(_QUERY_LIMITED_INFORMATION, False, pid)
        except OSError as exc:  # no such process (ERROR_INVALID_PARAMETER), or not ours
            return getattr(exc, "winerror", None) == _ACCESS_DENIED
        try:
            return bool(_winapi.GetExitCodeProcess(handle) == _winapi.STILL_ACTIVE)
        finally:
            _winapi.CloseHandle(handle)


def process_started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or None where nobody can tell.

    A pid is reused once its process is gone; a pid together with its start time names one
    process for the life of the machine (``started_process_alive``). Known from ``/proc``
    (Linux); elsewhere None, and a pid is then trusted as ``process_alive`` says.
    """
    if not PROC:
        off("/proc", "a process is known by its pid alone, not by its pid and start time")
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[19])  # field 22, counted after the command's closing parenthesis
    except (OSError, IndexError, ValueError):
        return None


def process_stamp() -> tuple[int, int]:
    """This process as (pid, start time; 0 where unknown): what names it while it lives."""
    global _stamp
    if _stamp[0] != _generation:
        pid = os.getpid()
        _stamp = (_generation, (pid, process_started(pid) or 0))
    return _stamp[1]


def started_process_alive(pid: int, started: int | None) -> bool:
    """Whether the process that was ``pid`` when it started at ``started`` still runs.

    False once ``pid`` belongs to another process (reused); with ``started`` None (unknown
    where it was recorded), as ``process_alive``.
    """
    if not process_alive(pid):
        return False
    return started is None or process_started(pid) in (None, started)


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic garbage collection while the calling thread waits for another thread.

    h5py reads a remote file through a Python file object while the calling thread holds
    h5py's global lock, and the object's reads wait for fsspec's event-loop thread. A
    collection that runs on that thread meanwhile and frees a cyclic h5py object needs h5py's
    lock to free it: the loop stops, and the read waits until its time bound fails it (seen as
    "did not answer within 30s" at a dataset's construction, in about one full test run in
    three). Collection is one switch for all threads: it is off until the last thread inside
    is back, and on again after if it was on before.
    """
    with _paused_lock:
        _pause()
        born = _generation
    try:
        yield
    finally:
        with _paused_lock:
            if born == _generation:  # a forked child left it: its count starts afresh
                _resume()


def pause_collection_until_h5py_returns() -> None:
    """Keep automatic collection off until this thread lets go of h5py's lock.

    For a file object h5py reads through (``storage.remote.file_object``): h5py calls its reads
    one after another with its lock held throughout, and a collection that starts on the event
    loop's thread *between* two of them (``collection_paused`` covers only the waits) frees a
    cyclic h5py object there, waits for that lock, and the next read waits for the loop: a
    stall until the read's time bound (reproduced with a thread making cyclic h5py garbage).
    The pause is handed to this process's watcher thread, which ends it once h5py's lock is
    free. Does nothing when this thread does not hold h5py's lock, or already paused for the
    call it is in.
    """
    if not holds_h5py_lock():
        return
    me = threading.get_ident()
    with _paused_lock:
        watcher = _watcher.peek()
        if watcher is not None and me in watcher.handed:
            return
        # paused before the first watcher starts: a collection inside the starting thread
        # would wait for h5py's lock while this thread waits for it to start
        _pause()
        watcher = _watcher.get()
        watcher.handed.add(me)
    watcher.queue.put(me)


def loop_may_wait_for_h5py(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop``'s thread is in a collection while this thread holds h5py's lock.

    Such a collection waits for h5py's lock as soon as it frees a cyclic h5py object, so a
    read that waits for ``loop`` would wait until its time bound; pausing collection cannot
    help, as the collection had begun before (``storage.remote.object_file`` reads on this
    thread instead). Collections are tracked from the first call on; a few tens of nanoseconds.
    """
    global _tracking
    if not _tracking:  # (two threads may both register: the callback is idempotent)
        _tracking = True
        gc.callbacks.insert(0, _collection_tracker())  # first: set before others run
    return _collecting_loop is loop and holds_h5py_lock()


def holds_h5py_lock() -> bool:
    """Whether the calling thread is inside an h5py call (holds h5py's global lock)."""
    from h5py._objects import phil

    return bool(phil._is_owned())


def _collection_tracker() -> Callable[[str, dict[str, int]], None]:
    """The ``gc.callbacks`` entry that keeps ``_collecting_loop``."""
    # imported here, not with this module: asyncio costs 30 ms to import, and only remote
    # reads need it
    from asyncio import _get_running_loop

    def track(phase: str, info: dict[str, int]) -> None:
        global _collecting_loop
        # a thread running no loop records None: nobody waits for it to answer
        _collecting_loop = _get_running_loop() if phase == "start" else None

    return track


class _Watcher:
    """Ends the pauses handed over by threads inside h5py calls, once h5py's lock is free."""

    def __init__(self) -> None:
        self.queue: SimpleQueue[int] = SimpleQueue()
        self.handed: set[int] = set()  # threads whose pause is not over yet
        self.generation = _generation
        self.thread = threading.Thread(target=self._run, name="nn_handler-gc", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from h5py._objects import phil

        while True:
            thread = self.queue.get()
            if thread == _STOP:
                return
            phil.acquire()  # free only once the thread that paused is out of its h5py call
            phil.release()
            with _paused_lock:
                if self.generation == _generation:  # a forked child counts afresh
                    self.handed.discard(thread)
                    _resume()


def _pause() -> None:
    """Count one more pause (``_paused_lock`` held); the first switches collection off."""
    global _paused, _was_enabled
    if _paused == 0:
        _was_enabled = gc.isenabled()
        gc.disable()
    _paused += 1


def _resume() -> None:
    """Count one pause less (``_paused_lock`` held); the last switches collection back on."""
    global _paused
    _paused -= 1
    if _paused == 0 and _was_enabled:
        gc.enable()


def _after_fork_in_child() -> None:
    global _collecting_loop, _generation, _make_lock, _paused, _paused_lock
    _generation += 1
    for hook in _in_forked_child:
        hook()
    _collecting_loop = None  # the thread that collected, if any, is not in this process
    # a thread of the parent may have held them at fork time; it does not exist here
    _make_lock = threading.Lock()
    _paused_lock = threading.Lock()
    if _paused and _was_enabled:  # nobody here would switch collection back on
        gc.enable()
    _paused = 0


def _stop_watcher_before_fork() -> None:
    """End this process's idle watcher thread, so that no thread of ours is alive at a fork.

    A watcher with a pause still to end (a thread inside an h5py call) is left running: the
    next ``pause_collection_until_h5py_returns`` starts a new one when needed.
    """
    with _paused_lock:
        watcher = _watcher.peek()
        if watcher is None or watcher.handed:
            return
        _watcher.pop()
    watcher.queue.put(_STOP)
    join_threads([watcher.thread], 1.0)


_before_fork: list[Callable[[], None]] = [_stop_watcher_before_fork]
_after_fork_in_parent: list[Callable[[], None]] = []
_in_forked_child: list[Callable[[], None]] = []


def around_fork(before: Callable[[], None], after_in_parent: Callable[[], None]) -> None:
    """Call ``before()`` ahead of every fork of this process and ``after_in_parent()`` after.

    For holders of threads: stop them in ``before`` so that no thread of ours is alive (or
    holds a lock) when the process forks, and start them again in ``after_in_parent``.
    """
    _before_fork.append(before)
    _after_fork_in_parent.append(after_in_parent)


def in_forked_child(hook: Callable[[], None]) -> None:
    """Call ``hook()`` in every child this process forks, first thing (and in theirs).

    For holders of descriptors that carry a lock (``storage/locks.py``): a forked child shares
    its parent's open file descriptions, so an inherited descriptor left open would keep the
    parent's locks alive after the parent dies. The hook closes them in the child (the parent's
    own descriptors, and so its locks, are untouched).
    """
    _in_forked_child.append(hook)


def join_threads(threads: Iterable[threading.Thread], timeout: float) -> bool:
    """Join ``threads`` and wait until the system has ended them too; False after ``timeout``.

    ``Thread.join`` returns once the thread's Python part is done, while the system thread
    is still exiting; a fork at that moment copies a process that still has it (Python 3.12+
    counts it and warns). Where ``/proc`` lists threads, wait for each to leave it.
    """
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return False
        task = f"/proc/{os.getpid()}/task/{thread.native_id}"
        while os.path.exists(task):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0002)
    return True


def _run_before_fork() -> None:
    for hook in reversed(_before_fork):
        hook()


def _run_after_fork_in_parent() -> None:
    for hook in _after_fork_in_parent:
        hook()


if AT_FORK:
    os.register_at_fork(
        before=_run_before_fork,
        after_in_parent=_run_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
else:  # no fork (Windows): nothing is ever inherited, every process starts afresh
    off("os.register_at_fork", "no process forks, so none inherits what this one holds")


class PerProcess(Generic[T]):
    """One value per process: empty after ``fork`` and after pickling.

    Args:
        factory: Makes the value on first ``get()`` in a process (must be picklable, e.g. a
            class or a module-level function); None when the holder sets the value itself.
    """

    __slots__ = ("_factory", "_generation", "_value")

    def __init__(self, factory: Callable[[], T] | None = None) -> None:
        self._factory = factory
        self._value: T | None = None
        self._generation = -1

    def get(self) -> T:
        """Return this process's value, made by the factory on first use.

        Raises:
            LookupError: the slot is empty in this process and has no factory.
        """
        value = self._value
        if value is not None and self._generation == _generation:
            return value
        if self._factory is None:
            raise LookupError("PerProcess slot is empty in this process and has no factory")
        return self.get_or_make(self._factory)

    def get_or_make(self, make: Callable[[], T]) -> T:
        """Return this process's value, made by ``make()`` when the slot is empty here."""
        value = self._value
        if value is not None and self._generation == _generation:
            return value
        with _make_lock:
            if self._value is None or self._generation != _generation:
                self._value, self._generation = make(), _generation
            return self._value

    def peek(self) -> T | None:
        """Return this process's value, or None (never makes one, never an inherited one)."""
        return self._value if self._generation == _generation else None

    def set(self, value: T) -> T:
        """Store ``value`` as this process's value and return it."""
        self._value, self._generation = value, _generation
        return value

    def pop(self) -> T | None:
        """Empty the slot and return what it held, this process's value or an inherited one."""
        value, self._value, self._generation = self._value, None, -1
        return value

    @property
    def inherited(self) -> bool:
        """True when the slot holds a value made in another process (before a ``fork``)."""
        return self._value is not None and self._generation != _generation

    def __getstate__(self) -> dict[str, Any]:
        return {"factory": self._factory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["factory"])  # type: ignore[misc]

    def __repr__(self) -> str:
        if self.peek() is not None:
            status = "set"
        elif self.inherited:
            status = "inherited"
        else:
            status = "empty"
        return f"PerProcess({status})"


_watcher: PerProcess[_Watcher] = PerProcess(_Watcher)  # the thread stays in its own process
