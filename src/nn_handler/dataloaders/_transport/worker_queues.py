"""Queues between the main process and DataLoader workers, without a feeder thread per message.

``multiprocessing.Queue.put`` hands each message to a feeder thread, which pickles it and
writes it to the queue's pipe. For a DataLoader that is one thread wake-up, one GIL hand-over
and one context switch per batch in the main process (the index list going out) and in each
worker (the batch going back). On a 2-core machine whose cores the workers already fill, the
main process spent ~0.1 ms a batch in its feeder threads alone, and each such switch preempts
a worker.

``DirectQueue.put`` pickles and writes the message itself, in the calling thread, when the
pipe has room for it: a write that cannot block. Room is counted, not guessed: the bytes in the
pipe (``FIONREAD``), its capacity (``F_GETPIPE_SZ``) and the messages not yet read (the queue's
own semaphore), with a page lost to every message, under the queue's write lock, which every
writer takes. Where the room is not certain, the message goes the standard way (the feeder
thread), and so does every later message from this process, so that this process's messages
keep their order. ``get`` with a timeout waits on a ``select.poll`` object kept for the queue
instead of building a selector per call.

Linux only (``F_GETPIPE_SZ`` and ``FIONREAD`` on a pipe: ``_io.platform.PIPE_ROOM``; with
them ``sem_getvalue`` and ``poll``); elsewhere ``direct_context`` returns the context unchanged and
every queue is a standard one (said once, at DEBUG level).
"""

from __future__ import annotations

import array
import multiprocessing.queues
import queue
import select
import time
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from typing import Any

from ..._io import PIPE_ROOM, off

if PIPE_ROOM:
    import fcntl
    import termios

__all__ = ["DirectQueue", "direct_context"]

_PAGE = 4096  # a pipe holds whole pages: a message can leave the rest of its last one unused
_WRITES_PER_MESSAGE = 2  # Connection.send_bytes writes a long message's header on its own


class DirectQueue(multiprocessing.queues.Queue):  # type: ignore[type-arg]
    """A ``multiprocessing.Queue`` whose ``put`` writes in the calling thread when it cannot block.

    Messages, order per writer, ``get``, pickling to spawned processes and closing are those
    of ``multiprocessing.Queue``; only the thread that pickles and writes changes.
    """

    def _reset(self, after_fork: bool = False) -> None:
        super()._reset(after_fork)  # type: ignore[misc]  # private in typeshed
        self._direct = PIPE_ROOM
        self._capacity = 0  # the pipe's, in bytes; asked on the first put
        self._poller: Any = None

    def put(self, obj: Any, block: bool = True, timeout: float | None = None) -> None:
        """Put ``obj`` on the queue: written now when the pipe has room, else by the feeder.

        Raises:
            ValueError: the queue is closed.
            queue.Full: ``block`` is false or ``timeout`` passed, and the queue is at its size.
        """
        if not self._direct:
            super().put(obj, block, timeout)
            return
        q: Any = self
        if q._closed:
            raise ValueError(f"Queue {self!r} is closed")
        data = ForkingPickler.dumps(obj)
        if not q._sem.acquire(block, timeout):
            raise queue.Full
        sent = False
        try:
            with q._wlock:
                if self._has_room(len(data)):
                    q._send_bytes(data)
                    sent = True
        finally:
            if not sent:
                q._sem.release()
        if not sent:  # from now on the feeder, which keeps order behind what it writes
            self._direct = False
            super().put(obj, block, timeout)

    def _has_room(self, nbytes: int) -> bool:
        """Whether a message of ``nbytes`` fits the pipe now (the write lock held)."""
        q: Any = self
        fd = q._writer.fileno()
        if not self._capacity:
            self._capacity = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        queued = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, queued, True)
        unread = q._maxsize - q._sem._semlock._get_value()  # put, not yet got (this one too)
        pages = -(-queued[0] // _PAGE) + _WRITES_PER_MESSAGE * unread
        need = -(-(nbytes + 4) // _PAGE) + _WRITES_PER_MESSAGE
        return bool((pages + need) * _PAGE <= self._capacity)

    def close(self) -> None:
        """Say that this process puts no more: its write end closes (after the feeder's flush)."""
        q: Any = self
        feeder = q._thread is not None
        super().close()
        if not feeder:  # the feeder closes it itself once its messages are out
            q._writer.close()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return a message, as ``multiprocessing.Queue.get``.

        Raises:
            ValueError: the queue is closed.
            queue.Empty: none came within ``timeout``, or ``block`` is false and none is there.
        """
        if not (PIPE_ROOM and block and timeout is not None):
            return super().get(block, timeout)
        q: Any = self
        if q._closed:
            raise ValueError(f"Queue {self!r} is closed")
        deadline = time.monotonic() + timeout
        if not q._rlock.acquire(True, timeout):
            raise queue.Empty
        try:
            if not self._readable(deadline - time.monotonic()):
                raise queue.Empty
            message = q._recv_bytes()
            q._sem.release()
        finally:
            q._rlock.release()
        return ForkingPickler.loads(message)

    def _readable(self, timeout: float) -> bool:
        if self._poller is None:
            poller = select.poll()
            poller.register(self._reader.fileno(), select.POLLIN)  # type: ignore[attr-defined]
            self._poller = poller
        return bool(self._poller.poll(max(0.0, timeout) * 1000))


def _queue(context: BaseContext, maxsize: int = 0) -> DirectQueue:
    return DirectQueue(maxsize, ctx=context.get_context())


_direct_types: dict[type[BaseContext], type[BaseContext]] = {}


def _direct_type(base: type[BaseContext]) -> type[BaseContext]:
    made = _direct_types.get(base)
    if made is None:
        made = type(f"Direct{base.__name__}", (base,), {"Queue": _queue, "__module__": __name__})
        _direct_types[base] = made
    return made


def direct_context(context: BaseContext) -> BaseContext:
    """``context`` whose ``Queue()`` makes ``DirectQueue``s (on Linux; elsewhere ``context``).

    Args:
        context: A concrete start-method context (``multiprocessing.get_context("fork")``).
    """
    if not PIPE_ROOM:
        off("F_GETPIPE_SZ and FIONREAD", "worker queues write through their feeder threads")
        return context
    return _direct_type(type(context))()
