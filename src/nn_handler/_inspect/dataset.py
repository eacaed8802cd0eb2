"""One dataset as ``inspect`` reports it: storage, what kind of samples it makes, advice.

Everything that can fail on a file written by other software (types NumPy has no dtype for,
filters whose plugin is missing, dimension scales, never-written data) is turned into a field of
the report or a line of advice, never an exception: ``inspect`` describes every file it can open.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import h5py

from nn_handler._io import (
    FilterInfo,
    H5Source,
    RowReader,
    decoded_budget,
    field_key,
    filters_of,
    is_url,
    random_order_advice,
    rewrite_command,
    sample_kind,
    unsupported_reason,
)

from .._validate import format_bytes
from .structures import is_dimension_scale
from .values import read_attrs

__all__ = [
    "DatasetReport",
    "FieldReport",
    "dataset_report",
    "rewrite_command",
    "unreadable_report",
]

_LAYOUT_NAMES = {
    h5py.h5d.COMPACT: "compact",
    h5py.h5d.CONTIGUOUS: "contiguous",
    h5py.h5d.CHUNKED: "chunked",
    h5py.h5d.VIRTUAL: "virtual",
}
_H5PY_DEFAULT_CACHE = 1024**2
_OUR_DEFAULT_CACHE = 256 * 1024**2
_DEFAULT_WINDOW_CHUNKS = 64
_SMALL_CHUNK_BYTES = 16 * 1024  # below this, per-chunk costs dominate reads
_FEW_CHUNKS = 1  # a dataset of at most this many chunks is read whole: no sampler advice


@dataclass(frozen=True)
class FieldReport:
    """One field of a compound (table) dataset and the key that selects it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    key: str


@dataclass(frozen=True)
class DatasetReport:
    """One dataset: shape, type, storage, how batches are read, and advice.

    ``kind`` is ``"numeric"``, ``"string"``, ``"encoded"`` (variable-length ``uint8``: one
    blob per row), ``"ragged"`` (other variable-length rows), ``"compound"`` (a table; see
    ``fields``), ``"scalar"``, ``"empty"``, ``"dimension"`` (a dimension scale),
    ``"unsupported"`` (a type torch cannot hold) or ``"unreadable"`` (see ``error``). ``role``
    names the structure it belongs to (``"pytables-index"``, ``"sparse-matrix"``, …).
    """

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
    attrs: dict[str, Any]
    advice: list[str]
    kind: str = "numeric"
    fields: list[FieldReport] = field(default_factory=list)
    role: str | None = None
    error: str | None = None


def unreadable_report(name: str, exc: BaseException, role: str | None = None) -> DatasetReport:
    """The report of a dataset that could not be described at all (``error`` says why)."""
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return DatasetReport(
        path=name, shape=None, dtype="?", layout="?", chunks=None, rows_per_chunk=None,
        chunk_bytes=None, filters=[], storage_bytes=0, data_bytes=0, compression_ratio=None,
        bytes_per_sample=None, read_strategy=None, attrs={}, advice=[], kind="unreadable",
        role=role, error=reason,
    )  # fmt: skip


def dataset_report(
    source: H5Source, name: str, dset: h5py.Dataset, limit: int, role: str | None
) -> DatasetReport:
    """Describe ``dset`` (stored at ``name``) with advice that applies to it."""
    plist = dset.id.get_create_plist()
    layout = _LAYOUT_NAMES.get(plist.get_layout(), "other")
    if layout == "contiguous" and plist.get_external_count() > 0:
        layout = "external"
    shape = tuple(int(s) for s in dset.shape) if dset.shape is not None else None
    dtype, itemsize, kind, reason = _type_info(dset)
    filters = filters_of(dset)
    storage = int(dset.id.get_storage_size())
    chunks = tuple(int(c) for c in dset.chunks) if dset.chunks else None
    data_bytes = itemsize * math.prod(shape) if shape else 0
    kind = _refine_kind(kind, dset, shape, storage)
    usable = kind not in ("unsupported", "dimension", "empty", "scalar") and all(
        f.available for f in filters
    )
    report = DatasetReport(
        path=name,
        shape=shape,
        dtype=dtype,
        layout=layout,
        chunks=chunks,
        rows_per_chunk=chunks[0] if chunks else None,
        chunk_bytes=itemsize * math.prod(chunks) if chunks else None,
        filters=[f.label for f in filters],
        storage_bytes=storage,
        data_bytes=data_bytes,
        compression_ratio=round(data_bytes / storage, 2) if storage and chunks else None,
        bytes_per_sample=itemsize * math.prod(shape[1:]) if shape else None,
        read_strategy=_strategy(source, name) if usable and storage else None,
        attrs=read_attrs(dset, limit),
        advice=[],
        kind=kind,
        fields=_fields(name, dset) if kind == "compound" else [],
        role=role,
    )
    report.advice.extend(_advice(report, dset, filters, reason, source.path))
    return report


