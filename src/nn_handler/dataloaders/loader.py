"""batched_loader: a DataLoader that hands whole batches of indices to the dataset.

``DataLoader(dataset, batch_size=256)`` calls ``dataset.__getitems__`` and then collates the
returned list of samples with ``torch.stack``: splitting a batch into samples and stacking it
again caps throughput near 200k samples/s even for data already in RAM (see the benchmarks).
``batched_loader`` instead samples *lists* of indices and lets the dataset return the stacked
batch itself (``DataLoader(batch_size=None, sampler=BatchSampler(...))``), so the only copy is
the read.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sized
from typing import Any, Literal

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from .._validate import check_choice, check_non_negative_int, check_positive_int
from ._loader.thread_loader import ThreadedDataLoader
from ._protocols import (
    STATE_CONSUMED,
    ChunkAware,
    ChunkWindowed,
    ReadsAhead,
    Resumable,
    indexes_batches,
    set_epoch_once,
)

__all__ = ["EpochBatchSampler", "batched_loader", "fit_chunk_cache"]

_LOG = logging.getLogger(__name__)
_BIG_CACHE = 1024**3  # above this per key and worker, growing the cache deserves a warning

WorkerMode = Literal["process", "thread", "auto"]
_WORKER_MODES: tuple[WorkerMode, ...] = ("process", "thread", "auto")
# DataLoader keywords that only mean something for worker processes
_PROCESS_ONLY = ("worker_init_fn", "multiprocessing_context", "persistent_workers", "timeout")


class EpochBatchSampler(BatchSampler):
    """A ``BatchSampler`` that forwards ``set_epoch`` and sampler state to the wrapped sampler.

    Training loops that call ``loader.sampler.set_epoch(epoch)`` keep working when the loader's
    sampler yields batches.

    Readahead (set by ``batched_loader`` when batches are read in this process): each batch is
    announced to the dataset's ``prefetch`` a few batches before it is yielded, so chunks are
    decoded in the background while earlier batches are served. ``state_dict`` still counts
    only the batches yielded.
    """

    _prefetch: Callable[[Any], None] | None = None
    _ahead = 0
    _held = 0

    def set_readahead(self, prefetch: Callable[[Any], None] | None, batches: int) -> None:
        """Call ``prefetch(indices)`` ``batches`` batches before each batch is yielded."""
        self._prefetch, self._ahead = prefetch, max(0, int(batches))

    def __iter__(self) -> Iterator[list[int]]:
        batches = super().__iter__()
        if self._prefetch is None or self._ahead == 0:
            yield from batches
            return
        ahead: deque[list[int]] = deque()
        self._held = 0
        try:
            for batch in batches:
                self._prefetch(batch)
                ahead.append(batch)
                self._held += len(batch)
                if len(ahead) > self._ahead:
                    self._held -= len(ahead[0])
                    yield ahead.popleft()
            while ahead:
                self._held -= len(ahead[0])
                yield ahead.popleft()
        finally:
            self._held = 0

    def set_epoch(self, epoch: int) -> None:
        """Call ``set_epoch(epoch)`` on the wrapped sampler when it has one."""
        set_epoch_once([self.sampler], epoch)

    def state_dict(self) -> dict[str, Any]:
        """Return the wrapped sampler's state (empty when it keeps none)."""
        state = dict(self.sampler.state_dict()) if isinstance(self.sampler, Resumable) else {}
        if self._held and isinstance(state.get(STATE_CONSUMED), int):
            state[STATE_CONSUMED] -= self._held  # drawn for readahead, not yet handed out
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the wrapped sampler's state."""
        if isinstance(self.sampler, Resumable):
            self.sampler.load_state_dict(state)
        elif state:
            raise ValueError(
                f"{type(self.sampler).__name__} keeps no state, but state {state!r} was given"
            )


