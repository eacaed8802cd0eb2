"""The plan of a rewrite: per dataset what is written (chunk shape, codec, dtype) and estimates.

The plan starts from what ``nn-handler inspect`` measures (``inspect_file``: each dataset's kind,
storage, filters and role in a recognised structure) and adds, per dataset, one sample chunk
compressed with the chosen codec: its ratio gives the estimated size, and the time to decode it
on one core the estimated read speed. Datasets it cannot rewrite are planned as copies
(``Group.copy``: the stored bytes as they are), each with the reason.

Actions: ``"chunks"`` (chunks compressed in a thread pool and written with
``write_direct_chunk``), ``"h5py"`` (variable-length data, or no imagecodecs: rows written
through h5py, which compresses), ``"csr"`` (a row-compressed sparse matrix, see ``sparse.py``)
and ``"copy"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from nn_handler._io import H5Source, SparseLayout, filters_of, sparse_layouts

from .._validate import format_bytes, format_names
from ..h5inspect import DatasetReport, FileReport
from .chunking import chunk_rows
from .codecs import Codec, have_imagecodecs
from .options import RewriteOptions
from .order import ANNDATA_ROW_ORDER_KEY, ROW_ORDER_KEY, choose_rows, is_lookup_table

__all__ = ["DatasetPlan", "RewritePlan", "make_plan"]

_INCOMPRESSIBLE = 1.05  # a sample chunk compressing less than this is stored uncompressed
_VLEN_SAMPLE = 64


@dataclass(frozen=True)
class DatasetPlan:
    """What is written for one dataset (or one sparse matrix group).

    Attributes:
        path: Dataset path (the group's, for ``"csr"``).
        action: ``"chunks"``, ``"h5py"``, ``"csr"`` or ``"copy"``.
        shape: Shape (rows x columns for ``"csr"``).
        dtype: dtype written (the ``data`` dtype for ``"csr"``).
        chunks: Chunk shape written (entries per chunk of ``data`` / ``indices`` for
            ``"csr"``); None for copies.
        codec: The codec (``"shuffle+zstd(level=3)"``); ``"as stored"`` for copies.
        permuted: Rows are written in the shuffled order.
        stored_bytes: Bytes the input stores.
        estimated_bytes: Estimated bytes written (None: unknown).
        read_mb_s: Estimated decode speed of one chunk on one core, MB/s (None: unknown).
        note: Why a dataset is copied as stored, or how it was estimated.
        pipeline: The filters written (None for copies).
        row_bytes: Bytes of one row in memory (mean of a sample for variable-length data; of
            one entry of ``data`` and ``indices`` for ``"csr"``); 0 for copies.
    """

    path: str
    action: str
    shape: tuple[int, ...] | None
    dtype: str
    chunks: tuple[int, ...] | None
    codec: str
    permuted: bool
    stored_bytes: int
    estimated_bytes: int | None
    read_mb_s: float | None
    note: str = ""
    pipeline: Codec | None = None
    row_bytes: int = 0

    def rows(self) -> int:
        """Rows along axis 0 (0 for scalars)."""
        return int(self.shape[0]) if self.shape else 0


@dataclass(frozen=True)
class RewritePlan:
    """The whole plan: groups, datasets, and the rows shuffled.

    Attributes:
        source: The input path or URL.
        groups: Groups created (parents first).
        datasets: One plan per dataset or sparse group, in writing order.
        rows: Rows shuffled (None: no shuffle).
        seed: The shuffle's seed (None: no shuffle).
        options: The options the plan was made with.
        row_order_key: Where the row order is stored (when rows are shuffled).
    """

    source: str
    groups: list[str]
    datasets: list[DatasetPlan]
    rows: int | None
    seed: int | None
    options: RewriteOptions
    row_order_key: str = ROW_ORDER_KEY

    @property
    def stored_bytes(self) -> int:
        """Bytes the input stores for what is written."""
        return sum(d.stored_bytes for d in self.datasets)

    @property
    def estimated_bytes(self) -> int:
        """Estimated bytes written (copies and unknowns counted at their stored size)."""
        return sum(
            d.estimated_bytes if d.estimated_bytes is not None else d.stored_bytes
            for d in self.datasets
        )

    def format(self) -> str:
        """The plan as a table (what ``--dry-run`` prints)."""
        lines = [
            f"plan for {self.source}: {len(self.datasets)} datasets, "
            f"{format_bytes(self.stored_bytes)} stored -> ~{format_bytes(self.estimated_bytes)}"
            + (f"; {self.rows} rows shuffled (seed {self.seed})" if self.rows is not None else ""),
            "",
            "| dataset | action | shape | dtype | chunks | codec | est. size | read MB/s/core |",
            "|---|---|---|---|---|---|---:|---:|",
        ]
        for d in self.datasets:
            size = format_bytes(d.estimated_bytes) if d.estimated_bytes is not None else "?"
            speed = f"{d.read_mb_s:,.0f}" if d.read_mb_s is not None else "-"
            action = d.action + (" (shuffled)" if d.permuted else "")
            lines.append(
                f"| {d.path} | {action} | {d.shape} | {d.dtype} | {d.chunks} | {d.codec} | "
                f"{size} | {speed} |"
            )
        lines.extend(f"note: {d.path}: {d.note}" for d in self.datasets if d.note)
        return "\n".join(lines)


def make_plan(source: H5Source, report: FileReport, options: RewriteOptions) -> RewritePlan:
    """Plan the rewrite of ``source`` (described by ``report``) under ``options``.

    Raises:
        KeyError: a key in ``options.keys`` or ``options.dtypes`` is not in the file.
        ValueError: a dtype is asked for a dataset that is not numeric; ``shuffle_rows`` with
            data whose rows cannot be permuted; ``memory`` too small for a chunk.
    """
    handle = source.file
    layouts = [lay for lay in sparse_layouts(handle) if _selected(lay.group, options.keys)]
    members = {p for lay in layouts for p in (lay.data_key, lay.indices_key, lay.indptr_key)}
    reports = [d for d in report.datasets if d.path not in members]
    reports = [d for d in reports if _selected(d.path, options.keys)]
    _check_keys(report, options)
    rows = _shuffled_rows(reports, layouts, options)
    lookups = frozenset(f"{s.path.strip('/')}/categories" for s in report.structures
                        if s.kind == "categorical")  # fmt: skip
    anndata = _text(handle.attrs.get("encoding-type")) == "anndata"

    def permuted(path: str, length: int | None) -> bool:
        return rows is not None and length == rows and not is_lookup_table(path, lookups, anndata)

    plans = [_sparse_plan(source, lay, options, permuted(lay.group, lay.n_rows)) for lay in layouts]
    for d in reports:
        length = d.shape[0] if d.shape else None
        plans.append(_dataset_plan(source, d, options, permuted(d.path, length)))
    _check_plans(plans, options)
    groups = [g.path for g in report.groups if g.path != "/" and _group_selected(g.path, options)]
    key = ANNDATA_ROW_ORDER_KEY if anndata else ROW_ORDER_KEY
    return RewritePlan(source.path, groups, plans, rows, options.shuffle_rows, options, key)


def _selected(path: str, keys: tuple[str, ...] | None) -> bool:
    return keys is None or any(path == k or path.startswith(k + "/") for k in keys)


def _group_selected(group: str, options: RewriteOptions) -> bool:
    keys = options.keys
    return keys is None or any(k == group or k.startswith(group + "/") or
                               group.startswith(k + "/") for k in keys)  # fmt: skip


def _check_keys(report: FileReport, options: RewriteOptions) -> None:
    names = {d.path for d in report.datasets} | {g.path.strip("/") for g in report.groups}
    missing = [k for k in options.keys or () if k not in names]
    if missing:
        raise KeyError(f"keys: {format_names(missing)} not in {report.path!r}; datasets in the "
                       f"file: {format_names(d.path for d in report.datasets)}")  # fmt: skip
    datasets = {d.path for d in report.datasets}
    missing = [k for k in options.dtypes if k not in datasets]
    if missing:
        raise KeyError(f"dtypes: {format_names(missing)} not datasets of {report.path!r}; "
                       f"datasets: {format_names(datasets)}")  # fmt: skip


def _shuffled_rows(
    reports: list[DatasetReport], layouts: list[SparseLayout], options: RewriteOptions
) -> int | None:
    if options.shuffle_rows is None:
        return None
    lengths = [d.shape[0] for d in reports if d.shape and d.kind not in ("dimension", "scalar")]
    return choose_rows(lengths, [lay.n_rows for lay in layouts])


def _check_plans(plans: list[DatasetPlan], options: RewriteOptions) -> None:
    stuck = [p for p in plans if p.permuted and p.action == "copy"]
    if stuck:
        raise ValueError(
            f"shuffle_rows: cannot permute the rows of {format_names(p.path for p in stuck)} "
            f"({stuck[0].note}); leave them out with keys= or write without shuffle_rows"
        )
    for p in plans:
        if p.chunks is None or p.action == "copy":
            continue
        need = options.min_memory(p.chunks[0] * p.row_bytes)
        if need > options.memory:
            raise ValueError(f"memory={options.memory} is too small for the chunks of {p.path!r} "
                             f"({p.chunks}): give at least {need} bytes")  # fmt: skip
    bad = [k for k in options.dtypes if not any(p.path == k and p.action in ("chunks", "h5py")
                                                 for p in plans)]  # fmt: skip
    if bad:
        raise ValueError(f"dtypes: {format_names(bad)} are not numeric datasets this rewrite "
                         "writes (only those can change dtype)")  # fmt: skip


def _copy(d: DatasetReport, permuted: bool, note: str) -> DatasetPlan:
    return DatasetPlan(d.path, "copy", d.shape, d.dtype, None, "as stored", permuted,
                       d.storage_bytes, d.storage_bytes, None, note)  # fmt: skip


def _dataset_plan(
    source: H5Source, d: DatasetReport, options: RewriteOptions, permuted: bool
) -> DatasetPlan:
    reason = _copy_reason(source, d)
    if reason:
        return _copy(d, permuted, reason)
    assert d.shape is not None
    dset = source.dataset(d.path)
    out = options.dtypes.get(d.path, dset.dtype)
    if d.path in options.dtypes and dset.dtype.kind not in "biuf":
        raise ValueError(f"dtypes[{d.path!r}]: {d.path!r} holds {d.dtype}, not numbers; only "
                         "numeric datasets change dtype")  # fmt: skip
    if dset.dtype.hasobject:
        return _vlen_plan(dset, d, options, permuted)
    try:
        rows = chunk_rows(d.shape[0], out.itemsize * math.prod(d.shape[1:]), options.chunk_bytes)
    except ValueError as exc:
        return _copy(d, permuted, str(exc))
    chunks = (rows, *d.shape[1:])
    sample = np.ascontiguousarray(dset[:rows]).astype(out, copy=False)
    codec, ratio, speed = _measure(sample, options, out)
    action = "chunks" if have_imagecodecs() else "h5py"
    note = "" if action == "chunks" else "imagecodecs not installed: HDF5 compresses (1 core)"
    estimate = int(out.itemsize * math.prod(d.shape) / ratio)
    return DatasetPlan(d.path, action, d.shape, str(out), chunks, codec.label, permuted,
                       d.storage_bytes, estimate, speed, note, codec,
                       out.itemsize * math.prod(d.shape[1:]))  # fmt: skip


def _copy_reason(source: H5Source, d: DatasetReport) -> str:
    if d.error is not None:
        return f"cannot be described: {d.error}"
    if not d.shape:
        return "scalar (0-d): nothing to chunk"
    if d.kind == "unsupported":
        return f"a type NumPy cannot hold ({d.dtype})"
    if d.layout in ("virtual", "external"):
        return f"{d.layout} layout: its data lives in other files"
    missing = [f.label for f in filters_of(source.dataset(d.path)) if not f.available]
    if missing:
        return f"filter {', '.join(missing)} cannot be decoded here: stored bytes copied"
    if math.prod(d.shape) == 0:
        return "no data (a dimension is 0)"
    return ""


def _measure(
    sample: np.ndarray[Any, Any], options: RewriteOptions, out: np.dtype[Any]
) -> tuple[Codec, float, float | None]:
    """The codec for this data, the sample's compression ratio and decode MB/s on one core."""
    codec = Codec.for_dtype(options.codec_name, options.level, out)
    if codec.name == "none" or not have_imagecodecs():
        return codec, 1.0, None
    encoded = codec.encode(sample)
    ratio = sample.nbytes / max(len(encoded), 1)
    if options.codec is None and ratio < _INCOMPRESSIBLE:
        return Codec.for_dtype("none", None, out), 1.0, None
    seconds = codec.decode_seconds(encoded, sample.nbytes)
    return codec, ratio, sample.nbytes / max(seconds, 1e-9) / 1e6


def _vlen_plan(
    dset: h5py.Dataset, d: DatasetReport, options: RewriteOptions, permuted: bool
) -> DatasetPlan:
    assert d.shape is not None
    head = dset[: min(d.shape[0], _VLEN_SAMPLE)]
    mean = max(1, int(np.mean([_vlen_nbytes(v) for v in head.reshape(-1)]) *
                      math.prod(d.shape[1:])))  # fmt: skip
    rows = chunk_rows(d.shape[0], mean, options.chunk_bytes)
    codec = Codec.for_dtype(options.codec_name, options.level, dset.dtype)
    note = "variable-length: HDF5 compresses the chunks of heap references (1 core)"
    return DatasetPlan(d.path, "h5py", d.shape, d.dtype, (rows, *d.shape[1:]), codec.label,
                       permuted, d.storage_bytes, None, None, note, codec, mean)  # fmt: skip


def _vlen_nbytes(value: Any) -> int:
    if isinstance(value, (bytes, str)):
        return len(value) + 16
    if isinstance(value, np.ndarray):
        return int(value.nbytes) + 16
    if isinstance(value, np.void):  # a table row with variable-length fields
        return sum(_vlen_nbytes(value[n]) for n in value.dtype.names or ())
    return 16


def _sparse_plan(
    source: H5Source, lay: SparseLayout, options: RewriteOptions, permuted: bool
) -> DatasetPlan:
    data = source.dataset(lay.data_key)
    stored = sum(int(source.dataset(k).id.get_storage_size())
                 for k in (lay.data_key, lay.indices_key, lay.indptr_key))  # fmt: skip
    shape = (lay.n_rows, lay.n_cols)
    if not lay.rows_compressed:
        note = f"{lay.encoding}: rows are not contiguous runs; the group is copied as stored"
        return DatasetPlan(lay.group, "copy", shape, str(data.dtype), None, "as stored",
                           permuted, stored, stored, None, note)  # fmt: skip
    if permuted and lay.group.split("/")[0] in ("obsp", "varp"):
        note = "a pairwise matrix: its columns are rows too"
        return DatasetPlan(lay.group, "copy", shape, str(data.dtype), None, "as stored",
                           permuted, stored, stored, None, note)  # fmt: skip
    entries = chunk_rows(int(data.shape[0]), data.dtype.itemsize, options.sparse_chunk_bytes)
    sample = np.ascontiguousarray(data[:entries])
    codec, ratio, speed = _measure(sample, options, data.dtype)
    entry = data.dtype.itemsize + source.dataset(lay.indices_key).dtype.itemsize
    nbytes = int(data.shape[0]) * entry + 8 * (lay.n_rows + 1)
    return DatasetPlan(lay.group, "csr", shape, str(data.dtype), (entries,), codec.label,
                       permuted, stored, int(nbytes / ratio), speed, lay.encoding, codec,
                       entry)  # fmt: skip


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value) if value is not None else ""
