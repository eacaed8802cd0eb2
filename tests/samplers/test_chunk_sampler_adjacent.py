"""ChunkShuffleSampler on a remote file: runs of adjacent chunks by default (``AdjacentChunks``)."""

import hashlib

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler._io.storage.remote.ranges import (
    BLOCK_TARGET_NBYTES,
    MAX_ADJACENT_CHUNKS,
    adjacent_chunks,
)
from nn_handler.dataloaders import ChunkShuffleSampler, H5LazyDataset
from nn_handler.dataloaders._contracts.protocols import AdjacentChunks, ChunkAware

from helpers.resume import check_resume


class _Remote:
    """A chunk-aware dataset of ``n`` rows that asks for blocks of ``k`` adjacent chunks."""

    def __init__(self, n: int, chunk_rows: int, k: int) -> None:
        self.n, self.chunk_rows, self.adjacent_chunks = n, chunk_rows, k
        self.chunk_cache_nbytes = 1 << 20

    def __len__(self) -> int:
        return self.n

    def window_cache_nbytes(self, block_rows, blocks):
        return blocks * (block_rows or self.chunk_rows) * 64

    def set_chunk_cache(self, nbytes, nslots=None, w0=None):
        self.chunk_cache_nbytes = nbytes


def _orders(ds, world, *, seed=0, epoch=0, equal_steps="pad", **kwargs):
    result = []
    for rank in range(world):
        sampler = ChunkShuffleSampler(
            ds, seed=seed, rank=rank, world_size=world, equal_steps=equal_steps, **kwargs
        )
        sampler.set_epoch(epoch)
        result.append(np.fromiter(sampler, np.int64))
    return result


def test_the_fake_has_both_capabilities():
    ds = _Remote(10, 2, 3)
    assert isinstance(ds, ChunkAware) and isinstance(ds, AdjacentChunks)


