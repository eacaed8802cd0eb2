"""ChunkShuffleSampler with blocks of varying length (``block_starts``)."""

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.dataloaders import ChunkShuffleSampler, fit_chunk_cache
from nn_handler.dataloaders.samplers.chunks import starts_order, window_shuffle_at

from helpers.chunk_orders import rank_orders
from helpers.resume import check_resume


@st.composite
def layouts(draw, max_n=400):
    """(data_len, block_starts): blocks of 1 to 40 rows."""
    n = draw(st.integers(0, max_n))
    lengths = []
    while sum(lengths) < n:
        lengths.append(draw(st.integers(1, 40)))
    if lengths:
        lengths[-1] -= sum(lengths) - n
    starts = np.cumsum([0, *lengths[:-1]]).astype(np.int64) if n else np.empty(0, np.int64)
    return n, starts


def orders(n, starts, window, world, *, seed=0, epoch=0, equal_steps="pad", **kw):
    kw.update(block_starts=starts, window_chunks=window, seed=seed, equal_steps=equal_steps)
    return rank_orders(n, world, epoch=epoch, **kw)


def block_of(n, starts):
    return np.searchsorted(starts, np.arange(n), side="right") - 1


@given(layouts(), st.integers(1, 9), st.integers(0, 2**40))
def test_single_rank_is_a_permutation(layout, window, seed):
    n, starts = layout
    (order,) = orders(n, starts, window, 1, seed=seed)
    assert sorted(order.tolist()) == list(range(n))


@given(layouts(), st.integers(1, 6), st.integers(1, 5))
def test_ranks_are_disjoint_with_equal_counts(layout, window, world):
    n, starts = layout
    dropped = orders(n, starts, window, world, equal_steps="drop")
    assert len({len(o) for o in dropped}) == 1
    joined = np.concatenate(dropped)
    assert len(set(joined.tolist())) == joined.size == n // world * world
    padded = orders(n, starts, window, world, equal_steps="pad")
    assert len({len(o) for o in padded}) == 1
    assert set(np.concatenate(padded).tolist()) == set(range(n))


@given(layouts(), st.integers(1, 6), st.integers(1, 4))
@settings(max_examples=80)
def test_windows_hold_whole_blocks(layout, window, world):
    """A rank's order splits into runs of at most ``window`` blocks, each block in one run."""
    n, starts = layout
    blocks = block_of(n, starts)
    for order in orders(n, starts, window, world, equal_steps="drop"):
        closed: set[int] = set()
        current: set[int] = set()
        for b in blocks[order].tolist():
            if b not in current and len(current) == window:
                closed |= current
                current = set()
            assert b not in closed, "a block came back after its window closed"
            current.add(b)


