"""Errors in words: each input that used to raise a bare Python error (or one whose
cause was Python's words) raises our error class naming the file, the object and the cause."""

from __future__ import annotations

import math
import multiprocessing
import random
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from nn_handler import CheckpointError, NNHandler
from nn_handler.dataloaders import (
    CombinedHDF5Dataset,
    CorruptFileError,
    DataFileError,
    H5LazyDataset,
    H5SparseDataset,
    batched_loader,
    decode_threads,
    fit_chunk_cache,
    set_decode_threads,
)

from helpers.damage import chunk_infos, rows
from helpers.recordings import GUID_KINDS, write_recording

BAD_GUID = b"\xff\xfeab"  # not UTF-8 (0xff never starts a character)


def write(path: Path, data: np.ndarray, libver: str | None = None, **kw) -> Path:
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("x", data=data, **kw)
    return path


def forge_chunk_address(path: Path, chunk: int, address: int) -> tuple[int, ...]:
    """Rewrite the address of the ``chunk``-th chunk in the index; return its coordinates."""
    info = chunk_infos(path)[chunk]
    raw = path.read_bytes()
    old = struct.pack("<Q", info.byte_offset)
    assert raw.count(old) == 1  # the index entry is the only place these bytes occur
    with open(path, "r+b") as fh:
        fh.seek(raw.find(old))
        fh.write(struct.pack("<Q", address))
    return tuple(info.chunk_offset)


@pytest.mark.parametrize("address", [0xFFFF_FFFF_FFFF_FFF0, 0x8000_0000_0000_0000])
def test_forged_chunk_address_names_the_chunk_the_address_and_the_file_size(tmp_path, address):
    # version-1 B-trees carry no checksum: the forged address reaches our index walk
    path = write(tmp_path / "f.h5", rows(1000), libver="earliest", chunks=(100, 4))
    coords = forge_chunk_address(path, 3, address)
    size = path.stat().st_size
    with pytest.raises(CorruptFileError) as info:
        H5LazyDataset(path, "x")
    text = str(info.value)
    assert "f.h5" in text and "dataset 'x'" in text
    assert f"chunk {coords} records address {address:#x}" in text
    assert f"beyond the file's {size:,} bytes" in text
    assert "C long" not in text


@pytest.mark.parametrize(
    ("name", "value", "largest"),
    [
        ("rdcc_nbytes", 2**70, 2**64 - 1),
        ("rdcc_nbytes", 2**64, 2**64 - 1),
        ("rdcc_nslots", 2**31, 2**31 - 1),
    ],
)
def test_chunk_cache_sizes_past_hdf5s_range_name_the_argument_and_the_limit(
    tmp_path, name, value, largest
):
    path = write(tmp_path / "f.h5", rows(10))
    with pytest.raises(ValueError, match=rf"{name}={value} is larger than {largest:,}"):
        H5LazyDataset(path, "x", **{name: value})
    ds = H5LazyDataset(path, "x", **{name: largest})  # the largest value still opens
    assert ds[[0, 9]].numpy().tobytes() == rows(10)[[0, 9]].tobytes()
    with pytest.raises(ValueError, match=rf"{name}={value} is larger"):
        ds.set_chunk_cache(value) if name == "rdcc_nbytes" else ds.set_chunk_cache(1, value)


def handler() -> NNHandler:
    return NNHandler(torch.nn.Linear, {"in_features": 2, "out_features": 2}, log_fn=None)


def rng_now() -> tuple:
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist()


@pytest.mark.parametrize("keep", [0.5, 0.99, 0.01])
def test_truncated_checkpoint_is_named_truncated_and_chains_the_cause(tmp_path, keep):
    handler().save(tmp_path / "full.pt")
    full = (tmp_path / "full.pt").read_bytes()
    cut = tmp_path / "ck.pt"
    cut.write_bytes(full[: max(1, int(len(full) * keep))])
    with pytest.raises(
        CheckpointError, match=r"checkpoint '.*ck\.pt' is truncated or not a checkpoint"
    ) as info:
        handler().load(cut)
    assert isinstance(info.value, ValueError)  # what NNHandler.load raised for such files before
    assert info.value.__cause__ is not None


def _damage(state: dict, part: str) -> None:
    if part == "python":
        state["python"] = (3, (1, 2, 3), None)
    elif part == "numpy":
        kind, key, _pos, has_gauss, gauss = state["numpy"]
        state["numpy"] = (kind, key[:3], 3, has_gauss, gauss)  # the IndexError of the issue
    elif part == "torch":
        state["torch"] = torch.zeros(3, dtype=torch.uint8)
    elif part == "cuda":
        state["cuda"] = ["garbage"]
    else:
        del state["torch"]


