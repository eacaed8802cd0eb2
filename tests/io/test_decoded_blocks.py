"""Datasets decoded whole, once, into memory the node shares (``_io/chunks/decoded.py``)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.forkserver as forkserver
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nn_handler._io import notice_board, notices
from nn_handler._io.chunks import decoded as decoded_module
from nn_handler._io.chunks import sources
from nn_handler._io.chunks.decoded import DecodedBlocks
from nn_handler._io.storage import shm_folder
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    FileOptions,
    H5LazyDataset,
    batched_loader,
    set_decode_threads,
)

from helpers.files import h5_rows
from helpers.process import process_with_pid

TIMEOUT = 120
ROWS = 203  # gzip + shuffle chunks of 8 rows: 26 blocks of 96 KiB (2.4 MB decoded)


def big_rows(n: int = ROWS) -> np.ndarray[Any, Any]:
    data = np.random.default_rng(0).standard_normal((n, 3, 32, 32)).astype(np.float32)
    data[:, 0, 0, 0] = np.arange(n)
    return data


def engine_of(ds: H5LazyDataset) -> Any:
    return ds._row_readers()[0]._rows.engine


@pytest.fixture(autouse=True)
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user's folder of regions (in a root of this test's own)."""
    root = tmp_path / "shm"
    root.mkdir()
    monkeypatch.setenv(shm_folder.SHM_DIR_ENV, str(root))
    monkeypatch.delenv(decoded_module.BUDGET_ENV, raising=False)
    set_decode_threads(None)
    yield Path(shm_folder.user_folder())
    set_decode_threads(None)


@pytest.fixture
def fresh_notices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Notices said before this test (in this process or, job-wide, by its workers) forgotten."""
    monkeypatch.setattr(notices, "_said", set())
    monkeypatch.setattr(notice_board, "_board", None)  # the next H5Source makes a new board
    yield
    board = notice_board._board
    if board is not None:
        os.close(board.fd)


def regions(folder: Path) -> list[str]:
    """The regions in the user's folder (not the makers' lock file)."""
    if not folder.exists():
        return []
    return sorted(n for n in os.listdir(folder) if not n.startswith("."))


@pytest.fixture
def counted_fills(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Blocks decoded in this process and every process forked from it."""
    count = mp.get_context("fork").Value("l", 0)
    fill = sources.TableChunks.fill

    def counting(self: Any, dset: Any, block: int, dest: Any) -> None:
        with count.get_lock():
            count.value += 1
        fill(self, dset, block, dest)

    monkeypatch.setattr(sources.TableChunks, "fill", counting)
    return count


@pytest.fixture
def own_fork_server() -> Iterator[None]:
    """A fork server with this test's environment (one started earlier has another shm folder)."""
    forkserver._forkserver._stop()
    yield
    forkserver._forkserver._stop()  # (later tests get one with their own environment)


@pytest.fixture
def gzip_file(make_h5: Any) -> Path:
    path: Path = make_h5({"x": (big_rows(), "gzip-shuffle"), "y": np.arange(ROWS)})
    return path


@pytest.mark.slow
@pytest.mark.parametrize("threads", [None, 2])
def test_random_order_in_workers_decodes_each_block_once(
    gzip_file: Path, counted_fills: Any, threads: int | None
) -> None:
    set_decode_threads(threads)
    ds = H5LazyDataset(gzip_file, "x", "y")
    blocks = engine_of(ds).geometry.count
    loader = batched_loader(
        ds, 16, shuffle=True, generator=torch.Generator().manual_seed(0), num_workers=2,
        multiprocessing_context="fork", timeout=TIMEOUT,
    )  # fmt: skip
    expected = h5_rows(gzip_file, "x")
    fills = []
    for _epoch in range(2):
        counted_fills.value = 0
        ys = []
        for xb, yb in loader:
            np.testing.assert_array_equal(xb.numpy(), expected[yb.numpy()])
            ys.append(yb.numpy())
        assert sorted(np.concatenate(ys).tolist()) == list(range(ROWS))  # each sample once
        fills.append(counted_fills.value)
    assert fills == [blocks, 0]  # one pass shared by both workers; the next epoch decodes none


