"""The verification pass's reads: any rows, in any order, equal to plain h5py indexing."""

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.rewrite.verify import read_rows

N = 97


@pytest.fixture(scope="module")
def dsets(tmp_path_factory):
    path = tmp_path_factory.mktemp("verify") / "v.h5"
    data = np.arange(N * 3, dtype=np.int32).reshape(N, 3)
    with h5py.File(path, "w") as f:
        f.create_dataset("one", data=data, chunks=(1, 3), compression="gzip")
        f.create_dataset("four", data=data, chunks=(4, 3))
        f.create_dataset("flat", data=data)
    f = h5py.File(path, "r")
    yield f, data
    f.close()


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(["one", "four", "flat"]),
    rows=st.lists(st.integers(0, N - 1), max_size=60),
    budget=st.integers(1, 2000),
)
def test_read_rows_equals_indexing(dsets, key, rows, budget):
    f, data = dsets
    idx = np.array(rows, dtype=np.int64)
    got = read_rows(f[key], idx, 12, budget)
    np.testing.assert_array_equal(got, data[idx])


def test_neighbouring_one_row_chunks_are_read_in_one_slice(dsets, monkeypatch):
    f, data = dsets
    slices = []

    class Spy:
        shape, chunks = f["one"].shape, f["one"].chunks

        def __getitem__(self, key):
            slices.append(key)
            return f["one"][key]

    rows = np.r_[0:40, 50:60][::-1].astype(np.int64)
    np.testing.assert_array_equal(read_rows(Spy(), rows, 12, 1 << 20), data[rows])
    assert slices == [slice(0, 40), slice(50, 60)]  # not one h5py call per chunk
    slices.clear()
    read_rows(Spy(), rows, 12, 12 * 16)  # at most 16 rows' bytes per slice
    assert slices == [slice(0, 16), slice(16, 32), slice(32, 40), slice(50, 60)]
