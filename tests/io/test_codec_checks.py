"""Filters and dtypes are checked when a dataset is built, not at the first read."""

import h5py
import numpy as np
import pytest
import torch

from nn_handler._io.file import filters as _codecs
from nn_handler.dataloaders import (
    CombinedHDF5Dataset,
    H5LazyDataset,
    H5SampleDataset,
    H5SparseDataset,
    MissingFilterError,
    RankMemCachedH5Dataset,
)

from helpers.real_files import write_odd_types


@pytest.fixture
def path(tmp_path):
    return write_odd_types(tmp_path)


def quiet(_):
    pass


def test_missing_filter_fails_at_construction_naming_it(path):
    with h5py.File(path) as f, pytest.raises(OSError, match="can't"):
        f["lzo"][:]  # what a user would otherwise meet at the first batch
    message = r"x_key='lzo' .* filter 305 \(lzo\): an HDF5 LZO plugin on HDF5_PLUGIN_PATH"
    with pytest.raises(MissingFilterError, match=message):
        H5LazyDataset(path, "lzo")
    with pytest.raises(MissingFilterError, match=r"filter 305 \(lzo\)"):
        RankMemCachedH5Dataset(path, "lzo", log_fn=quiet)
    with pytest.raises(MissingFilterError, match=r"field 'x'='lzo' .* filter 305 \(lzo\)"):
        CombinedHDF5Dataset(path, load_fields=["x"], field_names={"x": "lzo"}, cache_size=0)
    np.testing.assert_array_equal(H5LazyDataset(path, "good")[[1, 2]].numpy(), [1, 2])


def test_plugin_filters_name_hdf5plugin(path, monkeypatch):
    monkeypatch.setattr(_codecs, "_available", lambda code: code != 32004)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(10), chunks=(5,), compression="gzip")
        dcpl = f["x"].id.get_create_plist()
    assert [fi.label for fi in _codecs.filters_of(h5py.File(path)["x"])] == ["gzip(level=4)"]
    monkeypatch.setattr(_codecs, "_available", lambda code: False)
    with (
        h5py.File(path) as f,
        pytest.raises(MissingFilterError, match=r"filter 1 \(gzip\): built into"),
    ):
        _codecs.check_filters(f["x"], "x_key='x' in 'f.h5'")
    assert dcpl.get_nfilters() == 1


def test_unknown_filter_names_the_plugin_path(tmp_path, monkeypatch):
    path = tmp_path / "u.h5"
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((4,))
        dcpl.set_filter(32099, h5py.h5z.FLAG_OPTIONAL)
        h5py.h5d.create(f.id, b"x", h5py.h5t.STD_I32LE, h5py.h5s.create_simple((8,)), dcpl=dcpl)
    with pytest.raises(
        MissingFilterError,
        match=r"filter 32099 \(filter-32099\): a plugin for it on HDF5_PLUGIN_PATH",
    ):
        H5LazyDataset(path, "x")


def _unknown_filter(group, name, data):
    """A chunked dataset under filter 40000 (registered nowhere); optional, so it can be written."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((min(4, len(data)), *data.shape[1:]))
    dcpl.set_filter(40000, h5py.h5z.FLAG_OPTIONAL)
    space = h5py.h5s.create_simple(data.shape)
    dtype = h5py.h5t.py_create(data.dtype)
    h5py.Dataset(h5py.h5d.create(group.id, name.encode(), dtype, space, dcpl=dcpl))[...] = data


def test_a_missing_filter_is_one_error_from_every_dataset_class(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        _unknown_filter(f, "x", np.arange(16, dtype="f4").reshape(8, 2))
        _unknown_filter(f.create_group("samples"), "s0", np.arange(6, dtype="f4"))
        x = f.create_group("X")
        x.attrs.update({"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
        x.attrs["shape"] = (3, 4)
        _unknown_filter(x, "data", np.arange(1, 6, dtype="f4"))
        x["indices"] = np.array([0, 1, 3, 2, 0], dtype=np.int32)
        x["indptr"] = np.array([0, 2, 3, 5], dtype=np.int64)
    builds = {
        "H5LazyDataset": lambda: H5LazyDataset(path, "x"),
        "RankMemCachedH5Dataset": lambda: RankMemCachedH5Dataset(path, "x", log_fn=quiet),
        "CombinedHDF5Dataset": lambda: CombinedHDF5Dataset(
            path, load_fields=["x"], field_names={"x": "x"}, cache_size=0
        ),
        "H5SampleDataset": lambda: H5SampleDataset(path, group="samples")[0],
        "H5SparseDataset": lambda: H5SparseDataset(path, group="X"),
    }
    for name, build in builds.items():
        with pytest.raises(MissingFilterError) as info:
            build()
        text = str(info.value)
        assert "filter 40000 (filter-40000): a plugin for it on HDF5_PLUGIN_PATH" in text, name
        assert repr(str(path)) in text and info.value.path == str(path), name
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, OSError), name


def test_float128_needs_a_cast(path):
    with pytest.raises(
        TypeError,
        match=r"float128 \(128-bit\), which torch has no dtype for; pass a cast to np.float64",
    ):
        H5LazyDataset(path, "ld")
    ds = H5LazyDataset(path, "ld", x_dtype=np.float64)
    assert ds[[3, 1]].tolist() == [3.0, 1.0] and ds[[3]].dtype == torch.float64
    with pytest.raises(TypeError, match=r"torch cannot represent: float128 .* np.float64"):
        RankMemCachedH5Dataset(path, "ld", dtype_x=None, log_fn=quiet)
    cached = RankMemCachedH5Dataset(path, "ld", log_fn=quiet, pin_host_memory=False)
    assert cached.x.dtype == torch.float32 and cached.x.tolist() == list(range(8))


@pytest.mark.parametrize("key", ["quad", "time"])
def test_types_without_numpy_equivalent(path, key):
    with pytest.raises(TypeError, match=rf"x_key='{key}' .* HDF5 type that NumPy cannot represent"):
        H5LazyDataset(path, key)
    with pytest.raises(TypeError, match="NumPy cannot represent"):
        RankMemCachedH5Dataset(path, key, log_fn=quiet)
    with pytest.raises(TypeError, match="NumPy cannot represent"):
        CombinedHDF5Dataset(path, load_fields=["v"], field_names={"v": key}, cache_size=0)