def batched_loader(
    dataset: Dataset[Any],
    batch_size: int,
    *,
    shuffle: bool = False,
    sampler: Sampler[int] | None = None,
    drop_last: bool = False,
    generator: torch.Generator | None = None,
    worker_mode: WorkerMode = "process",
    **dataloader_kwargs: Any,
) -> DataLoader[Any]:
    """Return a DataLoader whose dataset reads and stacks each batch in one call.

    Args:
        dataset: A dataset whose ``__getitem__`` accepts a list of indices and returns the
            stacked batch (``supports_batch_indexing = True``, as every dataset here does).
        batch_size: Samples per batch.
        shuffle: Shuffle with a ``RandomSampler`` (ignored when ``sampler`` is given).
        sampler: Sampler of single indices (e.g. ``EpochShuffleSampler``); batches are cut
            from its order. A chunk-window sampler (``ChunkShuffleSampler``) gets the
            dataset's chunk cache grown to hold its window, unless it says ``size_cache=False``.
        drop_last: Drop the last incomplete batch.
        generator: Random generator for ``shuffle=True`` and for the workers' base seed (as
            ``DataLoader(generator=...)`` uses it).
        worker_mode: What ``num_workers > 0`` starts: ``"process"`` (DataLoader worker
            processes, the default), ``"thread"`` (that many threads of this process read
            batches; no pickling, no copy between processes: best when reads run outside the
            GIL, as memory-mapped gathers and our chunk decoding do), or ``"auto"`` (threads when
            the dataset says its batch reads release the GIL, ``reads_release_gil``, and no
            process-only keyword such as ``worker_init_fn`` is given; else processes).
        **dataloader_kwargs: Any other ``DataLoader`` keyword (``num_workers``,
            ``pin_memory``, ``persistent_workers``, ``worker_init_fn``, ...).

    Raises:
        TypeError: the dataset cannot index batches, or a keyword would conflict.
        ValueError: ``shuffle=True`` together with a ``sampler``, or an unknown
            ``worker_mode``.
    """
    check_positive_int("batch_size", batch_size)
    if not indexes_batches(dataset):
        raise TypeError(
            f"{type(dataset).__name__} does not index whole batches "
            "(no supports_batch_indexing = True); use DataLoader(dataset, batch_size=...) instead"
        )
    for key in ("batch_size", "batch_sampler", "collate_fn"):
        if key in dataloader_kwargs:
            raise TypeError(
                f"batched_loader() sets {key} itself; remove {key}={dataloader_kwargs[key]!r}"
            )
    if sampler is not None and shuffle:
        raise ValueError("shuffle=True and a sampler are exclusive; shuffle with the sampler")
    if sampler is None:
        sized: Sized = dataset  # type: ignore[assignment]
        sampler = RandomSampler(sized, generator=generator) if shuffle else SequentialSampler(sized)
    fit_chunk_cache(dataset, sampler)
    batches = EpochBatchSampler(sampler, batch_size, drop_last)
    threads = _use_threads(dataset, worker_mode, dataloader_kwargs)
    if threads or not dataloader_kwargs.get("num_workers"):
        _plan_readahead(dataset, batches, batch_size)
    if threads:
        return ThreadedDataLoader(
            dataset,
            batches,
            threads=dataloader_kwargs["num_workers"],
            prefetch_factor=dataloader_kwargs.get("prefetch_factor") or 2,
            pin_memory=bool(dataloader_kwargs.get("pin_memory", False)),
        )
    return DataLoader(
        dataset, batch_size=None, sampler=batches, generator=generator, **dataloader_kwargs
    )


def fit_chunk_cache(dataset: object, sampler: object) -> None:
    """Size ``dataset``'s chunk cache (and decoded window) for one window of ``sampler``.

    A window of ``window_chunks`` blocks, plus the blocks at its two borders, must fit: a
    smaller cache evicts chunks the window still needs, and they are decoded again. A dataset
    that decodes ahead is told the window, so it keeps about two windows decoded instead of its
    whole budget. Nothing happens unless the sampler walks chunk windows and the dataset has a
    chunk cache; growing the cache also needs the sampler's ``size_cache``.
    """
    if not isinstance(sampler, ChunkWindowed) or not isinstance(dataset, ChunkAware):
        return
    rows = sampler.cache_block_rows
    if isinstance(dataset, ReadsAhead):
        dataset.plan_window(rows, sampler.window_chunks)
    if not sampler.size_cache:
        return
    blocks, budget = sampler.window_chunks + 2, dataset.chunk_cache_nbytes
    need = int(dataset.window_cache_nbytes(rows, blocks))
    if need <= budget:
        return
    dataset.set_chunk_cache(need)
    big = need > _BIG_CACHE
    (_LOG.warning if big else _LOG.info)(
        "chunk cache of %r grown from %d to %d bytes per key so a window of %d blocks of %s "
        "rows stays decoded%s",
        dataset,
        budget,
        need,
        blocks,
        "its own" if rows is None else rows,
        " (per DataLoader worker: pass a smaller window_chunks to use less memory)" if big else "",
    )


def _plan_readahead(dataset: Any, batches: EpochBatchSampler, batch_size: int) -> None:
    """Announce batches early to a dataset that decodes ahead (``prefetch``, ``readahead_rows``)."""
    if isinstance(dataset, ReadsAhead) and dataset.readahead_rows > 0:
        batches.set_readahead(dataset.prefetch, -(-dataset.readahead_rows // batch_size))


def _use_threads(dataset: Any, mode: WorkerMode, kwargs: dict[str, Any]) -> bool:
    """Whether ``batched_loader`` serves batches from threads (see ``worker_mode``)."""
    check_choice("worker_mode", mode, _WORKER_MODES)
    workers = check_non_negative_int("num_workers", kwargs.get("num_workers", 0))
    if mode == "process" or workers == 0:
        return False
    given = [key for key in _PROCESS_ONLY if kwargs.get(key) not in (None, False, 0)]
    unknown = set(kwargs) - {"num_workers", "prefetch_factor", "pin_memory", *_PROCESS_ONLY}
    if mode == "thread":
        if given or unknown:
            raise TypeError(
                f"worker_mode='thread' reads batches in threads of this process; "
                f"{', '.join(sorted([*given, *unknown]))} only apply to worker processes: "
                "remove them or use worker_mode='process'"
            )
        return True
    releases = isinstance(dataset, ReadsAhead) and dataset.reads_release_gil
    return not given and not unknown and releases
