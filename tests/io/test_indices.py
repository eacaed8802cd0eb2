import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nn_handler._io.indices import as_index_array, normalize_index, plan_slabs


@given(st.integers(1, 1000), st.data())
def test_normalize_index_wraps_negatives(length, data):
    i = data.draw(st.integers(-length, length - 1))
    assert normalize_index(i, length) == range(length)[i]


@pytest.mark.parametrize("bad", [5, -6, 100])
def test_normalize_index_out_of_range_names_index_and_length(bad):
    with pytest.raises(IndexError, match=rf"index {bad} is out of range .* length 5"):
        normalize_index(bad, 5)


@pytest.mark.parametrize("bad", [1.0, "1", None, True])
def test_normalize_index_rejects_non_integers(bad):
    with pytest.raises(TypeError, match="index must be an integer"):
        normalize_index(bad, 5)


@given(st.integers(1, 500), st.data())
def test_as_index_array_matches_python_indexing(length, data):
    idx = data.draw(st.lists(st.integers(-length, length - 1), max_size=50))
    expected = [range(length)[i] for i in idx]
    got = as_index_array(idx, length)
    assert got.dtype == np.int64
    assert got.tolist() == expected
    assert as_index_array(np.array(idx, dtype=np.int32), length).tolist() == expected
    assert as_index_array(torch.tensor(idx, dtype=torch.long), length).tolist() == expected


def test_as_index_array_slices_and_empty():
    assert as_index_array(slice(None, None, -3), 10).tolist() == [9, 6, 3, 0]
    assert as_index_array([], 10).shape == (0,)


def test_as_index_array_errors():
    with pytest.raises(IndexError, match="index 10 is out of range for a dataset of length 10"):
        as_index_array([1, 10], 10)
    with pytest.raises(IndexError, match="index -11 "):
        as_index_array([-11], 10)
    with pytest.raises(TypeError, match="indices must be integers, got dtype float64"):
        as_index_array([1.0, 2.0], 10)
    with pytest.raises(TypeError, match="one-dimensional"):
        as_index_array([[1, 2]], 10)


@given(
    st.integers(1, 400),
    st.integers(1, 17),
    st.integers(0, 3),
    st.integers(1, 64),
    st.data(),
)
def test_plan_slabs_covers_each_row_once_with_whole_blocks(length, block, gap, max_rows, data):
    rows = np.array(
        sorted(data.draw(st.sets(st.integers(0, length - 1), max_size=80))), dtype=np.int64
    )
    slabs = list(plan_slabs(rows, block, gap, max_rows, length))
    served = []
    prev_stop = 0
    for start, stop, lo, hi in slabs:
        assert lo < hi
        assert start % block == 0  # slabs start on a block boundary
        assert stop == length or stop % block == 0  # and end on one (or the data's end)
        assert start >= prev_stop  # in order, disjoint
        assert start <= rows[lo] and rows[hi - 1] < stop
        assert stop - start <= max(block, max_rows // block * block)
        served.extend(rows[lo:hi].tolist())
        prev_stop = stop
    assert served == rows.tolist()
    # consecutive slabs were split for a reason: a gap too large, or the size cap
    for (s0, e0, _, _), (_, _, lo1, _) in itertools.pairwise(slabs):
        gap_blocks = rows[lo1] // block - (e0 - 1) // block - 1
        assert gap_blocks > gap or rows[lo1] // block - s0 // block >= max(1, max_rows // block)


def test_plan_slabs_groups_by_chunk():
    rows = np.array([0, 1, 9, 10, 30], dtype=np.int64)
    assert list(plan_slabs(rows, 10, 0, 1000, 35)) == [(0, 20, 0, 4), (30, 35, 4, 5)]
    assert list(plan_slabs(rows, 10, 1, 1000, 35)) == [(0, 35, 0, 5)]
    assert list(plan_slabs(rows, 1, 0, 1000, 35)) == [(0, 2, 0, 2), (9, 11, 2, 4), (30, 31, 4, 5)]
