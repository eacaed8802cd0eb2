"""Read one whole (small) HDF5 dataset as a sample, by the cheapest correct path.

``group[name][()]`` costs several times ``h5py.h5d.open`` + ``DatasetID.read`` per sample (path
normalization, link checks and the ``h5py.Dataset`` wrapper; ``benchmarks/bench_h5_sample.py``
measures both), and slicing the bytes out of the file's ``ByteSource`` costs less CPU per sample
than ``DatasetID.read``.

HDF5 stores contiguous, unfiltered, allocated data as one run of bytes at
``DatasetID.get_offset()`` (``None`` for every other layout), so those samples are read with one
range of the file's ``ByteSource`` (``pread`` of a descriptor per file and process; a file
truncated under us reads short and raises, where a memory map would kill the process with
SIGBUS) when the stored type is exactly NumPy's (``TypeID.equal``, memoized per file) and the
first such sample of each file matched HDF5's own read (``file/verify.py``); everything else
(chunked, compressed, compact, external, complex, odd-precision types) is read by HDF5.

Each sample is checked once per process before its first read, as ``RowReader`` checks a
dataset (``file/layout.py``): filters installed, bytes inside the file, chunk sizes that fit their
filters, data in other files only inside the data file's directory. A sample reached through an
external link lives in another file, so it is read by HDF5, never from this file's bytes.

No h5py object outlives the call: 100k cached dataset objects per worker would cost more memory
than the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from ..file.layout import inspect_layout, stored_as_values
from ..file.options import FileOptions
from ..file.source import H5Source
from ..file.types import TypeMemo
from ..file.verify import agrees_with_hdf5
from ..process import PerProcess
from ..storage.byte_source import ByteSource

__all__ = ["SampleReader"]

_NUMERIC_KINDS = "biufc"
_RAW_KINDS = "biuf"  # complex is a compound in HDF5: leave its member order to HDF5
_UNCHECKED, _IN_FILE, _ELSEWHERE = 0, 1, 2  # per sample: what its layout check found


@dataclass(frozen=True)
class _DataType:
    dtype: np.dtype[Any]
    readable: bool  # torch can hold it
    raw: bool  # the stored bytes are NumPy's bytes for dtype


@dataclass
class _Local:
    """One process's files (their descriptors) and checks (see ``_io/process.py``)."""

    files: dict[int, ByteSource] = field(default_factory=dict)
    trusted: dict[int, bool] = field(default_factory=dict)  # file -> raw reads match HDF5
    checked: bytearray = field(default_factory=bytearray)  # per sample: _UNCHECKED / ...
    filenos: dict[int, Any] = field(default_factory=dict)  # file -> HDF5's open-file number

    def close(self) -> None:
        for file in self.files.values():
            file.close()
        self.files.clear()


class SampleReader:
    """Per-process reader of whole datasets from a fixed list of files (descriptors cached).

    Args:
        files: The files, as ``H5Source`` objects (their open options, recorded identity and
            ``allow_external_files`` apply) or paths (opened with the default options).
    """

    def __init__(self, files: Sequence[str | H5Source]) -> None:
        self._sources = [
            f if isinstance(f, H5Source) else H5Source(f, FileOptions()) for f in files
        ]
        self._local: PerProcess[_Local] = PerProcess(_Local)
        self._types: TypeMemo[_DataType] = TypeMemo()

    def read(
        self, file_no: int, dsid: Any, where: Callable[[], str], sample: int | None = None
    ) -> np.ndarray[Any, Any]:
        """Return the whole dataset ``dsid`` (of file ``file_no``) as a new array.

        ``sample`` (the dataset's sample number) lets the layout check run once per sample and
        process; without it, it runs on every call.
        """
        self._sources[file_no].check_unchanged()
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
        in_file = self._check(file_no, dsid, sample) == _IN_FILE
        nbytes = math.prod(shape) * dtype.itemsize
        if kind.raw and in_file and self._local.get().trusted.get(file_no, True):
            raw = self._mapped(file_no, dsid, nbytes)
            if raw is not None:
                return self._checked_read(file_no, dsid, raw.view(dtype).reshape(shape))
        return _hdf5_read(dsid, shape, dtype)

    def close(self) -> None:
        """Drop this process's descriptors and checks."""
        local = self._local.pop()
        if local is not None:
            local.close()
        self._types.clear()

    def _check(self, file_no: int, dsid: Any, sample: int | None) -> int:
        """Check the sample's layout against its file once; say whether its bytes are here."""
        local = self._local.get()
        checked = local.checked
        if sample is not None and sample < len(checked) and checked[sample]:
            return checked[sample]
        source = self._sources[file_no]
        fileno = local.filenos.get(file_no)
        if fileno is None:
            fileno = local.filenos[file_no] = source.file.id.fileno
        state = _plain_in_file(dsid, source, fileno)
        if state == _UNCHECKED:  # anything but a plain dataset of this file: the full check
            name = h5py.h5i.get_name(dsid).decode("utf-8", "surrogateescape")
            layout = inspect_layout(h5py.Dataset(dsid), source, name)
            state = _IN_FILE if layout.in_file else _ELSEWHERE
        if sample is not None:
            if sample >= len(checked):
                checked.extend(bytes(sample + 1 - len(checked)))
            checked[sample] = state
        return state

    def _checked_read(
        self, file_no: int, dsid: Any, arr: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        trusted = self._local.get().trusted
        if file_no in trusted:
            return arr
        agrees, expected = agrees_with_hdf5(h5py.Dataset(dsid), lambda _rows: arr)
        trusted[file_no] = agrees
        return expected

    def _mapped(self, file_no: int, dsid: Any, nbytes: int) -> np.ndarray[Any, Any] | None:
        """The sample's stored bytes, read as one range (None when not contiguous)."""
        offset = dsid.get_offset()
        if offset is None or nbytes == 0 or dsid.get_storage_size() != nbytes:
            return None
        file = self._file(file_no)
        if file is None:
            return None
        out = np.empty(nbytes, dtype=np.uint8)
        file.read_ranges([(int(offset), nbytes)], [out])
        return out

    def _file(self, file_no: int) -> ByteSource | None:
        files = self._local.get().files
        file = files.get(file_no)
        if file is None:
            # checked against the identity the layouts were checked in, when first read
            file = self._sources[file_no].byte_source()
            if file is None:
                return None
            files[file_no] = file
        return file


def _plain_in_file(dsid: Any, source: H5Source, fileno: Any) -> int:
    """Check the common case with three cheap calls; ``_UNCHECKED`` for anything else.

    The common case is a contiguous dataset (``get_offset`` is None for every other layout,
    external storage included) of this very file (``fileno``: not reached through an external
    link) that lies inside the file.
    """
    offset = dsid.get_offset()
    if offset is None or dsid.fileno != fileno or source.identity is None:
        return _UNCHECKED
    if offset + dsid.get_storage_size() <= source.identity.size:
        return _IN_FILE
    return _UNCHECKED  # past the end: the full check says so, naming the dataset


def _data_type(tid: Any) -> _DataType:
    dtype = tid.dtype
    readable = dtype.kind in _NUMERIC_KINDS and dtype.fields is None
    # raw only when HDF5's type is exactly NumPy's (no odd precision, padding or bit offset)
    raw = dtype.kind in _RAW_KINDS and stored_as_values(tid)
    return _DataType(dtype, readable, raw)


def _hdf5_read(dsid: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    out = np.empty(shape, dtype=dtype)
    if out.size:
        dsid.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
    return out
