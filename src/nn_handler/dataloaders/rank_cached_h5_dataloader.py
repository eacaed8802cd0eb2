"""RankMemCachedH5Dataset: each DDP rank reads its shard of an HDF5 file into RAM once.

The shard is read at construction, straight into its final buffer (``contiguous``: one slice of
rows; ``interleave``: rows ``rank, rank + world_size, …``), after checking that it fits in
available RAM (and in ``/dev/shm`` with ``share_memory=True``). From then on every sample and
batch is served from memory: a batch is one gather (NumPy ``take`` on the CPU), and nothing
keeps the file open.

Ranks whose shards differ by one sample would run a different number of steps and hang DDP;
``equal_steps`` (default ``"pad"``) fixes the samples every rank iterates per epoch, and
``len(dataset)`` is that number on every rank, so any sampler over ``range(len(dataset))``
(``EpochShuffleSampler(len(dataset))``, ``RandomSampler``, ``make_sampler()``) runs the same
number of steps everywhere.

``EpochShuffleSampler``, ``_balanced_contiguous_shard`` and ``_interleaved_indices`` are
re-exported here from ``samplers`` (users import them from this module).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .._devices import check_device
from .._io import (
    FileOptions,
    H5Source,
    LockingMode,
    as_index_array,
    is_scalar_index,
    normalize_index,
)
from .._validate import (
    check_callable,
    check_choice,
    check_key,
    format_bytes,
    numpy_dtype,
)
from ..distributed import World
from ._contracts import sharding
from ._core import FileDataset
from ._rank_cache import memory as _memory
from ._rank_cache.shard_cache import CachePlan, fill_caches, open_readers, plan_cache, progress_bar
from ._tensors.split import restack, split_samples
from ._transport import in_worker_process
from .samplers import EpochShuffleSampler, ShardEpochSampler
from .samplers.shards import (
    EQUAL_STEPS,
    SHARD_MODES,
    EqualSteps,
    ShardMode,
    _balanced_contiguous_shard,
    _interleaved_indices,
    steps_per_rank,
)

__all__ = [
    "EpochShuffleSampler",
    "RankMemCachedH5Dataset",
    "_balanced_contiguous_shard",
    "_interleaved_indices",
]

Sample = torch.Tensor | tuple[Any, Any]


class RankMemCachedH5Dataset(FileDataset[Sample]):
    """This rank's shard of an HDF5 file, read into (optionally shared, pinned) RAM once.

    ``dataset[i]`` returns ``x`` or ``(x, y)`` from the cache (``0 <= i < len(dataset)``, this
    rank's shard); ``dataset[list / array / tensor / slice]`` returns the stacked batch and
    ``__getitems__`` the list of samples, each gathered with one ``index_select``. Transforms,
    when given, run per sample on a copy (the cache is never modified).

    Every rank iterates ``samples_per_rank`` samples per epoch, and ``len(dataset)`` is that
    number on every rank. Shards differ by at most one row (``shard_size``); with
    ``equal_steps="pad"`` (default) ``len`` is the largest shard's size and a shorter shard's
    last positions repeat its first rows (``num_padded``: at most one per rank, at most
    ``world_size - 1`` in all), with ``"drop"`` it is the smallest and a longer shard leaves
    one row out (``num_dropped``), with None it is this rank's own ``shard_size`` (unequal step
    counts: only safe without DDP). ``make_sampler()`` pads and drops with other samples each
    epoch instead of fixed ones; positions ``0 <= i < max(len, shard_size)`` are all served.
    More ranks than samples (an empty shard on some rank) raises ``ValueError`` on every rank
    with ``equal_steps="pad"``, because an empty shard has nothing to repeat; with ``"drop"`` or
    None the empty shard has length 0 and is logged.

    Args:
        path: Path of the HDF5 file.
        x_key: Dataset holding the inputs, samples along axis 0 (nested paths work).
        y_key: Dataset holding the targets (same length), or None for x-only samples.
        mode: ``"contiguous"`` (rank r caches one slice of rows: sequential reads, best for
            compressed files) or ``"interleave"`` (rows ``r, r + world_size, …``: every rank
            sees all parts of the file; compressed chunks are decoded by every rank).
        dtype_x: NumPy dtype the inputs are cached as (default float32), or None to keep the
            stored dtype. The cast runs block-wise, so it never doubles peak memory.
        dtype_y: NumPy dtype the targets are cached as, or None to keep the stored dtype.
        transform: Callable applied to each input sample (a tensor) when served.
        target_transform: Callable applied to each target sample when served.
        pin_host_memory: Page-lock the cache where CUDA is available (in place, so a shared
            cache stays shared), and gather batches in the main process into pinned buffers,
            so ``.cuda(non_blocking=True)`` is asynchronous. Without CUDA: logged once, no
            effect.
        share_memory: Allocate the cache in shared memory (``/dev/shm``) from the start, so
            DataLoader workers started with spawn or forkserver map it instead of copying.
        file_options: How each file is opened, as one ``FileOptions`` (HDF5's chunk cache, SWMR,
            locking, external files, and for URLs the fsspec options and a node-local cache; every
            field is documented there). Its fields ``rdcc_nbytes``, ``rdcc_nslots``, ``rdcc_w0``,
            ``swmr``, ``locking``, ``allow_external_files``, ``storage_options``, ``cache_dir``,
            ``cache_limit`` are also keywords of their own here, as the seeds name them; a keyword
            set to other than its default must agree with ``file_options`` when both are given. The
            chunk cache serves the preload only, and no dataset is decoded whole into memory
            the node shares (the cache holds the rows) unless ``file_options`` sets a
            ``decoded_budget``.
        log_fn: Receives the log lines (load size, time and speed; single-process notice).
        rank: This process's rank; detected (``torch.distributed``, then ``RANK``) when None.
        world_size: Number of ranks; detected (``torch.distributed``, then ``WORLD_SIZE``)
            when None, 1 when nothing is found.
        equal_steps: ``"pad"``, ``"drop"`` or None: see above.
        cache_device: Keep the cache on this device (e.g. ``"cuda"``) after the preload, so
            batches are gathered there (one ``index_select`` on the device, no host copy).
            Serve it from the main process (``num_workers=0``); incompatible with
            ``share_memory``. None (default) keeps it in host RAM.

    Raises:
        FileNotFoundError / OSError: the file is missing or not HDF5.
        KeyError: a key is missing; the message lists the file's datasets.
        ValueError: unknown ``mode`` / ``equal_steps``, ``rank`` outside
            ``[0, world_size)``, x and y lengths differ, or an empty shard with ``"pad"``.
        TypeError: a dtype torch cannot hold, or a non-callable transform.
        MemoryError: the shard does not fit in available RAM or ``/dev/shm``; the message
            says how much is needed, how much is free and what to do.

    Example:
        >>> ds = RankMemCachedH5Dataset("data.h5", "images", "labels", dtype_y=np.int64)
        >>> loader = batched_loader(ds, 256, sampler=ds.make_sampler(seed=0))
    """

    #: ``dataset[list_of_indices]`` returns a stacked batch (see ``batched_loader``).
    supports_batch_indexing = True
    #: Each rank holds a different part of the data: do not add a DistributedSampler.
    is_rank_sharded = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        x_key: str,
        y_key: str | None = None,
        *,
        mode: ShardMode = "contiguous",
        dtype_x: Any = np.float32,
        dtype_y: Any = None,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        pin_host_memory: bool = True,
        share_memory: bool = False,
        rdcc_nbytes: int = 256 * 1024**2,
        rdcc_nslots: int = 1_000_003,
        rdcc_w0: float = 0.75,
        swmr: bool = True,
        log_fn: Callable[[str], None] = print,
        rank: int | None = None,
        world_size: int | None = None,
        locking: LockingMode = "best-effort",
        equal_steps: EqualSteps = "pad",
        cache_device: str | torch.device | None = None,
        allow_external_files: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        file_options: FileOptions | None = None,
    ) -> None:
        device = None if cache_device is None else check_device("cache_device", cache_device)
        if device is not None and device.type != "cpu" and share_memory:
            raise ValueError(
                f"share_memory=True shares a host cache with DataLoader workers, but "
                f"cache_device={cache_device!r} keeps it on the device, served by this process; "
                "pass one of them"
            )
        self.mode: ShardMode = check_choice("mode", mode, SHARD_MODES)
        self.equal_steps: EqualSteps = check_choice("equal_steps", equal_steps, EQUAL_STEPS)
        check_key("x_key", x_key, optional=False)
        check_key("y_key", y_key, optional=True)
        _check_options(
            {"transform": transform, "target_transform": target_transform, "log_fn": log_fn},
            {"pin_host_memory": pin_host_memory, "share_memory": share_memory},
        )
        self.transform, self.target_transform = transform, target_transform
        self.log_fn = log_fn
        self.world = World.detect(rank=rank, world_size=world_size, log_fn=log_fn)
        options = self._file_options(RankMemCachedH5Dataset.__init__, locals())
        if options.decoded_budget is None:  # the cache holds the rows: no whole decoded copy too
            options = dataclasses.replace(options, decoded_budget=0)
        source = H5Source(path, options)
        self.path = source.path
        try:
            readers = open_readers(source, x_key, y_key)
            self.total = readers[0].length
            self._check_shard_sizes()
            self.rows = self._shard_rows()
            casts = [numpy_dtype("dtype_x", dtype_x), numpy_dtype("dtype_y", dtype_y)]
            plans = [
                plan_cache(reader, arg, cast, len(self.rows))
                for reader, arg, cast in zip(readers, ("x_key", "y_key"), casts, strict=False)
            ]
            caches = self._load(plans, share_memory)
        finally:
            source.close()  # everything is in RAM: nothing stays open
        self.x: torch.Tensor = caches[0]
        self.y: torch.Tensor | None = caches[1] if len(caches) > 1 else None
        self.x_key, self.y_key = x_key, y_key
        self._describe = [plan.describe() for plan in plans]
        self.is_shared = share_memory
        if device is not None and device.type != "cpu":
            self._move_to(device)
        self.is_pinned = pin_host_memory and self.x.device.type == "cpu" and self._pin()
        sharding.register_rank_sharded(self, self.world, (len(self), self.shard_size))

    # -- construction ------------------------------------------------------------------------

    def _check_shard_sizes(self) -> None:
        world = self.world.world_size
        if self.equal_steps == "pad" and 0 < self.total < world:
            empty = f"rank {world - 1}" if self.total == world - 1 else f"ranks {self.total}"
            empty += "" if self.total == world - 1 else f"..{world - 1}"
            raise ValueError(
                f"the file has {self.total} samples but world_size={world}: {empty} would "
                "get an empty shard, and equal_steps='pad' "
                "cannot pad an empty shard (it has nothing to repeat). Run at most "
                f"{self.total} ranks, or pass equal_steps='drop' (every rank then iterates 0 "
                "samples) or equal_steps=None (unequal step counts: hangs DDP)"
            )

    def _shard_rows(self) -> range:
        """This rank's rows of the file, as a range (step 1 or ``world_size``)."""
        world, rank = self.world.world_size, self.world.rank
        if self.mode == "contiguous":
            start, stop = _balanced_contiguous_shard(self.total, world, rank)
            return range(start, stop)
        return range(rank, max(rank, self.total), world)

    def _load(self, plans: list[CachePlan], shared: bool) -> list[torch.Tensor]:
        keys = " and ".join(repr(plan.reader.key) for plan in plans)
        world = self.world
        started = time.perf_counter()
        caches = fill_caches(
            plans,
            self.rows,
            shared=shared,
            what=f"rank {world.rank}'s shard of {keys} in {self.path!r}",
            progress=lambda n: progress_bar(n, f"rank {world.rank} caching", world.local_rank == 0),
        )
        seconds = time.perf_counter() - started
        nbytes = sum(plan.nbytes for plan in plans)
        rate = nbytes / 1e6 / seconds if seconds > 0 else float("inf")
        where = f"rank {world.rank}/{world.world_size}"
        self.log_fn(
            f"RankMemCachedH5Dataset: {where} cached {len(self.rows)} of {self.total} rows of "
            f"{keys} ({self._rows_text()}): {format_bytes(nbytes)} in {seconds:.2f} s "
            f"({rate:,.0f} MB/s)"
        )
        if len(self.rows) == 0:
            self.log_fn(f"RankMemCachedH5Dataset: {where} has an empty shard (length 0)")
        return caches

    def _move_to(self, device: torch.device) -> None:
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            if self.nbytes > free:
                raise MemoryError(
                    f"rank {self.world.rank}'s cache needs {format_bytes(self.nbytes)} "
                    f"on {device} but {format_bytes(free)} is free; pass "
                    "cache_device=None to keep it in host RAM, or use more ranks"
                )
        self.x = self.x.to(device)
        self.y = None if self.y is None else self.y.to(device)
        self.log_fn(f"RankMemCachedH5Dataset: rank {self.world.rank}'s cache moved to {device}")

    def _pin(self) -> bool:
        # pin every cache even if one fails (no short-circuit), then report whether all are
        pinned = [_memory.pin_in_place(t, self.log_fn) for t in self._caches()]
        return all(pinned)

    def _caches(self) -> list[torch.Tensor]:
        return [t for t in (self.x, self.y) if t is not None]

    def _rows_text(self) -> str:
        rows = self.rows
        if rows.step == 1:
            return f"rows {rows.start}:{rows.stop}"
        return f"rows {rows.start}::{rows.step}"

    # -- equal steps ---------------------------------------------------------------------------

    @property
    def shard_size(self) -> int:
        """Rows of the file in this rank's cache (``len(self)`` may pad or drop one)."""
        return len(self.rows)

    @property
    def samples_per_rank(self) -> int:
        """Samples every rank iterates per epoch under ``equal_steps`` (``len(self)``)."""
        return steps_per_rank(self.total, self.world.world_size, self.equal_steps, self.shard_size)

    @property
    def num_padded(self) -> int:
        """Samples this rank repeats per epoch to reach ``samples_per_rank``."""
        return max(0, self.samples_per_rank - self.shard_size)

    @property
    def num_dropped(self) -> int:
        """Samples of this rank's shard left out per epoch to stay at ``samples_per_rank``."""
        return max(0, self.shard_size - self.samples_per_rank)

    def make_sampler(self, seed: int = 0, shuffle: bool = True) -> ShardEpochSampler:
        """Return a ``ShardEpochSampler`` over this shard yielding ``samples_per_rank``.

        An ``EpochShuffleSampler`` that pads (or drops) with other samples of the shard each
        epoch, and knows that its data is this rank's shard: Lightning leaves it alone,
        accelerate's ``prepare()`` is refused (it would split the shard again), and using it
        under another world raises. Its state resumes on another number of ranks: each rank
        then trains the untrained rows of its new shard (see ``shard_sampler``).
        """
        return ShardEpochSampler(
            self.total, self.world, self.mode, self.equal_steps, seed=seed, shuffle=shuffle
        )

    @property
    def shard_indices(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Row numbers in the file of this rank's samples, in cache order."""
        return np.arange(self.rows.start, self.rows.stop, self.rows.step, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache (x and y)."""
        return sum(t.nbytes for t in self._caches())

    # -- serving -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.samples_per_rank

    def __getitem__(self, index: Any) -> Any:
        """Return sample ``index``, or a stacked batch for a sequence / array / tensor / slice."""
        if is_scalar_index(index):
            i = normalize_index(index, self._extent()) % max(1, self.shard_size)
            x = _apply(self.transform, self.x[i].clone())
            if self.y is None:
                return x
            return x, _apply(self.target_transform, self.y[i].clone())
        x, y = self._gathered(self._index_tensor(index), leaves=True)
        x = x if self.transform is None else restack(self.transform, x)
        if y is None:
            return x
        return x, y if self.target_transform is None else restack(self.target_transform, y)

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """Return the samples at ``indices`` as a list, gathered at once."""
        # torch's collate stacks the samples again: the batch stays in this process's memory
        x, y = self._gathered(self._index_tensor(indices), leaves=False)
        return split_samples(x, y, self.transform, self.target_transform)

    def _gathered(self, idx: torch.Tensor, *, leaves: bool) -> tuple[Any, Any | None]:
        """Rows ``idx`` of each cached tensor (``y`` None without one), one gather each.

        The one gather of a batch, for ``__getitems__`` (``leaves=False``: split into samples,
        views of its rows, next) and for a stacked batch: a tensor the batch keeps as gathered
        goes straight into pinned memory or the buffer that leaves a worker process.
        """
        x = _gather(self.x, idx, leaves and self.transform is None, self._pin_batches())
        if self.y is None:
            return x, None
        keep = leaves and self.target_transform is None
        return x, _gather(self.y, idx, keep, self._pin_batches())

    def _extent(self) -> int:
        """Positions served: ``len(self)`` (padded), or the whole shard when ``"drop"``."""
        return max(len(self), self.shard_size)

    def _index_tensor(self, indices: Any) -> torch.Tensor:
        extent = len(self) if isinstance(indices, slice) else self._extent()
        positions = as_index_array(indices, extent)
        if extent > self.shard_size:  # padded positions repeat the shard's first rows
            positions %= self.shard_size
        idx = torch.from_numpy(positions)
        # to a GPU cache from pageable memory: a pinned staging ring measured no faster for an
        # index array of a batch (0.33 of a bare index_select against 0.42, H200), and
        # pin_memory() per call slower (0.29)
        return idx if self.x.device.type == "cpu" else idx.to(self.x.device)

    @property
    def fork_only(self) -> bool:
        """True while the cache is in this process's private host memory (``ForkOnly``)."""
        return not self.is_shared and self.x.device.type == "cpu"

    def _pin_batches(self) -> bool:
        # Pinned batches help only the process that copies to the GPU; a DataLoader worker's
        # batches are pinned by DataLoader(pin_memory=True) in the main process instead.
        return self.is_pinned and not in_worker_process()

    def _sources(self) -> list[H5Source]:
        return []  # the file was closed after the preload: ``close()`` has nothing to do

    # -- pickling (DataLoader workers) ---------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if self.x.device.type != "cpu":
            raise RuntimeError(
                f"rank {self.world.rank}'s cache lives on {self.x.device}: serve it from this "
                "process (num_workers=0: batches are gathered on the device, no workers "
                "needed); DataLoader workers cannot share it"
            )
        if not self.is_shared:
            # torch moves a tensor into /dev/shm when it is sent to a spawn/forkserver worker:
            # fail clearly here rather than with SIGBUS there
            _memory.check_shm_fits(
                _memory.unshared_nbytes(self._caches()),
                f"rank {self.world.rank}'s cache (share_memory=False), which torch moves into "
                "shared memory to send it to another process (e.g. a spawn or forkserver "
                "DataLoader worker),",
            )
        state = self.__dict__.copy()
        state.update(log_fn=_no_log, is_pinned=False)  # a copy is not registered with CUDA
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # a copy in another process (a DataLoader worker, a spawned rank) is a shard there too
        sharding.register_rank_sharded(self, self.world, (len(self), self.shard_size))

    def __repr__(self) -> str:
        parts = [f"path={self.path!r}", f"x_key={self.x_key!r} {self._describe[0]}"]
        if self.y_key is not None:
            parts.append(f"y_key={self.y_key!r} {self._describe[1]}")
        parts += [
            f"mode={self.mode!r}",
            f"rank={self.world.rank}/{self.world.world_size}",
            f"{self._rows_text()}",
            f"shard_size={self.shard_size}",
            f"len={len(self)}",
            f"equal_steps={self.equal_steps!r} ({self.samples_per_rank}/rank)",
            f"{format_bytes(self.nbytes)}",
            "shared" if self.is_shared else "not shared",
            "pinned" if self.is_pinned else "not pinned",
        ]
        if self.x.device.type != "cpu":
            parts.append(f"on {self.x.device}")
        return f"RankMemCachedH5Dataset({', '.join(parts)})"


def _check_options(callables: dict[str, Any], flags: dict[str, Any]) -> None:
    for name, fn in callables.items():
        check_callable(name, fn)
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")


def _apply(fn: Callable[[Any], Any] | None, sample: torch.Tensor) -> Any:
    return sample if fn is None else fn(sample)


def _select(cache: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None = None) -> Any:
    """Rows ``idx`` of ``cache``; on the CPU with NumPy's ``take``, in the calling thread.

    ``torch.index_select`` splits a gather over torch's intra-op threads: on a machine busy with
    other work (other ranks, DataLoader workers, decode threads) those threads oversubscribe the
    cores and a batch gather ran 57x slower than with one thread. NumPy's ``take`` never spawns
    threads, and into a fresh (or pinned) buffer it is as fast as the best single-thread gather.
    """
    source = _as_numpy(cache) if idx.device.type == "cpu" else None
    if source is None:  # on a device, or a dtype NumPy lacks (bfloat16, float8, …)
        return _index_select(cache, idx, out)
    if out is None:
        out = torch.empty((len(idx), *cache.shape[1:]), dtype=cache.dtype)
    # indices are checked already; mode="raise" would make numpy take into a copy first
    np.take(source, idx.numpy(), axis=0, out=out.numpy(), mode="clip")
    return out


def _as_numpy(tensor: torch.Tensor) -> np.ndarray[Any, Any] | None:
    if tensor.device.type != "cpu":
        return None
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError):
        return None


def _gather(cache: torch.Tensor, idx: torch.Tensor, leaves: bool, pinned: bool) -> Any:
    """Rows ``idx`` of ``cache``; where the batch ``leaves`` as gathered, into its buffer."""
    if not leaves:
        return _select(cache, idx)
    shape = (len(idx), *cache.shape[1:])
    if pinned:
        return _select(cache, idx, torch.empty(shape, dtype=cache.dtype, pin_memory=True))
    source = _as_numpy(cache) if in_worker_process() else None
    if source is None:
        return _select(cache, idx)
    # gathered straight into a slot of the worker's batch ring (or shared memory): the batch
    # leaves the worker without another copy, and a full /dev/shm is an error raised here
    # rather than a batch dropped (see new_shared)
    return _select(cache, idx, FileDataset._output_buffer(shape, source.dtype))


# torch has no 1-d index_select kernel for uint16/32/64: gather their bits as the signed type
# of the same size (a view, no copy) and view the result back
_SIGNED_TWIN = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def _index_select(
    cache: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    twin = _SIGNED_TWIN.get(cache.dtype)
    if twin is None:
        return torch.index_select(cache, 0, idx, out=out)
    target = None if out is None else out.view(twin)
    return torch.index_select(cache.view(twin), 0, idx, out=target).view(cache.dtype)


def _no_log(message: str) -> None:
    """Stand-in ``log_fn`` in copies sent to workers (a user's ``log_fn`` may not pickle)."""
