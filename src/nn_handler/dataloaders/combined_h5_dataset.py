"""CombinedHDF5Dataset: many HDF5 files as one dataset, filtered on metadata, read in batches.

Each file holds per-sample fields of one length ``N`` (signals, one-hot targets, weights, ids,
flags). Filters are evaluated once, at construction, on the metadata columns they need; the
result is a global index of two NumPy arrays (file number, row). Batches are read with one
``RowReader`` call per (file, field), through a per-process pool that caps open files.
``create_optimized_dataloader`` builds a sharded, per-epoch shuffled DataLoader on top.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from .._io import (
    FileOptions,
    H5Source,
    IndexArray,
    LockingMode,
    PerProcess,
    as_index_array,
    normalize_index,
)
from .._validate import (
    check_count,
    check_loader_options,
    check_positive_int,
)
from ..distributed import World
from ._combined.batch import check_float_dtype, read_rows, to_batch
from ._combined.cache import SampleCache
from ._combined.fields import field_list, resolve_field_names, with_field_keys
from ._combined.file_pool import FilePool
from ._combined.index import build_index
from ._combined.loader_options import check_dataset_kwargs, choose_workers, loader_options
from ._combined.sample_filters import FilterSpec
from ._core import FileDataset
from ._tensors.split import split_batch
from ._transport import in_worker_process
from .loader import batched_loader
from .samplers import DistributedEpochSampler
from .samplers.shards import EvenMode, equal_steps_option

__all__ = ["CombinedHDF5Dataset", "create_optimized_dataloader"]

_log = logging.getLogger(__name__)
PathLike = str | os.PathLike[str]


@dataclass
class _ProcessState:
    """What each process keeps for itself: its sample cache and its counters."""

    cache: SampleCache | None
    hits: int = 0
    misses: int = 0
    accesses: int = 0
    bytes_read: int = 0


class CombinedHDF5Dataset(FileDataset[dict[str, Any]]):
    """Samples from many HDF5 files as one map-style dataset, with metadata filters and a cache.

    ``dataset[i]`` returns ``{field: value}`` for the loaded fields: float fields as tensors of
    ``dtype``, integer and bool fields as tensors of their stored type, string fields (``guid``)
    as ``str``. ``dataset[list_of_indices]`` returns the batch stacked (strings as a list of
    ``str``), and ``__getitems__`` lets ``DataLoader`` read a batch at once: one read per
    (file, field), however many samples the batch draws from that file.

    Fields are logical names mapped to dataset paths (default: the name itself): ``fhr_st``,
    ``fhr_ph``, ``target`` (one-hot, ``(N, C)`` or ``(N, T, C)``), ``weight``, ``guid``,
    ``cs_label``, ``bg_label``, ``epoch``; ``field_names`` renames them or adds others. A path
    may name one column of a compound (table) dataset, ``"<dataset>:<field>"``, in
    ``field_names`` or directly as a ``load_fields`` entry (``"df/table:values_block_0"``). Every
    field of a file has the file's length ``N``; files may differ in ``N``.

    Required fields: each ``load_fields`` entry, every field an active filter reads (``guid``,
    ``cs_label``, ``bg_label``, ``epoch``, ``target``, ``valid_field``), and ``valid_field``
    with ``return_valid_mask``. A file without one raises ``KeyError``. With
    ``load_fields=None`` the fields present in *every* file are loaded; one missing from some
    files is left out of every batch (logged), never returned for some samples only.

    Filters (all optional, combined with AND) run once, at construction, file by file and in
    this order: ``allowed_guids``, ``cs_label``, ``bg_label``, ``epoch_min``/``epoch_max``,
    ``label``, ``min_valid_fraction``, ``where``. Each reads only its field, for the rows still
    in; ``get_stats()["removed_by_filter"]`` counts per filter the samples it removed (a sample
    counts for the first filter that removes it). Files left without samples are skipped.

    The cache holds up to ``cache_size`` decoded samples **per process**: each DataLoader worker
    has its own cache and counters, and ``get_stats()`` reports those of the calling process.

    Args:
        paths: One HDF5 path or a sequence of them.
        load_fields: Fields to return (default: every field present in all files).
        allowed_guids: Keep samples whose ``guid`` is one of these (str or bytes; stored ids
            may be fixed- or variable-length, bytes or str; bytes given here are decoded with
            ``guid_encoding``).
        cs_label: Keep samples whose ``cs_label`` equals this (nonzero counts as True).
        bg_label: Keep samples whose ``bg_label`` equals this.
        epoch_min: Keep samples with ``epoch >= epoch_min`` (NaN epochs are removed).
        epoch_max: Keep samples with ``epoch <= epoch_max``.
        label: Keep samples whose one-hot ``target`` marks class ``label`` (value > 0) at any
            time step.
        cache_size: Samples cached per process (0 disables the cache).
        pin_memory: Return pinned tensors when CUDA is available (in the main process; in
            DataLoader workers use ``DataLoader(pin_memory=True)``); without CUDA a no-op,
            logged once.
        dtype: Dtype of float fields: ``torch.float16``, ``torch.bfloat16``, ``torch.float32``
            or ``torch.float64``.
        field_names: ``{field: dataset path}`` overriding or adding field names, e.g.
            ``{"guid": "patient_id", "fhr_xx": "signals/xx"}``.
        where: ``where(columns) -> bool array``: any other rule. ``columns`` maps every field
            with one value per sample (``epoch``, ``guid`` as str (bytes with
            ``guid_encoding="bytes"``), flags, …) to its whole
            column in one file; return a mask of the file's length.
        min_valid_fraction: Drop samples of ``valid_field`` with no valid time step, or with a
            valid fraction below this (0 drops only samples with none). A step is valid when
            all its values are finite and one is nonzero.
        valid_field: Signal field the validity is computed on.
        time_axis: Time axis of one ``valid_field`` sample (default: the last).
        return_valid_mask: Add the per-step validity (``bool``, shape ``(T,)``) as field
            ``"valid_mask"``.
        metadata_in_memory: Keep loaded fields with one value per sample (``weight``,
            ``guid``, flags, ``epoch``) in RAM after construction, as NumPy arrays of their
            itemsize per sample (ids as their stored bytes); a batch then reads only the per-sample
            arrays (signals, targets) from the files. False reads every field from the files.
        guid_encoding: How the stored bytes of string fields (``guid``, and any other
            string field) become ``str``: ``"utf-8"`` (the default; what HDF5 and h5py write),
            any Python text codec (``"latin-1"`` decodes every byte string, ``"cp1252"``, …),
            or ``"bytes"`` to get the stored ``bytes`` undecoded (in batches, ``where=`` and
            ``allowed_guids``, where str ids are compared as UTF-8). With ``"utf-8"``, an id
            that is not valid UTF-8 raises ``DataFileError`` naming the file, row and bytes.
        max_open_files: Files open at once per process (least recently used closed first).
        file_options: How each file is opened, as one ``FileOptions`` (HDF5's chunk cache, SWMR,
            locking, external files, and for URLs the fsspec options and a node-local cache; every
            field is documented there). Its fields ``rdcc_nbytes``, ``rdcc_nslots``, ``rdcc_w0``,
            ``swmr``, ``locking``, ``allow_external_files``, ``storage_options``, ``cache_dir``,
            ``cache_limit``, ``decoded_budget`` are also keywords of their own here, as the seeds
            name them; a keyword set to other than its default must agree with ``file_options``
            when both are given. The chunk cache is smaller here by default (16 MiB and 10,007
            slots per open dataset), as many files are open at once.

    Raises:
        ValueError: no paths, a path twice, ``epoch_min > epoch_max``, ``label`` outside the
            class range, an unknown ``load_fields`` entry (the message lists the fields), or
            fields that disagree in length or shape.
        FileNotFoundError: a file does not exist.
        KeyError: a file lacks a required field (naming the file, the field and its fields).
        TypeError: an argument of the wrong type.

    Example:
        >>> ds = CombinedHDF5Dataset(["a.h5", "b.h5"], cs_label=True, label=1, cache_size=2000)
        >>> batch = ds[[0, 5, 9]]  # {"fhr_st": tensor (3, ...), "guid": [str, str, str], ...}
    """

    #: ``dataset[list_of_indices]`` returns a stacked batch (see ``batched_loader``).
    supports_batch_indexing = True

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        load_fields: Sequence[str] | None = None,
        allowed_guids: Iterable[str | bytes] | None = None,
        cs_label: bool | None = None,
        bg_label: bool | None = None,
        epoch_min: float | None = None,
        epoch_max: float | None = None,
        label: int | None = None,
        cache_size: int = 1000,
        pin_memory: bool = True,
        dtype: torch.dtype = torch.float32,
        *,
        field_names: dict[str, str] | None = None,
        where: Callable[[dict[str, np.ndarray[Any, Any]]], Any] | None = None,
        guid_encoding: str = "utf-8",
        min_valid_fraction: float | None = None,
        valid_field: str = "fhr_st",
        time_axis: int = -1,
        return_valid_mask: bool = False,
        metadata_in_memory: bool = True,
        max_open_files: int = 64,
        rdcc_nbytes: int = 16 * 1024**2,
        rdcc_nslots: int = 10_007,
        rdcc_w0: float = 0.75,
        swmr: bool = True,
        locking: LockingMode = "best-effort",
        allow_external_files: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        decoded_budget: int | str | None = None,
        file_options: FileOptions | None = None,
    ) -> None:
        self.dtype = check_float_dtype(dtype)
        self.cache_size = check_count("cache_size", cache_size)
        self.pin_memory = _check_bool("pin_memory", pin_memory)
        spec = FilterSpec.build(
            allowed_guids=allowed_guids,
            cs_label=cs_label,
            bg_label=bg_label,
            epoch_min=epoch_min,
            epoch_max=epoch_max,
            label=label,
            min_valid_fraction=min_valid_fraction,
            valid_field=valid_field,
            time_axis=time_axis,
            where=where,
            guid_encoding=guid_encoding,
        )
        fields = field_list(load_fields)
        keys = with_field_keys(resolve_field_names(field_names), fields)
        mask = _check_bool("return_valid_mask", return_valid_mask)
        in_memory = _check_bool("metadata_in_memory", metadata_in_memory)
        options = self._file_options(CombinedHDF5Dataset.__init__, locals())
        self._pool = FilePool(paths, options, keys, max_open_files)
        try:
            self._index, self._plan = build_index(self._pool, spec, fields, mask, in_memory)
        finally:
            # hold no handle after construction: forked workers inherit nothing
            self._pool.close()
        self.filters = spec.active()
        self._pin = self.pin_memory and _cuda_pinning_available()
        self._lock: PerProcess[threading.Lock] = PerProcess(threading.Lock)
        self._state: PerProcess[_ProcessState] = PerProcess()

    @property
    def paths(self) -> list[str]:
        """Every file given, in order (files without samples included)."""
        return [s.path for s in self._pool.sources]

    @property
    def fields(self) -> list[str]:
        """Names of the fields each sample returns."""
        return list(self._plan.fields)

    def __len__(self) -> int:
        return int(self._index.file_of.size)

    def refresh(self) -> int:
        """Check every file again and return the length, which stays what it was.

        The filters and the global index are built once, from the rows each file had then:
        rows a SWMR writer appends later are not followed (that is said once, in the log);
        the indexed rows are still served, and they stay right because a SWMR writer only
        appends. Build the dataset again to include new rows.

        Raises:
            FileChangedError: a file was replaced, shrank, or was rewritten without SWMR.
        """
        with self._lock.get():  # the pool may be evicting files for a read in another thread
            grew = self._refresh_sources()
        if grew:
            self._say_not_followed()
        return len(self)

    def locate(self, index: int) -> tuple[str, int]:
        """Return ``(path, row)``: where sample ``index`` is stored."""
        i = normalize_index(index, len(self))
        return self.paths[int(self._index.file_of[i])], int(self._index.row_of[i])

    def __getitem__(self, index: Any) -> dict[str, Any]:
        """Return sample ``index``, or the stacked batch for a sequence / array / slice."""
        if hasattr(index, "__index__") and getattr(index, "ndim", 0) == 0:
            one = np.array([normalize_index(index, len(self))], dtype=np.int64)
            sample: dict[str, Any] = split_batch(self._batch(one))[0]
            return sample
        return self._batch(as_index_array(index, len(self)))

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Return the samples at ``indices`` as a list of dicts, reading the batch at once."""
        idx = as_index_array(indices, len(self))
        return split_batch(self._batch(idx, leaves=False))  # torch's collate stacks them again

    @property
    def _cache(self) -> Sized:
        """This process's sample cache; ``len()`` is the samples it holds.

        Kept for the seed's ``len(dataset._cache)``; ``get_stats()["cache_size"]`` says the same.
        """
        cache = self._local().cache
        return () if cache is None else cache

    def clear_cache(self) -> None:
        """Empty this process's sample cache (the counters are kept)."""
        with self._lock.get():
            state = self._local()
            if state.cache is not None:
                state.cache.clear()

    def get_stats(self) -> dict[str, Any]:
        """Return sizes, filter counts, and this process's cache and read counters."""
        with self._lock.get():
            state = self._local()
            cached = 0 if state.cache is None else len(state.cache)
            open_files = len(self._pool.open_files)
        lookups = state.hits + state.misses
        return {
            "total_samples": len(self),
            "files": self._index.files_kept,
            "files_skipped": len(self._index.schemas) - self._index.files_kept,
            "samples_scanned": self._index.scanned,
            "removed_by_filter": dict(self._index.removed),
            "cache_size": cached,
            "cache_capacity": self.cache_size,
            "cache_hits": state.hits,
            "cache_misses": state.misses,
            "hit_rate": state.hits / lookups if lookups else 0.0,
            "access_count": state.accesses,
            "bytes_read": state.bytes_read,
            "index_bytes_read": self._index.nbytes,
            "open_files": open_files,
            "max_open_files": self._pool.max_open,
            "dtype": self.dtype,
            "fields": self.fields,
        }

    def _sources(self) -> list[H5Source]:
        return self._pool.sources

    def _close_files(self) -> None:
        with self._lock.get():  # the pool evicts files a read in another thread may be using
            self._pool.close()

    def _local(self) -> _ProcessState:
        return self._state.get_or_make(self._new_state)

    def _new_state(self) -> _ProcessState:
        fields = {n: (f.row_shape, f.dtype) for n, f in self._plan.fields.items()}
        return _ProcessState(SampleCache(self.cache_size, fields) if self.cache_size else None)

    def _batch(self, idx: IndexArray, *, leaves: bool = True) -> dict[str, Any]:
        """The batch at ``idx``; pinned when it ``leaves`` as it is, to a GPU from this process."""
        with self._lock.get():
            arrays = self._fetch(idx)
        pin = leaves and self._pin and not in_worker_process()
        return to_batch(arrays, self._plan.fields, self.dtype, pin)

    def _fetch(self, idx: IndexArray) -> dict[str, np.ndarray[Any, Any]]:
        state = self._local()
        state.accesses += idx.size
        if state.cache is None:
            state.misses += idx.size
            return self._read(idx, state)
        arrays, misses = state.cache.fetch(idx, lambda missing: self._read(missing, state))
        state.hits += idx.size - misses
        state.misses += misses
        return arrays

    def _read(self, idx: IndexArray, state: _ProcessState) -> dict[str, np.ndarray[Any, Any]]:
        index = self._index
        arrays, nbytes = read_rows(self._pool, self._plan, idx, index.file_of, index.row_of)
        state.bytes_read += nbytes
        return arrays

    def __repr__(self) -> str:
        filters = ", ".join(self.filters) or "none"
        return (
            f"CombinedHDF5Dataset({len(self)} samples from {self._index.files_kept} of "
            f"{len(self._pool.sources)} files, fields={self.fields}, dtype={self.dtype}, "
            f"filters=[{filters}], cache_size={self.cache_size}, "
            f"open_files={len(self._pool.open_files)})"
        )


