import functools
import logging
import os
import pickle
import re
from collections import Counter

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler._io.errors import FileChangedError
from nn_handler._io.file import source as _source
from nn_handler.dataloaders import H5SampleDataset, pad_collate
from nn_handler.dataloaders._per_sample import files as sample_files

from helpers.files import LAYOUTS
from helpers.platform_marks import ROOT, needs_owners
from helpers.samples import fixed, h5_sample, trajectories, write_samples

LOGGER = "nn_handler.dataloaders"  # the dataset and its internals log under their own names


def negate(t: torch.Tensor) -> torch.Tensor:
    return -t


@pytest.fixture
def two_files(tmp_path):
    a = write_samples(tmp_path / "a.h5", trajectories(12))
    b = write_samples(tmp_path / "b.h5", trajectories(7, start=12, seed=1))
    return [a, b]


def expected_labels(attrs):
    """The documented decoding applied to h5py's own attribute values."""
    out = {}
    for key, value in attrs.items():
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, np.ndarray) and value.dtype.kind in "SO":
            value = np.array([v.decode() if isinstance(v, bytes) else v for v in value.flat])
        elif isinstance(value, np.generic) and value.dtype.kind in "biufc":
            value = value.item()
        out[key] = value
    return out


def assert_labels_equal(got, want):
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert isinstance(got[key], np.ndarray) and got[key].dtype.kind == value.dtype.kind
            np.testing.assert_array_equal(got[key], value)
        else:
            assert type(got[key]) is type(value) and got[key] == value, key


def test_data_and_labels_equal_h5py(two_files):
    ds = H5SampleDataset([str(two_files[0]), two_files[1]])
    assert len(ds) == 19
    for i in range(len(ds)):
        path, key = ds.locate(i)
        data, attrs = h5_sample(path, key)
        sample = ds[i]
        assert set(sample) == {"data", "labels"}
        assert isinstance(sample["data"], torch.Tensor)
        assert sample["data"].numpy().tobytes() == data.tobytes()
        assert sample["data"].shape == data.shape
        assert_labels_equal(sample["labels"], expected_labels(attrs))
    assert ds[-1]["labels"] == {"label": 18 % 3, "id": "s18"}


def test_files_in_given_order_then_natural_names(two_files, tmp_path):
    names = [f"trajectory_{i}" for i in (10, 2, 1, 0, 11, 3, 9)]
    c = write_samples(tmp_path / "c.h5", {n: np.zeros(1) for n in names})
    ds = H5SampleDataset([two_files[1], c, two_files[0]])
    keys = [ds.locate(i) for i in range(len(ds))]
    assert [k for p, k in keys if p == str(c)] == [
        f"/trajectory_{i}" for i in (0, 1, 2, 3, 9, 10, 11)
    ]
    firsts = [ds[i]["data"][0, 0].item() for i in range(len(ds)) if keys[i][0] != str(c)]
    assert firsts == [*range(12, 19), *range(12)]  # b's samples, then a's, each in number order
    assert [p for p, _ in keys] == [str(two_files[1])] * 7 + [str(c)] * 7 + [str(two_files[0])] * 12


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("trajectory_1*", [1, 10, 11]),
        ("trajectory_?", list(range(10))),
        ("TRAJECTORY_1", []),  # globs are case-sensitive
        ("re:trajectory_[02468]", [0, 2, 4, 6, 8]),
        ("re:trajectory_1", [1]),  # the whole name must match
        (re.compile(r"trajectory_1\d"), [10, 11]),
        (re.compile(r"TRAJECTORY_1\d", re.IGNORECASE), [10, 11]),
    ],
)
def test_pattern_glob_and_regex(two_files, pattern, expected):
    if not expected:
        with pytest.raises(ValueError, match="matches no dataset"):
            H5SampleDataset(two_files[0], pattern=pattern, sidecar=False)
        return
    ds = H5SampleDataset(two_files[0], pattern=pattern, sidecar=False)
    assert [ds[i]["data"][0, 0].item() for i in range(len(ds))] == expected
    text = pattern if isinstance(pattern, str) else "re:" + pattern.pattern
    assert ds.pattern.startswith(text) and f"pattern={ds.pattern!r}" in repr(ds)


