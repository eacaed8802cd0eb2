"""inspect_file: what an HDF5 file holds and how this library will read it, with advice.

The report is plain data (dataclasses with ``to_dict()``) so the CLI can print it as a tree or
as JSON without logic of its own.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import h5py
import numpy as np

from ._validate import format_bytes
from .dataloaders._io.reader import RowReader
from .dataloaders._io.source import FileOptions, H5Source

__all__ = ["DatasetReport", "FileReport", "GroupReport", "inspect_file"]

_FILTER_NAMES = {
    1: "gzip",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    32000: "lzf",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32015: "zstd",
    32026: "blosc2",
}
_LAYOUT_NAMES = {
    h5py.h5d.COMPACT: "compact",
    h5py.h5d.CONTIGUOUS: "contiguous",
    h5py.h5d.CHUNKED: "chunked",
    h5py.h5d.VIRTUAL: "virtual",
}
_H5PY_DEFAULT_CACHE = 1024**2
_OUR_DEFAULT_CACHE = 256 * 1024**2
_DEFAULT_WINDOW_CHUNKS = 64
_RANDOM_ACCESS_CHUNK_BYTES = 64 * 1024  # small enough that a random row decodes little extra


@dataclass(frozen=True)
class GroupReport:
    """A group: its path and (truncated) attributes."""

    path: str
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetReport:
    """One dataset: shape, type, storage, how batches are read, and advice."""

    path: str
    shape: tuple[int, ...] | None
    dtype: str
    layout: str
    chunks: tuple[int, ...] | None
    rows_per_chunk: int | None
    chunk_bytes: int | None
    filters: list[str]
    storage_bytes: int
    data_bytes: int
    compression_ratio: float | None
    bytes_per_sample: int | None
    read_strategy: str | None
    attrs: dict[str, str]
    advice: list[str]


@dataclass(frozen=True)
class FileReport:
    """A whole file: size, format versions, groups, datasets and file-level advice."""

    path: str
    file_bytes: int
    superblock_version: int
    swmr_mode_capable: bool
    groups: list[GroupReport]
    datasets: list[DatasetReport]
    advice: list[str]
    omitted_datasets: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-serializable plain data."""
        return asdict(self)


def inspect_file(
    path: str | os.PathLike[str], *, max_attr_chars: int = 80, max_datasets: int = 200
) -> FileReport:
    """Describe the groups and datasets in ``path`` and advise how to load them.

    Args:
        path: The HDF5 file.
        max_attr_chars: Attribute values longer than this are cut (with "…").
        max_datasets: Datasets described in full; the rest are only counted (files with one
            dataset per sample can hold hundreds of thousands).

    Raises:
        FileNotFoundError / OSError: the file is missing or not HDF5.
    """
    source = H5Source(path, FileOptions(swmr=False))
    try:
        handle = source.file
        groups: list[GroupReport] = [GroupReport("/", _attrs(handle, max_attr_chars))]
        datasets: list[DatasetReport] = []
        omitted = 0

        def visit(name: str, obj: Any) -> None:
            nonlocal omitted
            if isinstance(obj, h5py.Group):
                groups.append(GroupReport(name, _attrs(obj, max_attr_chars)))
            elif len(datasets) >= max_datasets:
                omitted += 1
            elif isinstance(obj, h5py.Dataset):
                datasets.append(_dataset_report(source, name, obj, max_attr_chars))

        handle.visititems(visit)
        superblock = int(handle.id.get_create_plist().get_version()[0])
    finally:
        source.close()
    return FileReport(
        path=source.path,
        file_bytes=os.path.getsize(source.path),
        superblock_version=superblock,
        swmr_mode_capable=superblock >= 3,
        groups=groups,
        datasets=datasets,
        advice=_file_advice(datasets),
        omitted_datasets=omitted,
    )


def _dataset_report(source: H5Source, name: str, dset: h5py.Dataset, limit: int) -> DatasetReport:
    plist = dset.id.get_create_plist()
    layout = _LAYOUT_NAMES.get(plist.get_layout(), "other")
    if layout == "contiguous" and plist.get_external_count() > 0:
        layout = "external"
    shape = dset.shape
    row_bytes = _row_bytes(dset)
    data_bytes = dset.dtype.itemsize * math.prod(shape) if shape else 0
    storage = int(dset.id.get_storage_size())
    chunks = tuple(int(c) for c in dset.chunks) if dset.chunks else None
    chunk_bytes = dset.dtype.itemsize * math.prod(chunks) if chunks else None
    report = DatasetReport(
        path=name,
        shape=tuple(int(s) for s in shape) if shape is not None else None,
        dtype=_dtype_name(dset),
        layout=layout,
        chunks=chunks,
        rows_per_chunk=chunks[0] if chunks else None,
        chunk_bytes=chunk_bytes,
        filters=_filters(plist),
        storage_bytes=storage,
        data_bytes=data_bytes,
        compression_ratio=round(data_bytes / storage, 2) if storage and chunks else None,
        bytes_per_sample=row_bytes,
        read_strategy=_strategy(source, name, shape),
        attrs=_attrs(dset, limit),
        advice=[],
    )
    report.advice.extend(_dataset_advice(report, dset))
    return report


def _row_bytes(dset: h5py.Dataset) -> int | None:
    if not dset.shape:
        return None
    return int(dset.dtype.itemsize * math.prod(dset.shape[1:]))