def _type_info(dset: h5py.Dataset) -> tuple[str, int, str, str]:
    """``(dtype name, itemsize, kind, reason)``; types NumPy lacks are named from HDF5's type."""
    try:
        dtype = dset.dtype
    except (TypeError, ValueError) as exc:
        tid = dset.id.get_type()
        name = f"HDF5 {_CLASS_NAMES.get(tid.get_class(), 'type')} ({tid.get_size()} bytes)"
        return name, int(tid.get_size()), "unsupported", f"a type NumPy cannot represent ({exc})"
    kind = sample_kind(dtype)
    string = h5py.check_string_dtype(dtype)
    if string is not None:
        length = "variable-length" if string.length is None else f"fixed({string.length})"
        return f"string[{length}, {string.encoding}]", dtype.itemsize, "string", ""
    if kind.kind == "ragged" and kind.base is not None:
        label = "encoded" if kind.base.kind in "iu" and kind.base.itemsize == 1 else "ragged"
        return f"vlen[{kind.base}]", dtype.itemsize, label, ""
    reason = kind.reason or unsupported_reason(dtype) if kind.kind == "unsupported" else ""
    return str(dtype), dtype.itemsize, kind.kind, reason


_CLASS_NAMES = {
    h5py.h5t.TIME: "time",
    h5py.h5t.FLOAT: "float",
    h5py.h5t.INTEGER: "integer",
    h5py.h5t.BITFIELD: "bitfield",
    h5py.h5t.OPAQUE: "opaque",
    h5py.h5t.REFERENCE: "reference",
    h5py.h5t.COMPOUND: "compound",
    h5py.h5t.ARRAY: "array",
    h5py.h5t.VLEN: "variable-length",
    h5py.h5t.ENUM: "enum",
    h5py.h5t.STRING: "string",
}


def _refine_kind(kind: str, dset: h5py.Dataset, shape: tuple[int, ...] | None, storage: int) -> str:
    if not shape:
        return "scalar"
    if is_dimension_scale(dset)[0]:
        return "dimension"
    if shape[0] == 0:
        return "empty"
    return kind


def _fields(name: str, dset: h5py.Dataset) -> list[FieldReport]:
    out = []
    for field_name in dset.dtype.names or ():
        sub = dset.dtype[field_name]
        out.append(
            FieldReport(field_name, str(sub.base), tuple(sub.shape), field_key(name, field_name))
        )
    return out


def _strategy(source: H5Source, name: str) -> str | None:
    try:
        return RowReader(source, name).strategy
    except Exception:  # inspect describes; a dataset our reader refuses simply has no strategy
        return None


def _advice(
    r: DatasetReport, dset: h5py.Dataset, filters: list[FilterInfo], reason: str, path: str
) -> list[str]:
    missing = [f for f in filters if not f.available]
    if r.role == "pandas-pickled":
        return ["Python objects pickled by pandas (object columns): not samples; pandas.read_hdf"]
    kind_line = _kind_advice(r, dset, reason)
    if r.kind in ("scalar", "empty", "dimension", "unsupported"):
        return kind_line
    if missing:
        names = ", ".join(f.title for f in missing)
        sources = "; ".join(dict.fromkeys(f.source for f in missing))
        return [
            *kind_line,
            f"filter {names} cannot be decoded here: datasets refuse this key at construction; "
            f"{sources}",
        ]
    if r.storage_bytes == 0:
        return [*kind_line, "never written (0 bytes stored): every read returns the fill value"]
    return kind_line + _layout_advice(r, dset, path)


def _kind_advice(r: DatasetReport, dset: h5py.Dataset, reason: str) -> list[str]:
    if r.kind == "scalar":
        return ["scalar (0-d): metadata, not samples; datasets cannot read it along axis 0"]
    if r.kind == "empty":
        return ["empty (0 rows): nothing to load"]
    if r.kind == "dimension":
        if is_dimension_scale(dset)[1] or r.storage_bytes == 0:
            return ["netCDF dimension without data (0 bytes stored): names an axis, not samples"]
        return ["dimension scale (coordinates along another dataset's axis): metadata, not samples"]
    if r.kind == "unsupported":
        return [f"torch cannot hold it as stored: {reason}"]
    if r.kind == "string":
        length = "variable-length" if dset.dtype.hasobject else "fixed-length"
        return [
            f"strings ({length}): H5LazyDataset returns str (a list per batch); as targets "
            "pass classes='auto' or label_map= for int64 class indices"
        ]
    if r.kind == "encoded":
        return [
            "one encoded blob per row (variable-length uint8, e.g. JPEG/PNG): H5LazyDataset "
            "returns 1-d uint8 tensors; decode with transform=decode_image"
        ]
    if r.kind == "ragged":
        return ["variable-length rows: one 1-d tensor per sample (a list per batch)"]
    if r.kind == "compound":
        example = r.fields[0].key if r.fields else f"{r.path}:<field>"
        return [
            f"table of {len(r.fields)} fields: pass one as '<dataset>:<field>', e.g. {example!r}"
        ]
    return []


