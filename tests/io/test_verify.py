"""One check of a fast path against h5py: same bytes, or h5py's reads take over."""

import h5py
import numpy as np
import pytest

from nn_handler._io.file.verify import agrees_with_hdf5, probe_rows
from nn_handler.dataloaders import FileChangedError


@pytest.fixture
def dset(tmp_path):
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f["x"] = np.arange(20, dtype=np.int32).reshape(10, 2)
        f["scalar"] = np.float16(2.5)
    f = h5py.File(tmp_path / "v.h5", "r")
    yield f
    f.close()


def test_probe_rows_are_the_ends():
    assert probe_rows(10).tolist() == [0, 9] and probe_rows(1).tolist() == [0]


def test_same_bytes_agree_and_h5py_is_returned(dset):
    rows = probe_rows(10)
    agrees, expected = agrees_with_hdf5(dset["x"], lambda r: dset["x"][()][r], rows)
    assert agrees and expected.tolist() == [[0, 1], [18, 19]]
    agrees, _ = agrees_with_hdf5(dset["x"], lambda r: np.zeros((2, 2), np.int32), rows)
    assert not agrees


def test_a_whole_0d_dataset_stays_0d(dset):
    agrees, expected = agrees_with_hdf5(dset["scalar"], lambda _: np.array(np.float16(2.5)))
    assert agrees and expected.shape == () and expected.dtype == np.float16


def test_a_fast_path_that_cannot_serve_disagrees_but_our_errors_are_raised(dset):
    def cannot(_rows):
        raise IndexError("offset past the view")

    assert agrees_with_hdf5(dset["x"], cannot, probe_rows(10))[0] is False

    def changed(_rows):
        raise FileChangedError("v.h5 changed", "v.h5")

    with pytest.raises(FileChangedError):
        agrees_with_hdf5(dset["x"], changed, probe_rows(10))