def test_pattern_skips_other_members(tmp_path):
    samples = {**trajectories(3), "meta": np.arange(4), "config": np.zeros(2)}
    path = write_samples(tmp_path / "m.h5", samples)
    assert len(H5SampleDataset(path, sidecar=False)) == 5
    ds = H5SampleDataset(path, pattern="trajectory_*", sidecar=False)
    assert [ds.locate(i)[1] for i in range(3)] == [
        "/trajectory_0",
        "/trajectory_1",
        "/trajectory_2",
    ]


def test_limit(two_files):
    ds = H5SampleDataset(two_files, limit=5)
    assert len(ds) == 5 and [ds.locate(i)[1] for i in range(5)] == [
        f"/trajectory_{i}" for i in range(5)
    ]
    assert ds.index_origins == ("built", "unused")  # the second file is never listed
    spanning = H5SampleDataset(two_files, limit=14)
    assert len(spanning) == 14 and spanning[13]["labels"]["id"] == "s13"
    assert len(H5SampleDataset(two_files, limit=1000)) == 19  # at most: all there are
    assert len(H5SampleDataset(two_files, limit=-1)) == 19
    with pytest.raises(IndexError, match="index 5 is out of range for 5 samples"):
        ds[5]


@pytest.mark.parametrize("group", ["grp/sub", "/grp/sub", "/grp/sub/"])
def test_nested_group(tmp_path, group):
    path = write_samples(tmp_path / "n.h5", fixed(4), group="grp/sub")
    with h5py.File(path, "a") as f:
        f["top"] = np.arange(3)
    ds = H5SampleDataset(path, group=group, sidecar=False)
    assert ds.group == "/grp/sub" and len(ds) == 4
    assert ds.locate(2) == (str(path), "/grp/sub/sample_2")
    np.testing.assert_array_equal(ds[2]["data"].numpy(), np.full((2, 3), 2, np.float32))


ATTRS = {
    "int": np.int64(7),
    "float32": np.float32(1.5),
    "bool": np.bool_(True),
    "str": "héllo",
    "bytes_vlen": b"raw",
    "bytes_fixed": np.bytes_(b"fixed"),
    "int_array": np.arange(4, dtype=np.int16),
    "one_element": np.array([5.0]),
    "str_array": ["a", "bc"],
    "bytes_array": np.array([b"x", b"yz"]),
    "complex": np.complex64(1 + 2j),
}


def test_attrs_of_every_kind(tmp_path):
    path = write_samples(tmp_path / "t.h5", {"s": (np.arange(3), ATTRS)})
    with h5py.File(path, "a") as f:
        f["s"].attrs["empty"] = h5py.Empty("f4")
        f["s"].attrs["compound"] = np.array((1, 2.5), dtype=[("a", "i4"), ("b", "f8")])
    labels = H5SampleDataset(path, sidecar=False)[0]["labels"]
    assert labels["int"] == 7 and type(labels["int"]) is int
    assert labels["float32"] == 1.5 and type(labels["float32"]) is float
    assert labels["bool"] is True
    assert labels["str"] == "héllo"
    assert labels["bytes_vlen"] == "raw" and labels["bytes_fixed"] == "fixed"
    np.testing.assert_array_equal(labels["int_array"], np.arange(4))
    assert labels["int_array"].dtype == np.int16
    assert isinstance(labels["one_element"], np.ndarray) and labels["one_element"].shape == (1,)
    for key, want in (("str_array", ["a", "bc"]), ("bytes_array", ["x", "yz"])):
        assert labels[key].dtype.kind == "U" and labels[key].tolist() == want
    assert labels["complex"] == 1 + 2j and type(labels["complex"]) is complex
    assert labels["empty"] is None
    assert isinstance(labels["compound"], np.void) and labels["compound"]["b"] == 2.5
    _, attrs = h5_sample(path, "s")
    attrs.pop("empty"), attrs.pop("compound")
    labels.pop("empty"), labels.pop("compound")
    assert_labels_equal(labels, expected_labels(attrs))


