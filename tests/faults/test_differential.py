"""Every read path against h5py on random layouts: the same bytes, or both raise.

Hypothesis draws a dataset (dtype incl. big-endian, float16, bool, enum and reduced-precision
integers; shape incl. zero-length axes; contiguous, compact or chunked with chunks that split
rows or hold one row; filters gzip / shuffle / fletcher32 / lzf / scaleoffset / nbit / blosc /
zstd; a fill value with chunks never written; the dataset behind an external link) and reads it
through ``RowReader``, ``H5LazyDataset`` (``ds[i]``, ``ds[list]``, ``__getitems__``),
``batched_loader`` with ``ChunkShuffleSampler``, ``RankMemCachedH5Dataset``'s preload,
``CombinedHDF5Dataset`` and ``H5SampleDataset``.

Chunked layouts come in every chunk-index type HDF5 has (``helpers.chunk_indexes``), written
wholly, partly or not at all. CI runs 100 layouts (a few seconds); ``NN_HANDLER_SLOW=1`` runs
600; ``NN_HANDLER_BURNERS=2`` runs them beside two CPU burners (timing bugs show under load).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

import h5py
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from nn_handler._io.chunks import decoded_pass
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader
from nn_handler._io.storage.shm_folder import SHM_DIR_ENV, user_folder
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    CombinedHDF5Dataset,
    FileChangedError,
    H5LazyDataset,
    H5SampleDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)
from nn_handler.dataloaders._tensors.tensors import to_tensor

from helpers.chunk_indexes import INDEX_TYPES, index_kwargs, index_type, write_rows
from helpers.damage import reduce_precision
from helpers.load import burners_asked, cpu_burners
from helpers.shared_node import after_a_killed_job, plant_folder
from helpers.users import as_other_user, world_folder

hdf5plugin = pytest.importorskip("hdf5plugin")

SLOW = os.environ.get("NN_HANDLER_SLOW", "") not in ("", "0")
PROFILE = settings(
    max_examples=600 if SLOW else 100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=not SLOW,  # CI: the same layouts every run; the slow profile explores
)

DTYPES = ["<f4", ">f4", "<f8", ">f8", "f2", "bool", "enum", "<i2", ">i4", "<i8", "u1", "<u8"]
DTYPES.append("int20")  # an int32 whose precision is 20 bits: HDF5 converts on read
COMPRESSORS = ["gzip", "lzf", "blosc", "zstd"]


@pytest.fixture(scope="module", autouse=True)
def _load() -> Iterator[None]:
    with cpu_burners(burners_asked()):
        yield


@dataclass(frozen=True)
class Layout:
    """One drawn dataset."""

    dtype: str
    shape: tuple[int, ...]
    storage: str  # "contiguous", "compact" or "chunked"
    chunks: tuple[int, ...] | None
    index: str | None  # chunked: HDF5's chunk-index type (helpers.chunk_indexes)
    compressor: str | None
    shuffle: bool
    fletcher32: bool
    scaleoffset: bool
    nbit: bool
    written: str  # "all", "some" (whole row blocks; the rest is the fill value) or "none"
    external_link: bool
    latest: bool  # the file's format: "latest" (else "earliest", which a v1 B-tree needs)
    seed: int


@st.composite
def layouts(draw: Any) -> Layout:
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(0, 30))
    rest = tuple(draw(st.lists(st.integers(0, 4), max_size=2)))
    shape = (n, *rest)
    storage = draw(st.sampled_from(["contiguous", "compact", "chunked", "chunked"]))
    chunks, index = None, None
    compressor, shuffle, fletcher32, scaleoffset, nbit = None, False, False, False, False
    if storage == "chunked":
        first = draw(st.sampled_from([1, max(1, n // 3), max(1, n), 7]))
        # chunks along the other axes may split a row into several chunks
        chunks = (first, *(draw(st.integers(1, max(1, d))) for d in rest))
        index = _index(draw(st.sampled_from(INDEX_TYPES)), shape, chunks, dtype)
        if index != "implicit":  # (HDF5 gives filtered data another index)
            compressor = draw(st.sampled_from([None, *COMPRESSORS]))
            shuffle, fletcher32 = draw(st.booleans()), draw(st.booleans())
            numeric = dtype not in ("bool", "enum")
            scaleoffset = numeric and not fletcher32 and draw(st.booleans())
            nbit = numeric and not scaleoffset and draw(st.integers(0, 3)) == 0
    return Layout(
        dtype=dtype,
        shape=shape,
        storage=storage,
        chunks=chunks,
        index=index,
        compressor=compressor,
        shuffle=shuffle,
        fletcher32=fletcher32,
        scaleoffset=scaleoffset,
        nbit=nbit,
        written=draw(st.sampled_from(["all", "all", "some", "none"])),
        external_link=draw(st.integers(0, 4)) == 0,
        latest=_latest(draw, dtype, index),
        seed=draw(st.integers(0, 2**16)),
    )


def _latest(draw: Any, dtype: str, index: str | None) -> bool:
    """The file's format: what the index needs, else drawn (int20: the older format)."""
    if dtype == "int20" or index == "btree1":
        return False
    return index is not None or bool(draw(st.booleans()))


