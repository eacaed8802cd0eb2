"""H5SparseDataset: rows of sparse matrices (AnnData ``.h5ad``, 10x ``.h5``) for PyTorch.

Each row (a cell) is stored as a run of ``data`` / ``indices`` entries that ``indptr`` points
to. ``indptr`` is held in RAM; a batch of rows becomes sorted runs of entries, read through the
library's ``RowReader`` (on compressed files: each needed chunk decoded once, in parallel
outside the HDF5 lock, and kept for the next batch) and scattered into a dense
``(batch, n_cols)`` array or a ``torch.sparse_csr_tensor``. ``block_starts`` gives
``ChunkShuffleSampler`` the rows whose entries share a chunk, so an epoch decodes each chunk once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import IO, Any, Literal

import numpy as np
import torch

from .._io import (
    FileOptions,
    H5Source,
    IndexArray,
    LockingMode,
    as_index_array,
    check_encoding,
    check_paths,
    merge_labels,
    normalize_index,
)
from .._validate import check_choice, check_key, numpy_dtype
from ._core import ChunkedDataset, ChunkParts
from ._sparse.batch import (
    RowEntries,
    concat_entries,
    csr_index_dtype,
    positions_of,
    select_columns,
    strictly_increasing_rows,
    to_csr_tensor,
    to_dense,
)
from ._sparse.columns import ColumnMap, check_columns_arg, column_map
from ._sparse.files import CscMode, SparseFile, open_sparse_file
from ._sparse.rows import CompressedRows
from ._tensors.columns import ENCODING_ARG
from ._tensors.split import split_samples

__all__ = ["H5SparseDataset"]

Output = Literal["dense", "sparse_csr"]
PathArg = str | os.PathLike[str] | IO[bytes]
_OUTPUTS: tuple[Output, ...] = ("dense", "sparse_csr")
_CSC_MODES: tuple[CscMode, ...] = ("sidecar", "direct")


class H5SparseDataset(ChunkedDataset[Any]):
    """A map-style dataset over the rows of sparse matrices in one or more HDF5 files.

    ``dataset[i]`` returns row ``i`` as a dense ``(n_cols,)`` tensor (or ``(x, y)`` with a
    label); a list / array / slice of indices returns the batch: ``x`` of shape
    ``(batch, n_cols)`` (a ``torch.sparse_csr_tensor`` with ``output="sparse_csr"``). Rows of
    several files follow each other in the order of ``paths``.

    Args:
        paths: One file or a sequence of files (``.h5ad``, 10x ``.h5``, or any HDF5 file with a
            group of ``data`` / ``indices`` / ``indptr``).
        group: The matrix group: ``"X"``, ``"layers/counts"``, ``"raw/X"``, ``"matrix"``, …
            Default: found from the AnnData ``encoding-type`` (``X`` first) or the 10x layout.
        label: Per-row label: an AnnData ``obs`` column name (categorical, strings or numbers)
            or a dataset path in the file. Categories become class indices (``-1`` for a
            missing value); ``label_categories`` lists them.
        columns: Columns to keep, in this order (a gene panel): names (matched against each
            file's ``var`` index / 10x feature names) or numbers.
        var_key: Dataset holding the column names (default: ``var`` index, or 10x
            ``features/name``).
        dtype: NumPy dtype of the returned values (default ``float32``).
        output: ``"dense"`` or ``"sparse_csr"`` for batches (single rows are always dense).
        csc: How a ``csc_matrix`` is served by rows: ``"sidecar"`` (default: converted once
            into a CSR copy next to the file, reused while the file is unchanged) or
            ``"direct"`` (every batch scans all columns: small files only).
        sidecar_dir: Folder for CSR copies (default: next to each file).
        file_options: How each file is opened, as one ``FileOptions`` (HDF5's chunk cache, SWMR,
            locking, external files, and for URLs the fsspec options and a node-local cache; every
            field is documented there). Its fields ``rdcc_nbytes``, ``rdcc_nslots``, ``rdcc_w0``,
            ``swmr``, ``locking``, ``storage_options``, ``cache_dir``, ``cache_limit``,
            ``decoded_budget`` are also keywords of their own here, as the seeds name them; a
            keyword set to other than its default must agree with ``file_options`` when both are
            given. ``rdcc_nbytes`` also sizes the decoded-chunk cache. ``swmr`` is off by default
            here (unlike the dense datasets): AnnData / 10x files are written once, and anndata
            or scanpy often hold the same file open in backed mode, which refuses a SWMR open in
            that process.
        label_encoding: How stored strings (string labels and column names) are decoded:
            ``"utf-8"`` (what anndata and h5py write), any Python text codec (``"latin-1"``
            decodes every byte string), or ``"bytes"`` for label categories as the stored
            bytes (column names are then read as UTF-8). A string the encoding cannot decode
            raises ``DataFileError`` naming the file, the dataset, the row and the bytes.

    Raises:
        FileNotFoundError / OSError: a file is missing or not HDF5, or a CSR copy cannot be
            written.
        DataFileError: a stored string is not valid in ``label_encoding``.
        KeyError: the group, label or a column name is missing (the message lists what exists).
        ValueError: the matrix is invalid or the files do not agree on their columns.
        TypeError: an argument has the wrong type.

    Example:
        >>> ds = H5SparseDataset("atlas.h5ad", label="cell_type")
        >>> sampler = ChunkShuffleSampler(ds, seed=0)
        >>> loader = batched_loader(ds, 256, sampler=sampler, num_workers=4)
    """

    def __init__(
        self,
        paths: PathArg | Sequence[PathArg],
        group: str | None = None,
        *,
        label: str | None = None,
        columns: Sequence[Any] | None = None,
        var_key: str | None = None,
        dtype: Any = np.float32,
        output: Output = "dense",
        csc: CscMode = "sidecar",
        sidecar_dir: str | os.PathLike[str] | None = None,
        rdcc_nbytes: int = 256 * 1024**2,
        rdcc_nslots: int = 1_000_003,
        rdcc_w0: float = 0.75,
        swmr: bool = False,
        locking: LockingMode = "best-effort",
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        decoded_budget: int | str | None = None,
        file_options: FileOptions | None = None,
        label_encoding: str = "utf-8",
    ) -> None:
        check_key("group", group, optional=True)
        check_key("label", label, optional=True)
        check_key("var_key", var_key, optional=True)
        self.output: Output = check_choice("output", output, _OUTPUTS)
        self.dtype = _value_dtype(dtype)
        strings = (check_encoding(ENCODING_ARG, label_encoding), ENCODING_ARG)
        options = self._file_options(H5SparseDataset.__init__, locals())
        wanted = check_columns_arg(columns)
        mode = check_choice("csc", csc, _CSC_MODES)
        folder = None if sidecar_dir is None else os.fspath(sidecar_dir)
        self._files: list[SparseFile] = [
            open_sparse_file(
                p,
                group,
                options,
                csc=mode,
                sidecar_dir=folder,
                var_key=var_key,
                label=label,
                strings=strings,
            )
            for p in check_paths(paths, file_objects=True)
        ]
        self._maps = _column_maps(self._files, wanted)
        self._offsets = np.cumsum([0] + [f.layout.n_rows for f in self._files], dtype=np.int64)
        self.label = label
        self._labels, self.label_categories = _labels(self._files, label)
        self.column_names = _output_names(self._files[0], self._maps[0], wanted)

    @property
    def paths(self) -> list[str]:
        """The files, in row order."""
        return [f.path for f in self._files]

    @property
    def group(self) -> str:
        """The matrix group of the first file."""
        return self._files[0].layout.group

    @property
    def n_cols(self) -> int:
        """Columns of every row returned (after ``columns``)."""
        return self._maps[0].n_out

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)`` as returned."""
        return len(self), self.n_cols

    @property
    def nnz(self) -> int:
        """Stored entries in all files."""
        return sum(f.rows.nnz for f in self._files)

    @property
    def origins(self) -> list[str]:
        """Per file: ``"rows"``, ``"sidecar"``, ``"built"`` or ``"direct"`` (see ``csc``)."""
        return [f.origin for f in self._files]

    @property
    def block_starts(self) -> IndexArray | None:
        """First row of every block of rows whose entries start in one chunk of ``data``.

        ``ChunkShuffleSampler`` shuffles these blocks. None when reads need no chunk-aware
        order (uncompressed, memory-mapped files, or ``csc="direct"``).
        """
        parts = [f.rows.block_starts() for f in self._files]
        if all(p is None for p in parts):
            return None
        return np.concatenate(
            [
                off + (p if p is not None else np.arange(f.layout.n_rows, dtype=np.int64))
                for off, p, f in zip(self._offsets[:-1].tolist(), parts, self._files, strict=True)
            ]
        )

    @property
    def chunk_rows(self) -> None:
        """None: rows per chunk vary; samplers use ``block_starts`` instead."""
        return None

    def _sources(self) -> list[H5Source]:
        return [source for f in self._files for source in f.sources]

    def _chunk_parts(self) -> list[ChunkParts]:
        return [f.rows for f in self._files]

    def _block_rows(self, block_rows: int | None) -> int | None:
        return block_rows  # None: each file's own blocks (``block_starts``)

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def _sample(self, index: Any) -> Any:
        return self.__getitems__([normalize_index(index, len(self))])[0]

    def _batch(self, indices: Any) -> Any:
        idx = as_index_array(indices, len(self))
        x = self._x_batch(idx)
        return x if self._labels is None else (x, self._label_batch(idx))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Return the rows at ``indices`` as a list of dense samples, reading them at once."""
        idx = as_index_array(indices, len(self))
        # torch's collate stacks the samples again: the batch stays in this process's memory
        x = torch.from_numpy(self._dense(idx, leaves=False))
        return split_samples(x, None if self._labels is None else self._label_batch(idx))

    def _x_batch(self, idx: IndexArray) -> torch.Tensor:
        if self.output == "dense":
            return torch.from_numpy(self._dense(idx, leaves=True))
        direct = self._entries_in_order(idx)
        if direct is not None:
            return to_csr_tensor(direct, None, self.n_cols, self.dtype)
        rows, inverse = self._entries(idx)
        return to_csr_tensor(rows, inverse, self.n_cols, self.dtype)

    def _entries_in_order(self, idx: IndexArray) -> RowEntries | None:
        """The entries of ``idx``'s rows in its order, read straight to their places; or None.

        One file of CSR rows, every column, no repeated row: each row's entries are copied
        once, from the file (or its decoded chunks) to their place in the batch, as the CSR
        output's dtypes (in a worker, into slots of its batch ring, which send them as they
        are; a copy of 4,096 cells' entries back into request order, and casts, cost as much as
        reading them). Otherwise None: ``_entries`` reads rows in file order and puts them in order.
        """
        f = self._files[0]
        if len(self._files) > 1 or self._maps[0].positions is not None:
            return None
        if not isinstance(f.rows, CompressedRows):
            return None
        rows, target = idx, None
        if not f.rows.reads_any_order and idx.size > 1 and not bool(np.all(idx[1:] > idx[:-1])):
            rows, inverse = np.unique(idx, return_inverse=True)
            if rows.size != idx.size:
                return None  # repeats: one read per row, then copies
            target = positions_of(inverse)
        lengths = f.rows.lengths(rows)
        ordered = lengths if target is None else np.empty_like(lengths)
        if target is not None:
            ordered[target] = lengths
        first = np.cumsum(ordered) - ordered
        dst = first if target is None else first[target]
        nnz = int(lengths.sum())
        index = csr_index_dtype(self.n_cols, nnz)
        if not np.can_cast(f.rows.indices.dtype, index):
            index = f.rows.indices.dtype  # checked as stored: a cast first could hide a bad one
        cols = self._batch_array(nnz, index)
        data = self._batch_array(nnz, self.dtype)
        f.rows.read_into(rows, dst, cols, data)
        canonical = strictly_increasing_rows(cols, ordered)
        return RowEntries(ordered, cols, data, canonical, canonical)

    def _dense(self, idx: IndexArray, *, leaves: bool) -> np.ndarray[Any, Any]:
        """Rows ``idx`` as one dense batch; the batch that ``leaves`` a worker, into its buffer."""
        rows, inverse = self._entries(idx)
        # in a worker process, scattered straight into a slot of its batch ring: a dense
        # single-cell batch is large (4,096 cells x 20,000 genes: 328 MB) and a copy costs
        slot = None
        if leaves and (inverse is None or inverse.size == rows.lengths.size):  # repeats: copies
            slot = self._output_buffer((idx.size, self.n_cols), self.dtype)
        out = None if slot is None else slot.numpy()
        return to_dense(rows, inverse, self.n_cols, self.dtype, out)

    def _batch_array(self, n: int, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """An uninitialised array of a batch: in a worker, in a slot of its batch ring."""
        slot = self._output_buffer((n,), dtype)
        return np.empty(n, dtype) if slot is None else slot.numpy()

    def _entries(self, idx: IndexArray) -> tuple[RowEntries, IndexArray | None]:
        """Entries of the sorted, unique rows of ``idx`` and the map back to ``idx``.

        A single memory-mapped file reads ``idx`` as it is (map None): each row straight to
        its place, with nothing to put back in order afterwards.
        """
        if len(self._files) == 1 and self._files[0].rows.reads_any_order:
            return select_columns(self._files[0].rows.read(idx), self._maps[0]), None
        inverse: IndexArray | None = None
        uniq = idx
        if idx.size > 1 and not bool(np.all(idx[1:] > idx[:-1])):
            uniq, inverse = np.unique(idx, return_inverse=True)
        cuts = np.searchsorted(uniq, self._offsets).tolist()
        parts = []
        for k, (f, cmap) in enumerate(zip(self._files, self._maps, strict=True)):
            if cuts[k + 1] > cuts[k]:
                local = uniq[cuts[k] : cuts[k + 1]] - self._offsets[k]
                parts.append(select_columns(f.rows.read(local), cmap))
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            return RowEntries(empty, empty, np.empty(0, self.dtype), True, True), inverse
        return concat_entries(parts), inverse

    def _label_batch(self, idx: IndexArray) -> torch.Tensor:
        assert self._labels is not None
        values = self._labels[idx]
        if self.label_categories is not None:
            values = values.astype(np.int64)
        return torch.from_numpy(np.ascontiguousarray(values))

    def __repr__(self) -> str:
        files = self.paths[0] if len(self._files) == 1 else f"{len(self._files)} files"
        parts = [
            repr(files) if len(self._files) == 1 else files,
            f"group={self.group!r} ({self._files[0].layout.encoding})",
            f"shape={self.shape}",
            f"nnz={self.nnz}",
            f"dtype={self.dtype}",
            f"output={self.output!r}",
        ]
        if self.label is not None:
            parts.append(f"label={self.label!r}")
        parts.append("open" if self.is_open else "closed")
        return f"H5SparseDataset({', '.join(parts)})"


def _value_dtype(dtype: Any) -> np.dtype[Any]:
    result = numpy_dtype("dtype", dtype)
    if result is None or result.kind not in "biuf":
        raise TypeError(f"dtype must be a numeric NumPy dtype (e.g. np.float32), got {dtype!r}")
    return result


def _column_maps(files: list[SparseFile], wanted: list[Any] | None) -> list[ColumnMap]:
    maps = [
        column_map(wanted, f.names, f.layout.n_cols, f"{f.path!r} ({f.layout.group!r})")
        for f in files
    ]
    if wanted is not None:
        return maps
    first = files[0]
    for f in files[1:]:
        if f.layout.n_cols != first.layout.n_cols:
            raise ValueError(
                f"{f.path!r} has {f.layout.n_cols} columns but {first.path!r} has "
                f"{first.layout.n_cols}; pass columns=[names…] to read the same columns of each"
            )
        if (
            first.names is not None
            and f.names is not None
            and not np.array_equal(first.names, f.names)
        ):
            raise ValueError(
                f"{f.path!r} and {first.path!r} name their columns differently (other genes or "
                "another order); pass columns=[names…] to align them by name"
            )
    return maps


def _labels(
    files: list[SparseFile], label: str | None
) -> tuple[np.ndarray[Any, Any] | None, list[Any] | None]:
    if label is None:
        return None, None
    columns = [f.label for f in files if f.label is not None]
    merged = merge_labels(columns, label)
    return merged.values, merged.categories


def _output_names(first: SparseFile, cmap: ColumnMap, wanted: list[Any] | None) -> list[str] | None:
    if wanted is not None and isinstance(wanted[0], str):
        return [str(w) for w in wanted]
    if first.names is None:
        return None
    if cmap.positions is None:
        return [str(n) for n in first.names.tolist()]
    order = np.argsort(cmap.positions[cmap.positions >= 0])
    return [str(n) for n in first.names[cmap.positions >= 0][order].tolist()]
