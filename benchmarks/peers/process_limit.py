"""The process limit (compressed data): whole-chunk sequential h5py reads, a process per core."""

from __future__ import annotations

import itertools
import time
from multiprocessing import get_context
from typing import TYPE_CHECKING

from nn_handler._validate import usable_cores
from nn_handler.bench.contenders import LIMIT, Case, read_slabs
from nn_handler.bench.timing import Result

from ..registry import Peer, register

if TYPE_CHECKING:
    from ..cases import WorkloadCase

NAME = "sequential chunks"


def process_limit(path: str, n: int, chunk_rows: int | None) -> tuple[int, float]:
    """(rows, seconds): rows ``[0, n)`` read in whole-chunk slabs, split over usable cores.

    Every part starts on a chunk boundary. A Pool starts every process up front; an untimed
    warm-up imports h5py & co. in each before the timed reads.
    """
    workers = usable_cores()
    rows = chunk_rows or 1
    bounds = [(n * i // workers) // rows * rows for i in range(workers)] + [n]
    parts = [(path, lo, hi) for lo, hi in itertools.pairwise(bounds)]
    with get_context("forkserver").Pool(workers) as pool:
        pool.starmap(read_slabs, [(path, 0, 0)] * workers)
        start = time.perf_counter()
        done = sum(pool.starmap(read_slabs, parts))
        return done, time.perf_counter() - start


def layouts(case: Case) -> list[Result]:
    """Compressed layouts: the process limit on the layout's file."""
    if not case.compressed:
        return []
    done, seconds = process_limit(case.path, len(case.images), case.chunk_rows)
    name = f"{LIMIT}: sequential chunks, {usable_cores()} processes"
    return [Result(name, done, seconds, case.sample_bytes)]


class _Processes:
    """``measure``: the process limit on the workload's file."""

    def __init__(self, case: WorkloadCase) -> None:
        self.name = f"sequential chunks, {usable_cores()} processes"
        self.case = case

    def measure(self) -> tuple[float, float]:
        """(samples/s, NaN: the CPU of the pool's processes is not counted)."""
        done, seconds = process_limit(self.case.path, self.case.n, self.case.workload.chunk_rows)
        return done / seconds, float("nan")


def workloads(case: WorkloadCase) -> _Processes | None:
    """The limit of a workload compressed by a plugin filter (None: any other)."""
    return _Processes(case) if case.workload.plugin is not None else None


register(Peer(NAME, "limit", {"layouts": layouts, "workloads": workloads}))