def test_attrs_false_and_a_list_of_names(tmp_path):
    path = write_samples(tmp_path / "t.h5", {"s": (np.arange(3), ATTRS)})
    assert H5SampleDataset(path, attrs=False, sidecar=False)[0]["labels"] == {}
    ds = H5SampleDataset(path, attrs=["str", "int", "str"], sidecar=False)
    assert ds[0]["labels"] == {"str": "héllo", "int": 7}
    assert H5SampleDataset(path, attrs=[], sidecar=False)[0]["labels"] == {}


def test_missing_attribute_names_the_sample_and_what_it_has(tmp_path):
    path = write_samples(tmp_path / "t.h5", {"s": (np.arange(3), {"a": 1, "b": 2})})
    ds = H5SampleDataset(path, attrs=["a", "label"], sidecar=False)
    with pytest.raises(
        KeyError, match=r"'/s' in .*t\.h5.* has no attribute 'label'; it has: 'a', 'b'"
    ):
        ds[0]


def test_reference_attribute_is_rejected_unless_not_asked_for(tmp_path):
    path = write_samples(tmp_path / "t.h5", {"s": (np.arange(3), {"a": 1})})
    with h5py.File(path, "a") as f:
        f["s"].attrs["ref"] = f.ref
    with pytest.raises(TypeError, match=r"attribute 'ref' of sample 0 .* object references"):
        H5SampleDataset(path, sidecar=False)[0]
    assert H5SampleDataset(path, attrs=["a"], sidecar=False)[0]["labels"] == {"a": 1}


def test_dtype_cast_and_transform(two_files):
    ds = H5SampleDataset(two_files, dtype=np.float64, transform=negate)
    data, _ = h5_sample(two_files[0], "trajectory_3")
    got = ds[3]["data"]
    assert got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), -data.astype(np.float64))
    assert H5SampleDataset(two_files, dtype="int32")[3]["data"].dtype == torch.int32


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_storage_layout_reads_like_h5py(tmp_path, layout):
    samples = {
        f"s{i}": np.arange(i * 12, i * 12 + 12, dtype=np.float32).reshape(4, 3) for i in range(5)
    }
    samples["big_endian"] = np.arange(6, dtype=">i4").reshape(2, 3)
    samples["scalar"] = np.float64(3.25)
    samples["empty_rows"] = np.zeros((0, 3), np.float32)
    path = write_samples(tmp_path / "l.h5", samples, layout=layout)
    ds = H5SampleDataset(path, sidecar=False)
    for i in range(len(ds)):
        data, _ = h5_sample(path, ds.locate(i)[1])
        got = ds[i]["data"]
        assert got.shape == data.shape
        np.testing.assert_array_equal(got.numpy(), data)
    assert ds[ds_index(ds, "/big_endian")]["data"].dtype == torch.int32


def ds_index(ds, key):
    return next(i for i in range(len(ds)) if ds.locate(i)[1] == key)


def test_string_sample_is_a_clear_error(tmp_path):
    path = write_samples(tmp_path / "s.h5", {"s": np.array([b"ab", b"cd"])})
    with pytest.raises(
        TypeError, match=r"sample 0 .*'/s'.* has dtype \|S2, which torch cannot hold"
    ):
        H5SampleDataset(path, sidecar=False)[0]


