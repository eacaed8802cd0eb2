"""Who computes which rows: contiguous, chunk-aligned spans per rank, and the batches in them.

The rows are cut into *blocks* of whole chunks (as many chunks as fit in a batch, at least one);
each rank takes a contiguous run of blocks (the first ``blocks % world_size`` ranks one more),
and each block is cut into batches from its own start. So a batch never straddles two ranks and
a chunk is always written whole by one process (which compresses it itself), and the batches
are the same on any number of ranks: the same rows meet in the same batch whatever the world,
so even a model whose arithmetic depends on its batch (GEMM blocking) gives the same values.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .._validate import check_count, check_positive_int

__all__ = ["block_rows", "rank_batches", "rank_span"]


def block_rows(chunk_rows: int, batch_size: int) -> int:
    """Rows of a block: the most whole chunks that fit in a batch (at least one chunk)."""
    chunk_rows = check_positive_int("chunk_rows", chunk_rows)
    batch_size = check_positive_int("batch_size", batch_size)
    return max(1, batch_size // chunk_rows) * chunk_rows


def rank_span(n_rows: int, block: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(start, stop)``: the rows rank ``rank`` of ``world_size`` computes.

    Spans are contiguous, cover ``range(n_rows)`` once in rank order, start on a block boundary,
    and differ by at most one block in length (a rank may get none when blocks are few).
    """
    n_rows = check_count("n_rows", n_rows)
    block = check_positive_int("block", block)
    world_size = check_positive_int("world_size", world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank!r}")
    blocks = -(-n_rows // block)
    per, extra = divmod(blocks, world_size)
    first = rank * per + min(rank, extra)
    last = first + per + (1 if rank < extra else 0)
    return min(first * block, n_rows), min(last * block, n_rows)


def rank_batches(
    span: tuple[int, int], block: int, batch_size: int, stored: np.ndarray | None = None
) -> Iterator[range]:
    """The batches of ``span``: each block cut into ``batch_size`` rows from its own start.

    Args:
        span: ``(start, stop)`` from ``rank_span`` (``start`` on a block boundary).
        block: Rows of a block (``block_rows``).
        batch_size: Rows per batch (the last batch of a block may be shorter).
        stored: Per row of the whole file, True where an earlier run already stored it: a
            batch whose rows are all stored is skipped (one with any row missing runs whole,
            so its rows meet the same neighbours as in an uninterrupted run).
    """
    start, stop = span
    for first in range(start, stop, block):
        end = min(first + block, stop)
        for lo in range(first, end, batch_size):
            batch = range(lo, min(lo + batch_size, end))
            if stored is None or not bool(stored[batch.start : batch.stop].all()):
                yield batch