@pytest.mark.parametrize("part", ["python", "numpy", "torch", "cuda", "missing"])
def test_damaged_rng_state_is_refused_before_anything_is_restored(tmp_path, part):
    path = tmp_path / "ck.pt"
    saver = handler()
    saver.save(path)
    payload = torch.load(path, weights_only=True)
    _damage(payload["ranks"][0]["rng"], part)
    torch.save(payload, path)
    loader = handler()
    weights = {k: v.clone() for k, v in loader.model.state_dict().items()}
    before = rng_now()
    with pytest.raises(
        CheckpointError, match=r"checkpoint '.*ck\.pt' holds a damaged RNG state for rank 0"
    ):
        loader.load(path)
    assert rng_now() == before  # no RNG restored, not even the undamaged ones
    for k, v in loader.model.state_dict().items():
        assert torch.equal(v, weights[k]), k  # the model was not loaded either


def write_bad_guid(path: Path, kind: str, row: int = 17, n: int = 30) -> Path:
    """A recording whose ``guid`` of ``row`` is ``BAD_GUID``, stored as ``kind`` stores ids."""
    write_recording(path, n, seed=0, uid_start=0, guid_kind=kind)
    with h5py.File(path, "r+") as f:
        ids = [bytes(v) if isinstance(v, bytes) else v.encode() for v in f["guid"][()].tolist()]
        ids[row] = BAD_GUID
        del f["guid"]
        if kind == "fixed-bytes":
            f["guid"] = np.array(ids, dtype="S8")
        elif kind == "fixed-utf8":
            f["guid"] = np.array(ids, dtype=h5py.string_dtype("utf-8", 10))
        else:  # HDF5 stores what it is given: a UTF-8-tagged string need not be UTF-8
            charset = "ascii" if kind == "vlen-bytes" else "utf-8"
            f.create_dataset(
                "guid", data=np.array(ids, dtype=object), dtype=h5py.string_dtype(charset)
            )
    return path


def read_everything(cls: type, *args, **kwargs) -> dict:
    """Build the dataset and read all of it as one batch (a bad id fails in one or the other)."""
    ds = cls(*args, **kwargs)
    return ds[np.arange(len(ds))]


READS = {
    "batch": {},
    "where": {"where": lambda cols: cols["weight"] >= 0},
    "allowed_guids": {"allowed_guids": ["p1-e", "p1-é"]},
    "from the files": {"metadata_in_memory": False},
}


@pytest.mark.parametrize("kind", GUID_KINDS)
@pytest.mark.parametrize("read", list(READS))
def test_guid_that_is_not_utf8_names_file_row_and_bytes(tmp_path, kind, read):
    good = write_recording(tmp_path / "a.h5", 20, seed=1, uid_start=100, guid_kind=kind)
    bad = write_bad_guid(tmp_path / "f.h5", kind)
    with pytest.raises(DataFileError) as info:
        read_everything(CombinedHDF5Dataset, [good, bad], **READS[read])
    text = str(info.value)
    assert f"guid of row 17 in {str(bad)!r} is not utf-8" in text
    assert repr(BAD_GUID) in text and "guid_encoding=" in text
    assert info.value.path == str(bad) and isinstance(info.value.__cause__, UnicodeDecodeError)


