"""A job of ``tests/faults/test_small_dev_shm.py``: each dataset class read with 2 workers.

Run as ``python small_shm_job.py CONTEXT FOLDER`` (a real file: spawn workers import the main
module) in a private mount namespace whose ``/dev/shm`` is a 64 MiB tmpfs, Docker's default.
With fork each dataset has a loader of its own; with spawn (whose workers take seconds to start)
one loader reads them all. Every batch is checked against a direct h5py read; ``OK <case>`` is
printed for each dataset.
Notices go to stderr as a user's script would log them (``logging.basicConfig``); spawned
workers, which configure no logging, print theirs through Python's last-resort handler.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from torch.utils.data import DataLoader, Dataset

from nn_handler.dataloaders import (
    CombinedHDF5Dataset,
    H5LazyDataset,
    H5SampleDataset,
    H5SparseDataset,
    RankMemCachedH5Dataset,
)

Case = tuple[Any, dict[str, np.ndarray], Callable[[Any], dict[str, Any]]]


class Every(Dataset[tuple[Any, ...]]):
    """Item ``i`` of each dataset (modulo its length): all of them behind one loader."""

    def __init__(self, datasets: list[Any]) -> None:
        self.datasets = datasets

    def __len__(self) -> int:
        return max(len(d) for d in self.datasets)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        return tuple(d[i % len(d)] for d in self.datasets)


def _loader(dataset: Any, context: str) -> DataLoader[Any]:
    return DataLoader(dataset, batch_size=500, num_workers=2, multiprocessing_context=context)


def _compare(got: dict[str, Any], expected: dict[str, np.ndarray], done: int) -> int:
    """Check one batch, the rows from ``done`` on (modulo the dataset's length); its length.

    Batches are compared as they come and dropped: kept, they would hold their shared memory
    (the whole dataset's worth of it) in a 64 MiB ``/dev/shm``.
    """
    for name, rows in expected.items():
        part = got[name].numpy()
        assert np.array_equal(part, rows[np.arange(done, done + len(part)) % len(rows)]), name
    return len(part)


def _h5(path: Path, *keys: str) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {key: f[key][()] for key in keys}


def combined(folder: Path) -> Case:
    """First: with fork, its workers, not this process, find the decoded copy too big."""
    ds = CombinedHDF5Dataset([folder / "big.h5"], pin_memory=False)
    return ds, _h5(folder / "big.h5", "fhr_st", "weight"), lambda batch: batch


def lazy(folder: Path) -> Case:
    expected = _h5(folder / "big.h5", "fhr_st", "weight")
    ds = H5LazyDataset(folder / "big.h5", "fhr_st", "weight")
    return ds, expected, lambda batch: dict(zip(expected, batch, strict=True))


def rank_cached(folder: Path) -> Case:
    expected = _h5(folder / "small.h5", "x", "y")
    ds = RankMemCachedH5Dataset(folder / "small.h5", "x", "y", rank=0, world_size=1, log_fn=print)
    return ds, expected, lambda batch: dict(zip(expected, batch, strict=True))


def per_sample(folder: Path) -> Case:
    with h5py.File(folder / "samples.h5", "r") as f:
        expected = {"data": np.stack([f[name][()] for name in sorted(f)])}  # (natural order)
    return H5SampleDataset(folder / "samples.h5", attrs=False), expected, lambda batch: batch


def sparse(folder: Path) -> Case:
    with h5py.File(folder / "sparse.h5ad", "r") as f:
        x = f["X"]
        dense = np.zeros(tuple(x.attrs["shape"]), x["data"].dtype)
        indptr, indices, data = x["indptr"][()], x["indices"][()], x["data"][()]
    for row in range(dense.shape[0]):
        dense[row, indices[indptr[row] : indptr[row + 1]]] = data[indptr[row] : indptr[row + 1]]
    return H5SparseDataset(folder / "sparse.h5ad"), {"x": dense}, lambda batch: {"x": batch}


CASES = (combined, lazy, rank_cached, per_sample, sparse)


def one_loader_each(folder: Path, context: str) -> None:
    """Each dataset behind its own loader, built just before it is read."""
    for make in CASES:
        dataset, expected, parts = make(folder)
        done = 0
        for batch in _loader(dataset, context):
            done += _compare(parts(batch), expected, done)
        assert done == len(dataset)
        print("OK", make.__name__, flush=True)


def one_loader_for_all(folder: Path, context: str) -> None:
    """Every dataset behind one loader (one start of the workers: spawn's is slow)."""
    cases = [make(folder) for make in CASES]
    done = 0
    for batch in _loader(Every([dataset for dataset, _, _ in cases]), context):
        for (_, expected, parts), part in zip(cases, batch, strict=True):
            got = _compare(parts(part), expected, done)
        done += got
    assert done == max(len(dataset) for dataset, _, _ in cases)
    for make in CASES:
        print("OK", make.__name__, flush=True)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    context, folder = sys.argv[1], Path(sys.argv[2])
    if context == "fork":
        one_loader_each(folder, context)
    else:
        one_loader_for_all(folder, context)


if __name__ == "__main__":
    main()