def test_adjacent_chunks_aims_at_a_megabyte_and_caps_at_eight():
    assert adjacent_chunks(0) == 1  # not chunked (or nothing to cache)
    assert adjacent_chunks(4096) == MAX_ADJACENT_CHUNKS == 8
    assert adjacent_chunks(BLOCK_TARGET_NBYTES // 3) == 3
    assert adjacent_chunks(BLOCK_TARGET_NBYTES) == adjacent_chunks(10 * BLOCK_TARGET_NBYTES) == 1


# (data_len, chunk_rows, adjacent chunks, world_size)
configs = st.tuples(st.integers(0, 600), st.integers(1, 20), st.integers(1, 9), st.integers(1, 4))


@given(configs, st.integers(0, 2**32), st.sampled_from(["pad", "drop"]))
@settings(max_examples=80, deadline=None)
def test_every_sample_once_per_epoch(cfg, seed, equal_steps):
    n, rows, k, world = cfg
    parts = _orders(_Remote(n, rows, k), world, seed=seed, equal_steps=equal_steps)
    assert len({len(p) for p in parts}) == 1
    joined = np.concatenate(parts)
    if equal_steps == "pad":
        assert set(joined.tolist()) == set(range(n)) and joined.size - n < world
    else:
        assert len(set(joined.tolist())) == joined.size == n // world * world
    if world == 1:
        assert sorted(joined.tolist()) == list(range(n))  # a permutation


@given(configs, st.integers(1, 5))
@settings(max_examples=80, deadline=None)
def test_blocks_are_runs_of_adjacent_chunks(cfg, window):
    """Block ``b`` is chunks ``[b*k, (b+1)*k)``; a window holds at most window + 2 of them."""
    n, rows, k, world = cfg
    ds = _Remote(n, rows, k)
    sampler = ChunkShuffleSampler(ds, window_chunks=window, rank=0, world_size=world)
    assert sampler.block_size == k * rows and sampler.state_dict()["block_size"] == k * rows
    block = k * rows
    for order in _orders(ds, world, window_chunks=window, equal_steps="drop"):
        for start in range(0, len(order), window * block):
            assert np.unique(order[start : start + window * block] // block).size <= window + 2
    (whole,) = _orders(ds, 1, window_chunks=1)  # one block per window: each block is one run
    for start in range(0, n, block):
        assert np.unique(whole[start : start + block] // block).size <= 2


def test_explicit_block_size_and_starts_win():
    ds = _Remote(1000, 10, 8)
    assert ChunkShuffleSampler(ds).block_size == 80
    assert ChunkShuffleSampler(ds, block_size=10).block_size == 10  # runs turned off
    varying = ChunkShuffleSampler(ds, block_starts=[0, 7, 500])
    assert varying.block_size is None and varying.num_blocks == 3


def test_bad_adjacent_chunks_is_named():
    with pytest.raises(ValueError, match="adjacent_chunks"):
        ChunkShuffleSampler(_Remote(100, 10, 0))


def test_resume_with_adjacent_blocks():
    check_resume(lambda: ChunkShuffleSampler(_Remote(503, 7, 4), window_chunks=3, seed=4))
    check_resume(lambda: ChunkShuffleSampler(_Remote(503, 7, 4), batch_size=5, num_workers=3))
    make = lambda: ChunkShuffleSampler(_Remote(503, 7, 4), rank=1, world_size=3)  # noqa: E731
    check_resume(make)


def test_a_state_of_other_blocks_is_refused():
    state = ChunkShuffleSampler(_Remote(500, 10, 8)).state_dict()
    with pytest.raises(ValueError, match="saved with block_size=80 but this sampler has"):
        ChunkShuffleSampler(_Remote(500, 10, 1)).load_state_dict(state)


@given(st.integers(0, 400), st.integers(0, 2**32), st.floats(0, 1), st.integers(1, 4))
@settings(max_examples=40, deadline=None)
def test_elastic_resume_trains_every_sample_once(n, seed, fraction, world):
    """Save mid-epoch on 2 ranks, load on ``world``: every sample once, with adjacent blocks."""
    ds = _Remote(n, 6, 4)
    first = [
        ChunkShuffleSampler(ds, seed=seed, rank=r, world_size=2, equal_steps="drop") for r in (0, 1)
    ]
    orders = [list(s) for s in first]
    take = int(fraction * len(orders[0]))
    trained = [i for order in orders for i in order[:take]]
    state = {**first[1].state_dict(), "consumed": take}
    for rank in range(world):
        sampler = ChunkShuffleSampler(
            ds, seed=seed, rank=rank, world_size=world, equal_steps="drop"
        )
        sampler.load_state_dict(dict(state))
        trained += list(sampler)
    assert len(trained) == len(set(trained))
    assert n - len(trained) <= 1 + (world - 1)  # each world drops at most its remainder


def _local_file(path):
    with h5py.File(path, "w") as f:
        x = np.arange(20000 * 4, dtype=np.float32).reshape(20000, 4)
        f.create_dataset("x", data=x, chunks=(64, 4), compression="gzip")
        f.create_dataset("y", data=np.arange(20000))
    return path


def test_local_default_is_unchanged(tmp_path):
    """The order and state of a local file's default sampler, as recorded on main (ac389a3)."""
    ds = H5LazyDataset(_local_file(tmp_path / "f.h5"), "x", "y")
    assert ds.adjacent_chunks == 1
    expected = {0: "c8473ec4625c2f40", 1: "5dcac022b657d888"}
    for rank, digest in expected.items():
        sampler = ChunkShuffleSampler(
            ds, seed=5, rank=rank, world_size=2, batch_size=10, num_workers=2
        )
        sampler.set_epoch(3)
        order = np.fromiter(sampler, np.int64)
        assert hashlib.sha256(order.tobytes()).hexdigest()[:16] == digest
        assert sampler.state_dict()["block_size"] == 64
        assert sampler.window_chunks == 64
