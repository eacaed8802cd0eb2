import os
import pickle

import h5py
import numpy as np
import pytest

from nn_handler._io.errors import FileChangedError
from nn_handler._io.formats.whole import SampleReader

from helpers.files import LAYOUTS
from helpers.process import as_if_forked
from helpers.samples import write_samples


def where():
    return "0 ('/s' in 'f.h5')"


def read_all(path, reader, names):
    fid = reader._sources[0].file.id  # as H5SampleDataset does: through the reader's own source
    assert reader._sources[0].path == str(path)
    return [reader.read(0, h5py.h5d.open(fid, n.encode()), where) for n in names]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_equals_h5py_and_only_raw_contiguous_is_mapped(tmp_path, layout):
    samples = {f"s{i}": np.arange(i, i + 12, dtype=np.float32).reshape(4, 3) for i in range(3)}
    path = write_samples(tmp_path / "f.h5", samples, layout=layout)
    reader = SampleReader([str(path)])
    got = read_all(path, reader, list(samples))
    for arr, want in zip(got, samples.values(), strict=True):
        np.testing.assert_array_equal(arr, want)
        assert arr.flags.writeable and arr.flags.owndata | (arr.base is not None)
    assert bool(reader._local.get().files) == (layout == "contiguous")  # raw reads of the bytes
    assert reader._local.get().trusted == ({0: True} if layout == "contiguous" else {})


@pytest.mark.parametrize(
    "data",
    [
        np.arange(6, dtype=">i2").reshape(2, 3),
        np.array([True, False, True]),
        np.arange(4, dtype=np.complex64) * (1 + 1j),
        np.float16(2.5),
        np.zeros((0, 2), np.int8),
        np.array([1, 2], dtype=h5py.enum_dtype({"A": 1, "B": 2}, basetype="u1")),
    ],
    ids=["big-endian", "bool", "complex", "scalar", "empty", "enum"],
)
def test_dtypes_equal_h5py(tmp_path, data):
    path = write_samples(tmp_path / "f.h5", {"s": data})
    got = read_all(path, SampleReader([str(path)]), ["s"])[0]
    with h5py.File(path, "r") as f:
        want = f["s"][()]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_a_map_that_disagrees_with_hdf5_is_never_used(tmp_path, monkeypatch):
    samples = {f"s{i}": np.full(3, i + 1, np.int64) for i in range(3)}
    path = write_samples(tmp_path / "f.h5", samples)
    reader = SampleReader([str(path)])
    monkeypatch.setattr(reader, "_mapped", lambda *a: np.zeros(24, np.uint8))
    got = read_all(path, reader, list(samples))
    assert [a.tolist() for a in got] == [[1] * 3, [2] * 3, [3] * 3]
    assert reader._local.get().trusted == {0: False}


def test_file_truncated_under_the_reader_raises_not_sigbus(tmp_path):
    path = write_samples(tmp_path / "f.h5", {"a": np.arange(3), "b": np.arange(50_000)})
    reader = SampleReader([str(path)])
    read_all(path, reader, ["a"])
    dsid = h5py.h5d.open(reader._sources[0].file.id, b"b")
    reader.read(0, dsid, where, sample=1)  # checked once, then trusted for this process
    os.truncate(path, os.path.getsize(path) - 1000)
    with pytest.raises(FileChangedError, match=r"f\.h5' changed after the dataset was built"):
        reader.read(0, dsid, where, sample=1)
    reader._sources[0].identity = None  # only the short read stands between us and garbage
    with pytest.raises(FileChangedError, match=r"ends before byte"):
        reader.read(0, dsid, where, sample=1)


def test_pickle_and_new_process_drop_descriptors(tmp_path):
    path = write_samples(tmp_path / "f.h5", {"a": np.arange(3)})
    reader = SampleReader([str(path)])
    read_all(path, reader, ["a"])
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._local.peek() is None
    assert read_all(path, clone, ["a"])[0].tolist() == [0, 1, 2]
    as_if_forked()
    assert reader._local.inherited
    read_all(path, reader, ["a"])
    assert list(reader._local.get().files) == [0]


def test_unreadable_samples(tmp_path):
    path = write_samples(tmp_path / "f.h5", {"s": np.array(["ab"], dtype=h5py.string_dtype())})
    with h5py.File(path, "a") as f:
        f.create_dataset("null", data=h5py.Empty("f4"))
    reader = SampleReader([str(path)])
    with pytest.raises(
        TypeError, match=r"sample 0 \('/s' in 'f.h5'\) has dtype object, which torch cannot hold"
    ):
        read_all(path, reader, ["s"])
    with pytest.raises(ValueError, match="is an empty \\(null dataspace\\) dataset"):
        read_all(path, reader, ["null"])
