"""One fetch per range per node: processes that miss the same bytes at once take turns."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nn_handler._io.storage import locks as ofd_locks
from nn_handler._io.storage.remote.cached_file import CachedFile
from nn_handler._io.storage.remote.object_file import RemoteFile
from nn_handler._io.storage.remote.single_flight import RangeLocks

from helpers.process import together

pytestmark = pytest.mark.skipif(not ofd_locks.OFD, reason="needs open-file-description locks")

DATA = np.random.default_rng(5).integers(0, 256, 2_000_000, dtype=np.uint8).tobytes()
RANGES = [(k * 97_000, 40_000) for k in range(20)]
TIMEOUT = 60


def _read(source: Any, ranges: list[tuple[int, int]]) -> list[bytes]:
    buffers = [np.empty(n, np.uint8) for _, n in ranges]
    source.read_ranges(ranges, buffers)
    return [b.tobytes() for b in buffers]


def _rank(url: str, cache: str, count: int, start: Any, results: Any) -> None:
    source = CachedFile(RemoteFile(url), cache)
    start.wait(TIMEOUT)  # every process misses the same ranges at the same moment
    ranges = RANGES[:count]
    got = _read(source, ranges)
    ok = got == [DATA[o : o + n] for o, n in ranges]
    results.put((ok, source.remote.requests, source.remote.backoff_s))
    source.close()


def _together(
    url: str, caches: list[str], count: int = len(RANGES), wait_s: float = TIMEOUT
) -> list[tuple[bool, int, float]]:
    """One forked process per cache dir reads the first ``count`` ranges, all at once.

    Returns each process's ``(same bytes, range requests, seconds of backoff)``.
    """
    return together(_rank, [(url, cache, count) for cache in caches], wait_s)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_processes_that_miss_the_same_ranges_together_fetch_them_once(
    http: Any, tmp_path: Path
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    http.latency_s = 0.05  # a store 50 ms away: every process misses before any has fetched
    alone = CachedFile(RemoteFile(http.url("f.bin")), str(tmp_path / "alone"))
    assert _read(alone, RANGES) == [DATA[o : o + n] for o, n in RANGES]
    one = alone.remote.requests  # range requests of one process
    before = http.requests
    out = _together(http.url("f.bin"), [str(tmp_path / "node")] * 8)
    assert all(ok for ok, _, _ in out)
    ranges = sum(requests for _, requests, _ in out)
    assert ranges == one, (ranges, one)  # the 8 processes' range requests together: those of one
    assert http.requests - before == ranges + 8  # and each process's own version check


def _hold(path: str, ranges: list[tuple[int, int]], held: Any) -> None:
    with RangeLocks(path).held(ranges):
        held.set()
        time.sleep(TIMEOUT)


@pytest.mark.timeout(60)
def test_a_range_lock_excludes_overlaps_only_and_dies_with_its_holder(tmp_path: Path) -> None:
    path = str(tmp_path / "fetching")
    ctx = mp.get_context("fork")
    held = ctx.Event()
    holder = ctx.Process(target=_hold, args=(path, [(0, 1000)], held))
    holder.start()
    try:
        assert held.wait(TIMEOUT)
        locks = RangeLocks(path)
        began = time.monotonic()
        with locks.held([(1000, 2000)]):  # next to it: not held
            assert time.monotonic() - began < 1
        began = time.monotonic()
        with locks.held([(500, 1500)], wait_s=0.3):  # held: waits, then goes on (bounded)
            assert 0.3 <= time.monotonic() - began < 5
        os.kill(holder.pid, signal.SIGKILL)  # a fetcher that dies mid-fetch
        holder.join(TIMEOUT)
        began = time.monotonic()
        with locks.held([(500, 1500)]):
            assert time.monotonic() - began < 1  # released by the kernel
        locks.close()
    finally:
        holder.kill()
        holder.join(TIMEOUT)


def test_threads_of_one_process_take_turns(tmp_path: Path) -> None:
    locks = RangeLocks(str(tmp_path / "fetching"))
    inside, overlapped = [0], [False]
    guard = threading.Lock()

    def fetch() -> None:
        with locks.held([(0, 100)]):
            with guard:
                inside[0] += 1
                overlapped[0] |= inside[0] > 1
            time.sleep(0.02)
            with guard:
                inside[0] -= 1

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not overlapped[0]
    assert locks.waited_s > 0.02
    locks.close()


def test_without_locks_every_process_fetches_for_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ofd_locks, "OFD", False)
    with RangeLocks(str(tmp_path / "fetching")).held([(0, 10)]):
        pass
    assert not (tmp_path / "fetching").exists()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ranks_against_a_throttling_store_all_read_after_backing_off(
    http: Any, tmp_path: Path
) -> None:
    (http.root / "f.bin").write_bytes(DATA)
    http.throttle_per_s = 10  # 503 SlowDown above 10 requests a second
    caches = [str(tmp_path / f"n{r}") for r in range(8)]  # nothing shared: all ask the store
    out = _together(http.url("f.bin"), caches, count=4, wait_s=150)
    assert all(ok for ok, _, _ in out)
    assert http.throttled > 0  # the store did say SlowDown
    assert sum(backoff for _, _, backoff in out) > 0  # and the ranks waited, then read
