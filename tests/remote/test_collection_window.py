"""A collection already running on fsspec's loop thread when an h5py call on a URL begins.

h5py reads a remote file's metadata through ``SourceFile.readinto`` with its global lock held,
and the bytes come from fsspec's event-loop thread. Pausing automatic collection around the
wait does not stop a collection that had already begun on that thread: when it reaches a
cyclic h5py object it waits for h5py's lock, which the reading thread holds while it waits for
the loop, and the read stalls until its time bound.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np
import pytest

from nn_handler._io.storage.remote.failures import RetryPolicy
from nn_handler._io.storage.remote.file_object import SourceFile
from nn_handler._io.storage.remote.object_file import RemoteFile

from helpers.object_servers import put_object

# a stall fails every read at this bound (30 s) with "did not answer": that error is what these
# tests catch, not a time, so a loaded machine cannot fail a read that did not stall
BOUND = RetryPolicy(total_s=20, attempt_s=10)


class _Cycle:
    """A reference cycle holding an h5py object: only a collection frees it (under h5py's lock)."""


class _SlowLoopCollection:
    """A collection on fsspec's loop thread that is still running when the test goes on.

    Once armed, the next collection on the loop's thread signals ``started`` at its "start"
    phase and sleeps there (the interpreter's lock released: other threads run), as a
    collection does whose finalizers run Python code or wait; only after that does it free
    the garbage, h5py's object among it.
    """

    def __init__(self, loop_thread: int) -> None:
        self.loop_thread = loop_thread
        self.started = threading.Event()
        self.armed = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and self.armed and threading.get_ident() == self.loop_thread:
            self.armed = False
            self.started.set()
            time.sleep(0.3)


@pytest.fixture
def slow_loop_collection() -> Iterator[_SlowLoopCollection]:
    from fsspec.asyn import get_loop

    hook = _SlowLoopCollection(_thread_of(get_loop()))
    gc.callbacks.append(hook)
    enabled = gc.isenabled()
    gc.disable()  # the garbage is freed by the loop's collection, not an earlier one here
    try:
        yield hook
    finally:
        gc.callbacks.remove(hook)
        if enabled:
            gc.enable()


def _thread_of(loop: Any) -> int:
    """The ident of the thread that runs ``loop``."""
    found: list[int] = []
    done = threading.Event()

    def record() -> None:
        found.append(threading.get_ident())
        done.set()

    loop.call_soon_threadsafe(record)
    assert done.wait(5)
    return found[0]


def _cyclic_h5py_garbage(local: h5py.File) -> None:
    cycle = _Cycle()
    cycle.me, cycle.dset = cycle, local["z"]  # type: ignore[attr-defined]


def _open_remote(store: str, request: pytest.FixtureRequest, tmp_path: Any) -> RemoteFile:
    """A RemoteFile for a chunked dataset "x" (x[i, j] = 10 i + j) on the HTTP server or S3."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(50_000.0).reshape(-1, 10), chunks=(100, 10))
    if store == "http":
        http = request.getfixturevalue("http")
        path.rename(http.root / "f.h5")
        return RemoteFile(http.url("f.h5"), policy=BOUND)
    s3 = request.getfixturevalue("s3")
    put_object(s3, "window", "f.h5", path.read_bytes())
    return RemoteFile("s3://window/f.h5", s3, policy=BOUND)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", ["http", "s3"])
def test_an_h5py_call_on_a_url_does_not_wait_for_a_collection_already_on_the_loop(
    store: str,
    request: pytest.FixtureRequest,
    tmp_path: Any,
    slow_loop_collection: _SlowLoopCollection,
) -> None:
    with h5py.File(tmp_path / "local.h5", "w") as f:
        f["z"] = np.arange(3)
    local = h5py.File(tmp_path / "local.h5")
    remote = _open_remote(store, request, tmp_path)
    loop = remote.fetcher().fs.loop
    try:
        for _ in range(3):
            _cyclic_h5py_garbage(local)
            slow_loop_collection.armed = True
            loop.call_soon_threadsafe(gc.collect)
            assert slow_loop_collection.started.wait(5)
            slow_loop_collection.started.clear()
            with h5py.File(SourceFile(remote, block=4096), "r") as opened:  # h5py's lock taken
                assert opened["x"][123, 4] == 1234.0  # no stall: a stall fails at the bound
    finally:
        remote.close()
        local.close()


@pytest.mark.timeout(120)
def test_a_read_already_waiting_leaves_the_loop_when_its_thread_begins_a_collection(
    http: Any, tmp_path: Any, slow_loop_collection: _SlowLoopCollection
) -> None:
    # the collection begins on the loop's thread while the read waits for the server's reply
    # (an explicit gc.collect(), or the moment before the collection is recorded)
    with h5py.File(http.root / "f.h5", "w") as f:
        f["x"] = np.arange(1000.0)
    with h5py.File(tmp_path / "local.h5", "w") as f:
        f["z"] = np.arange(3)
    local = h5py.File(tmp_path / "local.h5")
    remote = RemoteFile(http.url("f.h5"), policy=BOUND)
    loop = remote.fetcher().fs.loop
    http.latency_s = 0.1
    try:
        _cyclic_h5py_garbage(local)
        slow_loop_collection.armed = True
        loop.call_later(0.03, gc.collect)  # the first read is waiting by then
        with h5py.File(SourceFile(remote), "r") as opened:
            assert opened["x"][999] == 999.0
        assert slow_loop_collection.started.is_set()
    finally:
        remote.close()
        local.close()


class _ReadsWhenFreed:
    """A cyclic object that reads a URL through h5py when a collection frees it."""

    def __init__(self, remote: RemoteFile) -> None:
        self.remote, self.me, self.value = remote, self, None

    def __del__(self) -> None:
        with h5py.File(SourceFile(self.remote), "r") as opened:
            _READ.append(float(opened["x"][7]))


_READ: list[float] = []


@pytest.mark.timeout(120)
def test_a_read_inside_a_collection_on_the_reading_thread_does_not_wait_for_itself(
    http: Any,
) -> None:
    with h5py.File(http.root / "f.h5", "w") as f:
        f["x"] = np.arange(10.0)
    remote = RemoteFile(http.url("f.h5"), policy=BOUND)
    _READ.clear()
    try:
        _ReadsWhenFreed(remote)
        gc.collect()
        assert _READ == [7.0]
    finally:
        remote.close()