@pytest.mark.slow
def test_forkserver_workers_share_one_copy_by_name(
    gzip_file: Path, shm: Path, own_fork_server: None
) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y")
    loader = batched_loader(
        ds, 16, shuffle=True, num_workers=2, multiprocessing_context="forkserver",
        timeout=TIMEOUT, persistent_workers=True,
    )  # fmt: skip
    expected = h5_rows(gzip_file, "x")
    for _epoch in range(2):
        ys = []
        for xb, yb in loader:
            np.testing.assert_array_equal(xb.numpy(), expected[yb.numpy()])
            ys.append(yb.numpy())
        assert sorted(np.concatenate(ys).tolist()) == list(range(ROWS))  # each sample once
        assert len(regions(shm)) == 1  # both workers read one region


def test_a_peek_does_not_start_the_pass_a_batch_does(gzip_file: Path, shm: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x")
    engine = engine_of(ds)
    np.testing.assert_array_equal(ds[5].numpy(), h5_rows(gzip_file, "x", [5])[0])
    np.testing.assert_array_equal(ds[[5, 1, 5]].numpy(), h5_rows(gzip_file, "x", [5, 1, 5]))
    assert engine._decoded.ready() is None and regions(shm) == []
    rows = [200, 3, 3, 100, 17]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(gzip_file, "x", rows))
    assert engine._decoded.ready() is not None and len(regions(shm)) == 1
    np.testing.assert_array_equal(ds[::-1].numpy(), h5_rows(gzip_file, "x")[::-1])
    np.testing.assert_array_equal(ds[10:60].numpy(), h5_rows(gzip_file, "x")[10:60])


def test_the_budget_decides(gzip_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = engine_of(H5LazyDataset(gzip_file, "x")).geometry.count * 8 * 12288
    assert engine_of(H5LazyDataset(gzip_file, "x", decoded_budget=size))._decoded is not None
    assert engine_of(H5LazyDataset(gzip_file, "x", decoded_budget=size - 1))._decoded is None
    assert engine_of(H5LazyDataset(gzip_file, "x", decoded_budget="1KiB"))._decoded is None
    options = FileOptions(decoded_budget=0)
    assert engine_of(H5LazyDataset(gzip_file, "x", file_options=options))._decoded is None
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "1MiB")
    assert engine_of(H5LazyDataset(gzip_file, "x"))._decoded is None
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "4 GiB")
    over = H5LazyDataset(gzip_file, "x")
    assert engine_of(over)._decoded is not None
    rows = [9, 200, 0]
    np.testing.assert_array_equal(over[rows].numpy(), h5_rows(gzip_file, "x", rows))
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match="NN_HANDLER_DECODED_BUDGET must be a size"):
        H5LazyDataset(gzip_file, "x")


def test_a_budget_set_counts_the_other_decoded_datasets(make_h5: Any) -> None:
    a = make_h5({"x": (big_rows(), "gzip-shuffle")})
    b = make_h5({"x": (big_rows(), "gzip-shuffle")})
    size = engine_of(H5LazyDataset(a, "x")).geometry.count * 8 * 12288
    first = H5LazyDataset(a, "x", decoded_budget=int(1.5 * size))
    first[[0, 100]]  # decoded: its region holds ~size bytes of the node's memory
    assert engine_of(H5LazyDataset(b, "x", decoded_budget=int(1.5 * size)))._decoded is None
    # the same dataset again is joined, whatever the budget says
    assert engine_of(H5LazyDataset(a, "x", decoded_budget=1024))._decoded is not None


@pytest.mark.parametrize("value", [-1, "lots", True, 1.5])
def test_a_bad_budget_names_the_keyword(gzip_file: Path, value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="decoded_budget"):
        H5LazyDataset(gzip_file, "x", decoded_budget=value)


def _read_in_child(ds: H5LazyDataset, rows: list[int], queue: Any) -> None:
    fills = []
    fill = sources.TableChunks.fill

    def counting(self: Any, dset: Any, block: int, dest: Any) -> None:
        fills.append(block)
        fill(self, dset, block, dest)

    sources.TableChunks.fill = counting  # type: ignore[method-assign]
    queue.put((ds[rows].numpy(), len(fills)))


@pytest.mark.slow
def test_a_spawned_process_reads_the_copy_another_process_decoded(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x")
    rows = [200, 3, 3, 100]
    ds[rows]  # decoded here, into a named region
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_read_in_child, args=(ds, rows, queue))
    proc.start()
    got, fills = queue.get(timeout=TIMEOUT)
    proc.join(TIMEOUT)
    assert proc.exitcode == 0
    np.testing.assert_array_equal(got, h5_rows(gzip_file, "x", rows))
    assert fills == 0  # not a block decoded again in the other process


