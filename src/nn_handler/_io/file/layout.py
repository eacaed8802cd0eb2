"""Check what a file says about a dataset against the file itself, before anything is read.

A reader that memory-maps a file or reads raw chunks trusts byte offsets, sizes and types that
HDF5 reports from the file's metadata. A damaged or hostile file can forge any of them: a chunk
recorded past the end of the file reads as zeros, a chunk recorded as 1 byte makes HDF5's
Fletcher-32 filter read before its buffer (SIGSEGV), an external-storage dataset can point at
``/etc/passwd``. So, once per dataset and before any read (ours or h5py's):

* every filter the dataset needs is available (else ``MissingFilterError``, from the one check
  in ``filters.py``), with parameters HDF5 accepts (a gzip level outside 0-9:
  ``CorruptFileError``);
* data in other files (external links, external storage, virtual sources) stays inside the data
  file's directory unless the user allows otherwise (else ``ExternalDataError``);
* every byte range lies inside the file: the contiguous block, and each chunk of the chunk table,
  whose recorded size must also fit its filters (exactly one chunk of bytes when unfiltered, at
  least the 4-byte checksum with Fletcher-32); else ``CorruptFileError``.

``inspect_layout`` returns what the fast paths need to know: whether the dataset's bytes are in
this file, whether its stored bytes equal its values (``stored_as_values``: types HDF5 would copy
unconverted; reduced-precision integers, non-IEEE floats and the like go through h5py), and the
checked contiguous offset or chunk index (walked once, here: ``chunk_walk.py``).
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..codec_registry import DEFLATE, FLETCHER32
from ..errors import CorruptFileError, DataFileError, ExternalDataError
from ..storage.chunk_index import ChunkIndex, ChunkIndexStore
from .chunk_walk import read_chunk_index
from .filters import check_filters
from .source import H5Source

__all__ = ["Layout", "inspect_layout", "stored_as_values"]

_CHECKSUM_BYTES = 4
_ORIGIN = b"${ORIGIN}"


@dataclass(frozen=True)
class Layout:
    """What the read strategies may rely on, after the checks (see the module docstring)."""

    in_file: bool  # the dataset's bytes are in the source's own file
    raw_type: bool  # the stored bytes are the values (no HDF5 type conversion)
    contiguous_offset: int | None  # contiguous, allocated, internal storage: where it starts
    chunks: ChunkIndex | None  # chunked datasets of this file: the checked chunk index

    @property
    def fast_paths_allowed(self) -> bool:
        """True when our own byte-level reads (memory map, raw chunks) may serve the data."""
        return self.in_file and self.raw_type


def inspect_layout(dset: h5py.Dataset, source: H5Source, key: str) -> Layout:
    """Check ``dset`` against its file (see the module docstring) and describe its layout.

    Raises:
        MissingFilterError: a filter the dataset needs is not installed.
        ExternalDataError: its data reaches outside the data file's directory.
        CorruptFileError: a byte range of it lies outside the file, or a chunk's size cannot be.
    """
    try:
        return _inspect(dset, source, f"dataset {key!r} of {source.path!r}")
    except DataFileError as exc:
        exc.path = exc.path or source.path
        raise


def _inspect(dset: h5py.Dataset, source: H5Source, where: str) -> Layout:
    plist = dset.id.get_create_plist()
    _check_filter_values(plist, where)
    check_filters(dset, where)
    in_file = _in_this_file(dset, source)
    _check_outside(dset, plist, source, in_file, where)
    raw = stored_as_values(dset)
    size = _file_size(dset)
    layout = plist.get_layout()
    if dset.is_virtual or plist.get_external_count() > 0:
        return Layout(in_file, raw, None, None)
    if layout == h5py.h5d.CONTIGUOUS:
        return Layout(in_file, raw, _contiguous_offset(dset, size, where), None)
    if layout == h5py.h5d.CHUNKED:
        index = _chunk_table(dset, plist, size, where, _index_store(source))
        return Layout(in_file, raw, None, index)
    return Layout(in_file, raw, None, None)  # compact: the data is inside the object header


def _check_filter_values(plist: Any, where: str) -> None:
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        if int(code) == DEFLATE and not (len(values) == 1 and 0 <= values[0] <= 9):
            # HDF5's own filter refuses to run then; our decoder would not need the level
            raise CorruptFileError(
                f"{where} records gzip parameters {tuple(values)}; HDF5 accepts one level in "
                "0-9: the dataset's filter pipeline is damaged",
                None,
            )


def _in_this_file(dset: h5py.Dataset, source: H5Source) -> bool:
    """False for a dataset reached through an external link (its bytes are in another file)."""
    return bool(h5py.h5i.get_file_id(dset.id).fileno == source.file.id.fileno)


def stored_as_values(obj: h5py.Dataset | h5py.h5t.TypeID) -> bool:
    """True when HDF5 would copy the stored bytes of a dataset (or type) unchanged into NumPy's.

    That is when the file's type equals the one h5py builds for the NumPy dtype (``H5Tequal``
    compares class, size, byte order, precision, offset, padding, and enum members or compound
    fields): HDF5's conversion between equal types is a plain copy. A reduced-precision integer
    (sign-extended on read), a non-IEEE float, a null-terminated string and the like differ,
    and go through h5py.

    Args:
        obj: A dataset, or its file type (``DatasetID.get_type()``).
    """
    try:
        tid = obj.id.get_type() if isinstance(obj, h5py.Dataset) else obj
        dtype = tid.dtype
        if dtype.hasobject or dtype.itemsize == 0:
            return False
        return bool(tid.equal(h5py.h5t.py_create(dtype)))
    except (TypeError, ValueError):
        return False


def _file_size(dset: h5py.Dataset) -> int | None:
    """Bytes in the file that holds ``dset`` now (None for file objects and other drivers)."""
    handle = dset.file
    if handle.driver != "sec2":
        return None
    try:
        return int(os.fstat(int(handle.id.get_vfd_handle())).st_size)
    except (OSError, TypeError, ValueError):
        return None


def _contiguous_offset(dset: h5py.Dataset, size: int | None, where: str) -> int | None:
    offset = dset.id.get_offset()
    if offset is None:
        return None  # never written: HDF5 serves the fill value
    nbytes = int(dset.id.get_storage_size())
    if size is not None and int(offset) + nbytes > size:
        raise CorruptFileError(
            f"{where} is recorded at bytes [{offset}, {offset + nbytes}) but the file has only "
            f"{size} bytes: it is truncated or its metadata is damaged",
            None,
        )
    return int(offset)


def _chunk_table(
    dset: h5py.Dataset, plist: Any, size: int | None, where: str, store: ChunkIndexStore | None
) -> ChunkIndex:
    """The checked chunk index: loaded from ``store`` when it keeps a valid one, else walked."""
    key, shape, chunks = str(dset.name), tuple(dset.shape), tuple(dset.chunks)
    if store is not None:
        saved = store.load_index(key, shape, chunks)
        if saved is not None:
            with contextlib.suppress(CorruptFileError):  # a bad saved index: the walk decides
                _check_chunks(saved, dset, plist, size, where)
                return saved
    table = read_chunk_index(dset, where, size)
    _check_chunks(table, dset, plist, size, where)
    if store is not None:
        store.save_index(key, shape, chunks, table)
    return table


def _index_store(source: H5Source) -> ChunkIndexStore | None:
    file = source.byte_source() if source.is_remote else None
    return file if isinstance(file, ChunkIndexStore) else None


def _check_chunks(
    table: ChunkIndex, dset: h5py.Dataset, plist: Any, size: int | None, where: str
) -> None:
    """Vectorized over the table; the first chunk that fails is named."""
    nfilters = plist.get_nfilters()
    chunk_nbytes = math.prod(dset.chunks) * dset.dtype.itemsize
    offsets, sizes, masks = table.offsets, table.sizes, table.masks
    all_skipped = (1 << nfilters) - 1
    fletcher = np.zeros(len(table), dtype=bool)
    for k in range(nfilters):
        if int(plist.get_filter(k)[0]) == FLETCHER32:
            fletcher |= (masks >> k) & 1 == 0  # the checksum was applied to this chunk
    limit = np.iinfo(np.int64).max if size is None else size
    checks = [
        ((offsets < 0) | (sizes < 1), "has offset {o} and size {n}"),
        (offsets + sizes > limit, "lies at bytes [{o}, {e}), past the file's {s} bytes"),
        (
            (masks & all_skipped == all_skipped) & (sizes != chunk_nbytes),
            "is unfiltered but records {n} bytes instead of {c}",
        ),
        (fletcher & (sizes < _CHECKSUM_BYTES), "records {n} bytes, less than its Fletcher-32 sum"),
    ]
    for bad, text in checks:
        if bad.any():
            i = int(np.argmax(bad))
            o, n = int(offsets[i]), int(sizes[i])
            problem = text.format(o=o, n=n, e=o + n, s=size, c=chunk_nbytes)
            coords = tuple(int(c) for c in table.coords[i])
            raise CorruptFileError(
                f"{where}: the chunk at {coords} {problem}; the file is truncated or damaged",
                None,
            )


def _check_outside(
    dset: h5py.Dataset, plist: Any, source: H5Source, in_file: bool, where: str
) -> None:
    """Refuse data in files outside the data file's directory (unless the user allowed it)."""
    if source.options.allow_external_files:
        return
    home = _home(source)
    targets: list[tuple[str, str]] = []
    if not in_file:
        targets.append(("an external link to", os.fsdecode(dset.file.filename)))
    for i in range(plist.get_external_count()):
        name = plist.get_external(i)[0]
        targets.append(("external storage in", _external_file(dset, source, name)))
    if dset.is_virtual:
        for src in dset.virtual_sources():
            if src.file_name != ".":
                targets.extend(("a virtual source in", p) for p in _vds_candidates(source, src))
    for what, target in targets:
        if home is None or not _inside(target, home):
            raise ExternalDataError(
                f"{where} is {what} {target!r}, outside the data file's directory "
                f"{home!r}; pass allow_external_files=True if you trust this file",
                source.path,
            )