def _index(drawn: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str) -> str:
    """The drawn chunk index, or the nearest one HDF5 gives data of this shape and type."""
    if dtype == "int20":
        return "btree1"  # (reduce_precision patches the older format's messages only)
    if 0 in shape and drawn in ("single", "implicit", "fixed"):
        drawn = "btree2"  # a chunk cannot exceed a fixed axis of length 0
    elif chunks == shape and drawn in ("implicit", "fixed"):
        return "single"  # (a fixed shape in one chunk)
    if drawn == "btree2" and len(shape) == 1:
        return "extensible"  # (one axis, unlimited: an extensible array)
    return drawn


def numpy_dtype(name: str) -> np.dtype[Any]:
    if name == "enum":
        return h5py.enum_dtype({"A": 0, "B": 1, "C": 7}, basetype="u1")
    return np.dtype("<i4" if name == "int20" else name)


def values(layout: Layout) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(layout.seed)
    dtype = numpy_dtype(layout.dtype)
    raw = rng.integers(-(2**21), 2**21, size=layout.shape)
    if layout.dtype == "bool":
        return raw % 2 == 0
    if layout.dtype == "enum":
        return np.array([0, 1, 7], "u1")[raw % 3].astype(dtype)
    if dtype.kind == "u":
        return np.abs(raw).astype(dtype)
    if dtype.kind == "f":
        return (raw / (7 if dtype.itemsize > 2 else 700)).astype(dtype)  # float16 tops at 65504
    return raw.astype(dtype)


def create_kwargs(layout: Layout) -> dict[str, Any]:
    kw: dict[str, Any] = {"fillvalue": None}
    if layout.storage == "chunked":
        assert layout.chunks is not None and layout.index is not None
        kw.update(index_kwargs(layout.index, layout.shape, layout.chunks))
        kw.update(_compressor(layout.compressor))
        kw.update(shuffle=layout.shuffle, fletcher32=layout.fletcher32)
        if layout.scaleoffset:
            kw["scaleoffset"] = 0 if numpy_dtype(layout.dtype).kind in "iu" else 3
        if layout.nbit:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk(kw["chunks"])
            dcpl.set_filter(h5py.h5z.FILTER_NBIT)
            kw["dcpl"] = dcpl
    if layout.written != "all" and layout.dtype not in ("bool", "enum"):
        kw["fillvalue"] = numpy_dtype(layout.dtype).type(3)
    return kw


def _compressor(name: str | None) -> dict[str, Any]:
    if name == "blosc":
        return dict(hdf5plugin.Blosc())
    if name == "zstd":
        return dict(hdf5plugin.Zstd())
    return {} if name is None else {"compression": name}


def write_dataset(group: h5py.Group, name: str, layout: Layout, data: np.ndarray) -> None:
    """Create ``name`` in ``group`` holding ``data`` (or only part of it) as ``layout`` says."""
    if layout.storage == "compact":
        space = h5py.h5s.create_simple(data.shape)
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        tid = h5py.h5t.py_create(data.dtype, logical=True)
        dsid = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=plist)
        if data.size:
            dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))
        return
    dset = group.create_dataset(name, data.shape, data.dtype, **create_kwargs(layout))
    if layout.index is not None:
        assert index_type(dset) == layout.index, (layout, index_type(dset))
    write_rows(dset, data, layout.written)