def test_fixed_starts_read_the_same_blocks_as_block_size():
    n, block = 1000, 16
    starts = np.arange(0, n, block)
    varying = orders(n, starts, 4, 2, seed=5)
    fixed = [
        np.array(
            list(
                ChunkShuffleSampler(
                    n, block_size=block, window_chunks=4, rank=r, world_size=2, seed=5
                )
            )
        )
        for r in range(2)
    ]
    # the same block order (stream 0): each rank reads the same blocks either way
    for a, b in zip(varying, fixed, strict=True):
        assert set((a // block).tolist()) == set((b // block).tolist())
    assert not np.array_equal(varying[0], orders(n, starts, 4, 2, seed=5, epoch=1)[0])


def test_no_shuffle_is_file_order():
    starts = np.array([0, 3, 4, 9])
    parts = orders(10, starts, 2, 2, shuffle=False)
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


@given(layouts(max_n=200), st.integers(2, 4), st.integers(1, 9))
@settings(max_examples=40)
def test_workers_dealing_keeps_a_permutation(layout, workers, batch):
    n, starts = layout
    (order,) = orders(n, starts, 3, 1, batch_size=batch, num_workers=workers)
    assert sorted(order.tolist()) == list(range(n))


def test_starts_order_and_window_shuffle_at():
    starts = np.array([0, 2, 7, 8])
    lengths = np.array([2, 5, 1, 3])
    assert starts_order(starts, lengths, np.array([2, 0, 3, 1])).tolist() == [
        7,
        0,
        1,
        8,
        9,
        10,
        2,
        3,
        4,
        5,
        6,
    ]
    order = np.arange(10)
    out = window_shuffle_at(order, np.array([3, 7]), np.random.default_rng(0))
    assert sorted(out[:3]) == [0, 1, 2] and sorted(out[3:7]) == [3, 4, 5, 6]
    assert sorted(out[7:]) == [7, 8, 9]


def test_resume_and_state():
    starts = np.array([0, 5, 6, 20, 21, 50, 90])
    check_resume(lambda: ChunkShuffleSampler(103, block_starts=starts, window_chunks=2, seed=4))
    check_resume(
        lambda: ChunkShuffleSampler(
            103, block_starts=starts, rank=1, world_size=3, batch_size=4, num_workers=2
        )
    )
    state = ChunkShuffleSampler(103, block_starts=starts, window_chunks=2).state_dict()
    assert state["block_size"] is None and state["num_blocks"] == 7
    other = ChunkShuffleSampler(103, block_starts=starts[:-1], window_chunks=2)
    with pytest.raises(ValueError, match="saved with num_blocks=7 but this sampler has"):
        other.load_state_dict(state)
    fixed = ChunkShuffleSampler(103, block_size=8, window_chunks=2)
    with pytest.raises(KeyError, match="num_blocks"):
        fixed.load_state_dict(state)


def test_repr():
    sampler = ChunkShuffleSampler(10, block_starts=[0, 4], window_chunks=1)
    assert "num_blocks=2 (varying)" in repr(sampler)
    assert sampler.num_blocks == 2 and sampler.block_size is None


def test_errors():
    with pytest.raises(ValueError, match="block_size=4 and block_starts are exclusive"):
        ChunkShuffleSampler(10, block_size=4, block_starts=[0, 5])
    with pytest.raises(ValueError, match=r"strictly increasing and start at 0, got \[0, 5, 5\]"):
        ChunkShuffleSampler(10, block_starts=[0, 5, 5])
    with pytest.raises(ValueError, match="start at 0"):
        ChunkShuffleSampler(10, block_starts=[1, 5])
    with pytest.raises(ValueError, match="holds 10, outside a dataset of length 10"):
        ChunkShuffleSampler(10, block_starts=[0, 10])
    with pytest.raises(TypeError, match="1-d array of integers"):
        ChunkShuffleSampler(10, block_starts=[0.0, 5.0])
    with pytest.raises(TypeError, match="1-d array of integers"):
        ChunkShuffleSampler(10, block_starts=[[0, 5]])
    with pytest.raises(ValueError, match="must be empty for an empty dataset"):
        ChunkShuffleSampler(0, block_starts=[0])
    assert list(ChunkShuffleSampler(0, block_starts=[])) == []


class _VaryingBlocks:
    """A dataset with its own varying blocks and a chunk cache to size."""

    block_starts = np.array([0, 10, 12, 40])
    chunk_rows = None

    def __init__(self):
        self.chunk_cache_nbytes = 100
        self.asked = []

    def __len__(self):
        return 50

    def window_cache_nbytes(self, block_rows, blocks):
        self.asked.append(block_rows)
        return 1000 * blocks

    def set_chunk_cache(self, nbytes):
        self.chunk_cache_nbytes = nbytes


def test_reads_block_starts_from_the_dataset_and_sizes_its_cache(caplog):
    ds = _VaryingBlocks()
    sampler = ChunkShuffleSampler(ds, window_chunks=2)
    assert ds.chunk_cache_nbytes == 100  # the sampler only reads numbers
    with caplog.at_level(logging.INFO, logger="nn_handler.dataloaders.loader"):
        fit_chunk_cache(ds, sampler)  # what batched_loader does with it
    assert sampler.block_starts.tolist() == [0, 10, 12, 40]
    assert ds.asked == [None]  # the dataset sizes its own blocks
    assert ds.chunk_cache_nbytes == 4000
    assert "blocks of its own rows" in caplog.text
    assert sorted(sampler) == list(range(50))
    explicit = _VaryingBlocks()
    fit_chunk_cache(explicit, ChunkShuffleSampler(explicit, block_starts=[0, 30], window_chunks=1))
    assert explicit.asked == [30]  # other blocks: the longest one in rows
    fixed = _VaryingBlocks()
    sized = ChunkShuffleSampler(fixed, block_size=5, window_chunks=1)
    assert sized.block_starts is None
    fit_chunk_cache(fixed, sized)
    assert fixed.asked == [5]
