"""RowReader: read rows along axis 0 of one HDF5 dataset for a whole batch of indices.

The strategy is picked once, from the dataset's layout:

* ``memmap``: contiguous and unfiltered data, or chunked unfiltered data whose chunks hold whole
  rows. Rows are gathered straight from a read-only memory map of the file at the byte offsets
  HDF5 reports (``get_offset`` / the chunk table): one numpy call per batch, no h5py call.
* ``decode``: chunked data whose every filter the codec pipeline decodes (gzip, shuffle,
  Fletcher-32, blosc, lz4, bitshuffle, zstd, blosc2). Each needed chunk is read raw (``pread``
  from the chunk table, else ``read_direct_chunk``) and decoded in a per-process thread pool
  outside the HDF5 lock, into the chunk engine's window of decoded chunks (``chunks/engine.py``),
  bounded by ``rdcc_nbytes`` (HDF5's own chunk cache is switched off for the dataset).
* ``chunks``: other chunked data (lzf, scale-offset, … or unfiltered chunks that split rows):
  h5py decodes each needed block of chunks in one call, kept in the same window.
* ``slabs``: everything else (compact, virtual, external, variable-length data, file objects
  without chunks). Sorted, unique rows are grouped into runs of nearby rows; each run is read with
  one h5py call; rows are then put back into request order.

Before a strategy is picked, ``file/layout.py`` checks what the file says against the file
(filters installed, byte ranges inside the file, chunk sizes that fit their filters, data in
other files only inside the data file's directory); the fast strategies (``memmap``, ``decode``)
serve only datasets whose bytes are in this file and whose stored bytes are their values. The
memory map (of a ``Mappable`` byte source) is checked against h5py on the first and last row
(``file/verify.py``) before it is trusted, and against the file's size and identity before each
batch (a file truncated under a map would otherwise kill the process with SIGBUS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..chunks.engine import ChunkEngine, chunk_engine
from ..file.layout import Layout, inspect_layout
from ..file.source import H5Source
from ..file.verify import agrees_with_hdf5, probe_rows
from ..indices import IndexArray, as_index_array, normalize_index, plan_slabs
from ..process import PerProcess
from ..storage.byte_source import ByteSource, Mappable, MappedFile
from .ranged import RangedRows

__all__ = ["RowReader"]

_MAX_SLAB_BYTES = 64 * 1024**2
_GAP_BYTES = 64 * 1024  # below this, reading the unneeded rows between two runs beats a call


class RowReader:
    """Reads rows of one dataset of an ``H5Source``, in any order, in batches.

    Args:
        source: The file.
        key: Path of the dataset inside the file (nested paths allowed).
        arg: Name of the user-facing argument that gave ``key`` (for error messages).

    Raises:
        KeyError: ``key`` is not in the file.
        ValueError: the dataset is a scalar (0-d) or has no shape.
    """

    def __init__(self, source: H5Source, key: str, *, arg: str = "key") -> None:
        self.source = source
        self.key = key
        dset = source.dataset(key, arg=arg)
        if dset.shape is None or len(dset.shape) == 0:
            raise ValueError(
                f"{arg}={key!r} in {source.path!r} is a scalar (0-d) dataset; samples are read "
                "along axis 0, so it needs at least one dimension"
            )
        self.length: int = int(dset.shape[0])
        self.row_shape: tuple[int, ...] = tuple(int(s) for s in dset.shape[1:])
        self.dtype: np.dtype[Any] = dset.dtype
        self.chunk_rows: int | None = int(dset.chunks[0]) if dset.chunks else None
        self.row_nbytes: int = self.dtype.itemsize * math.prod(self.row_shape)
        layout = inspect_layout(dset, source, key)
        self._bytes = source.byte_source()
        self._mapped = _mapped_layout(dset, self._bytes, self.row_nbytes, layout)
        self._mapped_end = _mapped_end(self._mapped, self.length, self.row_nbytes)
        self._spans = _spans(self._mapped, self.length, self.row_nbytes)
        self._map: PerProcess[_MappedRows] = PerProcess()
        if self._mapped is not None and not self._memmap_agrees(dset):
            self._mapped = None
        self._blocks = None if self._mapped is not None else _block_reader(dset, source, layout)
        self._ranged = _ranged_rows(dset, source, layout) if self._blocks is None else None
        if self._ranged is not None and not self._ranged_agrees(dset):
            self._ranged = None

    @property
    def strategy(self) -> str:
        """``"memmap"``, ``"ranges"``, ``"decode"``, ``"chunks"`` or ``"slabs"`` (fixed when built).

        ``"ranges"``: contiguous data of a file in an object store, read by byte ranges
        (``ranged.py``).
        """
        if self._mapped is not None:
            return "memmap"
        if self._ranged is not None:
            return "ranges"
        if self._blocks is None:
            return "slabs"
        return "decode" if self._blocks.decodes else "chunks"

    @property
    def readahead_rows(self) -> int:
        """Rows worth announcing ahead of reads (``read_ahead``): a planned window, else 0."""
        return 0 if self._blocks is None else self._blocks.readahead_rows

    def read_ahead(self, indices: Any) -> None:
        """Start decoding the chunks rows ``indices`` need, in the background (or do nothing)."""
        if self._blocks is not None and self._blocks.releases_gil:
            self._blocks.read_ahead(self._dataset(), as_index_array(indices, self.length))

    @property
    def releases_gil(self) -> bool:
        """True when batch reads run outside the GIL and h5py's lock.

        Memory-map gathers, and chunks read by ``pread`` and decoded in the pool: threads then
        read in parallel.
        """
        return self._mapped is not None or (self._blocks is not None and self._blocks.releases_gil)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole dataset once decoded."""
        return self.row_nbytes * self.length

    def read(self, indices: Any, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """Return rows ``indices`` (any order, duplicates allowed) as one array, in that order.

        Args:
            indices: Row numbers: a sequence of ints, a 1-d integer array or tensor, or a slice.
                Negative numbers count from the end.
            out: Optional preallocated array of shape ``(len(indices), *row_shape)``.

        Raises:
            IndexError: an index is out of range; the message names it and the length.
        """
        idx = as_index_array(indices, self.length)
        if out is not None:
            self._output(len(idx), out)
        checked = self.source.check_unchanged()
        if self._mapped is not None and idx.size:
            if out is not None and out.flags.c_contiguous and self._spans[1].size == 1:
                return self._gather_mapped_into(idx, out, checked)  # one copy, into ``out``
            rows = self._gather_mapped(idx, checked)
            if out is None:
                return rows
            out[...] = rows
            return out
        out = self._output(len(idx), out)
        if self._blocks is not None and idx.size:
            return self._blocks.read(self._dataset(), idx, out)
        if self._ranged is not None:
            return self._ranged.read(idx, out)
        if idx.size == 0 or _is_strictly_increasing(idx):
            return self._read_sorted(idx, out)
        uniq, inverse = np.unique(idx, return_inverse=True)
        rows = self._read_sorted(uniq, self._output(len(uniq), None))
        np.take(rows, inverse, axis=0, out=out)
        return out

    def read_row(self, index: Any) -> np.ndarray[Any, Any]:
        """Return one row as an array the caller owns (negative indices allowed)."""
        i = normalize_index(index, self.length)
        checked = self.source.check_unchanged()
        if self._mapped is not None:
            one = np.array([i], dtype=np.int64)
            return self._gather_mapped(one, checked).reshape(self.row_shape)
        if self._blocks is not None or self._ranged is not None:
            return self.read(np.array([i], dtype=np.int64)).reshape(self.row_shape)
        row = self._dataset()[i]
        return np.array(row, dtype=self.dtype, copy=True)

    def read_range(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Return rows ``[start, stop)`` (sequential read into ``out`` when given)."""
        if not 0 <= start <= stop <= self.length:
            raise IndexError(
                f"row range [{start}, {stop}) is outside a dataset of length {self.length}"
            )
        out = self._output(stop - start, out)
        if stop == start:
            return out
        checked = self.source.check_unchanged()
        if self._mapped is not None:
            self._copy_mapped_range(start, stop, out, checked)
        elif self._blocks is not None:
            self._blocks.read_range(self._dataset(), start, stop, out)
        elif self._ranged is not None and out.flags.c_contiguous:
            self._ranged.read_range(start, stop, out)
        else:
            self._read_slab_into(self._dataset(), start, stop, out)
        return out

    def read_runs(
        self, starts: IndexArray, stops: IndexArray, dst: IndexArray, out: np.ndarray[Any, Any]
    ) -> None:
        """Copy rows ``[starts[i], stops[i])`` to ``out[dst[i]:]`` for every ``i``.

        A memory-mapped reader checks the file once for all of them: a sparse batch of random
        cells is thousands of short runs, and a check per run (an ``fstat``) cost a quarter of
        the batch. Other readers read each run with ``read_range``.

        Raises:
            IndexError: a run lies outside the dataset or ends before it starts.
        """
        runs = zip(starts.tolist(), stops.tolist(), dst.tolist(), strict=True)
        if self._mapped is None:
            for s, e, t in runs:
                self.read_range(s, e, out[t : t + e - s])
            return
        if starts.size and (
            int(starts.min()) < 0 or int(stops.max()) > self.length or bool((stops < starts).any())
        ):
            raise IndexError(f"row runs outside a dataset of length {self.length}")
        raw = self._mapped_rows(self.source.check_unchanged()).file.data
        # a sparse batch is thousands of short runs: each one slice copy out of the span of
        # end-to-end chunks it lies in (h5py writes chunks in order, a B-tree node between
        # every few dozen), and only runs across a gap go chunk by chunk
        heads = self._spans[0]
        span = np.minimum(np.searchsorted(heads, starts, side="right") - 1, heads.size - 2)
        inside = (stops <= heads[span + 1]).tolist()
        views: dict[int, tuple[int, np.ndarray[Any, Any]]] = {}
        for (s, e, t), k, one in zip(runs, span.tolist(), inside, strict=True):
            if not one:
                self._copy_mapped(raw, s, e, out[t : t + e - s])
                continue
            if k not in views:
                views[k] = self._span_rows(raw, k)
            head, rows = views[k]
            out[t : t + e - s] = rows[s - head : e - head]

    def read_chunks(self, chunks: list[int]) -> list[np.ndarray[Any, Any]]:
        """Return whole chunks along axis 0: rows ``[c * chunk_rows, (c + 1) * chunk_rows)``.

        For callers that gather pieces of many rows (sparse ``data`` / ``indices``): with the
        ``decode`` and ``chunks`` strategies each chunk is decoded once, in parallel, and kept
        in the decoded-chunk cache, so later calls that touch it again cost no decode. Other
        strategies read the rows with ``read_range``. Treat the arrays as read-only.

        Raises:
            ValueError: the dataset is not chunked.
            IndexError: a chunk number is out of range.
        """
        if self.chunk_rows is None:
            raise ValueError(f"{self.key!r} in {self.source.path!r} is not chunked")
        rows, count = self.chunk_rows, -(-self.length // self.chunk_rows)
        bad = [c for c in chunks if not 0 <= c < count]
        if bad:
            raise IndexError(f"chunk {bad[0]} is out of range for {count} chunks of {self.key!r}")
        bounds = [(c * rows, min((c + 1) * rows, self.length)) for c in chunks]
        if self._blocks is not None and self._blocks.geometry.block_rows == rows:
            ids = sorted(set(chunks))
            blocks = self._blocks.read_blocks(self._dataset(), ids)
            if blocks is not None:
                by_id = dict(zip(ids, blocks, strict=True))
                return [by_id[c] for c in chunks]
        if self._blocks is not None and bounds:
            # one batch read: the engine decodes each chunk once, in parallel, and keeps it
            whole = self.read(np.concatenate([np.arange(lo, hi) for lo, hi in bounds]))
            cuts = np.cumsum([hi - lo for lo, hi in bounds])[:-1]
            return list(np.split(whole, cuts))
        return [self.read_range(lo, hi) for lo, hi in bounds]

    @property
    def decodes_heads(self) -> bool:
        """True when ``read_chunk_head`` decodes a chunk only as far as asked (plain deflate).

        Otherwise it reads the whole chunk, one call per chunk: a caller with many heads to
        read does better to read them whole with ``read_chunks``, in one call.
        """
        return self._blocks is not None and self._blocks.decodes_heads

    def read_chunk_head(self, chunk: int, rows: int) -> np.ndarray[Any, Any]:
        """Return the first ``rows`` rows of chunk ``chunk`` (see ``read_chunks``; read-only).

        A chunk that is not in the decoded-chunk cache and whose only filter is deflate is
        inflated only that far, and not cached: for a sparse row that spills over into the next
        chunk, whose own rows are read (and the chunk decoded once) at another time.

        Raises:
            ValueError: the dataset is not chunked.
            IndexError: the chunk or the row count is out of range.
        """
        if self.chunk_rows is None:
            raise ValueError(f"{self.key!r} in {self.source.path!r} is not chunked")
        first = chunk * self.chunk_rows
        if not (0 <= first < self.length and 0 < rows <= min(self.chunk_rows, self.length - first)):
            raise IndexError(f"rows [0, {rows}) of chunk {chunk} are outside {self.key!r}")
        if self._blocks is not None:
            return self._blocks.head(self._dataset(), chunk, rows)
        return self.read_range(first, first + rows)

    def clear_cache(self) -> None:
        """Drop this process's decoded chunks (``decode`` / ``chunks``; a no-op otherwise).

        Also those it shares with the workers it forks, and the window is fitted to the
        current budget again (``ChunkEngine.clear``).
        """
        if self._blocks is not None:
            self._blocks.clear()

    def plan_window(self, block_rows: int, blocks: int) -> None:
        """Size the decoded-chunk window for a sampler reading ``blocks`` row blocks at a time."""
        if self._blocks is not None:
            chunks = self.window_cache_nbytes(block_rows, blocks) // self._blocks.block_nbytes
            own = self.chunk_rows or 1
            run = block_rows // own if block_rows % own == 0 else 1
            self._blocks.plan_window(max(1, chunks), run)

    def window_cache_nbytes(self, block_rows: int, blocks: int) -> int:
        """Chunk-cache bytes that keep every chunk of ``blocks`` row blocks decoded at once.

        A row block is ``block_rows`` rows starting at a multiple of ``block_rows`` (what a
        chunk-aware sampler shuffles). Zero when reads need no chunk cache (``memmap``, or data
        that is not chunked).
        """
        if self.chunk_rows is None or self._mapped is not None:
            return 0
        chunk = self.chunk_rows
        if block_rows % chunk == 0:
            per_block = block_rows // chunk
        elif chunk % block_rows == 0:
            per_block = 1
        else:  # blocks straddle chunk boundaries
            per_block = -(-(block_rows - 1) // chunk) + 1
        return blocks * per_block * chunk * self.row_nbytes

    def _output(self, n: int, out: np.ndarray[Any, Any] | None) -> np.ndarray[Any, Any]:
        shape = (n, *self.row_shape)
        if out is None:
            return np.empty(shape, dtype=self.dtype)
        if out.shape != shape or out.dtype != self.dtype:
            raise ValueError(
                f"out must have shape {shape} and dtype {self.dtype}, "
                f"got shape {out.shape} and dtype {out.dtype}"
            )
        return out

    def _gather_mapped(self, idx: IndexArray, checked: bool = False) -> np.ndarray[Any, Any]:
        assert self._mapped is not None
        rows_per_chunk, chunk_offsets = self._mapped
        offsets = chunk_offsets[idx // rows_per_chunk] + (idx % rows_per_chunk) * self.row_nbytes
        raw: np.ndarray[Any, Any] = self._mapped_rows(checked).view[offsets]
        return raw.view(self.dtype).reshape(len(idx), *self.row_shape)

    def _gather_mapped_into(
        self, idx: IndexArray, out: np.ndarray[Any, Any], checked: bool
    ) -> np.ndarray[Any, Any]:
        # one span (contiguous data, or chunks end to end): rows are equally spaced, so the
        # file is a 2-d array of row bytes
        assert self._mapped is not None
        raw = self._mapped_rows(checked).file.data
        start = int(self._spans[1][0])
        rows = raw[start : start + self.length * self.row_nbytes].reshape(self.length, -1)
        # mode="clip": indices are checked already, and "raise" makes numpy take into a copy
        np.take(rows, idx, axis=0, out=out.reshape(len(idx), -1).view(np.uint8), mode="clip")
        return out

    def _copy_mapped_range(
        self, start: int, stop: int, out: np.ndarray[Any, Any], checked: bool
    ) -> None:
        self._copy_mapped(self._mapped_rows(checked).file.data, start, stop, out)

    def _copy_mapped(
        self, raw: np.ndarray[Any, Any], start: int, stop: int, out: np.ndarray[Any, Any]
    ) -> None:
        # rows of one chunk (or of contiguous data) are consecutive bytes: one copy per chunk
        assert self._mapped is not None
        rows_per_chunk, chunk_offsets = self._mapped
        for chunk in range(start // rows_per_chunk, (stop - 1) // rows_per_chunk + 1):
            first = chunk * rows_per_chunk
            lo, hi = max(start, first), min(stop, first + rows_per_chunk)
            begin = int(chunk_offsets[chunk]) + (lo - first) * self.row_nbytes
            span = raw[begin : begin + (hi - lo) * self.row_nbytes]
            out[lo - start : hi - start] = span.view(self.dtype).reshape(hi - lo, *self.row_shape)

    def _span_rows(self, raw: np.ndarray[Any, Any], k: int) -> tuple[int, np.ndarray[Any, Any]]:
        """First row of span ``k`` and its rows, as an array over the mapped bytes."""
        heads, firsts = self._spans
        head, stop, begin = int(heads[k]), int(heads[k + 1]), int(firsts[k])
        span = raw[begin : begin + (stop - head) * self.row_nbytes].view(self.dtype)
        return head, span.reshape(stop - head, *self.row_shape)

    def _mapped_rows(self, checked: bool) -> _MappedRows:
        mapped = self._map.get_or_make(self._map_file)
        # a page past a truncated end is SIGBUS; the path's identity only when HDF5's
        # descriptor was not just checked
        mapped.file.check(self._mapped_end, identity=not checked)
        return mapped

    def _map_file(self) -> _MappedRows:
        # mapped through a descriptor we keep: the mapped file is checked before each read
        assert isinstance(self._bytes, Mappable)  # _mappable chose the memory map for it
        file = self._bytes.map()
        # One byte-strided view of the whole file whose element k is the row-sized record at
        # byte k: gathering any set of row offsets is then a single fancy-index call.
        view: np.ndarray[Any, Any] = np.ndarray(
            shape=(max(file.data.size - self.row_nbytes + 1, 0),),
            dtype=np.dtype((np.void, self.row_nbytes)),
            buffer=file.data,
            offset=0,
            strides=(1,),
        )
        return _MappedRows(file, view)

    def _dataset(self) -> h5py.Dataset:
        # block readers keep decoded chunks themselves: HDF5's cache would double the memory
        return self.source.dataset(self.key, chunk_cache=self._blocks is None)

    def _read_sorted(self, rows: IndexArray, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        dset = self._dataset()
        block = self.chunk_rows or 1
        row_bytes = max(self.row_nbytes, 1)
        gap = 0 if self.chunk_rows else _GAP_BYTES // row_bytes
        max_rows = max(block, (_MAX_SLAB_BYTES // row_bytes) // block * block)
        for start, stop, lo, hi in plan_slabs(rows, block, gap, max_rows, self.length):
            if stop - start == hi - lo:  # every row of the slab is wanted: read in place
                self._read_slab_into(dset, start, stop, out[lo:hi])
            else:
                slab = self._read_slab_into(dset, start, stop, self._output(stop - start, None))
                np.take(slab, rows[lo:hi] - start, axis=0, out=out[lo:hi])
        return out

    def _read_slab_into(
        self, dset: h5py.Dataset, start: int, stop: int, buf: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        if self.dtype.hasobject:
            buf[...] = dset[start:stop]
        elif buf.size:  # rows of no elements hold nothing (h5py < 3.11 divides by zero there)
            dset.read_direct(buf, np.s_[start:stop])
        return buf

    def _ranged_agrees(self, dset: h5py.Dataset) -> bool:
        assert self._ranged is not None
        ranged, probe = self._ranged, probe_rows(self.length)
        out = self._output(probe.size, None)
        agrees, _ = agrees_with_hdf5(dset, lambda _rows: ranged.read(probe, out), probe)
        return agrees

    def _memmap_agrees(self, dset: h5py.Dataset) -> bool:
        probe = probe_rows(self.length)
        agrees, _ = agrees_with_hdf5(dset, lambda _rows: self._gather_mapped(probe), probe)
        return agrees

    def __repr__(self) -> str:
        shape = (self.length, *self.row_shape)
        return (
            f"RowReader({self.source.path!r}, key={self.key!r}, shape={shape}, "
            f"dtype={self.dtype}, strategy={self.strategy!r})"
        )


@dataclass(frozen=True)
class _MappedRows:
    """One process's map of the file and its row-sized byte-strided view."""

    file: MappedFile
    view: np.ndarray[Any, Any]


def _block_reader(dset: h5py.Dataset, source: H5Source, layout: Layout) -> ChunkEngine | None:
    """Whole-chunk reads through the chunk engine, for chunked data of fixed-size rows."""
    # raw chunks are decoded by us only from this file, and only when the bytes are the values
    return chunk_engine(dset, source, decode=layout.fast_paths_allowed, index=layout.chunks)


def _mapped_end(mapped: tuple[int, IndexArray] | None, length: int, row_nbytes: int) -> int:
    """Bytes of the file a memory-mapped read may touch (checked against its size per batch)."""
    if mapped is None:
        return 0
    rows_per_chunk, offsets = mapped
    return int(offsets.max()) + min(rows_per_chunk, length) * row_nbytes


def _spans(
    mapped: tuple[int, IndexArray] | None, length: int, row_nbytes: int
) -> tuple[IndexArray, IndexArray]:
    """Spans of rows whose chunks lie end to end: ``(first rows + length, byte offsets)``."""
    if mapped is None:
        return np.array([0, length], dtype=np.int64), np.zeros(1, dtype=np.int64)
    rows_per_chunk, offsets = mapped
    gaps = np.flatnonzero(np.diff(offsets) != rows_per_chunk * row_nbytes) + 1
    chunks = np.concatenate(([0], gaps)).astype(np.int64)
    heads = np.minimum(np.append(chunks * rows_per_chunk, length), length)
    return heads, offsets[chunks]


def _is_strictly_increasing(idx: IndexArray) -> bool:
    return bool(idx.size < 2 or np.all(idx[1:] > idx[:-1]))


def _ranged_rows(dset: h5py.Dataset, source: H5Source, layout: Layout) -> RangedRows | None:
    """Byte-range reads for contiguous data of a file in an object store, or None."""
    file = source.byte_source() if source.is_remote else None
    if file is None or layout.contiguous_offset is None or not layout.fast_paths_allowed:
        return None
    if dset.dtype.hasobject or dset.is_virtual or dset.shape[0] == 0:
        return None
    shape = tuple(int(s) for s in dset.shape)
    return RangedRows(file, layout.contiguous_offset, shape[0], shape[1:], dset.dtype)


def _mapped_layout(
    dset: h5py.Dataset, file: ByteSource | None, row_nbytes: int, layout: Layout
) -> tuple[int, IndexArray] | None:
    """Return ``(rows_per_chunk, chunk_byte_offsets)`` for memory-mapped reads, or None.

    Row ``i`` starts at ``offsets[i // rows_per_chunk] + (i % rows_per_chunk) * row_nbytes``;
    contiguous data is one chunk holding every row.
    """
    if not _mappable(dset, file, row_nbytes, layout):
        return None
    if layout.contiguous_offset is not None:
        return int(dset.shape[0]), np.array([layout.contiguous_offset], dtype=np.int64)
    if layout.chunks is not None and dset.id.get_create_plist().get_nfilters() == 0:
        return _chunk_table(dset, layout)
    return None


def _mappable(dset: h5py.Dataset, file: ByteSource | None, row_nbytes: int, layout: Layout) -> bool:
    return (
        layout.fast_paths_allowed
        and isinstance(file, Mappable)
        and dset.file.driver == "sec2"
        and not dset.is_virtual
        and not dset.dtype.hasobject
        and row_nbytes > 0
        and dset.shape[0] > 0
    )


def _chunk_table(dset: h5py.Dataset, layout: Layout) -> tuple[int, IndexArray] | None:
    # the layout check made every unfiltered chunk exactly one chunk of bytes inside the file
    assert layout.chunks is not None
    blocks = layout.chunks.row_blocks(tuple(dset.shape), tuple(dset.chunks))
    return None if blocks is None else (blocks.rows, blocks.offsets)
