"""Chunks never written read as HDF5's fill value: every read path, every index type, any thread.

h5py's ``read_direct_chunk`` on a chunk never written sizes its buffer from a number HDF5 leaves
unset (``H5Dget_chunk_storage_size``), so it fails with whatever the stack held: ``OSError``,
``MemoryError`` or ``SystemError: Negative size passed to PyBytes_FromStringAndSize``, by chance,
more often on a busy decode thread. ``strict_h5py`` replaces our one call of it with a stand-in
that always fails so for a chunk never written (and reads a written one as h5py does): a read
path that asks h5py for an unwritten chunk fails here every run, not now and then under load.

The files: the layouts the failure was reported on, then every chunk-index type HDF5 has (single
chunk, implicit, fixed array, extensible array, v2 and v1 B-tree) written not at all and partly,
and fill-only data under each codec the decode pipeline knows. Each is read by ``RowReader``,
``H5LazyDataset`` (``ds[i]``, a list, strided and reversed slices, ``__getitems__``, a cast),
``batched_loader`` (shuffled and chunk-shuffled, decoding ahead), the rank cache's preload,
``CombinedHDF5Dataset`` and ``H5SampleDataset``, with one decode thread and with a pool of three
(blocks decoded on pool threads while the caller waits), and for the reported layouts by two
forked DataLoader workers. Every value is compared with h5py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch

from nn_handler._io import platform
from nn_handler._io.file import chunk_walk
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    CombinedHDF5Dataset,
    H5LazyDataset,
    H5SampleDataset,
    RankMemCachedH5Dataset,
    batched_loader,
    set_decode_threads,
)

from helpers.chunk_indexes import INDEX_TYPES, create_indexed, index_type, libver

hdf5plugin = pytest.importorskip("hdf5plugin")

GZIP_SHUFFLE = {"compression": "gzip", "shuffle": True}
CODECS: dict[str, dict[str, Any]] = {
    "gzip": {"compression": "gzip"},
    "gzip-shuffle": GZIP_SHUFFLE,
    "shuffle-gzip-fletcher32": {**GZIP_SHUFFLE, "fletcher32": True},
    "lzf": {"compression": "lzf"},
    "blosc": dict(hdf5plugin.Blosc()),
    "zstd": dict(hdf5plugin.Zstd()),
    "lz4": dict(hdf5plugin.LZ4()),
    "bitshuffle": dict(hdf5plugin.Bitshuffle()),
}


@dataclass(frozen=True)
class Case:
    """One dataset: its index type, dtype, filters and how much of it was written."""

    index: str
    dtype: str
    codec: str
    written: str
    split: bool = False
    file_libver: str | None = None  # None: what the index needs (``libver``)
    workers: bool = False  # also read by two forked DataLoader workers
    shape: tuple[int, ...] = field(default=(45, 3))

    @property
    def id(self) -> str:
        split = "-split" if self.split else ""
        return f"{self.index}-{self.dtype}-{self.codec}-{self.written}{split}"


REPORTED = [  # the layouts that failed under load (an unlimited first axis, three formats)
    Case("extensible", "<f4", "gzip-shuffle", "none", workers=True),
    Case("btree1", ">u4", "shuffle-gzip-fletcher32", "none", workers=True),
    Case("fixed", ">f2", "gzip", "none", file_libver="v110", workers=True),
]
EVERY_INDEX = [
    Case(index, "<f4", "gzip-shuffle" if index != "implicit" else "none", written)
    for index in INDEX_TYPES
    for written in ("none", "some")
    if index != "single" or written == "none"  # (one chunk: written wholly or not at all)
]
EVERY_CODEC = [
    Case(("extensible", "fixed", "btree2", "btree1")[k % 4], "<i4", codec, "none")
    for k, codec in enumerate(CODECS)
]
SPLIT_ROWS = [  # chunks that split rows: raw chunks read tile by tile
    Case("extensible", "<f4", "gzip", "some", split=True),
    Case("btree1", "<i2", "gzip-shuffle", "none", split=True),
]
CASES = list({case.id: case for case in REPORTED + EVERY_INDEX + EVERY_CODEC + SPLIT_ROWS}.values())


@dataclass
class StrictH5py:
    """What the stand-in saw: written chunks served, unwritten chunks asked for."""

    served: int = 0
    asked_unwritten: list[tuple[int, ...]] = field(default_factory=list)


@pytest.fixture
def strict_h5py(monkeypatch: pytest.MonkeyPatch) -> Iterator[StrictH5py]:
    """h5py's raw-chunk read, failing every time for a chunk never written (see above)."""
    seen = StrictH5py()
    real = chunk_walk._h5py_read_direct_chunk

    def strict(dset_id: Any, offset: tuple[int, ...]) -> tuple[int, bytes]:
        if dset_id.get_chunk_info_by_coord(tuple(offset)).byte_offset is None:
            seen.asked_unwritten.append(tuple(offset))
            raise SystemError("Negative size passed to PyBytes_FromStringAndSize")
        seen.served += 1
        return real(dset_id, offset)

    monkeypatch.setattr(chunk_walk, "_h5py_read_direct_chunk", strict)
    yield seen
    # (a read path that swallowed the error would still have asked)
    assert seen.asked_unwritten == [], f"h5py asked for unwritten chunks {seen.asked_unwritten}"


