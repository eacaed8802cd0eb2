"""Decoded blocks shared with forked DataLoader workers (``_io/chunks/shared.py``)."""

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest
import torch

from nn_handler._io.chunks import sources
from nn_handler._io.chunks.shared import SharedBlocks
from nn_handler.dataloaders import H5LazyDataset, batched_loader, set_decode_threads

from helpers.files import h5_rows, images

TIMEOUT = 120
ROWS = 203  # gzip + shuffle chunks of 8 rows: 26 blocks of 96 KiB


def big_rows(n=ROWS):
    """Rows of 3x32x32 float32 (2.4 MB in all: above the engine's minimum for sharing)."""
    data = np.random.default_rng(0).standard_normal((n, 3, 32, 32)).astype(np.float32)
    data[:, 0, 0, 0] = np.arange(n)
    return data


def engine_of(ds):
    return ds._row_readers()[0]._rows.engine


@pytest.fixture
def counted_fills(monkeypatch):
    """Blocks filled (decoded) in this process and every process forked from it."""
    count = mp.get_context("fork").Value("l", 0)
    fill = sources.TableChunks.fill

    def counting(self, dset, block, dest):
        with count.get_lock():
            count.value += 1
        fill(self, dset, block, dest)

    monkeypatch.setattr(sources.TableChunks, "fill", counting)
    return count


@pytest.fixture(autouse=True)
def default_threads():
    set_decode_threads(None)
    yield
    set_decode_threads(None)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [None, 2])
def test_random_order_in_workers_decodes_each_block_once(make_h5, counted_fills, threads):
    # A random order touches every block from every worker: with a window per worker, each
    # decoded the whole file, and again every epoch (its window died with it).
    set_decode_threads(threads)
    path = make_h5({"x": (big_rows(), "gzip-shuffle"), "y": np.arange(ROWS)})
    ds = H5LazyDataset(path, "x", "y")
    blocks = engine_of(ds).geometry.count
    loader = batched_loader(
        ds,
        16,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=2,
        multiprocessing_context="fork",
        timeout=TIMEOUT,
    )
    expected = h5_rows(path, "x")
    fills = []
    for _epoch in range(2):
        counted_fills.value = 0
        ys = []
        for xb, yb in loader:
            np.testing.assert_array_equal(xb.numpy(), expected[yb.numpy()])
            ys.append(yb.numpy())
        assert sorted(np.concatenate(ys).tolist()) == list(range(ROWS))  # each sample once
        fills.append(counted_fills.value)
    # two workers may both decode a block the other is filling at that moment, rarely
    assert blocks <= fills[0] < 1.5 * blocks, fills
    assert fills[1] == 0, fills  # the next epoch's workers find every block decoded


def test_only_when_the_budget_holds_every_block(make_h5):
    path = make_h5({"x": (big_rows(), "gzip-shuffle")})
    ds = H5LazyDataset(path, "x")
    engine = engine_of(ds)
    assert engine._shared is not None and not engine._shared.usable  # the parent's own window
    ds.set_chunk_cache(engine.block_nbytes * 4)  # 4 of 26 blocks
    assert engine._shared is None
    ds.set_chunk_cache(engine.block_nbytes * 26)
    assert engine._shared is not None
    short = H5LazyDataset(path, "x", rdcc_nbytes=engine.block_nbytes * 25)
    assert engine_of(short)._shared is None
    tiny = make_h5({"x": (images(ROWS), "gzip-shuffle")})  # 10 KB: decoded in moments
    assert engine_of(H5LazyDataset(tiny, "x"))._shared is None


def test_a_pickled_engine_leaves_the_shared_blocks_behind(make_h5):
    path = make_h5({"x": (big_rows(), "gzip-shuffle")})
    ds = H5LazyDataset(path, "x")
    copy = pickle.loads(pickle.dumps(ds))  # spawn / forkserver workers: their own windows
    assert engine_of(copy)._shared is None
    np.testing.assert_array_equal(copy[[200, 3, 3]].numpy(), h5_rows(path, "x", [200, 3, 3]))


def test_claim_settle_and_a_gone_filler(make_h5):
    path = make_h5({"x": (big_rows(), "gzip-shuffle")})
    shared = SharedBlocks(engine_of(H5LazyDataset(path, "x")).geometry)
    fill, busy = shared.claim(np.array([1, 2, 5]))
    assert (fill, busy) == ([1, 2, 5], [])
    shared.settle([1], ok=True)
    shared.settle([5], ok=False)  # failed: EMPTY again, filled by the next read
    assert shared.pending([1, 2, 5]) == [2, 5]
    shared.owner[2] = _gone_pid()  # a worker killed while filling block 2
    assert shared.claim(np.array([1, 2, 5])) == ([2, 5], [])
    shared.owner[2] = os.getppid()  # another live process fills it: not waited for
    assert shared.claim(np.array([2])) == ([], [2])
    shared.clear()
    assert len(shared) == 0 and shared.pending([1]) == [1]


def _gone_pid():
    proc = mp.get_context("fork").Process(target=int)
    proc.start()
    proc.join(timeout=TIMEOUT)
    return proc.pid


def _read_beside_a_busy_filler(ds, queue):
    shared = engine_of(ds)._shared
    assert shared.usable  # a forked child
    shared.claim(np.array([2]))
    shared.owner[2] = os.getppid()  # "another worker" is filling block 2 and never finishes
    rows = [17, 16, 3, 200, 17, 23]  # blocks 2, 0, 25 and 2 again
    queue.put((ds[rows].numpy(), shared.pending([0, 2, 25])))


@pytest.mark.slow
def test_a_block_another_worker_is_filling_is_decoded_here(make_h5):
    path = make_h5({"x": (big_rows(), "gzip-shuffle")})
    ds = H5LazyDataset(path, "x")
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_read_beside_a_busy_filler, args=(ds, queue))
    proc.start()
    got, pending = queue.get(timeout=TIMEOUT)
    proc.join(timeout=TIMEOUT)
    assert proc.exitcode == 0
    np.testing.assert_array_equal(got, h5_rows(path, "x", [17, 16, 3, 200, 17, 23]))
    assert pending == [2]  # served from scratch, left to its filler
    assert engine_of(ds)._shared.pending([0, 2, 25]) == [2]  # the parent sees what they did
