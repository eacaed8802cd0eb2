"""String datasets as targets or inputs: ``str`` per sample, or class indices via a label map."""

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler.dataloaders import H5LazyDataset, RankMemCachedH5Dataset

from helpers.real_files import LABELS, write_strings

ORDER = [5, 0, 29, 3, 3]


@pytest.fixture
def path(tmp_path):
    return write_strings(tmp_path)


def stored(path, key):
    with h5py.File(path) as f:
        return [v.decode() if isinstance(v, bytes) else v for v in f[key].asstr()[()].tolist()]


@pytest.mark.parametrize("key", ["fixed", "vlen", "utf8"])
def test_strings_are_str(path, key):
    want = stored(path, key)
    ds = H5LazyDataset(path, "x", key)
    _x, y = ds[7]
    assert y == want[7] and isinstance(y, str)
    xs, ys = ds[ORDER]
    assert ys == [want[i] for i in ORDER]
    np.testing.assert_array_equal(xs.numpy(), np.arange(60, dtype=np.float32).reshape(30, 2)[ORDER])
    assert [s[1] for s in ds.__getitems__(ORDER)] == [want[i] for i in ORDER]
    assert H5LazyDataset(path, key)[[1, 2]] == want[1:3]  # strings as x


@pytest.mark.parametrize("key", ["fixed", "vlen"])
def test_classes_give_indices_for_cross_entropy(path, key):
    ds = H5LazyDataset(path, "x", key, classes=["bird", "cat", "dog"])
    want = [["bird", "cat", "dog"].index(s) for s in stored(path, key)]
    _xs, ys = ds[ORDER]
    assert ys.dtype == torch.int64 and ys.tolist() == [want[i] for i in ORDER]
    assert ds.label_map == {"bird": 0, "cat": 1, "dog": 2}
    assert ds.classes == ["bird", "cat", "dog"]
    loader = DataLoader(ds, batch_size=8)
    _x, y = next(iter(loader))
    loss = torch.nn.functional.cross_entropy(torch.zeros(len(y), 3), y)
    assert torch.isfinite(loss) and y.tolist() == want[:8]


def test_auto_classes_and_label_map(path):
    auto = H5LazyDataset(path, "x", "vlen", classes="auto")
    assert auto.classes == sorted(LABELS)
    mapped = H5LazyDataset(path, "x", "fixed", label_map={"cat": 7, "dog": 8, "bird": 9})
    assert mapped[[0, 1, 2]][1].tolist() == [7, 8, 9]
    assert int(mapped[1][1]) == 8
    partial = H5LazyDataset(path, "x", "fixed", label_map={"cat": 0})
    with pytest.raises(KeyError, match=r"label 'dog' is not in the label map; known labels: 'cat'"):
        partial[[0, 1]]


def test_bad_label_options(path):
    with pytest.raises(TypeError, match="classes= / label_map= map string labels"):
        H5LazyDataset(path, "fixed", "x", classes=["a"])
    with pytest.raises(TypeError, match="pass classes= or label_map=, not both"):
        H5LazyDataset(path, "x", "fixed", classes=["a"], label_map={"a": 0})
    with pytest.raises(ValueError, match="classes must be distinct strings"):
        H5LazyDataset(path, "x", "fixed", classes=["a", "a"])
    with pytest.raises(ValueError, match="classes must be a list of labels or 'auto'"):
        H5LazyDataset(path, "x", "fixed", classes="sorted")
    with pytest.raises(TypeError, match="label_map must map str labels to int indices"):
        H5LazyDataset(path, "x", "fixed", label_map={"a": "0"})
    with pytest.raises(TypeError, match="pass a y_key"):
        H5LazyDataset(path, "x", classes=["a"])
    with pytest.raises(TypeError, match=r"y_key='vlen' .* holds strings, which y_dtype=int64"):
        H5LazyDataset(path, "x", "vlen", y_dtype=np.int64)


def test_target_transform_sees_str(path):
    ds = H5LazyDataset(path, "x", "ids", target_transform=str.upper)
    assert ds[[0, 11]][1] == ["ID-0", "ID-11"]


def test_rank_cached_refuses_strings_with_the_alternative(path):
    with pytest.raises(TypeError, match=r"H5LazyDataset returns strings as str"):
        RankMemCachedH5Dataset(path, "x", "vlen", log_fn=lambda _: None)


def write_latin1(tmp_path, kind):
    """Labels stored as latin-1 bytes (row 4 is b'caf\\xe9', not UTF-8) in one string form."""
    labels = [b"cat", b"dog", b"bird", b"dog", "café".encode("latin-1"), b"cat"]
    path = tmp_path / f"{kind}.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(12, dtype=np.float32).reshape(6, 2)
        if kind == "fixed":
            f["y"] = np.array(labels, dtype="S8")
        else:
            charset = "utf-8" if kind == "vlen-utf8" else "ascii"  # HDF5 checks neither
            f.create_dataset(
                "y", data=np.array(labels, dtype=object), dtype=h5py.string_dtype(charset)
            )
    return path


def stored_bytes(path):
    with h5py.File(path) as f:
        return [bytes(v) for v in f["y"][()].tolist()]


@pytest.mark.parametrize("kind", ["fixed", "vlen-ascii", "vlen-utf8"])
def test_label_encoding_reads_labels_that_are_not_utf8(tmp_path, kind):
    path = write_latin1(tmp_path, kind)
    raw = stored_bytes(path)
    latin = H5LazyDataset(path, "x", "y", label_encoding="latin-1")
    assert latin[np.arange(6)][1] == [v.decode("latin-1") for v in raw]
    assert latin[4][1] == "café" and latin.__getitems__([4, 0])[0][1] == "café"
    as_bytes = H5LazyDataset(path, "x", "y", label_encoding="bytes")
    assert as_bytes[np.arange(6)][1] == raw and as_bytes[4][1] == b"caf\xe9"
    auto = H5LazyDataset(path, "x", "y", classes="auto", label_encoding="cp1252")
    assert auto.classes == sorted({v.decode("cp1252") for v in raw})
    assert auto[[4, 1]][1].tolist() == [auto.label_map["café"], auto.label_map["dog"]]


def test_label_encoding_bytes_cannot_map_classes_and_bad_codecs_are_named(path):
    with pytest.raises(TypeError, match="label_encoding='bytes' returns the stored bytes"):
        H5LazyDataset(path, "x", "fixed", classes="auto", label_encoding="bytes")
    with pytest.raises(ValueError, match="label_encoding='nope' is not a Python codec"):
        H5LazyDataset(path, "x", "fixed", label_encoding="nope")
