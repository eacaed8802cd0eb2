import re

import h5py
import numpy as np
import pytest

from nn_handler.dataloaders._per_sample.index import (
    FileIndex,
    NamePattern,
    SampleIndex,
    list_samples,
    pack_names,
)


def test_pattern_parsing():
    assert NamePattern.parse(None) is None
    glob = NamePattern.parse("traj_[0-9]*")
    assert glob.kind == "glob" and glob.matches("traj_12") and not glob.matches("xtraj_1")
    assert glob.describe() == "traj_[0-9]*"
    rx = NamePattern.parse("re:t\\d+")
    assert rx.kind == "re" and rx.matches("t12") and not rx.matches("t12x")
    assert rx.describe() == "re:t\\d+"
    compiled = NamePattern.parse(re.compile("T\\d", re.I))
    assert compiled.matches("t1") and compiled.describe() == f"re:T\\d (flags={re.I | re.U})"
    for bad in ("", "re:", b"x*", re.compile(b"x"), 5):
        with pytest.raises(TypeError, match="pattern must be None"):
            NamePattern.parse(bad)
    with pytest.raises(ValueError, match=r"pattern='re:\[' is not a valid regular expression"):
        NamePattern.parse("re:[")


def names_of(index: FileIndex) -> list[str]:
    return [
        index.blob[index.offsets[i] : index.offsets[i + 1]].tobytes().decode()
        for i in range(len(index))
    ]


def test_list_samples_follows_links_and_skips_non_datasets(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["target"] = np.arange(2)
    with h5py.File(tmp_path / "main.h5", "w") as f:
        for i in (10, 9, 1):
            f[f"s{i}"] = np.arange(i)
        f["soft"] = h5py.SoftLink("/s1")
        f["external"] = h5py.ExternalLink(str(other), "/target")
        f["broken_ext"] = h5py.ExternalLink(str(tmp_path / "gone.h5"), "/x")
        f["broken_soft"] = h5py.SoftLink("/gone")
        f["subgroup"] = h5py.SoftLink("/")  # a group reached through a link
        f["dtype"] = np.dtype("i4")  # named datatype
        f.create_group("g")
        index = list_samples(f["/"], None)
        assert names_of(index) == ["external", "s1", "s9", "s10", "soft"]
        assert index.skipped == 5
        assert index.skipped_names == ("broken_ext", "broken_soft", "dtype", "g", "subgroup")
        assert index.listed == ("broken_ext", "broken_soft", "dtype", "external", "g")
        only = list_samples(f["/"], NamePattern.parse("s*"))
        assert names_of(only) == ["s1", "s9", "s10", "soft", "subgroup"][:4] and only.skipped == 1


def test_pack_names_roundtrip():
    blob, offsets = pack_names([b"a", b"", b"xyz"])
    assert blob.dtype == np.uint8 and offsets.dtype == np.int64
    assert blob.tobytes() == b"axyz" and offsets.tolist() == [0, 1, 1, 4]
    empty_blob, empty_offsets = pack_names([])
    assert empty_blob.size == 0 and empty_offsets.tolist() == [0]


def file_index(names):
    return FileIndex(*pack_names([n.encode() for n in names]), 0, (), ())


@pytest.mark.parametrize("limit", [None, 1, 2, 3, 4, 100])
def test_sample_index_concatenates_files_in_numpy(limit):
    files = [file_index(["a1", "a2"]), file_index([]), file_index(["c1", "c22"])]
    index = SampleIndex(files, limit)
    everything = [(0, b"a1"), (0, b"a2"), (2, b"c1"), (2, b"c22")]
    expected = everything if limit is None else everything[:limit]
    assert len(index) == len(expected)
    assert [(int(index.file_no[i]), index.name(i)) for i in range(len(index))] == expected
    assert index.file_no.dtype == np.int32 and index.offsets.dtype == np.int64
    assert index.blob.dtype == np.uint8 and len(index.blob) == index.offsets[-1]
    for arr in (index.file_no, index.offsets, index.blob):
        assert isinstance(arr, np.ndarray) and arr.dtype != object
