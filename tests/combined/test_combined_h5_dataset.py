import itertools
import logging
import os
import pickle
import re

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler.dataloaders import CombinedHDF5Dataset, batched_loader
from nn_handler.dataloaders.combined_h5_dataset import CombinedHDF5Dataset as Direct

from helpers.recordings import FIELD_NAMES, GUID_KINDS, C, T, read_file, reference, write_recording

LOGGER = "nn_handler.dataloaders"  # the dataset and its internals log under their own names
LENGTHS = [40, 0, 25, 60, 13]


@pytest.fixture(params=[0, 1], ids=["seed0", "seed1"])
def files(request, tmp_path):
    """Five files: different lengths (one empty), every guid kind, one without fhr_ph, and one
    whose cs_label is all False (nothing survives cs_label=True)."""
    seed = request.param
    paths, start = [], 0
    for k, n in enumerate(LENGTHS):
        path = write_recording(
            tmp_path / f"rec{k}.h5",
            n,
            seed=seed * 10 + k,
            uid_start=start,
            guid_kind=GUID_KINDS[k % len(GUID_KINDS)],
            drop=("fhr_ph",) if k == 2 else (),
            cs_value=False if k == 3 else None,
        )
        paths.append(path)
        start += n
    return paths


@pytest.fixture
def full_files(tmp_path):
    """Three files with every field (so every field loads by default)."""
    return [
        write_recording(tmp_path / f"full{k}.h5", n, seed=k, uid_start=100 * k, guid_kind=kind)
        for k, (n, kind) in enumerate([(17, "vlen-str"), (9, "fixed-bytes"), (23, "vlen-bytes")])
    ]


def where_vectorized(cols):
    return (cols["weight"] > 0.3) | np.char.startswith(cols["guid"], "p3")


def where_reference(data, i):
    return bool(data["weight"][i] > 0.3 or str(data["guid"][i]).startswith("p3"))


FILTER_VALUES = {
    "allowed_guids": ["p0-e", "p1-é".encode(), "p2-é", "nobody"],
    "cs_label": True,
    "bg_label": False,
    "epoch": (20.0, 80.0),
    "label": C - 1,
    "min_valid_fraction": 0.5,
    "where": where_vectorized,
}


def _kwargs(names):
    kw, ref = {}, {}
    for name in names:
        if name == "epoch":
            kw["epoch_min"], kw["epoch_max"] = FILTER_VALUES["epoch"]
        elif name == "where":
            kw["where"], ref["where_ref"] = where_vectorized, where_reference
        else:
            kw[name] = FILTER_VALUES[name]
    ref.update({k: v for k, v in kw.items() if k != "where"})
    return kw, ref


def _uids(ds):
    return ds[:]["uid"].tolist() if len(ds) else []


def test_every_filter_combination_matches_brute_force(files):
    names = list(FILTER_VALUES)
    for count in range(len(names) + 1):
        for combo in itertools.combinations(names, count):
            kw, ref = _kwargs(combo)
            ds = CombinedHDF5Dataset(
                files,
                load_fields=["uid", "guid"],
                cache_size=0,
                field_names=FIELD_NAMES,
                metadata_in_memory=count % 2 == 0,  # both read paths
                **kw,
            )
            expected, removed = reference(files, ref)
            assert _uids(ds) == expected, combo
            stats = ds.get_stats()
            active = {n: removed.get(n, 0) for n in stats["removed_by_filter"]}
            assert stats["removed_by_filter"] == active, combo
            assert stats["samples_scanned"] == sum(LENGTHS)
            assert stats["total_samples"] == len(expected)
            kept_files = {ds.locate(i)[0] for i in range(len(ds))}
            assert stats["files"] == len(kept_files)


@pytest.mark.parametrize(
    "kw",
    [
        {"epoch_min": 50.0},
        {"epoch_max": 50},
        {"epoch_min": 33.3, "epoch_max": 33.3},
        {"min_valid_fraction": 0.0},
        {"min_valid_fraction": 1.0},
        {"label": 0},
        {"cs_label": False, "bg_label": True},
        {"allowed_guids": []},
    ],
    ids=str,
)
def test_single_filters_match_brute_force(files, kw):
    ds = CombinedHDF5Dataset(files, load_fields=["uid"], field_names=FIELD_NAMES, **kw)
    expected, _ = reference(files, kw)
    assert _uids(ds) == expected


