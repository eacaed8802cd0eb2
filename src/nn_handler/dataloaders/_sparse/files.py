"""Open one file of an ``H5SparseDataset``: its layout, row reader, column names and labels.

Everything that needs the whole file (layout, column names, labels, a CSR copy of a CSC
matrix) happens here, once, in the process that builds the dataset; readers then hold no handle
until a process reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..._io import (
    FileOptions,
    H5Source,
    LabelColumn,
    SparseLayout,
    Strings,
    detect_layout,
    ensure_csr_sidecar,
    names_key,
    read_label,
    read_names,
)
from .csc_direct import ColumnScanRows
from .rows import CompressedRows

__all__ = ["CscMode", "SparseFile", "open_sparse_file"]

CscMode = Literal["sidecar", "direct"]
RowStrategy = CompressedRows | ColumnScanRows


@dataclass
class SparseFile:
    """One opened file.

    Attributes:
        path: The file.
        layout: Where its matrix is.
        rows: Reads rows (from the file, or from its CSR copy).
        sources: Every file handle holder reads may open (the file and/or its CSR copy).
        names: Column names, or None.
        label: Its labels, or None.
        origin: ``"rows"`` (CSR / 10x), ``"sidecar"`` (CSR copy reused), ``"built"`` (CSR copy
            built now) or ``"direct"`` (CSC read column by column).
    """

    path: str
    layout: SparseLayout
    rows: RowStrategy
    sources: tuple[H5Source, ...]
    names: np.ndarray[Any, Any] | None
    label: LabelColumn | None
    origin: str


def open_sparse_file(
    path: Any,
    group: str | None,
    options: FileOptions,
    *,
    csc: CscMode,
    sidecar_dir: str | None,
    var_key: str | None,
    label: str | None,
    strings: Strings,
) -> SparseFile:
    """Open ``path`` and read what the dataset keeps in RAM (see the module docstring).

    ``strings`` is ``(encoding, argument)``: how labels and column names are decoded.
    """
    source = H5Source(path, options)
    try:
        f = source.file
        layout = detect_layout(f, group, source.path)
        names = read_names(f, names_key(f, layout, var_key, source.path), source.path, strings)
        labels = None
        if label is not None:
            labels = read_label(f, layout.obs_key, label, layout.n_rows, source.path, strings)
        rows, sources, origin = _row_source(source, layout, csc, sidecar_dir)
    finally:
        source.close()
    for holder in sources:
        holder.close()
    return SparseFile(source.path, layout, rows, sources, names, labels, origin)


def _row_source(
    source: H5Source, layout: SparseLayout, csc: CscMode, sidecar_dir: str | None
) -> tuple[RowStrategy, tuple[H5Source, ...], str]:
    if layout.rows_compressed:
        keys = (layout.data_key, layout.indices_key, layout.indptr_key)
        rows = CompressedRows(source, layout.group, keys, layout.n_rows, layout.n_cols)
        return rows, (source,), "rows"
    if csc == "direct":
        return ColumnScanRows(source, layout), (source,), "direct"
    if not source.is_path:
        raise ValueError(
            f"group {layout.group!r} of {source.path} is a csc_matrix and a file object has no "
            "folder for its CSR copy: pass csc='direct' (slow), or a path"
        )
    target, origin = ensure_csr_sidecar(source, layout, sidecar_dir)
    copy = H5Source(target, source.options)
    rows = CompressedRows(
        copy, layout.group, ("data", "indices", "indptr"), layout.n_rows, layout.n_cols
    )
    return rows, (copy,), origin
