"""Where a decoded block comes from: one interface, three ways to fill it.

A *block* is ``block_rows`` rows starting at ``b * block_rows`` (every chunk whose first index
is a multiple of the chunk's rows; several when chunks split rows). The engine (``fills.py``)
asks a ``BlockFiller`` to fill one block into a destination it owns: a slot of the window, a
scratch block, or rows of the caller's batch. The three sources, best first (which one serves a
dataset is decided with the rest of how its rows are read, in ``rows/choice.py``):

* ``TableChunks``: raw chunks read with ``pread`` at the offsets of the chunk table
  (``ChunkTable``) and decoded by the ``ChunkPipeline``: no h5py, no lock, GIL released, so
  threads read and decode in parallel. Chunks that hold whole rows, in a file on disk.
* ``DirectChunks``: raw chunks read with h5py's ``read_direct_chunk`` (one per tile when
  chunks split rows), decoded by the same pipeline in the decode pool. Chunks never written
  (the walked chunk index does not list them) serve HDF5's fill value through h5py: h5py is
  never asked for their raw bytes (``file/chunk_walk.read_direct_chunk`` says why).
* ``H5pyBlocks``: h5py decodes the block itself, under its lock (filters we do not decode, or
  data whose stored bytes are not its values).

What h5py serves, each source asks of the one ``read_with_h5py`` callable it was built with
(``h5py_rows.py``), never of a dataset handle passed along with every call.

A chunk that does not decode (a bad checksum, a corrupt stream, the wrong size) raises
``CorruptFileError`` naming the file, the dataset and the chunk; it is never handed to HDF5 as
well, whose filters may inflate a forged stream twice or return uninitialised memory. Only a
filter *variant* we do not decode (``UnsupportedChunkError``) is read through h5py.
"""

from __future__ import annotations

import abc
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import CorruptFileError
from ..file.chunk_walk import WrittenChunks
from .codecs import ChunkPipeline
from .decoders import ChunkDecodeError, UnsupportedChunkError
from .h5py_rows import H5pyDataset, ReadWithH5py, row_span
from .pool import run_parallel
from .table import ChunkTable

__all__ = [
    "BlockFiller",
    "DirectChunks",
    "Geometry",
    "H5pyBlocks",
    "TableChunks",
]

_GAP_BYTES = 64 * 1024  # bytes between two chunks read rather than end a span there
_SPAN_BYTES = 8 * 1024**2  # raw bytes read at once (about)
_TASK_BYTES = 256 * 1024  # decoded bytes per decode task of a run


@dataclass(frozen=True)
class Geometry:
    """Rows of one chunked dataset cut into blocks, and where they come from (for messages)."""

    path: str
    key: str
    length: int
    row_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    block_rows: int
    #: the filter pipeline: (filter id, its values) each, in order (what a region records)
    filters: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def count(self) -> int:
        """Blocks in the dataset (the last one may be short)."""
        return -(-self.length // self.block_rows)

    @property
    def row_nbytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.row_shape)

    @property
    def block_nbytes(self) -> int:
        return self.block_rows * self.row_nbytes

    def bounds(self, block: int) -> tuple[int, int]:
        """Rows ``[lo, hi)`` of ``block`` that exist (the last block may be short)."""
        lo = block * self.block_rows
        return lo, min(lo + self.block_rows, self.length)

    def empty_block(self) -> np.ndarray[Any, Any]:
        return np.empty((self.block_rows, *self.row_shape), self.dtype)

    def corrupt(self, offset: tuple[int, ...], exc: BaseException) -> CorruptFileError:
        """The error for the chunk at ``offset``, naming the file, the dataset and the cause."""
        return CorruptFileError(
            f"dataset {self.key!r} of {self.path!r}: the chunk at {offset} is corrupt "
            f"({exc}); the file is damaged",
            self.path,
        )