def test_member_groups_are_skipped_counted_and_logged(tmp_path, caplog):
    path = write_samples(tmp_path / "g.h5", fixed(3))
    with h5py.File(path, "a") as f:
        f.create_group("sample_1x")
        f["sample_9/inner"] = np.arange(2)
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["alias"] = h5py.SoftLink("/sample_0")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ds = H5SampleDataset(path)
    assert ds.skipped == 3 and "skipped=3" in repr(ds)
    assert [ds.locate(i)[1] for i in range(len(ds))] == [
        "/alias",
        "/sample_0",
        "/sample_1",
        "/sample_2",
    ]
    assert (
        "skipped 3 member(s) of group '/' that are not datasets: "
        "'dangling', 'sample_1x', 'sample_9'" in caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        again = H5SampleDataset(path)  # from the sidecar: still counted and said
    assert again.index_origins == ("sidecar",) and again.skipped == 3
    assert "skipped 3 member(s)" in caplog.text


def test_only_groups_is_an_error(tmp_path):
    path = tmp_path / "only_groups.h5"
    with h5py.File(path, "w") as f:
        f.create_group("a")
        f.create_group("b")
    with pytest.raises(
        ValueError, match=r"no datasets in group '/' of .*; members there: 'a', 'b'"
    ):
        H5SampleDataset(path)


def test_bad_input(two_files, tmp_path):
    a = two_files[0]
    with pytest.raises(KeyError, match=r"group='/nope' not found in .*a\.h5'; its groups: '/'"):
        H5SampleDataset(a, group="nope")
    with pytest.raises(KeyError, match="group='/trajectory_1' is a dataset, not a group"):
        H5SampleDataset(a, group="trajectory_1")
    with pytest.raises(ValueError, match="pattern='nothing_\\*' matches no dataset in group '/'"):
        H5SampleDataset(a, pattern="nothing_*")
    with pytest.raises(ValueError, match="paths must name at least one HDF5 file, got \\[\\]"):
        H5SampleDataset([])
    with pytest.raises(FileNotFoundError, match="HDF5 file not found"):
        H5SampleDataset([a, tmp_path / "missing.h5"])
    not_h5 = tmp_path / "x.txt"
    not_h5.write_text("hello")
    with pytest.raises(OSError, match="is not an HDF5 file"):
        H5SampleDataset(not_h5)
    with pytest.raises(ValueError, match="must not repeat a file"):
        H5SampleDataset([a, str(a)])
    for bad in (0, -2):
        with pytest.raises(
            ValueError, match=f"limit must be -1 \\(all samples\\) or >= 1, got {bad}"
        ):
            H5SampleDataset(a, limit=bad)
    with pytest.raises(TypeError, match="limit must be an integer"):
        H5SampleDataset(a, limit=2.5)
    with pytest.raises(TypeError, match="attrs must be True, False or a list of attribute names"):
        H5SampleDataset(a, attrs="label")
    with pytest.raises(TypeError, match="attrs must hold non-empty str names"):
        H5SampleDataset(a, attrs=["label", 3])
    with pytest.raises(TypeError, match="dtype must be a numeric or bool NumPy dtype"):
        H5SampleDataset(a, dtype="S4")
    with pytest.raises(TypeError, match="transform must be callable"):
        H5SampleDataset(a, transform=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shuffle'"):
        H5SampleDataset(a, shuffle=True)
    with pytest.raises(ValueError, match="is not a valid regular expression"):
        H5SampleDataset(a, pattern="re:(")
    with pytest.raises(TypeError, match="pattern must be None, a non-empty glob"):
        H5SampleDataset(a, pattern=3)
    with pytest.raises(TypeError, match="group must be a non-empty str"):
        H5SampleDataset(a, group="")
    with pytest.raises(TypeError, match="sidecar must be True or False"):
        H5SampleDataset(a, sidecar="yes")
    with pytest.raises(ValueError, match="locking must be one of"):
        H5SampleDataset(a, locking="maybe")
    with pytest.raises(TypeError, match=r"paths must hold str or os\.PathLike entries"):
        H5SampleDataset([a, 3])


def test_a_failed_build_leaves_no_handle_open(two_files):
    with pytest.raises(KeyError, match="not found") as info:
        H5SampleDataset(two_files, group="nope")
    assert info.traceback  # the half-built dataset stays referenced, its sources too
    still_open = [s.path for s in _source._OPEN_SOURCES if s.is_open]
    assert str(two_files[0]) not in still_open


def test_group_missing_in_one_file_lists_its_groups(tmp_path):
    a = write_samples(tmp_path / "a.h5", fixed(2), group="train")
    b = write_samples(tmp_path / "b.h5", fixed(2), group="valid/x")
    with pytest.raises(
        KeyError,
        match=r"group='/train' not found in .*b\.h5'; its groups: '/', '/valid', '/valid/x'",
    ):
        H5SampleDataset([a, b], group="train")


def test_index_errors(two_files):
    ds = H5SampleDataset(two_files)
    with pytest.raises(IndexError, match="index -20 is out of range for 19 samples"):
        ds[-20]
    with pytest.raises(TypeError, match="index must be an integer"):
        ds["x"]
    assert ds[np.int64(2)]["labels"]["id"] == "s2"


def test_file_changed_after_indexing_is_a_clear_error(tmp_path):
    path = write_samples(tmp_path / "c.h5", fixed(3))
    ds = H5SampleDataset(path, sidecar=False)
    with h5py.File(path, "a") as f:
        del f["sample_2"]
    # caught when the file is opened again (any process), before the stale index is used
    with pytest.raises(FileChangedError, match=r"c\.h5' changed after the dataset was built"):
        ds[2]


def test_repr_close_and_context_manager(two_files):
    with H5SampleDataset(two_files, pattern="trajectory_*") as ds:
        assert not ds.is_open  # construction leaves no handle behind
        ds[0]
        text = repr(ds)
        assert text.startswith(
            f"H5SampleDataset(files=[{str(two_files[0])!r}, {str(two_files[1])!r}]"
        )
        assert "group='/'" in text and "pattern='trajectory_*'" in text and "len=19" in text
        assert text.endswith("open)")
    assert not ds.is_open and repr(ds).endswith("closed)")
    assert ds[1]["labels"]["id"] == "s1"  # reopens


def test_repr_shortens_many_files(tmp_path):
    paths = [write_samples(tmp_path / f"f{i}.h5", fixed(1)) for i in range(5)]
    assert "… (2 more)" in repr(H5SampleDataset(paths))


def test_plain_h5py_open_in_the_same_process_after_construction(two_files):
    ds = H5SampleDataset(two_files)
    with h5py.File(two_files[0], "r") as f:  # no SWMR clash: the dataset holds no handle yet
        assert "trajectory_0" in f
    assert ds[0]["labels"]["id"] == "s0"


def test_pickles_after_use_in_the_parent(two_files):
    ds = H5SampleDataset(two_files, transform=negate, attrs=["id"])
    first = ds[3]
    assert ds.is_open
    clone = pickle.loads(pickle.dumps(ds))
    assert not clone.is_open and len(clone) == len(ds)
    again = clone[3]
    np.testing.assert_array_equal(again["data"].numpy(), first["data"].numpy())
    assert again["labels"] == {"id": "s3"}


def all_samples(paths):
    """Every sample of the files as (first value, label id) via h5py, for multiset checks."""
    out = []
    for path in paths:
        with h5py.File(path, "r") as f:
            for name in f:
                out.append((float(f[name][0, 0]), f[name].attrs["id"]))
    return Counter(out)


LOADER_CASES = [
    pytest.param(0, None, id="workers0"),
    pytest.param(2, "fork", id="fork"),
    pytest.param(2, "spawn", id="spawn"),
    pytest.param(2, "forkserver", id="forkserver"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "context"), LOADER_CASES)
def test_dataloader_workers_pad_collate(two_files, workers, context):
    ds = H5SampleDataset(two_files)
    ds[0]  # the parent reads first: forked workers inherit open handles
    loader = DataLoader(
        ds,
        batch_size=4,
        shuffle=True,
        num_workers=workers,
        multiprocessing_context=context,
        collate_fn=functools.partial(pad_collate, padding_value=-1.0, axes=0),
        generator=torch.Generator().manual_seed(0),
        timeout=120 if workers else 0,
    )
    orders = []
    for _epoch in range(2):
        seen = []
        for batch in loader:
            for b, length in enumerate(batch["lengths"][:, 0].tolist()):
                row = batch["data"][b]
                assert batch["mask"][b, :length].all() and not batch["mask"][b, length:].any()
                assert (row[length:] == -1).all()
                path_key = batch["labels"]["id"][b]
                seen.append((row[0, 0].item(), path_key))
                i = int(path_key[1:])
                data, _ = h5_sample(two_files[0] if i < 12 else two_files[1], f"trajectory_{i}")
                np.testing.assert_array_equal(row[:length].numpy(), data)
        assert Counter(seen) == all_samples(two_files)  # every sample exactly once
        orders.append([s[1] for s in seen])
    assert orders[0] != orders[1]


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "context"), LOADER_CASES[1:])
def test_dataloader_workers_default_collate_fixed_shapes(tmp_path, workers, context):
    paths = [
        write_samples(tmp_path / "f0.h5", fixed(9)),
        write_samples(tmp_path / "f1.h5", fixed(8, 9)),
    ]
    ds = H5SampleDataset(paths, dtype=np.float64)
    loader = DataLoader(
        ds,
        batch_size=5,
        shuffle=True,
        num_workers=workers,
        multiprocessing_context=context,
        timeout=120,
    )
    labels = []
    for batch in loader:
        assert batch["data"].dtype == torch.float64 and batch["data"].shape[1:] == (2, 3)
        assert isinstance(batch["labels"]["label"], torch.Tensor)
        firsts = batch["data"][:, 0, 0].long()
        assert torch.equal(firsts, batch["labels"]["label"])  # data travels with its labels
        labels += batch["labels"]["label"].tolist()
    assert sorted(labels) == list(range(17))