@pytest.fixture(params=[1, 3], ids=["one-thread", "pool"])
def decode_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    set_decode_threads(request.param)
    yield request.param
    set_decode_threads(None)


def values(case: Case) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(len(case.id))
    return rng.integers(0, 1000, size=case.shape).astype(case.dtype)


def build(folder: Path, case: Case) -> tuple[Path, np.ndarray[Any, Any]]:
    """The data file (``x``, plus ``s0`` / ``s1`` per-sample copies) and h5py's reading of x."""
    path = folder / "data.h5"
    fmt = case.file_libver or libver(case.index)
    filters = None if case.codec == "none" else CODECS[case.codec]
    with h5py.File(path, "w", libver=fmt) as f:
        for name in ("x", "s0", "s1"):
            dset = create_indexed(
                f, name, values(case), case.index, rows=8, written=case.written,
                filters=filters, split=case.split,
            )  # fmt: skip
            assert index_type(dset) == case.index, (name, index_type(dset))
        want = f["x"][()]
    return path, want.astype(want.dtype.newbyteorder("="))


def same(got: Any, want: np.ndarray[Any, Any]) -> None:
    array = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    array = array.astype(array.dtype.newbyteorder("="))  # RowReader keeps the file's order
    want = np.asarray(want)
    assert array.shape == want.shape
    assert array.dtype == want.dtype, (array.dtype, want.dtype)
    assert array.tobytes() == want.tobytes()


def as_sorted_rows(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    flat = rows.reshape(len(rows), -1)
    return flat[np.lexsort(flat.T[::-1])]


def read_rows(path: Path, want: np.ndarray[Any, Any]) -> None:
    reader = RowReader(H5Source(path, FileOptions()), "x")
    n = len(want)
    same(reader.read([0, n - 1, 9, 9, 20, 3]), want[[0, n - 1, 9, 9, 20, 3]])
    same(reader.read_row(17), want[17])
    same(reader.read_range(5, n), want[5:])
    reader.read_ahead(np.arange(n)[::-1].copy())  # decoded ahead, then read
    same(reader.read(np.arange(n)[::-1]), want[::-1])


def read_lazy(path: Path, want: np.ndarray[Any, Any], workers: bool) -> None:
    ds = H5LazyDataset(path, "x")
    idx = [5, 40, 17, 44, 0, 17]
    same(ds[3], want[3])
    same(ds[idx], want[idx])
    same(ds[3:44:7], want[3:44:7])
    same(ds[::-1], want[::-1])
    for got, i in zip(ds.__getitems__(idx), idx, strict=True):
        same(got, want[i])
    same(H5LazyDataset(path, "x", x_dtype=np.float64)[idx], want[idx].astype(np.float64))
    order = list(ChunkShuffleSampler(ds, seed=4))
    chunked = batched_loader(ds, 6, sampler=ChunkShuffleSampler(ds, seed=4))
    same(torch.cat(list(chunked)), want[order])
    shuffled = torch.cat(list(batched_loader(ds, 6, shuffle=True))).numpy()
    same(as_sorted_rows(shuffled), as_sorted_rows(want))  # every row once, in some order
    if workers and platform.FORK:  # (spawn workers: tests/test_platforms.py)
        forked = batched_loader(
            ds, 6, sampler=ChunkShuffleSampler(ds, seed=4), num_workers=2,
            multiprocessing_context="fork", timeout=120,
        )  # fmt: skip
        same(torch.cat(list(forked)), want[order])


def read_others(path: Path, want: np.ndarray[Any, Any]) -> None:
    cached = RankMemCachedH5Dataset(path, "x", dtype_x=None, rank=0, world_size=1, log_fn=print)
    same(cached[np.arange(len(want))], want)
    combined = CombinedHDF5Dataset(
        path, field_names={"v": "x"}, load_fields=["v"], cache_size=0, pin_memory=False
    )
    got = combined[np.arange(len(want))]["v"]
    same(got, want.astype(np.float32) if want.dtype.kind == "f" else want)
    samples = H5SampleDataset(path, pattern="s*", attrs=False, sidecar=False)
    same(samples[0]["data"], want)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_unwritten_chunks_read_as_the_fill_value_everywhere(
    tmp_path: Path, case: Case, strict_h5py: StrictH5py, decode_threads: int
) -> None:
    path, want = build(tmp_path, case)
    read_rows(path, want)
    read_lazy(path, want, case.workers and decode_threads > 1)
    read_others(path, want)


def test_the_stand_in_serves_written_chunks(tmp_path: Path, strict_h5py: StrictH5py) -> None:
    # partly written chunks that split rows are read raw through h5py: the stand-in is on the
    # path the reported failure took (else the test above would prove nothing)
    path, want = build(tmp_path, SPLIT_ROWS[0])
    read_rows(path, want)
    assert strict_h5py.served > 0


def test_strict_stand_in_refuses_an_unwritten_chunk(
    tmp_path: Path, strict_h5py: StrictH5py
) -> None:
    path, _ = build(tmp_path, REPORTED[0])
    with h5py.File(path) as f, pytest.raises(SystemError, match="Negative size"):
        chunk_walk._h5py_read_direct_chunk(f["x"].id, (0, 0))
    strict_h5py.asked_unwritten.clear()  # (asked on purpose)