@pytest.mark.usefixtures("fresh_notices")
def test_no_room_for_the_region_falls_back_and_says_so_once(
    gzip_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(decoded_module, "shm_room", lambda: 1024)
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(gzip_file, "x")
    decoded = engine_of(ds)._decoded
    assert decoded is not None and decoded.name is None  # forked workers still share it
    rows = [200, 3, 100, 9]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(gzip_file, "x", rows))
    H5LazyDataset(gzip_file, "x")  # the same dataset again: said already
    said = [r.getMessage() for r in caplog.records if "shared memory" in r.getMessage()]
    assert len(said) == 1 and "--shm-size" in said[0] and "1.0 KiB free" in said[0]
    copy = pickle.loads(pickle.dumps(ds))  # spawned: the forked-only memory stays behind
    assert not engine_of(copy)._decoded.usable
    np.testing.assert_array_equal(copy[rows].numpy(), h5_rows(gzip_file, "x", rows))


@pytest.mark.usefixtures("fresh_notices")
def test_a_region_that_cannot_be_made_leaves_the_window(
    gzip_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_room(name: str, nbytes: int, description: bytes) -> None:
        raise shm_folder.NoRoomError("/dev/shm had 1.0 KiB free for a region of 2 MiB")

    monkeypatch.setattr(decoded_module, "open_region", no_room)
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(gzip_file, "x")
    rows = [200, 3, 100, 9]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(gzip_file, "x", rows))
    assert engine_of(ds)._decoded is None
    said = [r.getMessage() for r in caplog.records if "cannot be shared" in r.getMessage()]
    assert len(said) == 1 and "1.0 KiB free" in said[0] and "--shm-size" in said[0]


def geometry_of(path: Path) -> Any:
    return engine_of(H5LazyDataset(path, "x")).geometry


def _claim_and_die(store: DecodedBlocks, claimed: Any, how: str) -> None:
    view = store._attach()
    assert view is not None
    claimed.put(store._claim(view))
    if how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)  # alive, but never goes on: a stalled filler
    signal.pause()  # killed by the test


def _filler(store: DecodedBlocks, how: str) -> tuple[Any, int]:
    """A forked process that claims the next segment, then is stopped or waits to be killed."""
    ctx = mp.get_context("fork")
    claimed = ctx.SimpleQueue()  # (written at once: the filler stops right after)
    proc = ctx.Process(target=_claim_and_die, args=(store, claimed, how))
    proc.start()
    return proc, claimed.get()


@pytest.mark.parametrize("named", [True, False], ids=["named", "anonymous"])
def test_segments_are_claimed_in_order_settled_and_taken_over(gzip_file: Path, named: bool) -> None:
    geometry = geometry_of(gzip_file)
    facts = {"unit": "claims"} if named else None
    store = DecodedBlocks(geometry, facts, segment_bytes=4 * geometry.block_nbytes)
    assert (store.segment_blocks, store.segments) == (4, 7)  # 26 blocks
    view = store._attach()
    assert view is not None
    assert [store._claim(view), store._claim(view)] == [0, 1]
    store._settle(view, 0, decoded_module._READY)
    store._settle(view, 1, decoded_module._EMPTY)  # a fill that failed: claimed again
    assert store._claim(view) == 1
    proc, segment = _filler(store, "kill")
    assert segment == 2
    proc.kill()  # its filler was killed mid-fill
    proc.join(TIMEOUT)
    assert proc.pid is not None
    with process_with_pid(proc.pid):  # and its pid now names another process
        for k in range(3, 7):
            assert store._claim(view) == k
        assert store._claim(view) == 2  # nothing EMPTY: the dead filler's segment, at once
    assert store._claim(view) is None and not view.complete  # the others: still filling
    for k in range(1, 7):
        store._settle(view, k, decoded_module._READY)
    assert store._claim(view) is None and view.complete


