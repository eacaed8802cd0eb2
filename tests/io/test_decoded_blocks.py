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

import h5py
import numpy as np
import pytest
import torch

from nn_handler._io import notice_board, notices
from nn_handler._io.chunks import block_claims, block_fillers, fill_report
from nn_handler._io.chunks import decoded as decoded_module
from nn_handler._io.chunks.decoded import DecodedBlocks
from nn_handler._io.storage import node_memory, shm_folder
from nn_handler._io.storage.node_memory import NAMED
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    FileOptions,
    H5LazyDataset,
    batched_loader,
    set_decode_threads,
)

from helpers.files import h5_rows, write_layout
from helpers.platform_marks import needs_fork, needs_named_regions
from helpers.process import process_with_pid

TIMEOUT = 120
ROWS = 203  # gzip + shuffle chunks of 8 rows: 26 blocks of 96 KiB (2.4 MB decoded)


def big_rows(n: int = ROWS) -> np.ndarray[Any, Any]:
    data = np.random.default_rng(0).standard_normal((n, 3, 32, 32)).astype(np.float32)
    data[:, 0, 0, 0] = np.arange(n)
    return data


#: a named region (Linux), and memory shared with forked fillers (no fork: nothing to share)
STORES = [pytest.param(True, marks=needs_named_regions), pytest.param(False, marks=needs_fork)]


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
    yield Path(shm_folder.user_folder()) if NAMED else root / "no regions here"
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
    fill = block_fillers.TableChunks.fill

    def counting(self: Any, block: int, dest: Any) -> None:
        with count.get_lock():
            count.value += 1
        fill(self, block, dest)

    monkeypatch.setattr(block_fillers.TableChunks, "fill", counting)
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


@needs_named_regions
def test_a_peek_does_not_begin_the_copy_a_batch_does(gzip_file: Path, shm: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x")
    engine = engine_of(ds)
    np.testing.assert_array_equal(ds[5].numpy(), h5_rows(gzip_file, "x", [5])[0])
    np.testing.assert_array_equal(ds[[5, 1, 5]].numpy(), h5_rows(gzip_file, "x", [5, 1, 5]))
    assert engine.decoded.blocks.ready() is None and regions(shm) == []
    rows = [200, 3, 3, 100, 17]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(gzip_file, "x", rows))
    assert len(regions(shm)) == 1  # the copy is begun: its 4 blocks, not all 26
    assert engine.decoded.blocks.ready() is None
    np.testing.assert_array_equal(ds[::-1].numpy(), h5_rows(gzip_file, "x")[::-1])
    assert engine.decoded.blocks.ready() is not None  # every block read once: the copy is whole
    np.testing.assert_array_equal(ds[10:60].numpy(), h5_rows(gzip_file, "x")[10:60])


def test_the_budget_decides(gzip_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = engine_of(H5LazyDataset(gzip_file, "x")).geometry.count * 8 * 12288
    assert engine_of(H5LazyDataset(gzip_file, "x", decoded_budget=size)).decoded.blocks is not None
    assert engine_of(H5LazyDataset(gzip_file, "x", decoded_budget=size - 1)).decoded.blocks is None
    assert engine_of(H5LazyDataset(gzip_file, "x", decoded_budget="1KiB")).decoded.blocks is None
    options = FileOptions(decoded_budget=0)
    assert engine_of(H5LazyDataset(gzip_file, "x", file_options=options)).decoded.blocks is None
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "1MiB")
    assert engine_of(H5LazyDataset(gzip_file, "x")).decoded.blocks is None
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "4 GiB")
    over = H5LazyDataset(gzip_file, "x")
    assert engine_of(over).decoded.blocks is not None
    rows = [9, 200, 0]
    np.testing.assert_array_equal(over[rows].numpy(), h5_rows(gzip_file, "x", rows))
    monkeypatch.setenv(decoded_module.BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match="NN_HANDLER_DECODED_BUDGET must be a size"):
        H5LazyDataset(gzip_file, "x")


@needs_named_regions
def test_a_budget_set_counts_the_other_decoded_datasets(make_h5: Any) -> None:
    a = make_h5({"x": (big_rows(), "gzip-shuffle")})
    b = make_h5({"x": (big_rows(), "gzip-shuffle")})
    size = engine_of(H5LazyDataset(a, "x")).geometry.count * 8 * 12288
    first = H5LazyDataset(a, "x", decoded_budget=int(1.5 * size))
    first[[0, 100]]  # decoded: its region holds ~size bytes of the node's memory
    assert engine_of(H5LazyDataset(b, "x", decoded_budget=int(1.5 * size))).decoded.blocks is None
    # the same dataset again is joined, whatever the budget says
    assert engine_of(H5LazyDataset(a, "x", decoded_budget=1024)).decoded.blocks is not None


