"""Our loaders' worker-process iterator: torch's, with less to do per batch in the main process.

With worker processes, everything the main process does per batch is time a training loop
waits. Two things torch's ``_MultiProcessingDataLoaderIter`` does per batch are
not needed:

* a ``record_function`` profiler range around every ``__next__``, opened and closed through
  the dispatcher even when no profiler runs: skipped unless one does;
* a team of intra-op threads woken for the first index order of each epoch: torch's
  ``RandomSampler`` draws its permutation with ``torch.randperm``, which fills ``0..n-1`` in
  parallel above 32,768 rows, and OpenMP's threads then spin for milliseconds waiting for more
  work, a core taken from the workers (0.15 ms a batch on a 50,000-row epoch of 2 cores; it
  draws a second, unused permutation as each epoch ends). The index order is drawn on this
  thread alone; it is the same order;
* a feeder thread per queue, woken for every index list the main process sends and every batch
  a worker returns: the queues are ``DirectQueue``s, which write in the calling thread when
  the pipe has room.

Everything else (order, prefetch, worker start and shutdown, persistent workers, errors,
timeouts, a worker's death) is torch's own code.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _DatasetKind, _MultiProcessingDataLoaderIter

from .worker_queues import direct_context

__all__ = ["worker_iterator"]


def _profiling() -> bool:
    return bool(torch.autograd._profiler_enabled())  # type: ignore[attr-defined]


@functools.cache
def _openmp() -> bool:
    """Whether torch's intra-op threads are OpenMP's (set per thread, safe to lower briefly)."""
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


@contextlib.contextmanager
def _one_intraop_thread() -> Iterator[None]:
    """Run torch ops of this thread on this thread alone for a moment (OpenMP only)."""
    threads = torch.get_num_threads()
    if threads == 1 or not _openmp():
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _WorkerIter(_MultiProcessingDataLoaderIter):
    """``_MultiProcessingDataLoaderIter`` with less to do per batch in the main process."""

    def _next_index(self) -> Any:
        with _one_intraop_thread():  # where the sampler draws an epoch's order
            return super()._next_index()  # type: ignore[no-untyped-call]

    def __next__(self) -> Any:
        # an iterable dataset's length check, a reset, a profiler: torch's own __next__
        if self._dataset_kind != _DatasetKind.Map or self._sampler_iter is None or _profiling():
            return super().__next__()
        data = self._next_data()  # type: ignore[no-untyped-call]
        self._num_yielded += 1
        return data


def worker_iterator(loader: DataLoader[Any]) -> Any:
    """The worker-process iterator of ``loader`` (``num_workers > 0``), its queues direct.

    ``loader.multiprocessing_context`` (None: the default start method) is the start method;
    the attribute is left as it was.
    """
    chosen = loader.multiprocessing_context
    context = chosen if chosen is not None else multiprocessing.get_context()
    loader.multiprocessing_context = direct_context(context)
    try:
        return _WorkerIter(loader)
    finally:
        loader.multiprocessing_context = chosen
