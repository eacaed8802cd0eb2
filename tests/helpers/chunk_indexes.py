"""Chunked datasets in each of HDF5's chunk-index types, written wholly, partly or not at all.

HDF5 picks the index from the file's format version and the dataset's shape: with the
``earliest`` format, a version-1 B-tree; with ``v110`` or later, a single chunk (one chunk the
size of the dataset), an implicit index (no filters, space allocated early), a fixed array
(fixed shape), an extensible array (one unlimited axis) or a version-2 B-tree (several).
``index_type`` asks HDF5 which one a dataset got (``H5Dget_chunk_index_type``), so a builder
that no longer makes what it says fails its test instead of testing something else.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import h5py
import numpy as np
from h5py._objects import phil

INDEX_TYPES = ("single", "implicit", "fixed", "extensible", "btree2", "btree1")
WRITTEN = ("all", "some", "none")

# H5D_chunk_index_t (H5Dpublic.h)
_HDF5_NAMES = {0: "btree1", 1: "single", 2: "implicit", 3: "fixed", 4: "extensible", 5: "btree2"}


def libver(index: str) -> str:
    """The file format a file needs for a dataset of ``index`` (``h5py.File(..., libver=)``)."""
    return "earliest" if index == "btree1" else "latest"


def index_kwargs(index: str, shape: tuple[int, ...], chunks: tuple[int, ...]) -> dict[str, Any]:
    """``create_dataset`` keywords that give a dataset of ``shape`` the chunk index ``index``.

    ``chunks`` is ignored for ``single`` (one chunk holds the dataset); ``implicit`` wants no
    filters, ``btree2`` two axes or more, the fixed ones no zero-length axis.
    """
    kw: dict[str, Any] = {"chunks": shape if index == "single" else chunks}
    if index == "implicit":
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        kw["dcpl"] = dcpl
    elif index == "extensible":
        kw["maxshape"] = (None, *shape[1:])
    elif index == "btree2" or (index == "btree1" and 0 in shape):
        kw["maxshape"] = (None,) * len(shape)
    return kw


def create_indexed(
    group: h5py.Group,
    name: str,
    data: np.ndarray[Any, Any],
    index: str,
    *,
    rows: int,
    written: str,
    filters: dict[str, Any] | None = None,
    split: bool = False,
    fillvalue: Any = 3,
) -> h5py.Dataset:
    """Create ``name`` with ``index``, ``data``'s shape and dtype, holding ``written`` of it.

    Args:
        group: Where to create it (its file's ``libver`` must suit ``index``: ``libver``).
        name: The dataset's name.
        data: The values; rows not written read as ``fillvalue``.
        index: One of ``INDEX_TYPES``.
        rows: Rows per chunk (ignored for ``single``: one chunk holds everything).
        written: One of ``WRITTEN`` (``write_rows``).
        filters: ``create_dataset`` keywords of the filters (none for ``implicit``).
        split: Chunks halve every axis but the first (a row spans several chunks).
        fillvalue: HDF5's fill value.
    """
    rest = tuple(max(1, -(-d // 2)) if split else d for d in data.shape[1:])
    kw = index_kwargs(index, data.shape, (min(rows, data.shape[0]), *rest))
    kw.update(filters or {})
    fill = np.array(fillvalue, dtype=data.dtype)[()]
    dset = group.create_dataset(name, data.shape, data.dtype, fillvalue=fill, **kw)
    write_rows(dset, data, written)
    return dset


def write_rows(dset: h5py.Dataset, data: np.ndarray[Any, Any], written: str) -> None:
    """Write ``data`` into ``dset``: ``all`` of it, ``some`` or ``none``.

    ``some``: every other block of a chunk's rows, starting with the first (the last block
    partly when the data ends inside it); the rest stays HDF5's fill value.
    """
    step = int(dset.chunks[0]) if dset.chunks else max(1, len(data) // 2)
    if written == "none" or data.size == 0:
        return
    for start in range(0, len(data), step if written == "all" else 2 * step):
        dset[start : start + step] = data[start : start + step]


def index_type(dset: h5py.Dataset) -> str:
    """The chunk index HDF5 gave ``dset`` (one of ``INDEX_TYPES``)."""
    kind = ctypes.c_int(-1)
    with phil:
        failed = _hdf5().H5Dget_chunk_index_type(ctypes.c_int64(dset.id.id), ctypes.byref(kind))
    assert failed == 0, f"H5Dget_chunk_index_type failed for {dset.name}"
    return _HDF5_NAMES[kind.value]


@functools.cache
def _hdf5() -> ctypes.CDLL:
    """The HDF5 library h5py loaded (this process's map names its file).

    Other packages bring their own copy (PyTables' wheels do): h5py's is the one in its
    package's library folder, where it has one.
    """
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            base = path.rsplit("/", 1)[-1]
            if base.startswith("libhdf5") and not base.startswith("libhdf5_hl"):
                found.append(path)
    assert found, "h5py's HDF5 library is not among this process's mapped files"
    return ctypes.CDLL(next((p for p in found if "h5py" in p), found[0]))