def test_files_without_survivors_are_skipped(files, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        ds = CombinedHDF5Dataset(files, cs_label=True, load_fields=["uid"], field_names=FIELD_NAMES)
    used = {ds.locate(i)[0] for i in range(len(ds))}
    assert str(files[3]) not in used and str(files[1]) not in used  # all-False file, empty file
    stats = ds.get_stats()
    assert stats["files"] == 3 and stats["files_skipped"] == 2
    assert (
        "removed by cs_label:" in caplog.text and "2 files without samples skipped" in caplog.text
    )


def test_default_fields_leave_out_a_field_some_files_lack(files, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        ds = CombinedHDF5Dataset(files, field_names=FIELD_NAMES)
    assert "fhr_ph" not in ds.fields
    assert set(ds.fields) == {"fhr_st", "target", "weight", "guid", "cs_label", "bg_label"} | {
        "epoch",
        "uid",
    }
    assert "field 'fhr_ph' is not loaded: 1 of 5 files lack it" in caplog.text
    with pytest.raises(KeyError, match=r"rec2\.h5'? has no field 'fhr_ph'"):
        CombinedHDF5Dataset(files, load_fields=["fhr_ph"])


@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "from-files"])
def test_fields_equal_direct_h5py_reads(full_files, in_memory):
    ds = CombinedHDF5Dataset(
        full_files, field_names=FIELD_NAMES, cache_size=0, metadata_in_memory=in_memory
    )
    assert ds.fields == [
        "fhr_st",
        "fhr_ph",
        "target",
        "weight",
        "guid",
        "cs_label",
        "bg_label",
        "epoch",
        "uid",
    ]
    data = {str(p): read_file(p) for p in full_files}
    order = np.random.default_rng(0).permutation(len(ds))
    batch = ds[order]
    for pos, i in enumerate(order.tolist()):
        path, row = ds.locate(i)
        single = ds[i]
        for name in ds.fields:
            want = data[path][name][row]
            for got in (single[name], batch[name][pos]):
                if name == "guid":
                    assert isinstance(got, str) and got == want
                else:
                    assert (
                        got.numpy().tobytes()
                        == np.asarray(want).astype(got.numpy().dtype).tobytes()
                    )
    assert batch["cs_label"].dtype == torch.bool
    assert batch["bg_label"].dtype == torch.int8
    assert batch["uid"].dtype == torch.int64
    assert batch["weight"].dtype == torch.float32  # stored float64: a float field, cast
    assert isinstance(batch["guid"], list)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_float_fields_cast_to_dtype(full_files, dtype):
    ds = CombinedHDF5Dataset(full_files, dtype=dtype, field_names=FIELD_NAMES)
    idx = [5, 0, 30, 5]
    batch, stored = ds[idx], {str(p): read_file(p) for p in full_files}
    for name in ("fhr_st", "target", "weight", "epoch"):
        rows = [stored[ds.locate(i)[0]][name][ds.locate(i)[1]] for i in idx]
        expected = torch.from_numpy(np.stack(rows)).to(dtype)
        assert batch[name].dtype == dtype
        torch.testing.assert_close(batch[name], expected, equal_nan=True, rtol=0, atol=0)
    assert batch["uid"].dtype == torch.int64 and ds[3]["fhr_st"].dtype == dtype


def test_load_fields_subset_and_batch_shapes(full_files):
    ds = CombinedHDF5Dataset(full_files, load_fields=["target", "guid", "fhr_st", "guid"])
    assert ds.fields == ["target", "guid", "fhr_st"]
    sample = ds[0]
    assert list(sample) == ["target", "guid", "fhr_st"]
    assert sample["target"].shape == (T, C) and sample["fhr_st"].shape == (2, T)
    batch = ds[[1, 2, 3]]
    assert batch["target"].shape == (3, T, C) and len(batch["guid"]) == 3
    items = ds.__getitems__([3, 1])
    assert [s["guid"] for s in items] == [batch["guid"][2], batch["guid"][0]]
    torch.testing.assert_close(items[0]["fhr_st"], batch["fhr_st"][2], equal_nan=True)