def _layout_advice(r: DatasetReport, dset: h5py.Dataset, path: str) -> list[str]:
    if dset.dtype.hasobject:
        return [] if r.kind in ("string", "encoded", "ragged") else [
            "variable-length data: read through h5py row runs; fine for metadata columns, "
            "slow as model input"
        ]  # fmt: skip
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
    return _chunked_advice(r, path)


def _chunked_advice(r: DatasetReport, path: str) -> list[str]:
    assert r.chunks is not None
    assert r.shape is not None
    assert r.chunk_bytes is not None
    rows = min(int(r.chunks[0]), r.shape[0])
    per_row = max(r.bytes_per_sample or 1, 1)
    advice = []
    if tuple(r.chunks[1:]) != tuple(r.shape[1:]):
        spans = math.prod(-(-s // c) for s, c in zip(r.shape[1:], r.chunks[1:], strict=True))
        advice.append(
            f"a sample spans {spans} chunks ({r.chunks}): chunk along axis 0 only, e.g. "
            f"chunks=({rows}, {', '.join(str(s) for s in r.shape[1:])}), so each row is one "
            f"contiguous piece: {rewrite_command(path)}"
        )
    n_chunks = -(-r.shape[0] // max(int(r.chunks[0]), 1))
    if r.filters and n_chunks <= _FEW_CHUNKS:
        advice.append(
            f"{r.shape[0]} rows in one chunk: read whole once (RankMemCachedH5Dataset); "
            "no chunk-aware sampling needed"
        )
        advice.extend(_cache_advice(r.chunk_bytes, n_chunks, path))
    elif r.filters and rows == 1:
        advice.append("one row per chunk: random access decodes only the rows it needs")
        if r.chunk_bytes < _SMALL_CHUNK_BYTES and r.shape[0] > 1:
            advice.append(
                f"chunks of {format_bytes(r.chunk_bytes)} are small: the cost of each chunk "
                "(lookup, read, decoder call) dominates every read; write ~1 MiB chunks of "
                f"whole rows with {rewrite_command(path)}"
            )
    elif r.filters:
        advice.append(_random_access_advice(r, rows, per_row, path))
        advice.extend(_cache_advice(r.chunk_bytes, n_chunks, path))
    elif not advice:
        advice.append(
            f"chunked ({rows} rows per chunk), uncompressed: batched reads are memory-mapped "
            "gathers at memory speed"
        )
    return advice


def _random_access_advice(r: DatasetReport, rows: int, per_row: int, path: str) -> str:
    assert r.shape is not None
    budget = None if is_url(path) else decoded_budget(None)
    filters = "+".join(r.filters)
    decoded = r.shape[0] * per_row
    return random_order_advice(
        path, decoded, budget, rows, per_row, filters, window=_OUR_DEFAULT_CACHE
    )


def _cache_advice(chunk_bytes: int, n_chunks: int, path: str) -> list[str]:
    out = []
    if chunk_bytes > _H5PY_DEFAULT_CACHE:
        out.append(
            f"each chunk is {format_bytes(chunk_bytes)}, larger than h5py's default 1 MiB chunk "
            "cache: plain h5py decodes it again for every row; nn_handler datasets default to "
            f"rdcc_nbytes=256 MiB ({_OUR_DEFAULT_CACHE // chunk_bytes} chunks); or write 1 MiB "
            f"chunks with {rewrite_command(path)}"
        )
    window_chunks = min(_DEFAULT_WINDOW_CHUNKS, n_chunks)  # a window never exceeds the data
    window = chunk_bytes * window_chunks
    if window > _OUR_DEFAULT_CACHE:
        out.append(
            f"a shuffle window of {window_chunks} chunks needs {format_bytes(window)} of "
            f"chunk cache: chunk cache default too small for this chunk size, pass "
            f"rdcc_nbytes={-(-window // 1024**2) * 1024**2}"
        )
    return out