def build(folder: Path, layout: Layout) -> tuple[Path, Path]:
    """The data file (dataset ``x``) and a file of per-sample datasets ``s0``, ``s1``."""
    data = values(layout)
    libver = "latest" if layout.latest else "earliest"
    path, samples = folder / "data.h5", folder / "samples.h5"
    target = folder / "linked.h5" if layout.external_link else path
    with h5py.File(target, "w", libver=libver) as f:
        write_dataset(f, "x", layout, data)
    if layout.external_link:
        with h5py.File(path, "w", libver=libver) as f:
            f["x"] = h5py.ExternalLink("linked.h5", "x")
    with h5py.File(samples, "w", libver=libver) as f:
        for i in range(2):
            write_dataset(f, f"s{i}", layout, data if i == 0 else data[::-1].copy())
    if layout.dtype == "int20":
        reduce_precision(target, 20)
        _reduce_samples(samples)
    return path, samples


def _reduce_samples(path: Path) -> None:
    # one datatype message per dataset: patch a copy of each, keeping the group layout
    with h5py.File(path, "r") as f:
        arrays = {k: f[k][()] for k in f}
    for key, data in arrays.items():
        single = path.with_name(f"{key}.h5")
        with h5py.File(single, "w", libver="earliest") as f:
            f.create_dataset("x", data=data)
        reduce_precision(single, 20)
    with h5py.File(path, "w", libver="earliest") as f:
        for key in arrays:
            f[key] = h5py.ExternalLink(f"{key}.h5", "x")


def h5py_read(path: Path, key: str) -> np.ndarray[Any, Any] | BaseException:
    try:
        with h5py.File(path, "r") as f:
            return np.asarray(f[key][()])
    except Exception as exc:  # the reference may raise: then we must raise too
        return exc


def same(got: Any, want: np.ndarray[Any, Any]) -> None:
    want = np.array(want)  # a numpy scalar (one row of 1-d data) becomes a 0-d array
    expected = to_tensor(want) if isinstance(got, torch.Tensor) else want
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    got_bytes = got.numpy().tobytes() if isinstance(got, torch.Tensor) else got.tobytes()
    want_bytes = (
        expected.numpy().tobytes() if isinstance(expected, torch.Tensor) else expected.tobytes()
    )
    assert got_bytes == want_bytes


def check_row_reader(path: Path, expected: np.ndarray[Any, Any], rng: Any) -> None:
    reader = RowReader(H5Source(path, FileOptions(allow_external_files=False)), "x")
    n = len(expected)
    if n:
        idx = rng.integers(-n, n, size=min(12, 2 * n))
        same(reader.read(idx), expected[idx])
        same(reader.read_row(int(idx[0])), expected[int(idx[0]), ...])
        lo = int(rng.integers(0, n))
        same(reader.read_range(lo, n), expected[lo:])
    same(reader.read([]), expected[:0])


def check_lazy(path: Path, expected: np.ndarray[Any, Any], rng: Any) -> None:
    ds = H5LazyDataset(path, "x")
    n = len(expected)
    assert len(ds) == n
    if n == 0:
        return
    idx = rng.integers(0, n, size=min(9, 2 * n)).tolist()
    same(ds[idx[0]], expected[idx[0], ...])
    same(ds[idx], expected[idx])
    for got, i in zip(ds.__getitems__(idx), idx, strict=True):
        same(got, expected[i, ...])
    seed = int(rng.integers(0, 100))
    order = list(ChunkShuffleSampler(ds, seed=seed))
    loader = batched_loader(ds, batch_size=5, sampler=ChunkShuffleSampler(ds, seed=seed))
    got = torch.cat(list(loader)) if order else torch.empty(0)
    same(got, expected[order])
    cached = RankMemCachedH5Dataset(
        path, "x", dtype_x=None, rank=0, world_size=1, log_fn=lambda _: None
    )
    same(cached[np.arange(n)], expected)


def check_combined(path: Path, expected: np.ndarray[Any, Any]) -> None:
    ds = CombinedHDF5Dataset(
        path, field_names={"fhr_st": "x"}, load_fields=["fhr_st"], cache_size=0, pin_memory=False
    )
    batch = ds[np.arange(len(expected))]["fhr_st"]
    want = expected.astype(np.float32) if expected.dtype.kind == "f" else expected
    same(batch, want)


def check_samples(path: Path) -> None:
    ds = H5SampleDataset(path, pattern="s*", attrs=False, sidecar=False)
    for i, key in enumerate(("s0", "s1")):
        want = h5py_read(path, key)
        assert not isinstance(want, BaseException)
        same(ds[i]["data"], want)