def test_unknown_load_field_lists_the_available_fields(full_files):
    message = "load_fields entry 'fhr' is not a field; available fields: 'bg_label', 'cs_label'"
    with pytest.raises(ValueError, match=re.escape(message)):
        CombinedHDF5Dataset(full_files, load_fields=["fhr_st", "fhr"])
    with pytest.raises(ValueError, match="return_valid_mask=True"):
        CombinedHDF5Dataset(full_files, load_fields=["valid_mask"])


def test_field_names_map_other_layouts(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["signals/heart"] = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
        f["meta/patient_id"] = np.array([b"a", b"b", b"a", b"c"])
        f["meta/csection"] = np.array([1, 0, 1, 1], dtype=np.uint8)
    ds = CombinedHDF5Dataset(
        path,
        cs_label=True,
        allowed_guids=["a", "c"],
        field_names={
            "fhr_st": "signals/heart",
            "guid": "meta/patient_id",
            "cs_label": "meta/csection",
        },
    )
    assert len(ds) == 3 and ds.fields == ["fhr_st", "guid", "cs_label"]
    assert ds[:]["guid"] == ["a", "a", "c"]
    assert ds[2]["fhr_st"][0, 0].item() == 18.0
    assert ds[:]["cs_label"].dtype == torch.uint8


def test_valid_mask_field_and_filter(full_files):
    ds = CombinedHDF5Dataset(
        full_files, min_valid_fraction=0.25, return_valid_mask=True, field_names=FIELD_NAMES
    )
    expected, _ = reference(full_files, {"min_valid_fraction": 0.25})
    assert ds[:]["uid"].tolist() == expected
    batch = ds[:]
    mask, signal = batch["valid_mask"], batch["fhr_st"]
    assert mask.dtype == torch.bool and mask.shape == (len(ds), T)
    manual = torch.isfinite(signal).all(dim=1) & (signal != 0).any(dim=1)
    assert torch.equal(mask, manual)
    assert (mask.float().mean(dim=1) >= 0.25).all() and mask.any(dim=1).all()
    only = CombinedHDF5Dataset(
        full_files, load_fields=["uid"], return_valid_mask=True, field_names=FIELD_NAMES
    )
    assert only.fields == ["uid", "valid_mask"] and only[0]["valid_mask"].shape == (T,)


def test_time_axis_and_onehot_without_time(tmp_path):
    path = tmp_path / "tc.h5"
    sig = np.zeros((3, 5, 2), dtype=np.float32)  # (N, T, channels): time on axis 0
    sig[0, 1:, 0] = 1.0
    sig[2, 0, 1] = np.nan
    sig[2, 1, :] = 2.0
    with h5py.File(path, "w") as f:
        f["fhr_st"] = sig
        f["target"] = np.array([[1, 0], [0, 1], [1, 0]], dtype=np.int64)  # (N, C)
    ds = CombinedHDF5Dataset(path, time_axis=0, return_valid_mask=True, min_valid_fraction=0.0)
    assert len(ds) == 2
    assert ds[0]["valid_mask"].tolist() == [False, True, True, True, True]
    assert ds[1]["valid_mask"].tolist() == [False, True, False, False, False]
    assert ds[:]["target"].dtype == torch.int64
    assert len(CombinedHDF5Dataset(path, label=1)) == 1


def test_cache_counts_are_exact_on_a_scripted_pattern(full_files):
    ds = CombinedHDF5Dataset(full_files, cache_size=3, field_names=FIELD_NAMES)
    uids = CombinedHDF5Dataset(full_files, cache_size=0, field_names=FIELD_NAMES)[:]["uid"]
    script = [  # (access, hits, misses, cached keys after it, least recently used first)
        (0, 0, 1, [0]),
        (1, 0, 1, [0, 1]),
        (0, 1, 0, [1, 0]),
        (2, 0, 1, [1, 0, 2]),
        (3, 0, 1, [0, 2, 3]),  # evicts 1, the least recently used
        (1, 0, 1, [2, 3, 1]),
        ([2, 4, 4, 2], 3, 1, [1, 2, 4]),  # 4 is read once; its repeat and both 2s are hits
        ([5, 6, 7, 8], 0, 4, [6, 7, 8]),  # more misses than room: the last three stay
        ([8, 6], 2, 0, [7, 8, 6]),
    ]
    hits = misses = accesses = 0
    for access, h, m, keys in script:
        out = ds[access]
        hits, misses = hits + h, misses + m
        accesses += 1 if isinstance(access, int) else len(access)
        stats = ds.get_stats()
        assert (stats["cache_hits"], stats["cache_misses"]) == (hits, misses), access
        assert stats["access_count"] == accesses
        assert ds._local().cache.keys() == keys, access
        assert stats["cache_size"] == len(keys) <= 3
        assert torch.equal(out["uid"], uids[access])
    assert ds.get_stats()["hit_rate"] == pytest.approx(hits / (hits + misses))


def test_cache_serves_the_same_bytes_and_is_not_aliased(full_files):
    ds = CombinedHDF5Dataset(full_files, cache_size=50, field_names=FIELD_NAMES)
    plain = CombinedHDF5Dataset(full_files, cache_size=0, field_names=FIELD_NAMES)
    rng = np.random.default_rng(1)
    for _ in range(20):
        idx = rng.integers(0, len(ds), size=int(rng.integers(1, 12)))
        got, want = ds[idx], plain[idx]
        for name in ds.fields:
            if name == "guid":
                assert got[name] == want[name]
            else:
                torch.testing.assert_close(got[name], want[name], equal_nan=True, rtol=0, atol=0)
        got["fhr_st"].fill_(123.0)  # the caller owns returned tensors: the cache is unchanged
    assert ds[[0]]["fhr_st"].ne(123.0).any()
    stats = ds.get_stats()
    assert stats["cache_hits"] > 0 and stats["cache_size"] <= 50
    assert plain.get_stats()["cache_hits"] == 0
    assert plain.get_stats()["cache_misses"] == plain.get_stats()["access_count"]


def test_clear_cache(full_files):
    ds = CombinedHDF5Dataset(full_files, cache_size=10, field_names=FIELD_NAMES)
    ds[[0, 1, 2]]
    assert ds.get_stats()["cache_size"] == 3
    assert len(ds._cache) == 3  # the seed's memory-management snippet reads this
    ds.clear_cache()
    assert ds.get_stats()["cache_size"] == 0 and len(ds._cache) == 0
    assert len(CombinedHDF5Dataset(full_files, cache_size=0, field_names=FIELD_NAMES)._cache) == 0
    ds[0]
    assert ds.get_stats()["cache_misses"] == 4  # counters kept, 0 read again


def test_metadata_in_memory_reads_only_per_sample_arrays(full_files):
    resident = CombinedHDF5Dataset(full_files, load_fields=["weight", "guid"], cache_size=0)
    from_files = CombinedHDF5Dataset(
        full_files, load_fields=["weight", "guid"], cache_size=0, metadata_in_memory=False
    )
    idx = [4, 40, 4, 0]
    a, b = resident[idx], from_files[idx]
    assert a["guid"] == b["guid"] and torch.equal(a["weight"], b["weight"])
    assert resident.get_stats()["bytes_read"] == 0 and resident.get_stats()["open_files"] == 0
    assert resident.get_stats()["index_bytes_read"] > 0
    assert from_files.get_stats()["bytes_read"] > 0
    empty = CombinedHDF5Dataset(full_files, load_fields=["guid"], allowed_guids=[])
    assert len(empty) == 0 and empty[[]] == {"guid": []}


def test_stats_bytes_and_repr(full_files):
    ds = CombinedHDF5Dataset(full_files, load_fields=["fhr_st"], cache_size=0)
    assert ds.get_stats()["bytes_read"] == 0 and ds.get_stats()["index_bytes_read"] == 0
    ds[[0, 1, 2]]
    stats = ds.get_stats()
    assert stats["bytes_read"] == 3 * 2 * T * 4
    assert stats["dtype"] == torch.float32 and stats["fields"] == ["fhr_st"]
    assert stats["max_open_files"] == 64 and stats["open_files"] == 1
    text = repr(ds)
    assert "49 samples from 3 of 3 files" in text and "open_files=1" in text
    ds.close()
    assert ds.get_stats()["open_files"] == 0


def test_pin_memory_without_cuda_logs_once_and_continues(full_files, caplog):
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        ds = CombinedHDF5Dataset(full_files, pin_memory=True)
        ds[[0, 1]], ds[2]
    assert caplog.text.count("CUDA is not available") == 1
    assert not ds[0]["fhr_st"].is_pinned()


@pytest.mark.cuda
def test_pin_memory_with_cuda(full_files):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    ds = CombinedHDF5Dataset(full_files, pin_memory=True)
    assert ds[[0, 1]]["fhr_st"].is_pinned() and ds[0]["target"].is_pinned()
    assert not CombinedHDF5Dataset(full_files, pin_memory=False)[0]["fhr_st"].is_pinned()


def test_index_errors_and_single_path(full_files):
    ds = CombinedHDF5Dataset(str(full_files[0]), load_fields=["uid"], field_names=FIELD_NAMES)
    assert len(ds) == 17 and ds[-1]["uid"].item() == 16
    with pytest.raises(IndexError, match="index 17 is out of range for a dataset of length 17"):
        ds[17]
    with pytest.raises(IndexError, match="index -18"):
        ds[[0, -18]]
    with pytest.raises(TypeError, match="index must be an integer"):
        ds["0"]
    assert ds[np.int64(3)]["uid"].item() == 3 and ds[torch.tensor([4, 5])]["uid"].tolist() == [4, 5]


def test_pickle_after_use(full_files):
    ds = CombinedHDF5Dataset(full_files, cache_size=5, where=lambda c: c["weight"] > 0.2)
    before = ds[[0, 3]]
    clone = pickle.loads(pickle.dumps(ds))  # the where callable is not kept: lambdas are fine
    assert clone.get_stats()["cache_size"] == 0 and clone.get_stats()["open_files"] == 0
    after = clone[[0, 3]]
    assert after["guid"] == before["guid"]
    torch.testing.assert_close(after["fhr_st"], before["fhr_st"], equal_nan=True)
    assert Direct is CombinedHDF5Dataset


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "from-files"])
def test_more_files_than_the_handle_cap(tmp_path, in_memory):
    paths = [
        write_recording(tmp_path / f"m{k}.h5", 7 + k, seed=k, uid_start=1000 * k) for k in range(12)
    ]
    fields = ["fhr_st", "target", "uid", "guid"]
    data = {str(p): read_file(p) for p in paths}
    base = len(os.listdir("/proc/self/fd"))
    ds = CombinedHDF5Dataset(
        paths,
        load_fields=fields,
        field_names=FIELD_NAMES,
        cache_size=0,
        max_open_files=3,
        metadata_in_memory=in_memory,
    )
    assert len(os.listdir("/proc/self/fd")) == base  # construction leaves nothing open
    peak = base
    rng = np.random.default_rng(0)
    for _ in range(30):
        idx = rng.integers(0, len(ds), size=9)
        batch = ds[idx]
        peak = max(peak, len(os.listdir("/proc/self/fd")))
        assert ds.get_stats()["open_files"] <= 3
        for pos, i in enumerate(idx.tolist()):
            path, row = ds.locate(i)
            assert batch["uid"][pos].item() == data[path]["uid"][row]
            assert batch["guid"][pos] == data[path]["guid"][row]
            assert batch["fhr_st"][pos].numpy().tobytes() == data[path]["fhr_st"][row].tobytes()
    # each open file: its h5py handle plus one memory map per memmap-read field
    assert peak - base <= 3 * (1 + len(fields))
    first = ds[0]  # file 0 was evicted long ago: reopened, same bytes
    assert first["uid"].item() == 0
    ds.close()
    assert len(os.listdir("/proc/self/fd")) == base


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "from-files"])
def test_dataloader_workers_match_the_main_process(full_files, context, in_memory):
    ds = CombinedHDF5Dataset(
        full_files, cache_size=8, field_names=FIELD_NAMES, metadata_in_memory=in_memory
    )
    ds[[0, 1]]  # the parent opens files first: forked workers must not use its handles
    order = torch.Generator().manual_seed(0)
    plain = DataLoader(ds, batch_size=4, shuffle=True, generator=order)
    expected = [b["uid"].tolist() for b in plain]
    loader = DataLoader(
        ds,
        batch_size=4,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=2,
        multiprocessing_context=context,
        timeout=120,
    )
    got = [(b["uid"].tolist(), b["guid"], b["fhr_st"]) for b in loader]
    assert [g[0] for g in got] == expected
    data = {str(p): read_file(p) for p in full_files}
    uid_to_row = {int(d["uid"][r]): (p, r) for p, d in data.items() for r in range(len(d["uid"]))}
    for uids, guids, signal in got:
        for pos, uid in enumerate(uids):
            path, row = uid_to_row[uid]
            assert guids[pos] == data[path]["guid"][row]
            assert signal[pos].numpy().tobytes() == data[path]["fhr_st"][row].tobytes()


