"""``to_dense`` against a plain per-entry sum, for every way a batch reaches it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler._io.chunks import pool
from nn_handler.dataloaders._sparse import batch as sparse_batch
from nn_handler.dataloaders._sparse.batch import RowEntries, to_dense


def _expected(lengths, cols, data, n_out):
    rows = np.repeat(np.arange(lengths.size), lengths)
    dense = np.zeros((lengths.size, n_out), np.float32)
    np.add.at(dense, (rows, cols), data)
    return dense


@settings(max_examples=150, deadline=None)
@given(
    n_rows=st.integers(1, 12),
    n_out=st.integers(1, 9),
    canonical=st.booleans(),
    request_kind=st.sampled_from(["in order", "permuted", "repeats"]),
    into_slot=st.booleans(),
    cached_rows=st.integers(1, 4),
    threads=st.integers(1, 3),
    data=st.data(),
)
def test_to_dense_equals_the_sum_of_its_entries(
    n_rows, n_out, canonical, request_kind, into_slot, cached_rows, threads, data
):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(0, n_out + 1 if canonical else 7, n_rows).astype(np.int64)
    if canonical:
        cols = np.concatenate(
            [np.sort(rng.choice(n_out, n, replace=False)) for n in lengths.tolist()] + [[]]
        )
    else:
        cols = rng.integers(0, n_out, int(lengths.sum()))
    cols = cols.astype(data.draw(st.sampled_from([np.int32, np.int64])))
    values = rng.integers(-9, 10, cols.size).astype(np.float32)
    rows = RowEntries(lengths, cols, values, canonical, canonical)
    if request_kind == "in order":
        inverse = None
    elif request_kind == "permuted":
        inverse = rng.permutation(n_rows).astype(np.int64)
    else:
        inverse = rng.integers(0, n_rows, n_rows + 3).astype(np.int64)
    size = n_rows if inverse is None else inverse.size
    # a worker's ring slot holds the last batch it carried: every stale value must go
    slot = np.full((size, n_out), np.nan, np.float32) if into_slot else None
    pool.set_decode_threads(threads)
    with pytest.MonkeyPatch.context() as mp:  # a few rows zeroed and filled at a time
        mp.setattr(sparse_batch, "_CACHED_BYTES", cached_rows * n_out * 4)
        mp.setattr(
            sparse_batch,
            "_row_blocks",
            lambda n, _: [(a, min(n, a + 3)) for a in range(0, n, 3)],
        )
        try:
            got = to_dense(rows, inverse, n_out, np.dtype(np.float32), slot)
        finally:
            pool.set_decode_threads(None)
    expected = _expected(lengths, cols, values, n_out)
    np.testing.assert_array_equal(got, expected if inverse is None else expected[inverse])
    if slot is not None and request_kind != "repeats":
        assert got is slot  # straight into the slot, no copy