def test_variable_length_samples_through_pad_collate(tmp_path):
    lengths = [3, 1, 4, 2]
    samples = {
        f"seq_{i}": (np.arange(n * 2, dtype=np.int64).reshape(n, 2) + 100 * i, {"n": n})
        for i, n in enumerate(lengths)
    }
    path = write_samples(tmp_path / "v.h5", samples)
    ds = H5SampleDataset(path)
    batch = pad_collate([ds[i] for i in range(4)])
    assert batch["data"].shape == (4, 4, 2) and batch["data"].dtype == torch.int64
    assert batch["lengths"].tolist() == [[n, 2] for n in lengths]
    assert batch["mask"].shape == (4, 4, 2)
    assert batch["labels"]["n"].tolist() == lengths
    for b, n in enumerate(lengths):
        data, _ = h5_sample(path, f"seq_{b}")
        np.testing.assert_array_equal(batch["data"][b, :n].numpy(), data)
        assert (batch["data"][b, n:] == 0).all()
        assert batch["mask"][b, :n].all() and not batch["mask"][b, n:].any()


# ---------------------------------------------------------------- sidecar


def test_sidecar_is_written_next_to_the_file_and_reused(two_files, monkeypatch):
    first = H5SampleDataset(two_files)
    assert first.index_origins == ("built", "built")
    for p in two_files:
        assert os.path.exists(f"{p}.nnh-index.npz")
    calls = []
    real = sample_files.list_samples
    monkeypatch.setattr(sample_files, "list_samples", lambda *a: calls.append(a) or real(*a))
    second = H5SampleDataset(two_files)
    assert second.index_origins == ("sidecar", "sidecar") and calls == []  # nothing listed
    assert [second.locate(i) for i in range(19)] == [first.locate(i) for i in range(19)]
    assert second[18]["labels"] == first[18]["labels"]
    assert not [n for n in os.listdir(two_files[0].parent) if n.endswith(".tmp")]


