"""Servers for the remote tests: an HTTP Range server per test, moto's S3 server per module."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nn_handler._io.storage.remote.failures import RetryPolicy

from helpers.object_servers import RangeServer, range_server, s3_server


@pytest.fixture
def http(tmp_path: Path) -> Iterator[RangeServer]:
    """An HTTP server for ``tmp_path / "www"``."""
    root = tmp_path / "www"
    root.mkdir()
    with range_server(root) as server:
        yield server


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """moto's S3 server; the ``storage_options`` that reach it."""
    with s3_server() as options:
        yield options


GRACE_S = RetryPolicy().total_s + RetryPolicy().attempt_s  # the bound of one read


@pytest.fixture(autouse=True)
def collect_after_each_test() -> Iterator[None]:
    """With ``NN_HANDLER_TEST_GC=1``, collect garbage as each test ends.

    An object a test leaves to the collector (an HTTP session, a transport) is otherwise
    freed whenever a later collection happens to run, and a warning it gives there fails
    whichever test is running then: collecting at once pins it on the test that left it.
    (Defined first, this runs last: after the test's servers have stopped and its requests
    ended.) Off by default (a collection per test costs time); switch it on to hunt leaks.
    """
    yield
    if os.environ.get("NN_HANDLER_TEST_GC") == "1":
        gc.collect()


@pytest.fixture(autouse=True)
def no_request_outlives_its_test() -> Iterator[None]:
    """Fail a test that leaves requests running on fsspec's event loop thread.

    A request still retrying after its read has ended holds a connection and draws on the
    process's state behind the next tests' backs. Readahead filled in the background may still
    be in flight when a test ends (and its server may be gone): it gets the bound of one read
    to end on its own.
    """
    yield
    began = time.monotonic()
    while (left := requests_in_flight()) and time.monotonic() - began < GRACE_S:
        time.sleep(0.05)
    assert not left, f"{len(left)} requests still running on fsspec's loop: {left[:3]}"


def requests_in_flight() -> list[str]:
    """The tasks now pending on fsspec's event loop, as text."""
    from fsspec import asyn

    loop = asyn.loop[0]
    if loop is None or loop.is_closed():
        return []

    async def pending() -> list[str]:
        me = asyncio.current_task()
        return [repr(t) for t in asyncio.all_tasks() if t is not me]

    return asyncio.run_coroutine_threadsafe(pending(), loop).result(5)