@pytest.mark.parametrize("value", [-1, "lots", True, 1.5])
def test_a_bad_budget_names_the_keyword(gzip_file: Path, value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="decoded_budget"):
        H5LazyDataset(gzip_file, "x", decoded_budget=value)


def _read_in_child(ds: H5LazyDataset, rows: list[int], queue: Any) -> None:
    fills = []
    fill = block_fillers.TableChunks.fill

    def counting(self: Any, block: int, dest: Any) -> None:
        fills.append(block)
        fill(self, block, dest)

    block_fillers.TableChunks.fill = counting  # type: ignore[method-assign]
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


@needs_named_regions
@pytest.mark.usefixtures("fresh_notices")
def test_no_room_for_the_region_falls_back_and_says_so_once(
    gzip_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(decoded_module, "shm_room", lambda: 1024)
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(gzip_file, "x")
    decoded = engine_of(ds).decoded.blocks
    assert decoded is not None and decoded.name is None  # forked workers still share it
    rows = [200, 3, 100, 9]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(gzip_file, "x", rows))
    H5LazyDataset(gzip_file, "x")  # the same dataset again: said already
    said = [r.getMessage() for r in caplog.records if "shared memory" in r.getMessage()]
    assert len(said) == 1 and "--shm-size" in said[0] and "1.0 KiB free" in said[0]
    copy = pickle.loads(pickle.dumps(ds))  # spawned: the forked-only memory stays behind
    assert not engine_of(copy).decoded.blocks.usable
    np.testing.assert_array_equal(copy[rows].numpy(), h5_rows(gzip_file, "x", rows))


@needs_named_regions
@pytest.mark.usefixtures("fresh_notices")
def test_a_region_that_cannot_be_made_leaves_the_window(
    gzip_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_room(name: str, nbytes: int, description: bytes, reserve: int = 0) -> None:
        raise shm_folder.NoRoomError("/dev/shm had 1.0 KiB free for a region of 2 MiB")

    monkeypatch.setattr(decoded_module, "open_region", no_room)
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(gzip_file, "x")
    rows = [200, 3, 100, 9]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(gzip_file, "x", rows))
    assert engine_of(ds).decoded.blocks is None
    said = [r.getMessage() for r in caplog.records if "cannot be shared" in r.getMessage()]
    assert len(said) == 1 and "1.0 KiB free" in said[0] and "--shm-size" in said[0]


@needs_named_regions
def test_shared_memory_that_fills_up_midway_leaves_the_window(
    gzip_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    ds = H5LazyDataset(gzip_file, "x")
    first = [200, 3, 100]
    np.testing.assert_array_equal(ds[first].numpy(), h5_rows(gzip_file, "x", first))

    def full(self: Any, offset: int, length: int) -> None:
        raise shm_folder.NoRoomError("/dev/shm had 1.0 KiB free and could not give 96.0 KiB")

    monkeypatch.setattr(node_memory.Region, "reserve", full)  # another job took the rest
    rows = [9, 150, 3, 77]
    np.testing.assert_array_equal(ds[rows].numpy(), h5_rows(gzip_file, "x", rows))
    np.testing.assert_array_equal(ds[::-1].numpy(), h5_rows(gzip_file, "x")[::-1])
    said = [r.getMessage() for r in caplog.records if "ran out of shared memory" in r.getMessage()]
    assert len(said) == 1 and "--shm-size" in said[0] and "1.0 KiB free" in said[0]


def geometry_of(path: Path) -> Any:
    return engine_of(H5LazyDataset(path, "x")).geometry


def ids(*blocks: int) -> np.ndarray[Any, Any]:
    return np.array(blocks, dtype=np.int64)


def _claim_and_die(store: DecodedBlocks, blocks: list[int], claimed: Any, how: str) -> None:
    view = store._attach()
    assert view is not None and view.claims is not None
    mine, _ = view.claims.claim(ids(*blocks), stalled=False)
    claimed.put(mine.tolist())
    if how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)  # alive, but never goes on: a stalled filler
    signal.pause()  # killed by the test


def _filler(store: DecodedBlocks, blocks: list[int], how: str) -> tuple[Any, list[int]]:
    """A forked process that claims ``blocks``, then is stopped or waits to be killed."""
    ctx = mp.get_context("fork")
    claimed = ctx.SimpleQueue()  # (written at once: the filler stops right after)
    proc = ctx.Process(target=_claim_and_die, args=(store, blocks, claimed, how))
    proc.start()
    return proc, claimed.get()