def test_sidecar_rebuilt_when_a_file_changes(two_files):
    H5SampleDataset(two_files)
    a, b = two_files
    with h5py.File(b, "a") as f:  # size (and mtime) change
        f["trajectory_99"] = np.full((1, 3), 99, np.float32)
        f["trajectory_99"].attrs["id"] = "s99"
    ds = H5SampleDataset(two_files)
    assert ds.index_origins == ("sidecar", "built") and len(ds) == 20
    assert ds[19]["labels"] == {"id": "s99"}
    st = os.stat(a)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # mtime only
    assert H5SampleDataset(two_files).index_origins == ("built", "sidecar")
    assert H5SampleDataset(two_files).index_origins == ("sidecar", "sidecar")


def test_sidecar_rebuilt_for_other_build_parameters(two_files):
    assert H5SampleDataset(two_files[0]).index_origins == ("built",)
    by_pattern = H5SampleDataset(two_files[0], pattern="trajectory_1*")
    assert by_pattern.index_origins == ("built",) and len(by_pattern) == 3
    regex = H5SampleDataset(two_files[0], pattern="re:trajectory_1.*")
    assert regex.index_origins == ("built",) and len(regex) == 3  # same names, other pattern
    again = H5SampleDataset(two_files[0], pattern="re:trajectory_1.*")
    assert again.index_origins == ("sidecar",) and len(again) == 3
    # limit, attrs and dtype are not build parameters: the sidecar serves them
    assert H5SampleDataset(two_files[0], pattern="re:trajectory_1.*", limit=2).index_origins == (
        "sidecar",
    )


