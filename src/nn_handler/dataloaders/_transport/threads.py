"""A DataLoader whose workers are threads of this process: no pickling, no copy between processes.

DataLoader worker processes cost a new shared-memory segment and two page-faulting copies per
batch, and each process decodes with its own share of the cores. When a dataset's reads run
outside the GIL (a NumPy gather from a memory map, or chunks read by ``pread`` and decoded by
the chunk engine in the decode pool), threads in the main process serve batches just as well,
share one window of decoded chunks, and hand each batch over by reference.

``ThreadedDataLoader`` is a ``DataLoader`` (``isinstance`` checks, ``len``, ``.sampler``,
``.dataset`` and ``set_epoch`` through the batch sampler all work as before) whose iterator
submits ``dataset[batch]`` for the next few batches of the sampler to a thread pool and yields
the results in the sampler's order: every batch exactly once, in order, and a reader's error is
raised at that batch. Breaking out of the loop waits for the reads already running and drops
the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data._utils.pin_memory import pin_memory as pin_batch

from ..._validate import check_parallel, check_prefetch

__all__ = ["ThreadedDataLoader"]


class ThreadedDataLoader(DataLoader[Any]):
    """Serve ``dataset[indices]`` for each batch of ``batch_sampler`` from ``threads`` threads.

    Args:
        dataset: A dataset whose ``__getitem__`` takes a list of indices and returns the batch.
        batch_sampler: Yields lists of indices (e.g. ``EpochBatchSampler``); exposed as
            ``.sampler`` like ``batched_loader``'s DataLoader does.
        threads: Threads reading batches (``num_workers`` of a process-based loader).
        prefetch_factor: Batches in flight per thread.
        pin_memory: Pin each batch in its thread (when CUDA is available).

    Raises:
        TypeError / ValueError: ``threads`` or ``prefetch_factor`` is not a positive integer.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_sampler: Sampler[Any],
        *,
        threads: int,
        prefetch_factor: int = 2,
        pin_memory: bool = False,
    ) -> None:
        super().__init__(dataset, batch_size=None, sampler=batch_sampler, num_workers=0)
        self.threads = check_parallel("threads", threads, minimum=1)
        self.prefetch = check_prefetch("prefetch_factor", prefetch_factor)
        self.pin_batches = bool(pin_memory) and torch.cuda.is_available()

    @property
    def worker_mode(self) -> str:
        """``"thread"``: batches are read by threads of this process."""
        return "thread"

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return _serve(
            self.dataset, iter(self.sampler), self.threads, self.prefetch, self.pin_batches
        )

    def __repr__(self) -> str:
        return (
            f"ThreadedDataLoader(dataset={type(self.dataset).__name__}, threads={self.threads}, "
            f"prefetch_factor={self.prefetch}, pin_memory={self.pin_batches})"
        )


def _read(dataset: Any, indices: Any, pin: bool) -> Any:
    batch = dataset[indices]
    return pin_batch(batch) if pin else batch  # type: ignore[no-untyped-call]


def _serve(
    dataset: Any, batches: Iterator[Any], threads: int, prefetch: int, pin: bool
) -> Iterator[Any]:
    pool = ThreadPoolExecutor(threads, thread_name_prefix="nn_handler-loader")
    pending: deque[Future[Any]] = deque()
    try:
        for indices in batches:
            pending.append(pool.submit(_read, dataset, indices, pin))
            if len(pending) >= threads * prefetch:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)