@pytest.mark.parametrize("named", [True, False], ids=["named", "anonymous"])
def test_a_stalled_filler_is_waited_for_a_bounded_time_then_done_here(
    gzip_file: Path,
    named: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(decoded_module, "STALL_S", 0.5)
    geometry = geometry_of(gzip_file)
    facts = {"unit": "stalls"} if named else None
    store = DecodedBlocks(geometry, facts, segment_bytes=4 * geometry.block_nbytes)
    proc, segment = _filler(store, "stop")
    assert segment == 0

    def fill(first: int, count: int, dest: Any) -> None:
        dest[...] = np.arange(first, first + count).reshape(-1, *[1] * (dest.ndim - 1))

    caplog.set_level(logging.WARNING)
    try:
        blocks = store.complete(fill, lambda first, count: None)
    finally:
        proc.kill()
        proc.join(TIMEOUT)
    assert blocks is not None
    np.testing.assert_array_equal(blocks[:, 0, 0, 0, 0], np.arange(geometry.count))
    said = [r.getMessage() for r in caplog.records if "made no progress" in r.getMessage()]
    assert len(said) == 1 and f"process {proc.pid}" in said[0] and "0.5 s" not in said[0]


def test_a_fill_that_fails_leaves_its_segment_empty_and_raises(gzip_file: Path) -> None:
    store = DecodedBlocks(geometry_of(gzip_file), {"unit": "failing"})
    calls: list[int] = []

    def fill(first: int, count: int, dest: Any) -> None:
        calls.append(first)
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="disk went away"):
        store.complete(fill, lambda first, count: None)
    view = store._attach()
    assert view is not None and calls == [0] and int(view.states[0]) == decoded_module._EMPTY


def test_a_chunk_sampler_reads_the_copy_too(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y")
    order = list(ChunkShuffleSampler(ds, seed=3))
    loader = batched_loader(ds, 10, sampler=ChunkShuffleSampler(ds, seed=3))
    got = torch.cat([xb for xb, _ in loader]).numpy()
    np.testing.assert_array_equal(got, h5_rows(gzip_file, "x", order))
    assert engine_of(ds)._decoded.ready() is not None


_EXIT_WITHOUT_CLOSING = """
import os, sys
from nn_handler.dataloaders import H5LazyDataset, batched_loader

ds = H5LazyDataset(sys.argv[1], "x", "y")
loader = batched_loader(
    ds, 16, shuffle=True, num_workers=2, multiprocessing_context=sys.argv[2],
    persistent_workers=sys.argv[3] == "persistent", timeout=120,
)
for _epoch in range(2):
    for xb, yb in loader:
        pass
from nn_handler._io.storage.node_memory import list_regions
print(len(list_regions()))
"""  # ends without closing the loader or the dataset, as most training scripts do


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("context", ["fork", "forkserver"])
@pytest.mark.parametrize("workers", ["persistent", "per epoch"])
def test_a_script_that_ends_leaves_no_region_behind(
    gzip_file: Path, shm: Path, context: str, workers: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WITHOUT_CLOSING, str(gzip_file), context, workers],
        capture_output=True,
        text=True,
        timeout=200,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "1"  # the copy its workers read while it ran
    assert regions(shm) == []  # gone with the last process that used it


_TRAIN_UNTIL_KILLED = """
import os, sys
from nn_handler.dataloaders import H5LazyDataset, batched_loader

ds = H5LazyDataset(sys.argv[1], "x", "y")
loader = batched_loader(
    ds, 16, shuffle=True, num_workers=2, multiprocessing_context="fork",
    persistent_workers=True, timeout=120,
)
for xb, yb in loader:
    pass
print("decoded", flush=True)
while True:
    for xb, yb in loader:
        pass
"""  # a training job; its scheduler ends all its processes at once


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_job_ended_by_its_scheduler_leaves_no_region_after_the_next_open(
    gzip_file: Path, shm: Path, make_h5: Any, signal_name: str
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _TRAIN_UNTIL_KILLED, str(gzip_file)],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ), start_new_session=True,
    ) as job:  # fmt: skip
        assert job.stdout is not None and job.stdout.readline().strip() == "decoded"
        assert len(regions(shm)) == 1
        os.killpg(job.pid, getattr(signal, signal_name))  # the job and its workers
        job.wait(TIMEOUT)
    if signal_name == "SIGTERM":  # released by the job's own processes as they ended
        deadline = time.monotonic() + TIMEOUT
        while regions(shm) and time.monotonic() < deadline:
            time.sleep(0.05)  # (its workers end a moment after their parent)
        assert regions(shm) == []
        return
    assert len(regions(shm)) == 1  # killed: nobody ran anything
    other = make_h5({"x": np.arange(10.0)})  # any dataset at all, not a decoded one
    H5LazyDataset(other, "x")[3]
    assert regions(shm) == []  # the next process that opened a dataset swept it