def test_sidecar_off(two_files):
    ds = H5SampleDataset(two_files, sidecar=False)
    assert ds.index_origins == ("built", "built")
    assert not [n for n in os.listdir(two_files[0].parent) if "nnh-index" in n]


def test_corrupt_sidecar_is_rebuilt(two_files):
    H5SampleDataset(two_files[0])
    side = f"{two_files[0]}.nnh-index.npz"
    with open(side, "wb") as fh:
        fh.write(b"not a zip")
    ds = H5SampleDataset(two_files[0])
    assert ds.index_origins == ("built",) and len(ds) == 12
    assert H5SampleDataset(two_files[0]).index_origins == ("sidecar",)  # rewritten


def test_sidecar_with_inconsistent_content_is_rebuilt(two_files):
    H5SampleDataset(two_files[0])
    side = f"{two_files[0]}.nnh-index.npz"
    with np.load(side) as npz:
        members = {k: npz[k] for k in npz.files}
    members["offsets"] = members["offsets"][:-1]  # no longer ends at the blob's end
    with open(side, "wb") as fh:
        np.savez(fh, **members)
    ds = H5SampleDataset(two_files[0])
    assert ds.index_origins == ("built",) and len(ds) == 12
    members.pop("offsets")
    with open(side, "wb") as fh:
        np.savez(fh, **members)
    assert H5SampleDataset(two_files[0]).index_origins == ("built",)


def test_unwritable_directory_falls_back_with_a_log_line(two_files, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("nn_handler.dataloaders._per_sample.sidecar.os.open", refuse)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        ds = H5SampleDataset(two_files)
    assert len(ds) == 19 and ds.index_origins == ("built", "built")
    assert caplog.text.count("cannot write the index sidecar") == 2
    assert "going on without it" in caplog.text
    assert not [n for n in os.listdir(two_files[0].parent) if "nnh-index" in n]


@needs_owners
@pytest.mark.skipif(ROOT, reason="root ignores permissions")
def test_read_only_directory_for_real(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    path = write_samples(ro / "a.h5", fixed(3))
    ro.chmod(0o555)
    try:
        assert len(H5SampleDataset(path)) == 3
    finally:
        ro.chmod(0o755)
