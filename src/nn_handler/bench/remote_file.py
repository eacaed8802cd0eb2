"""``bench_file`` on a URL: the baseline users write first, and what a node-local cache buys.

h5py cannot open a URL, so the per-sample baseline is h5py on an fsspec file object (what the
h5py and fsspec docs suggest, one ``__getitem__`` per sample in shuffled order), counted sample
by sample so that its budget holds even when each sample costs round trips.

With a ``cache_dir``, the fastest ``batched_loader`` strategy is timed twice on a fresh entry in
a scratch folder inside it (the node-local disk the user names, emptied afterwards): a first
pass that fetches and writes the cache, then a new dataset reading the very same batches, which
the first pass left on disk: what later epochs and the node's other ranks and workers get.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

import h5py
from torch.utils.data import DataLoader

from ..dataloaders import H5LazyDataset, batched_loader
from .contenders import NaiveH5Dataset
from .timing import Result, batch_len, timed_pass

__all__ = ["CACHE_COLD", "CACHE_WARM", "NAIVE_FSSPEC", "FsspecNaiveDataset", "time_cache_passes"]

NAIVE_FSSPEC = "h5py on an fsspec file object, per-sample (baseline)"
CACHE_COLD = "cache_dir, first pass (fetching, filling the cache)"
CACHE_WARM = "cache_dir, the same batches again (from the cache)"
_WARM_BUDGET = 10  # the warm pass re-reads the cold pass's batches: at most this many budgets

#: makes the sampler a strategy uses on a dataset
SamplerFor = Callable[[H5LazyDataset], Any]


class FsspecNaiveDataset(NaiveH5Dataset):
    """``NaiveH5Dataset`` on ``h5py.File(fsspec.open(url).open())``: the remote baseline."""

    def __init__(
        self, url: str, x_key: str, y_key: str | None, storage_options: Mapping[str, Any] | None
    ) -> None:
        self._storage_options = dict(storage_options or {})
        self._fileobj: IO[bytes] | None = None
        super().__init__(url, x_key, y_key)

    def _open_file(self) -> h5py.File:
        import fsspec

        self._fileobj = fsspec.open(self.path, "rb", **self._storage_options).open()
        return h5py.File(self._fileobj, "r")

    def close(self) -> None:
        """Close the file and the fsspec file object under it."""
        super().close()
        if self._fileobj is not None:
            self._fileobj.close()
            self._fileobj = None


def time_fsspec_naive(
    url: str,
    keys: tuple[str, str | None],
    storage_options: Mapping[str, Any] | None,
    sample_bytes: int,
    seconds: float,
) -> Result:
    """Per-sample h5py on an fsspec file object, in shuffled order, for ``seconds``."""
    ds = FsspecNaiveDataset(url, keys[0], keys[1], storage_options)
    try:
        samples = DataLoader(ds, batch_size=None, shuffle=True)
        return timed_pass(NAIVE_FSSPEC, samples, sample_bytes, seconds, _one, warmup=1)
    finally:
        ds.close()


def time_cache_passes(
    make: Callable[[str], H5LazyDataset],
    sampler_for: SamplerFor,
    cache_dir: str,
    batch_size: int,
    sample_bytes: int,
    seconds: float,
) -> tuple[Result, Result]:
    """Time a first pass filling an empty cache entry, then the same batches read from it.

    ``make(folder)`` builds the dataset with ``cache_dir=folder``. The first pass reads at most
    one epoch for ``seconds``; the second is a new dataset (as a later epoch's or another
    rank's) reading exactly the batches the first one read.
    """
    scratch = _scratch_folder(cache_dir)
    try:
        batches = itertools.count()
        cold = _cache_pass(make(scratch), sampler_for, batch_size, batches)
        cold_result = timed_pass(CACHE_COLD, cold[0], sample_bytes, seconds, batch_len, warmup=1)
        cold[1]()
        read = next(batches)  # batches the first pass took (warm-up included)
        warm = _cache_pass(make(scratch), sampler_for, batch_size, itertools.count())
        same = itertools.islice(warm[0], read)
        budget = _WARM_BUDGET * seconds
        warm_result = timed_pass(CACHE_WARM, same, sample_bytes, budget, batch_len, warmup=1)
        warm[1]()
        return cold_result, warm_result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _cache_pass(
    ds: H5LazyDataset,
    sampler_for: SamplerFor,
    batch_size: int,
    counter: Iterator[int],
) -> tuple[Iterator[Any], Callable[[], None]]:
    """One epoch of ``ds`` (epoch 0 of its sampler), counting the batches handed out."""
    loader = batched_loader(ds, batch_size, sampler=sampler_for(ds))

    def counted() -> Iterator[Any]:
        for batch in loader:
            next(counter)
            yield batch

    return counted(), ds.close


def _scratch_folder(cache_dir: str) -> str:
    """An empty folder inside ``cache_dir`` (created): the disk the user named, not /tmp."""
    try:
        os.makedirs(cache_dir, exist_ok=True)
        return tempfile.mkdtemp(prefix="nnh-bench-", dir=cache_dir)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cache_dir={cache_dir!r} cannot be used for the cache: {exc.strerror or exc}; "
            "pass a writable node-local directory",
        ) from exc


def _one(_sample: Any) -> int:
    return 1