def test_batched_loader_returns_stacked_dicts(full_files):
    ds = CombinedHDF5Dataset(full_files, load_fields=["uid", "guid"], field_names=FIELD_NAMES)
    loader = batched_loader(ds, 10, shuffle=False)
    batches = list(loader)
    assert [len(b["guid"]) for b in batches] == [10, 10, 10, 10, 9]
    assert torch.cat([b["uid"] for b in batches]).tolist() == ds[:]["uid"].tolist()


def _write(path, **datasets):
    with h5py.File(path, "w") as f:
        for key, value in datasets.items():
            f[key] = value
    return path


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"epoch_min": 50, "epoch_max": 10.5},
            ValueError,
            "epoch_min=50 is greater than epoch_max=10.5",
        ),
        ({"epoch_min": float("nan")}, ValueError, "epoch_min must be a number, got nan"),
        ({"epoch_max": "10"}, TypeError, "epoch_max must be a number or None, got '10'"),
        (
            {"label": C},
            ValueError,
            f"label={C} is outside the class range 0..{C - 1} of field 'target'",
        ),
        ({"label": -1}, ValueError, "label must be >= 0, got -1"),
        ({"cs_label": 1}, TypeError, "cs_label must be True, False or None, got 1"),
        ({"allowed_guids": "p0-e"}, TypeError, "allowed_guids must be an iterable of ids"),
        ({"allowed_guids": [1]}, TypeError, "allowed_guids must hold str or bytes ids, got 1"),
        (
            {"dtype": torch.int32},
            TypeError,
            "dtype must be one of torch.float16, torch.bfloat16, torch.float32",
        ),
        ({"dtype": "float32"}, TypeError, "got 'float32'"),
        ({"cache_size": -1}, ValueError, "cache_size must be >= 0, got -1"),
        ({"pin_memory": "yes"}, TypeError, "pin_memory must be True or False, got 'yes'"),
        ({"max_open_files": 0}, ValueError, "max_open_files must be >= 1, got 0"),
        ({"min_valid_fraction": 1.5}, ValueError, "min_valid_fraction must be in [0, 1], got 1.5"),
        (
            {"time_axis": 2, "min_valid_fraction": 0},
            ValueError,
            "time_axis=2 is not an axis of field 'fhr_st'",
        ),
        (
            {"valid_field": "weight", "return_valid_mask": True},
            ValueError,
            "field 'weight' has one value per sample",
        ),
        (
            {"valid_field": "guid", "return_valid_mask": True},
            TypeError,
            "valid_field='guid' holds strings",
        ),
        ({"where": 3}, TypeError, "where must be callable or None, got 3"),
        (
            {"where": lambda c: c["weight"]},
            TypeError,
            "where= must return a boolean array of shape (17,)",
        ),
        ({"where": lambda c: c["uid"] > 0}, KeyError, "where= asked for column 'uid'"),
        ({"load_fields": "fhr_st"}, TypeError, "load_fields must be a list of field names or None"),
        ({"load_fields": []}, ValueError, "load_fields is empty"),
        ({"field_names": {"guid": ""}}, TypeError, "field_names must map non-empty field names"),
        (
            {"field_names": {"valid_mask": "x"}},
            ValueError,
            "field_names may not define 'valid_mask'",
        ),
        ({"field_names": ["guid"]}, TypeError, "field_names must be a mapping"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_arguments(full_files, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        CombinedHDF5Dataset(full_files, **kwargs)


def test_bad_paths(full_files, tmp_path):
    with pytest.raises(
        ValueError, match=re.escape("paths must name at least one HDF5 file, got []")
    ):
        CombinedHDF5Dataset([])
    missing = tmp_path / "nope.h5"
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"HDF5 file not found: path={str(missing)!r}")
    ):
        CombinedHDF5Dataset([full_files[0], missing])
    with pytest.raises(ValueError, match=r"lists .*full0\.h5' twice"):
        CombinedHDF5Dataset([full_files[0], str(full_files[0])])
    with pytest.raises(TypeError, match="paths must be a path or a sequence of paths"):
        CombinedHDF5Dataset([full_files[0], 3])
    text = _write(tmp_path / "text.h5", x=np.zeros(2))
    text.write_bytes(b"not hdf5")
    with pytest.raises(OSError, match="is not an HDF5 file"):
        CombinedHDF5Dataset(text)


