"""RemoteFile: one object in a store (or one file on an HTTP server) as a ``ByteSource``.

The object's version (size + ETag, version id or date) is recorded once, when the first
``RemoteFile`` for it is made, and travels with every copy (pickles, forked workers); every
range request is conditional on it (``s3.py``, ``http.py``), so a replaced object fails the
first read after the change with a ``FileChangedError`` naming the URL: never new bytes at old
offsets, never a mix of versions.

A ``read_ranges`` call is planned as few requests as possible (``ranges.plan_requests``: near
neighbours merged, long runs split) and all of them are sent at once, up to
``RetryPolicy.concurrency`` in flight, on fsspec's event loop thread. TransientError failures are
retried with backoff until ``RetryPolicy.total_s``; then, or at once for a failure no retry can
fix, a ``RemoteReadError`` names the URL, the range, the last status and what was tried.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from ...errors import FileChangedError, RemoteAccessError, RemoteReadError
from ...process import PerProcess, collection_paused, holds_h5py_lock, loop_may_wait_for_h5py
from ..byte_source import Buffer
from ..identity import ObjectVersion
from .failures import ChangedError, DeniedError, RequestError, RetryPolicy, TransientError
from .generic import Fetcher
from .job_blocks import job_store, shared_read
from .ranges import Request, plan_requests
from .stores import close_fetcher, close_fetcher_here, credentials_hint, open_fetcher
from .urls import safe_url

__all__ = ["RemoteFile"]

T = TypeVar("T")
Work = Callable[[Fetcher], Coroutine[Any, Any, T]]  # a read, given the client to send it by
# how often a wait with h5py's lock held looks whether the loop's thread began a collection
_WATCH_S = 0.005


class RemoteFile:
    """An object read by byte ranges; a ``ByteSource`` (see the module docstring).

    Args:
        url: ``s3://bucket/key``, ``https://host/path``, ``gs://…``, or any fsspec URL.
        storage_options: Passed to the fsspec filesystem (credentials, endpoint, …).
        version: The version to read; None: the current one, asked for now.
        policy: Time limits, retries, request merging and concurrency.

    Raises:
        FileNotFoundError: no object at ``url``.
        RemoteAccessError: credentials are missing or refused (the message says what to set).
        RemoteReadError: the store kept failing while the version was asked for.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        version: ObjectVersion | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.policy = policy or RetryPolicy()
        self._fetcher: PerProcess[Fetcher] = PerProcess()
        #: requests sent and bytes received by this object in this process (tests, benchmarks)
        self.requests = 0
        self.fetched_bytes = 0
        #: seconds paused between attempts (a store that throttles: 503 SlowDown, 429)
        self.backoff_s = 0.0
        self._version = version if version is not None else self._head()

    @property
    def name(self) -> str:
        """The URL, without user info or query string."""
        return safe_url(self.url)

    @property
    def identity(self) -> ObjectVersion:
        """The version recorded at open (every read is conditional on it)."""
        return self._version

    def size(self) -> int:
        """Bytes in the recorded version (a read of a changed object fails instead)."""
        return self._version.size

    def read_ranges(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """Fill each buffer with its range of the object (see ``ByteSource.read_ranges``).

        Raises:
            ValueError: a buffer's size is not its range's length, or a range is negative.
            FileChangedError: a range ends past the object's end, or the object changed.
            RemoteReadError: the store kept failing (after retries within the time bound).
            RemoteAccessError: the credentials were refused.
        """
        views = _check_buffers(ranges, buffers)
        self._check_ends(ranges)
        plan = plan_requests(ranges, gap=self.policy.gap, max_request=self.policy.max_request)
        if not plan:
            return
        fetched = self._run(lambda fetcher: self._fetch_all(plan, fetcher))
        for request, data in zip(plan, fetched, strict=True):
            for k in request.members:
                offset, length = ranges[k]
                start = offset - request.start
                views[k][:] = np.frombuffer(data, np.uint8, length, start)

    def read_metadata(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """As ``read_ranges``, each range fetched by one process of the job (``job_blocks.py``).

        Without a job store (no ``torch.distributed`` group in this process), a plain read.
        """
        store = job_store()
        if store is None:
            self.read_ranges(ranges, buffers)
            return
        _check_buffers(ranges, buffers)
        self._check_ends(ranges)
        shared_read(self, ranges, buffers, store, self.policy.total_s + self.policy.attempt_s)

    def close(self) -> None:
        """Drop this process's client; the next read makes a new one.

        A filesystem made for this file alone (``skip_instance_cache``) closes its connections
        now; one fsspec shares with other files opened with the same options stays open for
        them (fsspec closes it at exit).
        """
        fetcher = self._fetcher.pop()
        if fetcher is not None:
            close_fetcher(fetcher)

    def fetcher(self) -> Fetcher:
        """This process's fetcher (made on first use: see ``stores.open_fetcher``)."""
        return self._fetcher.get_or_make(
            lambda: open_fetcher(self.url, self.storage_options, self.policy)
        )

    def _head(self) -> ObjectVersion:
        return self._run(lambda fetcher: self._retry(fetcher.head, "the object's size and ETag"))

    def _check_ends(self, ranges: Sequence[tuple[int, int]]) -> None:
        end = max((o + n for o, n in ranges), default=0)
        if end > self._version.size:
            raise FileChangedError(
                f"{self.name!r} has {self._version.size} bytes, but bytes up to {end} were "
                "asked for: the offsets came from another version of the object. Build the "
                "dataset again",
                self.name,
            )

    async def _fetch_all(self, plan: list[Request], fetcher: Fetcher) -> list[bytes]:
        limit = asyncio.Semaphore(self.policy.concurrency)
        step = self.policy.max_request

        async def one(start: int, end: int) -> bytes:
            async with limit:
                what = f"bytes [{start}, {end})"
                data: bytes = await self._retry(lambda: self._get(fetcher, start, end), what)
                return data

        # A task group, not gather: the first request that fails for good cancels the others,
        # where gather would leave them retrying on fsspec's thread after the read has failed.
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    [
                        group.create_task(one(s, min(s + step, r.end)))
                        for s in range(r.start, r.end, step)
                    ]
                    for r in plan
                ]
        except BaseExceptionGroup as failed:
            first = failed.exceptions[0]  # the failure that cancelled the rest, cause kept
            raise first from first.__cause__
        return [
            b"".join(t.result() for t in parts) if len(parts) > 1 else parts[0].result()
            for parts in tasks
        ]

    async def _get(self, fetcher: Fetcher, start: int, end: int) -> bytes:
        self.requests += 1
        data = await fetcher.get(start, end, self._version)
        if len(data) != end - start:
            raise TransientError("short reply", f"got {len(data)} of {end - start} bytes")
        self.fetched_bytes += len(data)
        return data

    async def _retry(self, attempt: Callable[[], Coroutine[Any, Any, T]], what: str) -> T:
        """Run ``attempt()`` until it succeeds, retrying transient failures within the bound."""
        policy, began, tries = self.policy, time.monotonic(), 0
        while True:
            tries += 1
            try:
                return await asyncio.wait_for(attempt(), policy.attempt_s)
            except TimeoutError:
                failure: RequestError = TransientError(
                    "time-out", f"no reply in {policy.attempt_s}s"
                )
            except TransientError as exc:
                failure = exc
            except RequestError as exc:
                raise self._error(exc, what, tries, time.monotonic() - began) from exc
            pause = policy.backoff(tries)
            if time.monotonic() - began + pause >= policy.total_s:
                raise self._error(failure, what, tries, time.monotonic() - began) from failure
            self.backoff_s += pause
            await asyncio.sleep(pause)

    def _error(self, failure: RequestError, what: str, tries: int, spent: float) -> OSError:
        tried = f"{tries} attempt{'s' if tries > 1 else ''} over {spent:.1f}s"
        if isinstance(failure, ChangedError) and getattr(self, "_version", None) is None:
            return FileNotFoundError(
                errno.ENOENT, f"no object at url={self.name!r} ({failure})", self.name
            )
        if isinstance(failure, ChangedError):
            return FileChangedError(
                f"{self.name!r} changed after the dataset was built (reading {what}: "
                f"{failure}; recorded at open: {self._version_text()}); the offsets read from "
                "it no longer hold. Build the dataset again (and write a new object rather than "
                "replacing one while a loader reads it)",
                self.name,
            )
        if isinstance(failure, DeniedError):
            return RemoteAccessError(
                f"{self.name!r} refused access while reading {what} ({failure}): "
                f"{credentials_hint(self.url)}",
                self.name,
            )
        kind = "kept failing" if isinstance(failure, TransientError) else "failed"
        return RemoteReadError(
            f"{self.name!r} {kind} while reading {what}: last status {failure.status} "
            f"({failure.detail}); {tried}, each attempt limited to {self.policy.attempt_s}s "
            f"and all within {self.policy.total_s}s (RetryPolicy)",
            self.name,
        )

    def _version_text(self) -> str:
        version = getattr(self, "_version", None)
        return version.describe() if version is not None else "not yet recorded"

    def _run(self, work: Work[T]) -> T:
        """Run ``work`` on fsspec's event loop thread and wait (bounded) for its result.

        Whatever ends the wait (the result, the bound, an interrupt) ends the coroutine too:
        no request outlives the call that sent it. When the loop's thread is in a collection
        that may wait for h5py's lock, which this thread holds (``loop_may_wait_for_h5py``),
        the read is sent from this thread instead.
        """
        from fsspec.asyn import get_loop

        fetcher = self.fetcher()
        loop = getattr(getattr(fetcher, "fs", None), "loop", None) or get_loop()
        here = _running_loop()
        if here is loop:
            raise RuntimeError(
                f"{self.name!r} was read from fsspec's event loop thread, where the read would "
                "wait for itself: read it from another thread"
            )
        # (a thread that runs a loop of its own cannot run another: it waits for fsspec's)
        with collection_paused():  # before the coroutine can start on the loop's thread
            if here is None and loop_may_wait_for_h5py(loop):
                return self._run_here(work)
            future = asyncio.run_coroutine_threadsafe(work(fetcher), loop)
            try:
                # only a wait inside an h5py call can meet that collection: other reads (the
                # chunk engine's) wait without waking every few milliseconds
                if self._wait(future, loop, watch=here is None and holds_h5py_lock()):
                    return future.result()
            finally:
                future.cancel()
            return self._run_here(work)

    def _wait(self, future: Future[Any], loop: asyncio.AbstractEventLoop, watch: bool) -> bool:
        """Wait for ``future`` within the bound: True once it is done.

        False (with ``watch``) as soon as the loop's thread is in a collection that may wait
        for h5py's lock held here: the caller reads on this thread instead.
        """
        deadline = time.monotonic() + self.policy.total_s + self.policy.attempt_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                future.result(timeout=min(left, _WATCH_S) if watch else left)
            except TimeoutError:
                if future.done():  # the coroutine's own TimeoutError: the caller raises it
                    return True
                if watch and loop_may_wait_for_h5py(loop):
                    return False
                continue
            return True
        if not future.cancel():  # it ended as the wait ran out: that ending stands
            return True
        raise RemoteReadError(
            f"{self.name!r} did not answer within {self.policy.total_s}s", self.name
        )

    def _run_here(self, work: Work[T]) -> T:
        """Run ``work`` on this thread, on an event loop and a client of its own (then closed).

        Costs a connection and a client per call: only for a read that must not wait for the
        loop's thread.
        """
        with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
            return runner.run(self._with_own_client(work))

    async def _with_own_client(self, work: Work[T]) -> T:
        options = {
            **self.storage_options,
            "asynchronous": True,
            "loop": asyncio.get_running_loop(),
            "skip_instance_cache": True,
        }
        fetcher = open_fetcher(self.url, options, self.policy)
        try:
            return await work(fetcher)
        finally:
            await close_fetcher_here(fetcher)

    def __repr__(self) -> str:
        return f"RemoteFile({self.name!r}, {self._version_text()})"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _check_buffers(
    ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]
) -> list[np.ndarray[Any, np.dtype[np.uint8]]]:
    """Flat byte views of ``buffers``, checked against ``ranges``."""
    if len(ranges) != len(buffers):
        raise ValueError(f"{len(ranges)} ranges but {len(buffers)} buffers")
    views = []
    for (offset, length), buf in zip(ranges, buffers, strict=True):
        view = np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf
        if not view.flags.c_contiguous or not view.flags.writeable:
            raise ValueError("buffers must be writable and C-contiguous")
        flat = view.reshape(-1).view(np.uint8)
        if offset < 0 or length < 0 or flat.nbytes != length:
            raise ValueError(
                f"range (offset={offset}, length={length}) needs a buffer of {length} bytes, "
                f"got {flat.nbytes} bytes"
            )
        views.append(flat)
    return views
