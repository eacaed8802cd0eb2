"""Our loaders the synthetic suite times, each a function ``(Case) -> list[Result]``.

An empty list means skipped. Baseline: ``NaiveH5Dataset``, the best simple thing a user writes
(lazy open, keeps its ``h5py.Dataset``, one h5py call per sample) through
``DataLoader(batch_size, shuffle=True)``. Sequential reads and the rank cache's preload are best
of ``ROUNDS``. Peers and the machine's limits are not here: they live with the benchmarks that
compare us with them (``benchmarks/`` in the repository), which slot them between these groups.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from nn_handler._io import FileOptions, H5Source, RowReader, resolve_key

from ..dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)
from .timing import Result, batch_len, best_of, timed_pass

__all__ = [
    "BASELINE",
    "CONTENDERS",
    "H5PY_LOAD",
    "LIMIT",
    "NAIVE",
    "ONE_PASS",
    "PRELOAD",
    "RANDOM_ORDER",
    "X_KEY",
    "Y_KEY",
    "Case",
    "Contender",
    "NaiveH5Dataset",
    "read_slabs",
    "sequential_reads",
]

NAIVE = "naive per-sample h5py"
LIMIT = "limit"
PRELOAD = "RankMemCachedH5Dataset preload"
H5PY_LOAD = "h5py load into RAM (f[key][()])"
X_KEY, Y_KEY = "central", "0/labels"
_SLAB_CHUNKS = 16  # chunks per sequential read call
ROUNDS = 2  # sequential reads: best of this many alternating rounds


@dataclass
class Case:
    """One layout's file and what every contender needs to read it."""

    path: str
    layout: str
    images: np.ndarray[Any, Any]
    labels: np.ndarray[Any, Any]
    batch_size: int
    budget_s: float
    compressed: bool
    chunk_rows: int | None

    @property
    def sample_bytes(self) -> int:
        """Bytes of one decoded sample."""
        return int(self.images[0].nbytes)


class NaiveH5Dataset(Dataset[Any]):
    """What a user writes first: lazy open, keep the dataset objects, one h5py call per sample.

    Returns ``(x, y)``, or ``x`` alone when ``y_key`` is None.
    """

    def __init__(self, path: str, x_key: str, y_key: str | None = None) -> None:
        self.path, self.x_key, self.y_key = path, x_key, y_key
        with self._open_file() as f:
            self.n = len(_open_key(f, x_key))
        self._x: Any = None
        self._y: Any = None

    def _open_file(self) -> h5py.File:
        """The file, opened as the user would (a subclass opens it otherwise)."""
        return h5py.File(self.path, "r")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if self._x is None:
            f = self._open_file()
            self._x = _open_key(f, self.x_key)
            self._y = None if self.y_key is None else _open_key(f, self.y_key)
        x = torch.from_numpy(np.asarray(self._x[i]))
        return x if self._y is None else (x, torch.as_tensor(self._y[i]))

    def close(self) -> None:
        """Close the file."""
        if self._x is not None:
            self._x.file.close()
            self._x = self._y = None


class _FieldView:
    """One field of a compound dataset read per sample, as a user would: ``dset.fields``."""

    def __init__(self, dset: h5py.Dataset, field: str) -> None:
        self.file = dset.file
        self._view = dset.fields([field])
        self._field = field
        self._len = len(dset)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> Any:
        return self._view[i][self._field]


def _open_key(f: h5py.File, key: str) -> Any:
    """``f[key]``, or a per-sample view of one field for ``"<dataset>:<field>"`` keys."""
    resolved = resolve_key(f, key, arg="x_key", where=f.filename)
    if resolved is None or resolved.field is None:
        return f[key]
    return _FieldView(f[resolved.path], resolved.field)


def _shuffled_loader(ds: Dataset[Any], batch_size: int) -> DataLoader[Any]:
    gen = torch.Generator().manual_seed(0)
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=0, generator=gen)


def naive(case: Case) -> list[Result]:
    """The baseline: per-sample h5py reads in a random order."""
    ds = NaiveH5Dataset(case.path, X_KEY, Y_KEY)
    loader = _shuffled_loader(ds, case.batch_size)
    result = timed_pass(NAIVE, loader, case.sample_bytes, case.budget_s, batch_len)
    ds.close()
    return [result]


def lazy_epoch_shuffle(case: Case) -> list[Result]:
    """``H5LazyDataset`` + ``batched_loader`` with a full shuffle (``EpochShuffleSampler``)."""
    ds = H5LazyDataset(case.path, X_KEY, Y_KEY)
    loader = batched_loader(ds, case.batch_size, sampler=EpochShuffleSampler(len(ds)))
    name = "H5LazyDataset batched, EpochShuffleSampler"
    result = timed_pass(name, loader, case.sample_bytes, case.budget_s, batch_len)
    ds.close()
    return [result]