def create_optimized_dataloader(
    hdf5_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    batch_size: int,
    num_workers: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    *,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    equal_steps: EvenMode = "pad",
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    prefetch_factor: int | None = None,
    multiprocessing_context: Any = None,
    timeout: float = 0.0,
    even: EvenMode | None = None,
    **dataset_kwargs: Any,
) -> DataLoader[Any]:
    """Return a DataLoader of stacked batches from ``CombinedHDF5Dataset(hdf5_files, ...)``.

    The sampler is a ``DistributedEpochSampler``: each epoch one permutation (a pure function
    of ``seed`` and the epoch), dealt round-robin to the ranks. Call
    ``loader.sampler.set_epoch(epoch)`` before each epoch to reshuffle. Per epoch, with ``N``
    samples and ``W`` ranks:

    * ``equal_steps="pad"`` (default): every rank gets ``ceil(N / W)`` samples. Together they cover
      all ``N``; the ``ceil(N / W) * W - N <= W - 1`` extra places repeat the first samples of
      the epoch's permutation once each (the only overlap between ranks).
    * ``equal_steps="drop"``: every rank gets ``floor(N / W)`` samples, pairwise disjoint; the last
      ``N mod W`` samples of the permutation (different ones each epoch) are skipped.

    Every rank therefore runs the same number of batches. Batches are read whole by the dataset
    (``batched_loader``): a dict of stacked tensors, strings as lists of ``str``.

    Args:
        hdf5_files: One path or a sequence of paths.
        batch_size: Samples per batch on each rank.
        num_workers: DataLoader workers per rank. None picks
            ``min(8, cores // ranks on this node)`` (cores this process may run on; ranks
            from ``LOCAL_WORLD_SIZE``, else ``world_size``).
        rank: This rank (detected from ``torch.distributed`` / the environment when None).
        world_size: Number of ranks (detected when None).
        shuffle: Shuffle anew each epoch (False keeps file order, still dealt round-robin).
        seed: Shuffle seed, the same on every rank.
        drop_last: Drop each rank's last incomplete batch.
        equal_steps: ``"pad"`` or ``"drop"`` (see above).
        pin_memory: Pin batches for CUDA (default: when CUDA is available; without CUDA,
            True is a no-op, logged once).
        persistent_workers: Keep workers between epochs (default: when ``num_workers > 0``).
        prefetch_factor: Batches prefetched per worker (only with workers; torch's default 2).
        multiprocessing_context: ``"fork"``, ``"spawn"``, ``"forkserver"`` or None.
        timeout: Seconds to wait for a batch from a worker (0: forever).
        even: The old name of ``equal_steps`` (still accepted; a ``DeprecationWarning``).
        **dataset_kwargs: Any ``CombinedHDF5Dataset`` argument except ``paths`` and
            ``pin_memory`` (``load_fields``, filters, ``cache_size``, ``dtype``, …).

    Raises:
        TypeError: an unknown keyword (the message lists the valid ones).
        ValueError: no sample survives the filters, or options that need workers without them.
    """
    check_dataset_kwargs(dataset_kwargs, CombinedHDF5Dataset, create_optimized_dataloader)
    check_positive_int("batch_size", batch_size)
    equal_steps = equal_steps_option(equal_steps, even, "create_optimized_dataloader")
    world = World.detect(rank=rank, world_size=world_size)  # fail before reading any file
    workers = choose_workers(num_workers, world.world_size)
    options = loader_options(workers, pin_memory, persistent_workers, prefetch_factor)
    check_loader_options({**options, "timeout": timeout})
    if workers:
        options.update(multiprocessing_context=multiprocessing_context, timeout=timeout)
    # batches are pinned by the DataLoader (after the workers), not by the dataset
    dataset = CombinedHDF5Dataset(hdf5_files, pin_memory=False, **dataset_kwargs)
    if len(dataset) == 0:
        raise ValueError(
            "no sample is left after the filters "
            f"(removed per filter: {dataset.get_stats()['removed_by_filter']}); nothing to load"
        )
    sampler = DistributedEpochSampler(
        len(dataset),
        seed=seed,
        shuffle=shuffle,
        rank=world.rank,
        world_size=world.world_size,
        equal_steps=equal_steps,
    )
    return batched_loader(dataset, batch_size, sampler=sampler, drop_last=drop_last, **options)


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _cuda_pinning_available() -> bool:
    if torch.cuda.is_available():
        return True
    _log.info("pin_memory=True but CUDA is not available: returning unpinned tensors")
    return False