def _dtype_name(dset: h5py.Dataset) -> str:
    string = h5py.check_string_dtype(dset.dtype)
    if string is not None:
        kind = "variable-length" if string.length is None else f"fixed({string.length})"
        return f"string[{kind}, {string.encoding}]"
    return str(dset.dtype)


def _filters(plist: Any) -> list[str]:
    names = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        label = _FILTER_NAMES.get(code, f"filter-{code}")
        if code == 1 and values:
            label += f"(level={values[0]})"
        names.append(label)
    return names


def _strategy(source: H5Source, name: str, shape: tuple[int, ...] | None) -> str | None:
    if not shape:
        return None
    try:
        return RowReader(source, name).strategy
    except (ValueError, TypeError, OSError):
        return None


def _attrs(obj: h5py.HLObject, limit: int) -> dict[str, str]:
    out = {}
    for key in obj.attrs:
        try:
            text = repr(_decode(obj.attrs[key]))
        except (OSError, TypeError, ValueError) as exc:  # unreadable types (e.g. references)
            text = f"<unreadable: {exc}>"
        out[key] = text if len(text) <= limit else text[: limit - 1] + "…"
    return out


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _dataset_advice(r: DatasetReport, dset: h5py.Dataset) -> list[str]:
    if not r.shape:
        return ["scalar (0-d): metadata, not samples; datasets cannot read it along axis 0"]
    if dset.dtype.hasobject:
        return [
            "variable-length data: read through h5py row runs; fine for metadata columns "
            "(e.g. ids in CombinedHDF5Dataset), slow as model input"
        ]
    if r.layout in ("virtual", "external", "compact"):
        return [
            f"{r.layout} layout: batches are read through h5py (still batched); for speed "
            "copy it into a contiguous dataset"
        ]
    if r.layout == "contiguous":
        return [
            "contiguous and uncompressed: batched reads (H5LazyDataset with batched_loader) "
            "run at memory speed (memory-mapped gather)"
        ]
    return _chunked_advice(r)


def _chunked_advice(r: DatasetReport) -> list[str]:
    assert r.chunks is not None
    assert r.shape is not None
    assert r.chunk_bytes is not None
    rows = int(r.chunks[0])
    per_row = max(r.bytes_per_sample or 1, 1)
    advice = []
    if tuple(r.chunks[1:]) != tuple(r.shape[1:]):
        spans = math.prod(-(-s // c) for s, c in zip(r.shape[1:], r.chunks[1:], strict=True))
        advice.append(
            f"a sample spans {spans} chunks ({r.chunks}): chunk along axis 0 only, e.g. "
            f"chunks=({rows}, {', '.join(str(s) for s in r.shape[1:])}), so each row is one "
            "contiguous piece"
        )
    if r.filters:
        advice.append(_random_access_advice(r, rows, per_row))
        advice.extend(_cache_advice(r.chunk_bytes))
    elif not advice:
        advice.append(
            f"chunked ({rows} rows per chunk), uncompressed: batched reads are memory-mapped "
            "gathers at memory speed"
        )
    return advice


def _random_access_advice(r: DatasetReport, rows: int, per_row: int) -> str:
    text = (
        f"random access decodes {rows} rows per sample here ({'+'.join(r.filters)}, "
        f"{rows}-row chunks): use ChunkShuffleSampler (block shuffle: each chunk decoded once "
        "per epoch)"
    )
    small = max(1, _RANDOM_ACCESS_CHUNK_BYTES // per_row)
    if small < rows:
        text += f", or rechunk with {small} rows per chunk (~{format_bytes(small * per_row)})"
    return text


def _cache_advice(chunk_bytes: int) -> list[str]:
    out = []
    if chunk_bytes > _H5PY_DEFAULT_CACHE:
        out.append(
            f"each chunk is {format_bytes(chunk_bytes)}, larger than h5py's default 1 MiB chunk "
            "cache: plain h5py decodes it again for every row; nn_handler datasets default to "
            f"rdcc_nbytes=256 MiB ({_OUR_DEFAULT_CACHE // chunk_bytes} chunks)"
        )
    window = chunk_bytes * _DEFAULT_WINDOW_CHUNKS
    if window > _OUR_DEFAULT_CACHE:
        out.append(
            f"a shuffle window of {_DEFAULT_WINDOW_CHUNKS} chunks needs {format_bytes(window)} of "
            f"chunk cache: chunk cache default too small for this chunk size, pass "
            f"rdcc_nbytes={_round_up_mib(window)}"
        )
    return out


def _file_advice(datasets: list[DatasetReport]) -> list[str]:
    by_len: dict[int, list[str]] = {}
    for d in datasets:
        if d.shape and d.read_strategy is not None:
            by_len.setdefault(d.shape[0], []).append(d.path)
    advice = []
    for length, keys in sorted(by_len.items(), key=lambda kv: -len(kv[1])):
        if len(keys) >= 2:
            shown = ", ".join(repr(k) for k in sorted(keys)[:6])
            advice.append(
                f"{len(keys)} datasets share {length} rows along axis 0 ({shown}): candidates "
                "for H5LazyDataset(path, x_key=..., y_key=...)"
            )
    return advice


def _round_up_mib(n: int) -> int:
    return -(-n // 1024**2) * 1024**2
