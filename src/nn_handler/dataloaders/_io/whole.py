"""Read one whole (small) HDF5 dataset as a sample, by the cheapest correct path.

``group[name][()]`` costs 2-3x ``h5py.h5d.open`` + ``DatasetID.read`` per sample (path
normalization, link checks and the ``h5py.Dataset`` wrapper; ``benchmarks/bench_h5_sample.py``
measures both), and slicing the bytes out of a memory map instead of ``DatasetID.read`` saves
another ~20% of CPU per sample (interleaved A/B on 25k 16×8 float32 samples).

HDF5 stores contiguous, unfiltered, allocated data as one run of bytes at
``DatasetID.get_offset()`` (``None`` for every other layout), so those samples are sliced from a
per-process ``np.memmap`` of the file when the stored type is exactly NumPy's
(``TypeID.equal``, memoized per file) and the first such sample of each file matched HDF5's own
read; everything else (chunked, compressed, compact, external, complex, odd-precision types, a
file grown past the map) is read by HDF5.

No h5py object outlives the call: 100k cached dataset objects per worker would cost more memory
than the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from .h5types import TypeMemo
from .process import PerProcess

__all__ = ["SampleReader"]

_NUMERIC_KINDS = "biufc"
_RAW_KINDS = "biuf"  # complex is a compound in HDF5: leave its member order to HDF5


@dataclass(frozen=True)
class _DataType:
    dtype: np.dtype[Any]
    readable: bool  # torch can hold it
    raw: bool  # the stored bytes are NumPy's bytes for dtype


class SampleReader:
    """Per-process reader of whole datasets from a fixed list of files (memory maps cached)."""

    def __init__(self, paths: list[str]) -> None:
        self._paths = paths
        self._maps: PerProcess[dict[int, np.memmap[Any, np.dtype[np.uint8]]]] = PerProcess(dict)
        # file -> memory map verified against HDF5
        self._trusted: PerProcess[dict[int, bool]] = PerProcess(dict)
        self._types: TypeMemo[_DataType] = TypeMemo()

    def read(self, file_no: int, dsid: Any, where: Callable[[], str]) -> np.ndarray[Any, Any]:
        """Return the whole dataset ``dsid`` (of file ``file_no``) as a new array."""
        kind = self._types.get(file_no, dsid.get_type(), _data_type)
        dtype = kind.dtype
        shape = dsid.shape
        if shape is None:
            raise ValueError(f"sample {where()} is an empty (null dataspace) dataset: no data")
        if not kind.readable:
            raise TypeError(
                f"sample {where()} has dtype {dtype}, which torch cannot hold; "
                "H5SampleDataset reads numeric and bool datasets"
            )
        nbytes = math.prod(shape) * dtype.itemsize
        if kind.raw and self._trusted.get().get(file_no, True):
            raw = self._mapped(file_no, dsid, nbytes)
            if raw is not None:
                return self._checked(file_no, dsid, raw.view(dtype).reshape(shape))
        return _hdf5_read(dsid, shape, dtype)

    def close(self) -> None:
        """Drop this process's memory maps."""
        self._maps.pop()
        self._trusted.pop()
        self._types.clear()

    def _checked(self, file_no: int, dsid: Any, arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        trusted = self._trusted.get()
        if file_no in trusted:
            return arr
        expected = _hdf5_read(dsid, arr.shape, arr.dtype)
        trusted[file_no] = expected.tobytes() == arr.tobytes()
        return expected

    def _mapped(self, file_no: int, dsid: Any, nbytes: int) -> np.ndarray[Any, Any] | None:
        offset = dsid.get_offset()
        if offset is None or nbytes == 0 or dsid.get_storage_size() != nbytes:
            return None
        view = self._view(file_no)
        if offset + nbytes > len(view):  # the file grew after we mapped it: let HDF5 read
            return None
        return np.array(view[offset : offset + nbytes])

    def _view(self, file_no: int) -> np.memmap[Any, np.dtype[np.uint8]]:
        maps = self._maps.get()
        view = maps.get(file_no)
        if view is None:
            view = maps[file_no] = np.memmap(self._paths[file_no], dtype=np.uint8, mode="r")
        return view


def _data_type(tid: Any) -> _DataType:
    dtype = tid.dtype
    readable = dtype.kind in _NUMERIC_KINDS and dtype.fields is None
    # raw only when HDF5's type is exactly NumPy's (no odd precision, padding or bit offset)
    raw = dtype.kind in _RAW_KINDS and bool(tid.equal(h5py.h5t.py_create(dtype)))
    return _DataType(dtype, readable, raw)


def _hdf5_read(dsid: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    out = np.empty(shape, dtype=dtype)
    if out.size:
        dsid.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
    return out
