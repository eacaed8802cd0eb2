"""The chunk-shape, slab and sparse-block arithmetic of nn_handler.rewrite (property tests)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nn_handler.rewrite.chunking import MAX_CHUNK_BYTES, chunk_rows, chunk_shape
from nn_handler.rewrite.dense import slab_rows
from nn_handler.rewrite.order import choose_rows, row_order
from nn_handler.rewrite.sparse import block_ends, entry_index


@given(
    n=st.integers(0, 10**9),
    row=st.integers(0, 2**31),
    target=st.integers(1, 2**31),
)
def test_chunk_rows_holds_whole_rows_near_the_target(n, row, target):
    rows = chunk_rows(n, row, target)
    assert 1 <= rows <= max(n, 1)
    assert rows * row <= max(target, row)  # never past the target unless one row is larger
    if rows < n and row > 0:
        assert (rows + 1) * row > target  # as many rows as fit
    assert rows * row <= MAX_CHUNK_BYTES


def test_a_row_past_hdf5s_chunk_limit_is_refused():
    with pytest.raises(ValueError, match="chunk limit"):
        chunk_rows(10, MAX_CHUNK_BYTES + 1, 1 << 20)


def test_chunk_shape_spans_every_axis_but_the_first():
    assert chunk_shape((1000, 32, 32), 4, 1 << 20) == (256, 32, 32)
    assert chunk_shape((3, 7), 8, 1 << 20) == (3, 7)


@given(
    chunk=st.integers(1, 10**4),
    row=st.integers(1, 10**5),
    budget=st.integers(1, 10**9),
    n=st.integers(0, 10**7),
)
def test_slabs_are_whole_chunks_within_budget(chunk, row, budget, n):
    step = slab_rows(chunk, row, budget, n)
    assert step >= 1
    if step < n:
        assert step % chunk == 0
        assert step * row <= max(budget, chunk * row)


@given(st.lists(st.integers(0, 50), max_size=200), st.integers(1, 300))
def test_sparse_blocks_cover_rows_in_order_within_budget(lengths, budget):
    lengths = np.array(lengths, dtype=np.int64)
    ends = block_ends(lengths, budget)
    starts = [0, *ends[:-1]] if ends else []
    assert ends == sorted(ends) and (not len(lengths) or ends[-1] == len(lengths))
    for lo, hi in zip(starts, ends, strict=True):
        assert hi > lo
        assert hi - lo == 1 or lengths[lo:hi].sum() <= budget


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 20)), max_size=50))
def test_entry_index_is_the_rows_runs_back_to_back(rows):
    starts = np.array([s for s, _ in rows], dtype=np.int64)
    lengths = np.array([n for _, n in rows], dtype=np.int64)
    expected = [i for s, n in rows for i in range(s, s + n)]
    assert entry_index(starts, lengths).tolist() == expected


@given(st.integers(0, 5000), st.integers(0, 2**32))
def test_row_order_is_a_seeded_permutation(n, seed):
    order = row_order(n, seed)
    assert order.dtype == np.int64
    assert np.array_equal(np.sort(order), np.arange(n))
    assert np.array_equal(order, row_order(n, seed))


def test_the_shuffled_rows_are_the_most_shared_length_or_a_sparse_matrixs():
    assert choose_rows([100, 100, 7, 1], []) == 100
    assert choose_rows([5, 9], []) == 9  # a tie goes to the longer
    assert choose_rows([100, 100], [30]) == 30
    assert choose_rows([1, 0], []) is None
