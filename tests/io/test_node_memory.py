"""Node memory regions (``_io/storage/node_memory.py``): made whole, shared, freed at last."""

from __future__ import annotations

import errno
import itertools
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nn_handler._io.storage import node_memory
from nn_handler._io.storage.byte_source import advise_spans

from helpers.process import gone_pid

TIMEOUT = 60


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(node_memory.SHM_DIR_ENV, str(tmp_path))
    return tmp_path


def regions(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_region_is_made_whole_and_found_by_name(shm: Path) -> None:
    first = node_memory.open_region("a", 100_000)
    assert first is not None and first.node_wide
    first.payload[:5] = [1, 2, 3, 4, 5]
    again = node_memory.open_region("a", 100_000)  # another process would find the same bytes
    assert again is not None and again.payload[:5].tolist() == [1, 2, 3, 4, 5]
    assert regions(shm) == ["nn_handler-a"]  # no temporary name left behind
    assert node_memory.node_regions_bytes() == os.stat(shm / "nn_handler-a").st_size
    with pytest.raises(OSError, match="not a region of 5 bytes"):
        node_memory.open_region("a", 5)  # the name holds another size


def test_the_last_live_user_unlinks_the_name(shm: Path) -> None:
    one = node_memory.open_region("b", 4096)
    two = node_memory.open_region("b", 4096)
    assert one is not None and two is not None
    one.release()
    assert regions(shm) == ["nn_handler-b"]  # this process still maps it through ``two``
    two.release()
    assert regions(shm) == []
    three = node_memory.open_region("c", 4096)
    assert three is not None
    three._users[three._users == os.getpid()] = gone_pid()  # (as if its user died since)
    four = node_memory.open_region("c", 4096)
    assert four is not None
    four.release()  # the one live user goes: the dead one does not keep the name
    assert regions(shm) == []


def _hold_region(name: str, ready: mp.synchronize.Event) -> None:
    region = node_memory.open_region(name, 4096)
    assert region is not None
    ready.set()
    os._exit(0)  # killed, say: never released


def test_a_region_whose_users_died_is_collected(shm: Path) -> None:
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_hold_region, args=("dead", ready))
    proc.start()
    assert ready.wait(TIMEOUT)
    proc.join(TIMEOUT)
    assert regions(shm) == ["nn_handler-dead"]
    (shm / f"nn_handler-x.{proc.pid}.1.tmp").write_bytes(b"")  # a maker killed half way
    assert node_memory.open_region("new", 4096) is not None
    assert regions(shm) == ["nn_handler-new"]


def test_no_room_is_none_not_a_crash_later(shm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(node_memory.os, "posix_fallocate", full)
    assert node_memory.open_region("big", 1 << 20) is None
    assert regions(shm) == []  # the temporary file is gone too


def test_a_missing_folder_has_no_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(node_memory.SHM_DIR_ENV, str(tmp_path / "missing"))
    assert node_memory.shm_room() == 0
    assert node_memory.open_region("x", 4096) is None


def _write_and_report(region: node_memory._TreeRegion, queue: mp.Queue) -> None:
    with region.lock():
        region.payload[0] = 7
    queue.put(int(region.payload[1]))


def test_anonymous_memory_is_shared_with_forked_processes() -> None:
    region = node_memory.anonymous_region(4096)
    region.payload[1] = 9
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_write_and_report, args=(region, queue))
    proc.start()
    assert queue.get(timeout=TIMEOUT) == 9
    proc.join(TIMEOUT)
    assert region.payload[0] == 7 and not region.node_wide


@given(
    st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 10**5)), max_size=40),
    st.integers(0, 10**6),
    st.integers(1, 10**5),
)
def test_advise_spans_cover_every_range_in_order(
    ranges: list[tuple[int, int]], gap: int, piece: int
) -> None:
    starts = np.array([s for s, _ in ranges], dtype=np.int64)
    ends = starts + np.array([n for _, n in ranges], dtype=np.int64)
    spans = advise_spans(starts, ends, gap)
    assert all(lo <= hi for lo, hi in spans)
    assert all(a[1] + gap < b[0] for a, b in itertools.pairwise(spans))  # apart
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        assert any(lo <= s and e <= hi for lo, hi in spans)  # each range inside one span
    assert len(spans) <= len(ranges)
    pieces = advise_spans(starts, ends, gap, piece)  # the same bytes, none longer than piece
    assert all(hi - lo <= piece for lo, hi in pieces)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(pieces))
    covered = sum(hi - lo for lo, hi in pieces)
    assert covered == sum(hi - lo for lo, hi in spans)
