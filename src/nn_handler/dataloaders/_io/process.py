"""PerProcess: state that belongs to the process that made it.

File handles, memory maps, decoded-chunk caches, thread pools and locks must never be used by
another process: a forked DataLoader worker that reads through its parent's h5py handle can get
wrong data, a lock that a parent thread held at ``fork`` time stays locked in the child forever,
and h5py objects cannot be pickled for spawn / forkserver workers. Every holder of such state
keeps it in a ``PerProcess`` slot, which gives one rule for all of them:

* after ``fork`` the child finds every slot empty (a generation counter is bumped in the child
  by ``os.register_at_fork``; one integer compare per access, no system call);
* a pickled slot (spawn, forkserver, ``copy.copy``) travels empty;
* the value is made on first use in each process, by the slot's factory or the caller.

A value inherited from the parent is never returned by ``get``; ``pop`` hands it over once so
its holder can release it (close a handle, drop a map) without using it for reads.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["PerProcess", "collection_paused", "process_generation"]

T = TypeVar("T")

_generation = 0
_make_lock = threading.Lock()
_paused_lock = threading.Lock()
_paused = 0  # threads now inside collection_paused()
_was_enabled = False


def process_generation() -> int:
    """A number that changes in every forked child (and never in the process itself)."""
    return _generation


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
    global _paused, _was_enabled
    with _paused_lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
        born = _generation
    try:
        yield
    finally:
        with _paused_lock:
            if born == _generation:  # a forked child left it: its count starts afresh
                _paused -= 1
                if _paused == 0 and _was_enabled:
                    gc.enable()


def _after_fork_in_child() -> None:
    global _generation, _make_lock, _paused, _paused_lock
    _generation += 1
    # a thread of the parent may have held them at fork time; it does not exist here
    _make_lock = threading.Lock()
    _paused_lock = threading.Lock()
    if _paused and _was_enabled:  # nobody here would switch collection back on
        gc.enable()
    _paused = 0


os.register_at_fork(after_in_child=_after_fork_in_child)


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