def _home(source: H5Source) -> str | None:
    return os.path.dirname(os.path.realpath(source.path)) if source.is_path else None


def _inside(target: str, home: str) -> bool:
    real = os.path.realpath(target)
    return os.path.commonpath([real, home]) == home


def _external_file(dset: h5py.Dataset, source: H5Source, name: bytes) -> str:
    """Where HDF5 looks for an external-storage file (its prefix rules, H5Pset_efile_prefix)."""
    text = os.fsdecode(name)
    if os.path.isabs(text):
        return text
    prefix = dset.id.get_access_plist().get_efile_prefix() or os.fsencode(
        os.environ.get("HDF5_EXTFILE_PREFIX", "")
    )
    if prefix.startswith(_ORIGIN) and source.is_path:
        base = os.path.dirname(os.path.abspath(source.path)) + os.fsdecode(prefix[len(_ORIGIN) :])
    else:
        base = os.fsdecode(prefix) or os.getcwd()
    return os.path.join(base, text)


def _vds_candidates(source: H5Source, src: Any) -> list[str]:
    """Files HDF5 may open for one virtual source (its name as given, or next to the file)."""
    name = str(src.file_name)
    if "%" in name:  # a printf-style pattern: we cannot tell which files it names
        return [name if os.path.isabs(name) else os.path.join("/", "%pattern%", name)]
    home = os.path.dirname(os.path.abspath(source.path)) if source.is_path else os.getcwd()
    found = [name] if os.path.isabs(name) else [os.path.join(home, name), os.path.abspath(name)]
    return [p for p in found if os.path.exists(p)] or found[:1]
