"""Filling blocks for the chunk engine: in the decode pool, in runs, or in one call to h5py.

Every way the engine serves rows (its window, its read-ahead, the decoded pass, sequential
reads) ends in blocks filled here from the dataset's ``BlockFiller``: in parallel in the decode
pool when we decode raw chunks, in one batch of requests from an object store, in spans of the
file for small neighbouring chunks (``fill_run``), or, when h5py decodes, one h5py call for a
whole run of rows (``read_with_h5py``, ``h5py_rows.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..indices import consecutive_runs
from .block_fillers import BlockFiller
from .h5py_rows import ReadWithH5py, row_span
from .pool import run_parallel

__all__ = ["BlockFills", "Task"]

_RUN_BLOCK_BYTES = 64 * 1024  # blocks this small are read in runs by sequential reads

Task = tuple[int, np.ndarray[Any, Any]]  # (block, destination of block_rows rows)


class BlockFills:
    """Fills blocks of one dataset from its source (see the module docstring).

    Args:
        source: Fills one block (and knows the blocks' geometry).
        read_with_h5py: Reads rows through h5py (made once, with the engine).
    """

    def __init__(self, source: BlockFiller, read_with_h5py: ReadWithH5py) -> None:
        self.source = source
        self.geometry = source.geometry
        self.read_with_h5py = read_with_h5py

    def fill(self, tasks: list[Task]) -> None:
        """Fill each task's block: in the decode pool when we decode, else in this thread."""
        source = self.source
        if not source.decodes:  # h5py decodes under its lock: threads would only queue
            for block, dest in tasks:
                source.fill(block, dest)
            return
        if source.batches_reads and len(tasks) > 1:
            errors = source.fill_many(tasks)  # one request batch, then decodes
            first = next((e for e in errors if e is not None), None)
            if first is not None:
                raise first
            return
        run_parallel(lambda task: source.fill(*task), tasks)

    def fill_ids(self, ids: np.ndarray[Any, Any], dest: np.ndarray[Any, Any]) -> None:
        """Fill blocks ``ids`` (sorted, unique) into ``dest[ids]``, runs of them at once.

        The kernel reads their raw bytes first (one request per span of neighbours) while the
        pool decodes what has arrived.
        """
        self.source.advise(ids.tolist())
        singles: list[Task] = []
        for first, count in consecutive_runs(ids):
            part = dest[first : first + count]
            if not self.source.decodes:  # h5py decodes: one call for all the rows of a run
                g = self.geometry
                lo, hi = first * g.block_rows, g.bounds(first + count - 1)[1]
                self.read_rows(lo, hi, part.reshape(-1, *g.row_shape)[: hi - lo])
            elif self.in_runs(count):
                self.source.fill_run(first, part)
            else:
                singles += zip(range(first, first + count), part, strict=True)
        if singles:
            self.fill(singles)

    def fill_whole(self, first: int, dest: np.ndarray[Any, Any]) -> None:
        """Fill blocks ``first, first + 1, ...`` into ``dest`` (whole blocks of rows, in order)."""
        rows = self.geometry.block_rows
        count = len(dest) // rows
        if self.in_runs(count):
            self.source.fill_run(first, dest)
        else:
            self.fill([(first + k, dest[k * rows : (k + 1) * rows]) for k in range(count)])

    def read_rows(self, lo: int, hi: int, out: np.ndarray[Any, Any]) -> None:
        """Rows ``[lo, hi)`` into ``out`` in one h5py call (where h5py decodes: its best read)."""
        self.read_with_h5py(row_span(lo, hi), out)

    def in_runs(self, blocks: int) -> bool:
        """True when a sequential read of ``blocks`` whole blocks goes through ``fill_run``.

        Small chunks of a local file: a task, a read and a pipeline walk per chunk would cost
        more than decoding one (large chunks read best one per task, reads in parallel).
        """
        small = self.geometry.block_nbytes <= _RUN_BLOCK_BYTES
        return blocks > 1 and small and self.source.reads_runs