def lazy_chunk_shuffle(case: Case) -> list[Result]:
    """``H5LazyDataset`` + ``batched_loader`` with ``ChunkShuffleSampler``."""
    ds = H5LazyDataset(case.path, X_KEY, Y_KEY)
    loader = batched_loader(ds, case.batch_size, sampler=ChunkShuffleSampler(ds))
    name = "H5LazyDataset batched, ChunkShuffleSampler"
    result = timed_pass(name, loader, case.sample_bytes, case.budget_s, batch_len)
    ds.close()
    return [result]


def sequential_reads(case: Case) -> list[Result]:
    """One process, file order: plain h5py slab reads against ``RowReader.read_range``.

    ``read_range`` is what the rank cache's preload runs; on compressed data it decodes with
    the thread pool. Best of ``ROUNDS`` alternating rounds (the two share the machine's noise).
    """
    n, rows = len(case.images), (case.chunk_rows or 64) * _SLAB_CHUNKS
    strategy = _strategy(case.path)

    def range_reads() -> int:
        # opened per round: HDF5 shares one chunk cache between handles on the same dataset
        source = H5Source(case.path, FileOptions())
        reader = RowReader(source, X_KEY)
        buf = np.empty((rows, *reader.row_shape), reader.dtype)
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            reader.read_range(start, stop, out=buf[: stop - start])
        source.close()
        return n

    return best_of(
        [
            ("sequential h5py, 1 process", lambda: read_slabs(case.path, 0, n)),
            (f"sequential read_range [{strategy}]", range_reads),
        ],
        case.sample_bytes,
        ROUNDS,
    )


def rank_cached(case: Case) -> list[Result]:
    """``RankMemCachedH5Dataset`` (rank 0 of 1): the preload, then random batches from RAM.

    The preload's baseline is what a user writes to load the same bytes into RAM with h5py
    (``f[key][()]`` for x and y, a fresh array each time, as the cache is).
    """
    loaded: list[RankMemCachedH5Dataset] = []

    def h5py_load() -> int:
        with h5py.File(case.path, "r") as f:
            images, labels = f[X_KEY][()], f[Y_KEY][()]  # the cache holds both
        return min(len(images), len(labels))

    def preload() -> int:
        loaded.clear()  # free the previous round's cache first, as h5py_load's array is
        loaded.append(
            RankMemCachedH5Dataset(
                case.path,
                X_KEY,
                Y_KEY,
                dtype_x=None,
                pin_host_memory=False,
                log_fn=_quiet,
                rank=0,
                world_size=1,
            )
        )
        return len(loaded[0])

    results = best_of([(H5PY_LOAD, h5py_load), (PRELOAD, preload)], case.sample_bytes, ROUNDS)
    ds = loaded[0]
    loader = batched_loader(ds, case.batch_size, sampler=ds.make_sampler())
    name = "RankMemCachedH5Dataset batched, make_sampler"
    results.append(timed_pass(name, loader, case.sample_bytes, case.budget_s, batch_len))
    return results


def _strategy(path: str) -> str:
    source = H5Source(path, FileOptions())
    strategy = RowReader(source, X_KEY).strategy
    source.close()
    return strategy


def _quiet(message: str) -> None:
    """A ``log_fn`` that drops the rank cache's log lines."""


def read_slabs(path: str, start: int, stop: int) -> int:
    """Read rows ``[start, stop)`` of ``central`` in whole-chunk slabs with plain h5py.

    Returns the rows read; loads ``hdf5plugin`` first when installed, so a fresh process
    reads blosc / zstd layouts too.
    """
    with contextlib.suppress(ImportError):
        importlib.import_module("hdf5plugin")  # blosc / zstd layouts in a fresh process
    with h5py.File(path, "r") as f:
        dset = f[X_KEY]
        slab = (dset.chunks[0] if dset.chunks else 64) * _SLAB_CHUNKS
        buf = np.empty((slab, *dset.shape[1:]), dset.dtype)
        for lo in range(start, stop, slab):
            hi = min(lo + slab, stop)
            dset.read_direct(buf, np.s_[lo:hi], np.s_[: hi - lo])
    return stop - start


Contender = Callable[[Case], list[Result]]
"""A contender: one layout's case in, its rows out (empty: skipped)."""

BASELINE: list[Contender] = [naive]
RANDOM_ORDER: list[Contender] = [lazy_epoch_shuffle, lazy_chunk_shuffle]
ONE_PASS: list[Contender] = [sequential_reads, rank_cached]
CONTENDERS: list[Contender] = [*BASELINE, *RANDOM_ORDER, *ONE_PASS]
