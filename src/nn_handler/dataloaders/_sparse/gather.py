"""Gather ranges of a 1-d dataset (sparse ``data`` / ``indices``) through one ``RowReader``.

A batch of sparse rows needs the entries ``[indptr[r], indptr[r + 1])`` of every row ``r``: sorted,
disjoint ranges of the 1-d ``data`` and ``indices`` datasets. On compressed chunked data each
needed chunk is fetched once (``RowReader.read_chunks``: decoded in parallel outside the HDF5
lock, kept in the decoded-chunk cache so the next batch of the same shuffle window reuses it) and
the ranges are copied out of it piece by piece. Otherwise (memory-mapped or h5py reads) the
ranges are read directly, touching ones merged.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..._io.indices import IndexArray
from ..._io.rows.reader import RowReader

__all__ = ["gather_ranges", "plan_pieces"]

_GROUP_BYTES = 64 * 1024**2  # decoded chunks held at once by one gather, cache aside
_GAP_BYTES = 64 * 1024  # h5py reads: read the unneeded entries between two ranges below this


def gather_ranges(reader: RowReader, starts: IndexArray, stops: IndexArray) -> np.ndarray[Any, Any]:
    """Return entries ``[starts[i], stops[i])`` of ``reader``, concatenated in order.

    Args:
        reader: A reader over a 1-d dataset.
        starts: Sorted first entries of the ranges (any order, repeats too, for a
            memory-mapped reader).
        stops: Their ends; ranges must be disjoint (``stops[i] <= starts[i + 1]``) unless the
            reader is memory-mapped.
    """
    lengths = stops - starts
    out = np.empty(int(lengths.sum()), dtype=reader.dtype)
    if out.size == 0:
        return out
    keep = lengths > 0
    starts, stops, dst = starts[keep], stops[keep], (np.cumsum(lengths) - lengths)[keep]
    if reader.strategy in ("decode", "chunks"):
        _from_chunks(reader, starts, stops, dst, out)
    else:
        _from_runs(reader, starts, stops, dst, out)
    return out


def plan_pieces(
    starts: IndexArray, stops: IndexArray, dst: IndexArray, chunk: int
) -> tuple[IndexArray, IndexArray, IndexArray, IndexArray, np.ndarray[Any, Any]]:
    """Split non-empty sorted ranges at chunk borders.

    Returns:
        ``(chunk_id, lo, hi, to, spill)`` per piece: entries ``[lo, hi)`` lie in chunk
        ``chunk_id`` and go to ``out[to : to + hi - lo]``; ``spill`` is True when the piece
        continues a range that began in an earlier chunk. Pieces come in range order, so chunk
        ids never drop.
    """
    first, last = starts // chunk, (stops - 1) // chunk
    count = last - first + 1
    owner = np.repeat(np.arange(starts.size), count)
    step = np.arange(owner.size) - np.repeat(np.cumsum(count) - count, count)
    chunk_id = first[owner] + step
    lo = np.maximum(starts[owner], chunk_id * chunk)
    hi = np.minimum(stops[owner], (chunk_id + 1) * chunk)
    return chunk_id, lo, hi, dst[owner] + lo - starts[owner], step > 0


def _from_chunks(
    reader: RowReader, starts: IndexArray, stops: IndexArray, dst: IndexArray, out: Any
) -> None:
    chunk = reader.chunk_rows
    assert chunk is not None
    chunk_id, lo, hi, to, spill = plan_pieces(starts, stops, dst, chunk)
    needed, first, count = np.unique(chunk_id, return_index=True, return_counts=True)
    # a chunk only reached by the tail of a row that began before it: its own rows belong to
    # another block (read at another time), so inflate just the head this row needs
    heads = (count == 1) & spill[first] & (hi[first] < (needed + 1) * chunk)
    # a codec that cannot stop early (lz4, zstd, blosc) reads a head as its whole chunk, one
    # window claim per chunk: read them with the others, in one call (16 KiB lz4 chunks: 7x)
    heads &= reader.decodes_heads
    for k in np.flatnonzero(heads).tolist():
        p = int(first[k])
        c, q, t = int(needed[k]), int(hi[p]), int(to[p])
        out[t : t + q - c * chunk] = reader.read_chunk_head(c, q - c * chunk)
    whole = needed[~heads]
    per_group = max(1, _GROUP_BYTES // max(1, chunk * reader.dtype.itemsize))
    for g in range(0, whole.size, per_group):
        ids = whole[g : g + per_group].tolist()
        blocks = dict(zip(ids, reader.read_chunks(ids), strict=True))
        a, b = np.searchsorted(chunk_id, [ids[0], ids[-1] + 1])
        for c, p, q, t in zip(
            chunk_id[a:b].tolist(),
            lo[a:b].tolist(),
            hi[a:b].tolist(),
            to[a:b].tolist(),
            strict=True,
        ):
            if c in blocks:
                base = c * chunk
                out[t : t + q - p] = blocks[c][p - base : q - base]


def _from_runs(
    reader: RowReader, starts: IndexArray, stops: IndexArray, dst: IndexArray, out: Any
) -> None:
    if reader.strategy == "memmap":  # runs of touching ranges straight into place, any order
        breaks = np.flatnonzero(starts[1:] != stops[:-1]) + 1
        firsts = np.concatenate(([0], breaks))
        lasts = np.concatenate((breaks, [starts.size])) - 1
        reader.read_runs(starts[firsts], stops[lasts], dst[firsts], out)
        return
    gap = _GAP_BYTES // max(1, reader.dtype.itemsize)
    breaks = np.flatnonzero(starts[1:] - stops[:-1] > gap) + 1
    bounds = np.concatenate(([0], breaks, [starts.size])).tolist()
    for a, b in itertools.pairwise(bounds):
        first, end = int(starts[a]), int(stops[b - 1])
        if int(stops[b - 1] - starts[a]) == int(dst[b - 1] + stops[b - 1] - starts[b - 1] - dst[a]):
            reader.read_range(first, end, out[int(dst[a]) : int(dst[a]) + end - first])
            continue  # the ranges touch: one read straight into place
        run = reader.read_range(first, end)
        for s, e, t in zip(
            starts[a:b].tolist(), stops[a:b].tolist(), dst[a:b].tolist(), strict=True
        ):
            out[t : t + e - s] = run[s - first : e - first]
