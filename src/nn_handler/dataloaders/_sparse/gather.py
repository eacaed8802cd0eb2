"""Gather ranges of a 1-d dataset (sparse ``data`` / ``indices``) through one ``RowReader``.

A batch of sparse rows needs the entries ``[indptr[r], indptr[r + 1])`` of every row ``r``: sorted,
disjoint ranges of the 1-d ``data`` and ``indices`` datasets, each bound for its place in the
batch (its rows' request order). On compressed chunked data each needed chunk is decoded once
(``RowReader.read_runs``: in parallel outside the HDF5 lock, kept in the decoded-chunk window so
the next batch of the same shuffle window reuses it) and the ranges are copied out of it piece by
piece, straight to their places. Otherwise (memory-mapped or h5py reads) the ranges are read
directly, touching ones merged.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..._io import IndexArray, RowReader, plan_pieces

__all__ = ["gather_ranges"]

_GAP_BYTES = 64 * 1024  # h5py reads: read the unneeded entries between two ranges below this


def gather_ranges(
    reader: RowReader,
    starts: IndexArray,
    stops: IndexArray,
    dst: IndexArray | None = None,
    out: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """Copy entries ``[starts[i], stops[i])`` of ``reader`` to ``out[dst[i]:]``; return ``out``.

    Args:
        reader: A reader over a 1-d dataset.
        starts: Sorted first entries of the ranges (any order, repeats too, for a
            memory-mapped reader).
        stops: Their ends; ranges must be disjoint (``stops[i] <= starts[i + 1]``) unless the
            reader is memory-mapped.
        dst: Where each range goes in ``out`` (default: one after the other, in order); a
            batch's rows read in file order land in their request order.
        out: The output, of any dtype the entries cast to (default: a new array of the
            reader's dtype, as long as the ranges).
    """
    lengths = stops - starts
    if dst is None:
        dst = np.cumsum(lengths) - lengths
    if out is None:
        out = np.empty(int(lengths.sum()), dtype=reader.dtype)
    keep = lengths > 0
    if not keep.any():
        return out
    starts, stops, dst = starts[keep], stops[keep], dst[keep]
    if reader.strategy in ("decode", "chunks"):
        _from_chunks(reader, starts, stops, dst, out)
    else:
        _from_runs(reader, starts, stops, dst, out)
    return out


def _from_chunks(
    reader: RowReader, starts: IndexArray, stops: IndexArray, dst: IndexArray, out: Any
) -> None:
    chunk = reader.chunk_rows
    assert chunk is not None
    chunk_id, lo, hi, to, spill = plan_pieces(starts, stops, dst, chunk)
    needed, first, count = np.unique(chunk_id, return_index=True, return_counts=True)
    # a chunk only reached by the tail of a row that began before it: its own rows belong to
    # another block (read at another time), so decode just the head this row needs
    heads = (count == 1) & spill[first] & (hi[first] < (needed + 1) * chunk)
    # a pipeline with no cheaper head (lz4 alone, say) reads a head as its whole chunk, one
    # window claim per chunk: read them with the others, in one call (16 KiB lz4 chunks: 7x)
    heads &= reader.decodes_heads
    if heads.any():
        at = first[heads]
        sizes = (hi[at] - needed[heads] * chunk).tolist()
        got = reader.read_chunk_heads(list(zip(needed[heads].tolist(), sizes, strict=True)))
        for part, n, t in zip(got, sizes, to[at].tolist(), strict=True):
            out[t : t + n] = part
        rest = ~np.isin(chunk_id, needed[heads])
        lo, hi, to = lo[rest], hi[rest], to[rest]
    # the other pieces straight out of the decoded chunks (each decoded once, in parallel)
    reader.read_runs(lo, hi, to, out)


def _from_runs(
    reader: RowReader, starts: IndexArray, stops: IndexArray, dst: IndexArray, out: Any
) -> None:
    if reader.strategy == "memmap":  # runs that touch in the file and in ``out``: one copy
        breaks = (
            np.flatnonzero(
                (starts[1:] != stops[:-1]) | (dst[1:] != dst[:-1] + (stops[:-1] - starts[:-1]))
            )
            + 1
        )
        firsts = np.concatenate(([0], breaks))
        lasts = np.concatenate((breaks, [starts.size])) - 1
        reader.read_runs(starts[firsts], stops[lasts], dst[firsts], out)
        return
    gap = _GAP_BYTES // max(1, reader.dtype.itemsize)
    breaks = np.flatnonzero(starts[1:] - stops[:-1] > gap) + 1
    bounds = np.concatenate(([0], breaks, [starts.size])).tolist()
    for a, b in itertools.pairwise(bounds):
        first, end = int(starts[a]), int(stops[b - 1])
        touching = bool(np.all(starts[a + 1 : b] == stops[a : b - 1]))
        if touching and bool(np.all(np.diff(dst[a:b]) == (stops - starts)[a : b - 1])):
            reader.read_range(first, end, out[int(dst[a]) : int(dst[a]) + end - first])
            continue  # the ranges touch, in the file and in ``out``: one read straight into place
        run = reader.read_range(first, end)
        for s, e, t in zip(
            starts[a:b].tolist(), stops[a:b].tolist(), dst[a:b].tolist(), strict=True
        ):
            out[t : t + e - s] = run[s - first : e - first]