def test_bad_files(full_files, tmp_path):
    no_cs = write_recording(tmp_path / "no_cs.h5", 5, seed=9, uid_start=500, drop=("cs_label",))
    message = (
        f"{str(no_cs)!r} has no field 'cs_label' (dataset 'cs_label'), which cs_label needs; "
        "the file has fields 'bg_label', 'epoch', 'fhr_ph', 'fhr_st', 'guid', 'target', 'weight'"
    )
    with pytest.raises(KeyError, match=re.escape(message)):
        CombinedHDF5Dataset([full_files[0], no_cs], cs_label=True)
    with pytest.raises(KeyError, match=r"which load_fields needs; .* datasets 'bg_label'"):
        CombinedHDF5Dataset([no_cs], load_fields=["cs_label"])
    assert len(CombinedHDF5Dataset([full_files[0], no_cs])) == 22  # not needed: not loaded
    other = _write(tmp_path / "other.h5", signals=np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"holds none of the fields .* it has datasets: 'signals'"):
        CombinedHDF5Dataset(other)
    ragged = _write(tmp_path / "ragged.h5", fhr_st=np.zeros((4, 2)), weight=np.zeros(3))
    with pytest.raises(
        ValueError, match=re.escape("differ in length along axis 0 ('fhr_st': 4, 'weight': 3)")
    ):
        CombinedHDF5Dataset(ragged)
    wide = _write(tmp_path / "wide.h5", fhr_st=np.zeros((4, 2, T + 1), dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \(2, 12\) in .* but \(2, 13\) in"):
        CombinedHDF5Dataset([full_files[0], wide], load_fields=["fhr_st"])
    mixed = _write(tmp_path / "mixed.h5", guid=np.arange(4))
    with pytest.raises(ValueError, match="field 'guid' holds strings in one file and numbers"):
        CombinedHDF5Dataset([full_files[0], mixed], load_fields=["guid"])
    scalar = _write(tmp_path / "scalar.h5", fhr_st=np.float32(1))
    with pytest.raises(ValueError, match="is a scalar dataset"):
        CombinedHDF5Dataset(scalar)
    flat = _write(tmp_path / "flat.h5", target=np.arange(4))
    with pytest.raises(ValueError, match="label needs field 'target' with at least one axis"):
        CombinedHDF5Dataset(flat, label=0)
    texty = _write(tmp_path / "texty.h5", epoch=np.array([b"a", b"b"]))
    with pytest.raises(TypeError, match="epoch_min/epoch_max needs a numeric field 'epoch'"):
        CombinedHDF5Dataset(texty, epoch_min=0)


def test_integer_widths_are_promoted_across_files(tmp_path):
    a = _write(tmp_path / "a.h5", bg_label=np.array([1, 0], dtype=np.int8))
    b = _write(tmp_path / "b.h5", bg_label=np.array([300], dtype=np.int16))
    ds = CombinedHDF5Dataset([a, b])
    assert ds[:]["bg_label"].dtype == torch.int16 and ds[:]["bg_label"].tolist() == [1, 0, 300]