@pytest.mark.parametrize("kind", GUID_KINDS)
@pytest.mark.parametrize("in_memory", [True, False])
def test_guid_encoding_latin1_and_bytes_give_the_data_anyway(tmp_path, kind, in_memory):
    path = write_bad_guid(tmp_path / "f.h5", kind)
    with h5py.File(path, "r") as f:
        stored = [bytes(v) if isinstance(v, bytes) else v.encode() for v in f["guid"][()].tolist()]
    raw = CombinedHDF5Dataset(path, guid_encoding="bytes", metadata_in_memory=in_memory)
    assert raw[np.arange(30)]["guid"] == [v.rstrip(b"\0") for v in stored]
    assert raw[17]["guid"] == BAD_GUID
    latin = CombinedHDF5Dataset(path, guid_encoding="latin-1", metadata_in_memory=in_memory)
    assert latin[np.arange(30)]["guid"] == [v.rstrip(b"\0").decode("latin-1") for v in stored]
    # the filters see the same values as the batches
    only = CombinedHDF5Dataset(path, guid_encoding="bytes", allowed_guids=[BAD_GUID])
    assert len(only) == 1 and only[0]["guid"] == BAD_GUID
    picked = CombinedHDF5Dataset(
        path, guid_encoding="latin-1", where=lambda cols: cols["guid"] == "ÿþab"
    )
    assert len(picked) == 1 and picked.locate(0) == (str(path), 17)
    by_bytes = CombinedHDF5Dataset(
        path, guid_encoding="bytes", where=lambda cols: cols["guid"] == BAD_GUID
    )
    assert len(by_bytes) == 1


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        ("no-such-codec", ValueError, "guid_encoding='no-such-codec' is not a Python codec"),
        ("base64", ValueError, "guid_encoding='base64' is not a text encoding"),
        (8, TypeError, "guid_encoding must be a codec name .* got int 8"),
    ],
)
def test_guid_encoding_is_checked(tmp_path, value, error, words):
    path = write_recording(tmp_path / "f.h5", 5, seed=0, uid_start=0)
    with pytest.raises(error, match=words):
        CombinedHDF5Dataset(path, guid_encoding=value)


@pytest.mark.parametrize("ranks", ["garbage", [{"rng": None}], [None]])
def test_damaged_per_rank_state_is_refused_before_anything_is_restored(tmp_path, ranks):
    path = tmp_path / "ck.pt"
    handler().save(path)
    payload = torch.load(path, weights_only=True)
    payload["ranks"] = ranks
    torch.save(payload, path)
    with pytest.raises(
        CheckpointError, match=r"checkpoint '.*ck\.pt' holds damaged per-rank state"
    ):
        handler().load(path)


def write_bad_labels(path: Path, kind: str, row: int = 7) -> Path:
    """A file whose string labels ``y`` hold ``BAD_GUID`` at ``row``, stored as ``kind``."""
    labels = [b"cat", b"dog"] * 5
    labels[row] = BAD_GUID
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(20, dtype=np.float32).reshape(10, 2)
        if kind == "fixed":
            f["y"] = np.array(labels, dtype="S8")
        else:
            dtype = h5py.string_dtype("utf-8" if kind == "vlen-utf8" else "ascii")
            f.create_dataset("y", data=np.array(labels, dtype=object), dtype=dtype)
    return path


LABEL_READS = {
    "str batch": ({}, lambda ds: ds[np.arange(10)]),
    "str sample": ({}, lambda ds: ds[7]),
    "getitems": ({}, lambda ds: ds.__getitems__([3, 7])),
    "classes": ({"classes": ["cat", "dog"]}, lambda ds: ds[[0, 7]]),
    "classes auto": ({"classes": "auto"}, len),
}


@pytest.mark.parametrize("kind", ["fixed", "vlen-ascii", "vlen-utf8"])
@pytest.mark.parametrize("read", list(LABEL_READS))
def test_string_label_that_is_not_utf8_names_file_dataset_row_and_bytes(tmp_path, kind, read):
    path = write_bad_labels(tmp_path / "f.h5", kind)
    kwargs, use = LABEL_READS[read]
    with pytest.raises(DataFileError) as info:
        use(H5LazyDataset(path, "x", "y", **kwargs))
    text = str(info.value)
    assert f"y_key='y' of row 7 in {str(path)!r} is not utf-8 ({BAD_GUID!r}" in text
    assert "pass label_encoding=" in text and info.value.path == str(path)
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


def write_sparse_bad_strings(path: Path, where: str) -> Path:
    """An AnnData-like CSR file whose string labels (or column names) are not UTF-8."""
    labels = np.array([b"T", b"B", BAD_GUID, b"T"], dtype=object)
    names = np.array([b"g0", b"g1", b"g2"], dtype=object)
    if where == "names":
        labels, names = np.array([b"T", b"B", b"B", b"T"], dtype=object), names.copy()
        names[2] = BAD_GUID
    vlen = h5py.string_dtype("utf-8")
    with h5py.File(path, "w") as f:
        x = f.create_group("X")
        x.attrs.update({"encoding-type": "csr_matrix", "shape": (4, 3)})
        x["data"] = np.ones(4, np.float32)
        x["indices"] = np.array([0, 1, 2, 0])
        x["indptr"] = np.array([0, 1, 2, 3, 4])
        f.create_dataset("obs/cell_type", data=labels, dtype=vlen)
        for frame, index in (("obs", [b"c0", b"c1", b"c2", b"c3"]), ("var", names)):
            f.create_dataset(f"{frame}/_index", data=np.array(index, dtype=object), dtype=vlen)
            f[frame].attrs.update({"encoding-type": "dataframe", "_index": "_index"})
    return path