@pytest.mark.parametrize("named", STORES, ids=["named", "anonymous"])
def test_blocks_are_claimed_once_settled_and_taken_over(gzip_file: Path, named: bool) -> None:
    store = DecodedBlocks(geometry_of(gzip_file), {"unit": "claims"} if named else None)
    view = store._attach()
    assert view is not None and view.claims is not None
    claims = view.claims
    mine, others = claims.claim(ids(0, 1), stalled=False)
    assert mine.tolist() == [0, 1] and not others
    claims.settle(ids(0), ok=True)
    claims.settle(ids(1), ok=False)  # a fill that failed: claimed again
    assert claims.claim(ids(0, 1), stalled=False)[0].tolist() == [1]  # 0 is decoded already
    proc, taken = _filler(store, [1, 2, 3], "kill")
    assert taken == [2, 3]  # 1 is this process's (alive): not the other's to take
    assert claims.claim(ids(2, 4), stalled=False)[0].tolist() == [4]  # 2: its filler works
    assert claims.claim(ids(2), stalled=False)[1]  # ... so this read waits for it
    proc.kill()  # its filler was killed mid-fill
    proc.join(TIMEOUT)
    with process_with_pid(proc.pid):  # and its pid now names another process
        mine, others = claims.claim(ids(1, 2, 3, 5), stalled=False)
    assert mine.tolist() == [2, 3, 5] and others  # the dead filler's, at once; 1 is ours
    claims.settle(ids(1, 2, 3, 4, 5), ok=True)
    assert claims.ready() == 6 and not view.complete
    every = np.arange(store.geometry.count)
    claims.settle(claims.claim(every, stalled=False)[0], ok=True)
    assert store.serve(every, lambda todo, dest: None) is view.blocks and view.complete


def _write_block_numbers(todo: np.ndarray[Any, Any], dest: np.ndarray[Any, Any]) -> None:
    dest[todo] = todo.reshape(-1, *[1] * (dest.ndim - 1))


@pytest.mark.parametrize("named", STORES, ids=["named", "anonymous"])
def test_a_stalled_filler_is_waited_for_a_bounded_time_then_done_here(
    gzip_file: Path,
    named: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(block_claims, "STALL_S", 0.5)
    geometry = geometry_of(gzip_file)
    store = DecodedBlocks(geometry, {"unit": "stalls"} if named else None)
    proc, taken = _filler(store, [0, 1], "stop")
    assert taken == [0, 1]
    caplog.set_level(logging.WARNING)
    try:
        blocks = store.serve(np.arange(geometry.count), _write_block_numbers)
    finally:
        proc.kill()
        proc.join(TIMEOUT)
    assert blocks is not None
    np.testing.assert_array_equal(blocks[:, 0, 0, 0, 0], np.arange(geometry.count))
    said = [r.getMessage() for r in caplog.records if "was decoded for" in r.getMessage()]
    assert len(said) == 1 and f"[{proc.pid}]" in said[0]


@needs_fork
def test_a_read_decodes_only_its_own_blocks_and_waits_for_nothing_else(gzip_file: Path) -> None:
    geometry = geometry_of(gzip_file)
    store = DecodedBlocks(geometry, {"unit": "first batch"} if NAMED else None)
    filled: list[list[int]] = []

    def fill(todo: np.ndarray[Any, Any], dest: np.ndarray[Any, Any]) -> None:
        filled.append(todo.tolist())
        _write_block_numbers(todo, dest)

    proc, _ = _filler(store, [7, 8], "kill")  # another reader is busy with other blocks
    try:
        blocks = store.serve(ids(3, 9, 20), fill)  # the first batch: its blocks, no wait
        assert blocks is not None and filled == [[3, 9, 20]]
        assert store.serve(ids(3, 9, 21), fill) is blocks and filled[-1] == [21]
    finally:
        proc.kill()
        proc.join(TIMEOUT)
    store.serve(np.arange(geometry.count), fill)  # the rest, once; the dead filler's too
    assert sorted(b for todo in filled for b in todo) == list(range(geometry.count))
    assert store.ready() is not None


def test_a_fill_that_fails_leaves_its_blocks_empty_and_raises(gzip_file: Path) -> None:
    store = DecodedBlocks(geometry_of(gzip_file), {"unit": "failing"} if NAMED else None)
    calls: list[list[int]] = []

    def fill(todo: np.ndarray[Any, Any], dest: Any) -> None:
        calls.append(todo.tolist())
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="disk went away"):
        store.serve(ids(0, 5), fill)
    view = store._attach()
    assert view is not None and view.claims is not None and calls == [[0, 5]]
    assert view.claims.states[[0, 5]].tolist() == [block_claims.EMPTY] * 2
    assert view.claims.claim(ids(0, 5), stalled=False)[0].tolist() == [0, 5]  # claimed anew