class BlockFiller(Protocol):
    """Fills whole blocks (see the module docstring)."""

    @property
    def geometry(self) -> Geometry:
        """The dataset's rows as blocks."""

    @property
    def decodes(self) -> bool:
        """True when we decode raw chunks ourselves, in the pool (the ``decode`` strategy)."""

    @property
    def releases_gil(self) -> bool:
        """True when blocks are read and decoded outside the GIL and h5py's lock."""

    def fill(self, block: int, dest: np.ndarray[Any, Any]) -> None:
        """Write block ``block``'s rows into ``dest`` (C-contiguous, ``block_rows`` rows).

        Rows past the end of the dataset (a short last block) are never served; a source may
        leave them as they are or write the chunk's padding there.

        Raises:
            CorruptFileError: the chunk is damaged (names the file, dataset and chunk).
        """

    @property
    def decodes_heads(self) -> bool:
        """True when ``head`` may decode a block only as far as asked (else it returns None)."""

    def head(self, block: int, rows: int) -> np.ndarray[Any, Any] | None:
        """The first ``rows`` rows of ``block``, decoded only that far; None when it cannot."""

    @property
    def batches_reads(self) -> bool:
        """True when the raw bytes of many blocks are best fetched by one ``fill_many`` call.

        An object store, where a request costs a round trip: the engine then hands readahead
        and multi-block reads over in one call, and keeps no shared decoded copy.
        """

    def fill_many(
        self,
        tasks: Sequence[tuple[int, np.ndarray[Any, Any]]],
        *,
        parallel: bool = True,
    ) -> list[BaseException | None]:
        """Fill each ``(block, dest)`` task; per task, None or the error its fill raised.

        ``parallel``: fill in the decode pool (never from inside a pool thread).
        """

    def advise(self, blocks: Sequence[int]) -> None:
        """Have the raw bytes of ``blocks`` read ahead (no wait; nothing where it cannot)."""

    @property
    def reads_runs(self) -> bool:
        """True when ``fill_run`` reads consecutive blocks cheaper than a ``fill`` each."""

    def fill_run(self, first: int, dest: np.ndarray[Any, Any]) -> None:
        """Fill blocks ``first, first + 1, ...`` into ``dest`` (whole blocks, in order)."""


class _Blocks(abc.ABC):
    """What a source that reads one block at a time offers for many blocks: a ``fill`` each."""

    geometry: Geometry
    batches_reads = False
    reads_runs = False

    @abc.abstractmethod
    def fill(self, block: int, dest: np.ndarray[Any, Any]) -> None:
        """See ``BlockFiller.fill``."""

    def fill_many(
        self,
        tasks: Sequence[tuple[int, np.ndarray[Any, Any]]],
        *,
        parallel: bool = True,
    ) -> list[BaseException | None]:
        """See ``BlockFiller.fill_many``."""

        def fill(task: tuple[int, np.ndarray[Any, Any]]) -> BaseException | None:
            try:
                self.fill(*task)
            except Exception as exc:  # reported per block: readahead settles each one
                return exc
            return None

        return run_parallel(fill, tasks) if parallel else [fill(task) for task in tasks]

    def fill_run(self, first: int, dest: np.ndarray[Any, Any]) -> None:
        """See ``BlockFiller.fill_run``."""
        blocks = dest.reshape(-1, self.geometry.block_rows, *self.geometry.row_shape)
        for k, block in enumerate(blocks):
            self.fill(first + k, block)

    def advise(self, blocks: Sequence[int]) -> None:  # noqa: B027 (a default, not abstract)
        """Nothing: the source reads its bytes itself (h5py, or one chunk at a time)."""