@pytest.mark.parametrize("where", ["labels", "names"])
def test_sparse_strings_that_are_not_utf8_name_the_row_and_offer_label_encoding(tmp_path, where):
    path = write_sparse_bad_strings(tmp_path / "f.h5ad", where)
    with pytest.raises(DataFileError) as info:
        H5SparseDataset(path, label="cell_type")
    text = str(info.value)
    row = 2
    assert f"of row {row} in {str(path)!r} is not utf-8 ({BAD_GUID!r}" in text
    assert "pass label_encoding=" in text
    ds = H5SparseDataset(path, label="cell_type", label_encoding="latin-1")
    with h5py.File(path) as f:
        stored = [bytes(v) for v in f["obs/cell_type"][()].tolist()]
        names = [bytes(v).decode("latin-1") for v in f["var/_index"][()].tolist()]
    assert ds.column_names == names
    assert [ds.label_categories[int(i)] for i in ds[np.arange(4)][1]] == [
        v.decode("latin-1") for v in stored
    ]
    if where == "labels":
        raw = H5SparseDataset(path, label="cell_type", label_encoding="bytes")
        assert [raw.label_categories[int(i)] for i in raw[np.arange(4)][1]] == stored


# -- hostile arguments: a ValueError / TypeError naming argument and value --

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    ("keywords", "error", "words"),
    [
        ({"num_workers": 2**70}, ValueError, f"num_workers={2**70} is more than"),
        (
            {"num_workers": 2, "prefetch_factor": NAN},
            TypeError,
            "prefetch_factor must be an integer",
        ),
        (
            {"num_workers": 2, "prefetch_factor": INF},
            TypeError,
            "prefetch_factor must be an integer",
        ),
        ({"num_workers": 2, "prefetch_factor": 1.5}, TypeError, "got float 1.5"),
        ({"num_workers": 2, "prefetch_factor": True}, TypeError, "got bool True"),
        ({"num_workers": 2, "prefetch_factor": 2**70}, ValueError, "more than 4,096 batches"),
        ({"num_workers": 2, "timeout": NAN}, ValueError, "timeout must be a finite number"),
        ({"num_workers": 2, "timeout": INF}, ValueError, "timeout must be a finite number"),
        ({"num_workers": 2, "timeout": True}, TypeError, "timeout must be a finite number"),
        ({"num_workers": 2, "timeout": -1}, ValueError, r"timeout must be in \[0, 9.2"),
        ({"timeout": 5}, ValueError, "timeout=5 waits for worker processes, but num_workers is 0"),
    ],
)
def test_batched_loader_refuses_hostile_worker_keywords_before_any_worker_starts(
    tmp_path, keywords, error, words
):
    ds = H5LazyDataset(write(tmp_path / "f.h5", rows(10)), "x")
    with pytest.raises(error, match=words):
        batched_loader(ds, 4, multiprocessing_context="fork", **keywords)
    assert multiprocessing.active_children() == []


def test_rdcc_w0_true_is_not_a_float(tmp_path):
    with pytest.raises(TypeError, match=r"rdcc_w0 must be a finite number in \[0, 1\], got bool"):
        H5LazyDataset(write(tmp_path / "f.h5", rows(10)), "x", rdcc_w0=True)


@pytest.mark.parametrize("sampler", [-1, NAN, "3"])
def test_fit_chunk_cache_refuses_what_is_not_a_sampler(tmp_path, sampler):
    ds = H5LazyDataset(write(tmp_path / "f.h5", rows(10), chunks=(5, 4)), "x")
    with pytest.raises(
        TypeError, match=f"sampler must be a sampler .* got {type(sampler).__name__}"
    ):
        fit_chunk_cache(ds, sampler)


@pytest.mark.parametrize(
    ("threads", "error", "words"),
    [
        (2**70, ValueError, f"threads={2**70} is more than"),
        (0, ValueError, "threads must be >= 1, got 0"),
        (-1, ValueError, "threads must be >= 1, got -1"),
        (True, TypeError, "threads must be an integer, got bool True"),
    ],
)
def test_set_decode_threads_refuses_hostile_counts(threads, error, words):
    before = decode_threads()
    with pytest.raises(error, match=words):
        set_decode_threads(threads)
    assert decode_threads() == before  # nothing changed
