"""The per-process thread pool that decodes compressed chunks.

The pool is created on first use in whichever process decodes, and never crosses a ``fork``: a
forked child (a DataLoader worker) drops the reference it inherited (the parent's threads do not
exist there) and builds its own pool on first use. Spawned workers import this module afresh.

Size: ``set_decode_threads(n)`` in this process, else the environment variable
``NN_HANDLER_DECODE_THREADS`` (reaches spawned workers too), else every CPU this process may run on
(``os.sched_getaffinity``), divided among DataLoader worker processes (torch's worker info, asked
when the pool sizes itself). No cap: the decoders release the GIL and a thread's memory is a few
chunks of scratch, while ``num_workers=0`` is often the fastest loader and a fixed cap would
leave the cores of a bigger machine idle in it. Workers divide the cores so that N workers never
run more decode threads than there are cores (N processes of ``cores`` threads each
oversubscribe).

Order: the blocks a read waits for (``run_parallel``) are decoded before blocks filled ahead
of need (``submit``), whatever was queued first. Readahead queues a whole window of blocks; a
read that found a block of its own window unclaimed would otherwise wait for the next window
to be decoded before its block, and then leave the threads idle while it serves the rest.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from ..._validate import check_parallel, usable_cores
from ..process import PerProcess, around_fork, join_threads

__all__ = [
    "decode_threads",
    "loader_workers",
    "run_parallel",
    "set_decode_threads",
    "submit",
]

T = TypeVar("T")
R = TypeVar("R")

_log = logging.getLogger(__name__)

ENV_VAR = "NN_HANDLER_DECODE_THREADS"
_IN_FLIGHT_PER_THREAD = 4  # queued tasks per thread: keeps threads busy, bounds memory
_READ, _AHEAD = 0, 1  # priorities: a waiting read first, then readahead

_Work = tuple[int, int, Callable[[Any], Any], Any, "Future[Any]"]  # priority, order, fn, item


class _Pool:
    """This process's decode threads, serving waiting reads before readahead.

    Works wait in a heap (most urgent first, then in the order they came). At most ``size``
    runners take works from it, each until it is empty; a work added when fewer are running
    starts another (checked under the heap's lock, so no work is ever left without a runner).
    """

    def __init__(self, threads: int) -> None:
        self.size = threads
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="nn_handler-decode")
        self._lock = threading.Lock()
        self._works: list[_Work] = []
        self._order = itertools.count()
        self._runners = 0
        self._parked = False  # while this process forks: no runner starts or goes on

    def park(self, timeout: float) -> bool:
        """Let this pool's threads finish their work at hand and exit; True once all have.

        Works submitted meanwhile wait in the heap for ``unpark``. Called before this process
        forks, so that no decode thread is alive (or holds a lock) at the fork.
        """
        with self._lock:
            self._parked = True
            executor = self.executor
        executor.shutdown(wait=False)  # idle threads exit; a runner exits after its work
        return join_threads(list(executor._threads), timeout)

    def unpark(self) -> None:
        """Start threads again after ``park``, with runners for the works that waited."""
        with self._lock:
            self._parked = False
            self.executor = ThreadPoolExecutor(self.size, thread_name_prefix="nn_handler-decode")
            start = max(0, min(self.size - self._runners, len(self._works)))
            self._runners += start
            for _ in range(start):
                self.executor.submit(self._run)

    def submit(self, fn: Callable[[T], R], item: T, priority: int) -> Future[R]:
        future: Future[R] = Future()
        work: _Work = (priority, next(self._order), fn, item, future)
        with self._lock:
            heapq.heappush(self._works, work)
            start = self._runners < self.size and not self._parked
            self._runners += start
        if start:
            try:
                self.executor.submit(self._run)
            except RuntimeError:  # shut down: take the work back unless a runner has it
                with self._lock:
                    self._runners -= 1
                    if any(w is work for w in self._works):
                        self._works.remove(work)
                        heapq.heapify(self._works)
                        raise
        return future

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._works or self._parked:
                    self._runners -= 1
                    return
                _, _, fn, item, future = heapq.heappop(self._works)
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            try:
                result = fn(item)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)


_lock: PerProcess[threading.Lock] = PerProcess(threading.Lock)
_pool: PerProcess[_Pool] = PerProcess()
_requested: int | None = None


def loader_workers() -> int:
    """How many DataLoader worker processes share the cores with this one (1 outside them).

    torch's worker info, found without importing torch (``_io`` stays free of it): torch
    started every DataLoader worker, so a process that has not imported it is none.
    """
    data = sys.modules.get("torch.utils.data")
    info = None if data is None else data.get_worker_info()
    return 1 if info is None else int(info.num_workers)


def set_decode_threads(threads: int | None) -> None:
    """Set how many threads decode compressed HDF5 chunks in this process.

    Applies to this process and to DataLoader workers forked from it after the call; spawned
    workers read ``NN_HANDLER_DECODE_THREADS`` instead (or call this in ``worker_init_fn``).

    Args:
        threads: Threads (``1`` decodes in the calling thread), or None for the default: the
            CPUs this process may use, divided among DataLoader worker processes.

    Raises:
        TypeError / ValueError: ``threads`` is not None or an integer from 1 to 8 per CPU
            (at least 64; ``_validate.max_parallel``).
    """
    global _requested
    value = None if threads is None else check_parallel("threads", threads, minimum=1)
    with _lock.get():
        _requested = value
        _drop_pool()


def decode_threads() -> int:
    """Return how many threads decode chunks in this process (see ``set_decode_threads``)."""
    if _requested is not None:
        return _requested
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        try:
            return check_parallel(ENV_VAR, int(env), minimum=1)
        except ValueError as exc:
            raise ValueError(
                f"{ENV_VAR} must be a positive integer, got {env!r} ({exc}); unset it for the "
                "default"
            ) from exc
    return max(1, usable_cores() // max(1, loader_workers()))


def run_parallel(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """Return ``[fn(item) for item in items]``, computed in the decode pool.

    At most a few tasks per thread are queued at a time, so a long stream of items never
    builds a long queue. If a task raises, the tasks not yet started are cancelled, the running
    ones are waited for (they may be writing into the caller's buffers), and the error is raised.
    """
    pool = _executor()
    if pool is None:
        return [fn(item) for item in items]
    limit = _IN_FLIGHT_PER_THREAD * pool.size
    results: list[R] = []
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item, _READ))
            if len(pending) >= limit:
                results.append(pending.popleft().result())
        while pending:
            results.append(pending.popleft().result())
    except BaseException:
        for future in pending:
            future.cancel()
        wait(pending)
        raise
    return results


def submit(fn: Callable[[T], R], item: T) -> Future[R] | None:
    """Start ``fn(item)`` in the decode pool, after any waiting read's work; return its future.

    None when there is no pool (one decode thread): work started ahead of need (readahead) is
    then simply not started.
    """
    pool = _executor()
    return None if pool is None else pool.submit(fn, item, _AHEAD)


def _executor() -> _Pool | None:
    threads = decode_threads()
    if threads < 2:
        return None
    pool = _pool.peek()
    if pool is not None and pool.size == threads:
        return pool
    with _lock.get():
        pool = _pool.peek()
        if pool is None or pool.size != threads:
            _drop_pool()
            pool = _pool.set(_Pool(threads))
        return pool


def _drop_pool() -> None:
    own = _pool.peek()  # an inherited pool's threads do not exist in this process
    _pool.pop()
    if own is not None:
        own.executor.shutdown(wait=False)


_PARK_TIMEOUT = 10.0  # seconds a fork waits for decode threads to finish the work at hand


def _park_before_fork() -> None:
    pool = _pool.peek()
    if pool is not None and not pool.park(_PARK_TIMEOUT):
        _log.warning(
            "nn_handler: a decode thread was still busy after %.0f s when this process forked; "
            "the child may inherit a lock it held",
            _PARK_TIMEOUT,
        )


def _unpark_after_fork() -> None:
    pool = _pool.peek()
    if pool is not None:
        pool.unpark()


# No decode thread of ours is alive when this process forks (a DataLoader worker, any fork):
# a thread that holds a lock at the fork (h5py's, an allocator's) leaves the child waiting for
# it forever, and Python 3.12+ warns about every fork of a multi-threaded process.
around_fork(_park_before_fork, _unpark_after_fork)