def read_everything(path: Path, samples: Path, layout: Layout) -> None:
    expected = h5py_read(path, "x")
    rng = np.random.default_rng(layout.seed)
    if isinstance(expected, BaseException):  # h5py cannot read it: we must refuse too
        with pytest.raises(Exception):  # noqa: B017, PT011
            RowReader(H5Source(path, FileOptions()), "x").read_range(0, layout.shape[0])
        return
    check_row_reader(path, expected, rng)
    check_lazy(path, expected, rng)
    if expected.ndim >= 1 and len(expected):
        check_combined(path, expected)
    check_samples(samples)


@PROFILE
@given(layout=layouts())
def test_every_read_path_equals_h5py(layout: Layout) -> None:
    with tempfile.TemporaryDirectory() as folder:
        try:
            path, samples = build(Path(folder), layout)
        except (ValueError, TypeError, OSError):
            assume(False)  # a combination HDF5 or h5py refuses to create
        read_everything(path, samples, layout)


@PROFILE
@given(layout=layouts())
def test_every_read_path_equals_h5py_decoded_whole(layout: Layout) -> None:
    # the same layouts, every chunked one decoded whole into node memory at its first batch
    # (below 1 MiB a dataset otherwise keeps its window: these are small)
    with (
        tempfile.TemporaryDirectory() as folder,
        mock.patch.object(decoded_pass, "_DECODED_MIN_BYTES", 0),
    ):
        shm = Path(folder) / "shm"
        shm.mkdir()
        with mock.patch.dict(os.environ, {SHM_DIR_ENV: str(shm)}):
            try:
                path, samples = build(Path(folder), layout)
            except (ValueError, TypeError, OSError):
                assume(False)
            read_everything(path, samples, layout)


# -- a shared node ---------------------------------------------------------------------------
# The same layouts, decoded whole, on a node where other jobs and users left things behind: a
# killed job's region (a segment half filled, its filler gone), another user's folder planted
# under our name (root only), or the file rewritten in place with the same size and mtime while
# a live dataset of the old bytes keeps their region. Every read equals h5py's of the file now.
NODE_STATES = ["killed job", "same-size rewrite"] + (["another user"] if os.geteuid() == 0 else [])
SHARED = settings(PROFILE, max_examples=120 if SLOW else 24)
_SPARE = 64 * 1024


@SHARED
@given(layout=layouts(), state=st.sampled_from(NODE_STATES))
def test_every_read_path_equals_h5py_on_a_shared_node(layout: Layout, state: str) -> None:
    assume(layout.storage == "chunked" and not layout.external_link)
    with (
        world_folder() as root,
        mock.patch.object(decoded_pass, "_DECODED_MIN_BYTES", 0),
        mock.patch.dict(os.environ, {SHM_DIR_ENV: str(root / "shm")}),
    ):
        (root / "shm").mkdir(mode=0o1777)
        (root / "shm").chmod(0o1777)
        try:
            path, samples = build(root, layout)
        except (ValueError, TypeError, OSError):
            assume(False)
        kept = leave_behind(state, root, path, layout)
        if state == "same-size rewrite" and isinstance(kept, H5LazyDataset):
            time.sleep(0.02)  # (a memory-mapped file is looked at once every 10 ms at most)
            with pytest.raises(FileChangedError):
                kept[[0, len(kept) - 1]]  # the old dataset never serves the old region
        read_everything(path, samples, layout)


def leave_behind(state: str, root: Path, path: Path, layout: Layout) -> Any:
    """Put the node in ``state`` for the file at ``path``; what must stay alive meanwhile."""
    if state == "killed job":
        after_a_killed_job(str(path))
        return None
    if state == "another user":
        as_other_user(plant_folder, user_folder(os.geteuid()))
        return None
    with open(path, "ab") as f:
        f.write(bytes(_SPARE))  # room for the new values' file (HDF5 ignores bytes past its end)
    old = H5LazyDataset(path, "x")
    if len(old) > 1:
        old[[0, len(old) - 1]]  # decoded whole now (a region of the old bytes, kept alive)
    _rewrite_same_size(root, path, layout)
    return old


def _rewrite_same_size(root: Path, path: Path, layout: Layout) -> None:
    """Write other values into ``path`` in place: same size, its mtime put back."""
    other = root / "other"
    other.mkdir()
    new, _ = build(other, replace(layout, seed=layout.seed + 1))
    before, data = path.stat(), new.read_bytes()
    assume(len(data) <= before.st_size)
    with open(path, "r+b") as f:
        f.write(data.ljust(before.st_size, b"\0"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