class H5pyBlocks(_Blocks):
    """Blocks read by h5py, which decodes them under its lock."""

    decodes = False
    releases_gil = False

    def __init__(self, geometry: Geometry, read_with_h5py: ReadWithH5py) -> None:
        self.geometry = geometry
        self._read = read_with_h5py

    def fill(self, block: int, dest: np.ndarray[Any, Any]) -> None:
        """See ``BlockFiller.fill``."""
        lo, hi = self.geometry.bounds(block)
        self._read(row_span(lo, hi), dest[: hi - lo])

    decodes_heads = False

    def head(self, block: int, rows: int) -> np.ndarray[Any, Any] | None:
        """None: h5py reads whole blocks."""
        return None


class TableChunks(_Blocks):
    """Raw chunks read by ``pread`` from the chunk table, decoded by the pipeline.

    ``batches_reads``: the table's bytes are in an object store, where a request costs a round
    trip: the engine then reads the raw chunks of many blocks in one ``fill_many`` call (one
    ``read_ranges``: merged and concurrent requests) before decoding them.
    """

    decodes = True
    releases_gil = True

    def __init__(
        self,
        geometry: Geometry,
        table: ChunkTable,
        pipeline: ChunkPipeline,
        read_with_h5py: ReadWithH5py,
    ) -> None:
        self.geometry, self.table, self.pipeline = geometry, table, pipeline
        self._h5py = H5pyBlocks(geometry, read_with_h5py)  # a filter variant we do not decode
        self.batches_reads = table.local is None
        # a local file: small chunks stored side by side read in spans (``fill_run``)
        self.reads_runs = not self.batches_reads

    def fill(self, block: int, dest: np.ndarray[Any, Any]) -> None:
        """See ``BlockFiller.fill``."""
        raw, mask = self.table.read(block)
        self._decode(block, raw, mask, dest)

    def advise(self, blocks: Sequence[int]) -> None:
        """See ``BlockFiller.advise``: the kernel reads each span of them in one request."""
        self.table.advise(blocks)

    def fill_many(
        self,
        tasks: Sequence[tuple[int, np.ndarray[Any, Any]]],
        *,
        parallel: bool = True,
    ) -> list[BaseException | None]:
        """Fill each ``(block, dest)`` task: every raw chunk read in one call, then decoded.

        ``parallel``: decode in the decode pool (not from inside a pool thread). Returns, per
        task, None or the error that block's decode raised (a failed read raises for all).
        """
        if not tasks:
            return []
        blocks = [block for block, _ in tasks]
        raws = [np.empty(int(self.table.sizes[b]), np.uint8) for b in blocks]
        masks = self.table.read_many(blocks, raws)

        def decode(k: int) -> BaseException | None:
            try:
                self._decode(blocks[k], raws[k], masks[k], tasks[k][1])
            except Exception as exc:  # reported per block: readahead settles each one
                return exc
            return None

        jobs = range(len(tasks))
        return run_parallel(decode, jobs) if parallel else [decode(k) for k in jobs]

    def fill_run(self, first: int, dest: np.ndarray[Any, Any]) -> None:
        """Fill blocks ``first, first + 1, ...`` into ``dest`` (whole blocks, in order).

        For reading many small chunks in order: chunks stored side by side are read in spans
        of the file (one read each, the few bytes between chunks included) and decoded many
        per task in the decode pool (``ChunkPipeline.decode_many``), so the cost per chunk is
        not a read, a task and a pipeline walk each.
        """
        rows, nbytes = self.geometry.block_rows, self.pipeline.chunk_nbytes
        blocks = dest.reshape(-1, rows, *self.geometry.row_shape)
        flat = dest.reshape(-1).view(np.uint8).reshape(len(blocks), nbytes)
        run = _Run(first, self.table, len(blocks))
        per_task = max(1, _TASK_BYTES // max(nbytes, 1))
        for span in _spans(run.offsets, run.sizes):
            lo = int(run.offsets[span[0]])
            hi = int((run.offsets[span] + run.sizes[span]).max())
            raw = self.table.read_span(lo, hi, (span[:8] + first).tolist())

            def decode(
                part: tuple[int, int], raw: np.ndarray[Any, Any] = raw, lo: int = lo
            ) -> None:
                a, b = part
                spans = list(
                    zip((run.offsets[a:b] - lo).tolist(), run.sizes[a:b].tolist(), strict=True)
                )
                try:
                    self.pipeline.decode_many(raw, spans, run.masks[a:b].tolist(), flat[a:b])
                except ChunkDecodeError:  # one at a time: names the chunk, or lets h5py read it
                    for k, (start, size) in enumerate(spans, a):
                        chunk = raw[start : start + size]
                        self._decode(first + k, chunk, int(run.masks[k]), blocks[k])

            run_parallel(decode, _parts(span, per_task))

    def _decode(
        self,
        block: int,
        raw: np.ndarray[Any, Any],
        mask: int,
        dest: np.ndarray[Any, Any],
    ) -> None:
        try:
            self.pipeline.decode_into(raw, mask, dest.reshape(-1).view(np.uint8))
        except UnsupportedChunkError:
            self._h5py.fill(block, dest)  # a filter variant we do not decode
        except ChunkDecodeError as exc:
            at = (self.geometry.bounds(block)[0], *(0 for _ in self.geometry.row_shape))
            raise self.geometry.corrupt(at, exc) from exc

    @property
    def decodes_heads(self) -> bool:
        """See ``BlockFiller.decodes_heads``."""
        return self.pipeline.decodes_head

    def head(self, block: int, rows: int) -> np.ndarray[Any, Any] | None:
        """See ``BlockFiller.head`` (plain deflate, or a shuffle over one compressor)."""
        if not self.pipeline.decodes_head:
            return None
        raw, mask = self.table.read(block)
        return _head(self.geometry, self.pipeline, raw, mask, rows)


class DirectChunks(_Blocks):
    """Raw chunks read by h5py's ``read_direct_chunk`` (tile by tile), decoded by the pipeline.

    ``written`` says which chunks hold bytes; the others are HDF5's fill value. ``dataset``
    reads the raw chunks, and the values h5py serves.
    """

    decodes = True
    releases_gil = False

    def __init__(
        self,
        geometry: Geometry,
        chunks: tuple[int, ...],
        pipeline: ChunkPipeline,
        written: WrittenChunks,
        dataset: H5pyDataset,
    ) -> None:
        self.geometry, self.chunks, self.pipeline = geometry, chunks, pipeline
        self.written, self._h5py = written, dataset
        self._tiles = _tiles(geometry.row_shape, chunks[1:])

    def fill(self, block: int, dest: np.ndarray[Any, Any]) -> None:
        """See ``BlockFiller.fill``."""
        lo, hi = self.geometry.bounds(block)
        for offset, region in self._tiles:
            self._fill_tile((lo, *offset), dest[(slice(0, hi - lo), *region)])

    @property
    def decodes_heads(self) -> bool:
        """See ``BlockFiller.decodes_heads``."""
        return len(self._tiles) == 1 and self.pipeline.decodes_head

    def head(self, block: int, rows: int) -> np.ndarray[Any, Any] | None:
        """See ``BlockFiller.head`` (``ChunkPipeline.decode_head``'s, chunks of whole rows)."""
        if not self.decodes_heads:
            return None
        offset = (self.geometry.bounds(block)[0], *(0 for _ in self.geometry.row_shape))
        try:
            found = self._h5py.raw_chunk(offset, self.written)
        except (RuntimeError, OSError):
            return None  # unreadable: the whole block says why
        if found is None:
            return None  # unwritten: the whole block serves the fill value
        mask, raw = found
        return _head(self.geometry, self.pipeline, np.frombuffer(raw, np.uint8), mask, rows)

    def _fill_tile(self, offset: tuple[int, ...], dest: np.ndarray[Any, Any]) -> None:
        try:
            found = self._h5py.raw_chunk(offset, self.written)
        except (RuntimeError, OSError) as exc:  # a chunk the index lists, unreadable
            raise self.geometry.corrupt(offset, exc) from exc
        if found is None:
            self._h5py(_selection(offset, dest.shape), dest)  # HDF5 serves the fill value
            return
        mask, raw = found
        whole = dest.flags.c_contiguous and dest.nbytes == self.pipeline.chunk_nbytes
        chunk = dest if whole else np.empty(self.chunks, self.geometry.dtype)
        try:
            self.pipeline.decode_into(
                np.frombuffer(raw, np.uint8), mask, chunk.reshape(-1).view(np.uint8)
            )
        except UnsupportedChunkError:  # a filter variant we do not decode
            self._h5py(_selection(offset, dest.shape), dest)
            return
        except ChunkDecodeError as exc:
            raise self.geometry.corrupt(offset, exc) from exc
        if not whole:
            dest[...] = chunk[tuple(slice(0, n) for n in dest.shape)]


class _Run:
    """The chunk table's entries of blocks ``[first, first + count)``."""

    def __init__(self, first: int, table: ChunkTable, count: int) -> None:
        part = slice(first, first + count)
        self.offsets, self.sizes = table.offsets[part], table.sizes[part]
        self.masks = table.masks[part]


def _spans(
    offsets: np.ndarray[Any, Any], sizes: np.ndarray[Any, Any]
) -> list[np.ndarray[Any, Any]]:
    """Chunks in file order, cut into spans read at once.

    A span ends where the next chunk starts more than ``_GAP_BYTES`` after the bytes read so
    far, and spans are about ``_SPAN_BYTES`` long. Returns each span's chunk positions.
    """
    order = np.argsort(offsets, kind="stable")
    starts, ends = offsets[order], np.maximum.accumulate(offsets[order] + sizes[order])
    gap = np.concatenate([[0], starts[1:] - ends[:-1]])
    segment = np.cumsum(gap > _GAP_BYTES)
    first = starts[np.concatenate([[0], np.flatnonzero(np.diff(segment)) + 1])][segment]
    key = segment * (1 << 40) + (starts - first) // _SPAN_BYTES
    return np.split(order, np.flatnonzero(np.diff(key)) + 1)


def _parts(span: np.ndarray[Any, Any], per_task: int) -> list[tuple[int, int]]:
    """Runs ``[a, b)`` of consecutive blocks of ``span`` (in its order), ``per_task`` at most."""
    cuts = np.flatnonzero(np.diff(span) != 1) + 1
    parts = []
    for piece in np.split(span, cuts):
        lo = int(piece[0])
        parts += [
            (a, min(a + per_task, lo + len(piece))) for a in range(lo, lo + len(piece), per_task)
        ]
    return parts


def _head(
    geometry: Geometry, pipeline: ChunkPipeline, raw: np.ndarray[Any, Any], mask: int, rows: int
) -> np.ndarray[Any, Any] | None:
    """The first ``rows`` rows of a chunk, decoded no further than ``decode_head`` must.

    None when the pipeline has no cheaper head (see ``ChunkPipeline.decode_head``; or HDF5
    skipped a filter for this chunk), or the stream is corrupt (the whole chunk is then
    decoded, and the error names it).
    """
    try:
        head = pipeline.decode_head(raw, rows * geometry.row_nbytes, mask)
    except ChunkDecodeError:
        return None
    if head is None:
        return None
    return head.view(geometry.dtype).reshape(rows, *geometry.row_shape)


def _selection(offset: tuple[int, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))


def _tiles(
    row_shape: tuple[int, ...], chunk_rest: tuple[int, ...]
) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Chunk offsets along the non-row axes, each with the slice of a row it fills."""
    axes = [
        [(o, slice(o, min(o + c, d))) for o in range(0, d, c)]
        for d, c in zip(row_shape, chunk_rest, strict=True)
    ]
    return [
        (tuple(o for o, _ in combo), tuple(s for _, s in combo))
        for combo in itertools.product(*axes)
    ]
