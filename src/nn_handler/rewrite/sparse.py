"""Write one row-compressed sparse matrix (AnnData ``csr_matrix``, 10x): data, indices, indptr.

Rows are written in blocks of whole rows, at most a quarter of ``memory`` of entries (and their
gather indices) each, ``SEQUENTIAL_BYTES`` when read in order (compressing one block while the
next is read); ``data`` and ``indices`` get the same number of entries per chunk, so chunk
``k`` of both covers the same entries, and ``indptr`` is recomputed from the row lengths in the
order written. Under ``shuffle_rows`` output row ``i`` is input row ``order[i]``: its run of
entries is gathered from the input (each needed input chunk decoded once per block). ``indptr``
(8 bytes per row) is held whole, for the input and for the output.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import h5py
import numpy as np

from nn_handler._io import H5Source, RowReader, SparseLayout

from .chunking import SEQUENTIAL_BYTES, chunk_rows
from .codecs import Codec, have_imagecodecs
from .plan import DatasetPlan
from .stream import ChunkStream, H5pyRows, RowSink, create_dataset

__all__ = ["block_ends", "entry_index", "write_csr"]

Index = np.ndarray[Any, np.dtype[np.int64]]


def block_ends(lengths: Index, max_entries: int) -> list[int]:
    """Row ends of blocks of whole rows holding at most ``max_entries`` entries each.

    A row longer than ``max_entries`` is a block alone. Returns the exclusive end of each block.
    """
    total = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    ends, start, n = [], 0, len(lengths)
    while start < n:
        end = int(np.searchsorted(total, total[start] + max_entries, side="right")) - 1
        end = max(end, start + 1)
        ends.append(min(end, n))
        start = ends[-1]
    return ends


def entry_index(starts: Index, lengths: Index) -> Index:
    """The entries of rows that start at ``starts`` with ``lengths``, row after row."""
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    index: Index = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lengths)
    return index


def write_csr(
    source: H5Source,
    dst: h5py.File,
    plan: DatasetPlan,
    layout: SparseLayout,
    order: Index | None,
    pool: Executor,
    budget: int,
    progress: Callable[[int], None],
) -> None:
    """Write the sparse matrix ``plan`` describes into ``dst`` (rows in ``order`` if given)."""
    assert plan.chunks is not None
    assert plan.pipeline is not None
    indptr = source.dataset(layout.indptr_key)[...].astype(np.int64)
    lengths = np.diff(indptr)
    if order is not None:
        lengths = lengths[order]
    out_ptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    sinks = _create(source, dst, layout, plan, int(out_ptr[-1]), pool, budget)
    readers = [RowReader(source, layout.data_key), RowReader(source, layout.indices_key)]
    try:
        block = budget if order is not None else min(budget, SEQUENTIAL_BYTES)
        _write_rows(readers, sinks, indptr, lengths, order, block // (8 + plan.row_bytes),
                    progress)  # fmt: skip
        ptr_dtype = source.dataset(layout.indptr_key).dtype
        sinks[2].append(out_ptr.astype(ptr_dtype))
        for sink in sinks:
            sink.close()
    except BaseException:
        for sink in sinks:
            if isinstance(sink, ChunkStream):
                sink.abandon()
        raise
    finally:
        for reader in readers:
            reader.clear_cache()


def _write_rows(
    readers: list[RowReader],
    sinks: list[RowSink],
    indptr: Index,
    lengths: Index,
    order: Index | None,
    max_entries: int,
    progress: Callable[[int], None],
) -> None:
    start = 0
    for end in block_ends(lengths, max(1, max_entries)):
        if order is None:
            lo, hi = int(indptr[start]), int(indptr[end])
            parts = [r.read_range(lo, hi) for r in readers]
        else:
            rows = order[start:end]
            index = entry_index(indptr[rows], lengths[start:end])
            parts = [r.read(index) for r in readers]
        for sink, part in zip(sinks, parts, strict=False):
            sink.append(part)
        progress(end - start)
        start = end


def _create(
    source: H5Source,
    dst: h5py.File,
    layout: SparseLayout,
    plan: DatasetPlan,
    entries: int,
    pool: Executor,
    budget: int,
) -> list[RowSink]:
    assert plan.chunks is not None
    assert plan.pipeline is not None
    group = dst[layout.group]
    sinks: list[RowSink] = []
    for name in ("data", "indices", "indptr"):
        src = source.dataset(f"{layout.group}/{name}")
        n = entries if name != "indptr" else layout.compressed_len + 1
        rows = plan.chunks[0] if name != "indptr" else chunk_rows(n, 8, plan.chunks[0] * 8)
        codec = Codec.for_dtype(plan.pipeline.name, plan.pipeline.level, src.dtype)
        dset = create_dataset(group, name, (n,), src.id.get_type(), (rows,), codec)
        fast = have_imagecodecs()
        sinks.append(ChunkStream(dset, codec, pool, budget // 3) if fast else H5pyRows(dset))
    return sinks