def test_a_chunk_sampler_reads_the_copy_too(gzip_file: Path) -> None:
    ds = H5LazyDataset(gzip_file, "x", "y")
    order = list(ChunkShuffleSampler(ds, seed=3))
    loader = batched_loader(ds, 10, sampler=ChunkShuffleSampler(ds, seed=3))
    got = torch.cat([xb for xb, _ in loader]).numpy()
    np.testing.assert_array_equal(got, h5_rows(gzip_file, "x", order))
    assert engine_of(ds).decoded.blocks.ready() is not None


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


_ENDINGS = [(c, w) for w in ("persistent", "per epoch") for c in ("fork", "forkserver")]


def _start_ending(folder: Path, context: str, workers: str) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the script on a file and in a root of regions of its own; and its user's folder."""
    path, root = folder / "data.h5", folder / "shm"
    root.mkdir()
    with h5py.File(path, "w") as f:
        write_layout(f, "x", big_rows(), "gzip-shuffle")
        write_layout(f, "y", np.arange(ROWS), "contiguous")
    env = dict(os.environ)
    env[shm_folder.SHM_DIR_ENV] = str(root)
    env.pop(decoded_module.BUDGET_ENV, None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(shm_folder.SHM_DIR_ENV, str(root))
        user = Path(shm_folder.user_folder()) if NAMED else root / "no regions here"
    argv = [sys.executable, "-c", _EXIT_WITHOUT_CLOSING, str(path), context, workers]
    with open(folder / "out.txt", "w") as out, open(folder / "err.txt", "w") as err:
        run = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
    return run, user


def _ended(run: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The run's exit code (``None``: killed, with its workers, at the deadline)."""
    try:
        return run.wait(max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        return None


@pytest.fixture(scope="module")
def ended_scripts(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, str], tuple[int | None, str, str, Path]]:
    """Each way of ending, run to its end: exit code, stdout, stderr and the user's folder.

    The four scripts start together (each a fresh interpreter, on a file and in a root of
    regions of its own) and share one bound; each test checks its own.
    """
    folders = {ending: tmp_path_factory.mktemp("ends") for ending in _ENDINGS}
    started = {ending: _start_ending(folders[ending], *ending) for ending in _ENDINGS}
    deadline = time.monotonic() + 200
    ended = {}
    for ending, (run, user) in started.items():
        code = _ended(run, deadline)
        out, err = ((folders[ending] / name).read_text() for name in ("out.txt", "err.txt"))
        ended[ending] = (code, out, err, user)
    return ended


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("context", ["fork", "forkserver"])
@pytest.mark.parametrize("workers", ["persistent", "per epoch"])
def test_a_script_that_ends_leaves_no_region_behind(
    ended_scripts: dict[tuple[str, str], tuple[int | None, str, str, Path]],
    context: str,
    workers: str,
) -> None:
    code, out, err, user = ended_scripts[context, workers]
    assert code == 0, err
    assert out.split()[-1] == "1"  # the copy its workers read while it ran
    assert regions(user) == []  # gone with the last process that used it


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
    opened = subprocess.run(
        [sys.executable, "-c", _OPEN_ANY, str(other)], env=dict(os.environ), timeout=TIMEOUT
    )
    assert opened.returncode == 0
    assert regions(shm) == []  # the next process that opened a dataset swept it


_OPEN_ANY = """
import sys
from nn_handler.dataloaders import H5LazyDataset
H5LazyDataset(sys.argv[1], "x")[3]
"""


@needs_named_regions
def test_the_maker_reports_the_copy_once_it_is_whole(
    gzip_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fill_report, "PROGRESS_BYTES", 0)  # (a big file's bar, on a small one)
    caplog.set_level(logging.INFO, logger="nn_handler")
    ds = H5LazyDataset(gzip_file, "x")
    ds[[200, 3, 100]]
    report = engine_of(ds).decoded.blocks._view.peek().report
    assert report is not None and report._bar is not None  # (drawn on a terminal only)
    ds[::-1]  # every block: the copy is whole
    said = [r.getMessage() for r in caplog.records if "decoded whole" in r.getMessage()]
    assert len(said) == 1 and "(2.4 MiB) in" in said[0] and shm_folder.user_folder() in said[0]


def test_no_bar_when_asked(gzip_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fill_report, "PROGRESS_BYTES", 0)
    monkeypatch.setenv(fill_report.PROGRESS_ENV, "0")
    ds = H5LazyDataset(gzip_file, "x")
    ds[[200, 3, 100]]
    report = engine_of(ds).decoded.blocks._view.peek().report
    assert report is not None and report._bar is None
