"""The index math of predictions: which rank computes which rows, and the batches in them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nn_handler.outputs import block_rows, rank_batches, rank_span

sizes = st.integers(1, 5000)
chunks = st.integers(1, 300)
batches = st.integers(1, 700)
worlds = st.integers(1, 9)


def _spans(n, block, world):
    return [rank_span(n, block, rank, world) for rank in range(world)]


@given(sizes, chunks, batches, worlds)
def test_spans_cover_every_row_once_in_rank_order_on_block_boundaries(n, chunk, batch, world):
    block = block_rows(chunk, batch)
    assert block % chunk == 0 and (block <= batch or block == chunk)
    spans = _spans(n, block, world)
    assert spans[0][0] == 0 and spans[-1][1] == n
    for (_, stop), (start, _) in itertools.pairwise(spans):
        assert stop == start  # contiguous, no gap, no overlap
    for start, stop in spans:
        assert start % block == 0 or start == n  # whole chunks: each rank encodes its own
        assert stop % block == 0 or stop == n
    lengths = [-(-(stop - start) // block) for start, stop in spans]
    assert max(lengths) - min(lengths) <= 1  # balanced to one block


@given(sizes, chunks, batches, worlds, worlds)
def test_batches_are_the_same_on_any_number_of_ranks(n, chunk, batch, world, other):
    block = block_rows(chunk, batch)

    def cut(w):
        return [
            (b.start, b.stop) for s in _spans(n, block, w) for b in rank_batches(s, block, batch)
        ]

    mine = cut(world)
    assert mine == cut(other)
    rows = np.concatenate([np.arange(a, b) for a, b in mine])
    assert np.array_equal(rows, np.arange(n))
    assert all(0 < b - a <= batch for a, b in mine)
    assert all(a // block == (b - 1) // block for a, b in mine)  # never across a block


@given(sizes, chunks, batches, st.data())
def test_batches_with_every_row_stored_are_skipped_the_rest_run_whole(n, chunk, batch, data):
    block = block_rows(chunk, batch)
    stored = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    everything = list(rank_batches((0, n), block, batch))
    left = list(rank_batches((0, n), block, batch, stored))
    assert left == [b for b in everything if not stored[b.start : b.stop].all()]


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        block_rows(64, 0)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\), got 2"):
        rank_span(10, 4, 2, 2)
    with pytest.raises(TypeError, match="block must be an integer"):
        rank_span(10, 4.0, 0, 1)
