"""Every dataset class of the package, for tests that must cover each one.

A test that builds "every dataset" takes its factories from ``FACTORIES`` (one small dataset
per class, in a folder of the test's) and checks them against ``dataset_classes()``: a new class
without a factory then fails that test instead of being skipped by it.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from torch.utils.data import Dataset

from nn_handler import dataloaders
from nn_handler.dataloaders import (
    CombinedHDF5Dataset,
    H5LazyDataset,
    H5SampleDataset,
    H5SparseDataset,
    RankMemCachedH5Dataset,
)
from nn_handler.dataloaders._core import FileDataset

from helpers.recordings import write_recording
from helpers.samples import trajectories, write_samples
from helpers.sparse_files import write_anndata

__all__ = ["FACTORIES", "dataset_classes", "dense_file", "make_dataset"]


def dataset_classes() -> set[type]:
    """The concrete classes of the dataset core and every public dataset that opens files."""
    public = _public_datasets()  # (first: it imports every public module, and so each class)
    return _concrete_below(FileDataset) | public


def _concrete_below(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("nn_handler.") and not inspect.isabstract(sub):
            found.add(sub)
        found |= _concrete_below(sub)
    return found


def _public_datasets() -> set[type]:
    found = set()
    for name in dataloaders.__all__:
        obj = getattr(dataloaders, name)
        dataset = isinstance(obj, type) and issubclass(obj, Dataset)
        if dataset and "file_options" in inspect.signature(obj).parameters:
            found.add(obj)
    return found


def dense_file(tmp_path: Path) -> Path:
    path = tmp_path / "d.h5"
    if path.exists():  # written once: a rewrite would (rightly) fail a dataset built before
        return path
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(60, dtype=np.float32).reshape(20, 3)
        f["y"] = np.arange(20)
    return path


def _lazy(tmp_path: Path, **kw):
    return H5LazyDataset(dense_file(tmp_path), "x", "y", **kw)


def _rank_cached(tmp_path: Path, **kw):
    return RankMemCachedH5Dataset(
        dense_file(tmp_path), "x", "y", rank=0, world_size=1, log_fn=lambda _: None,
        pin_host_memory=False, **kw,
    )  # fmt: skip


def _combined(tmp_path: Path, **kw):
    path = tmp_path / "r.h5"
    if not path.exists():
        write_recording(path, 6, seed=0, uid_start=0, guid_kind="vlen-str")
    return CombinedHDF5Dataset([path], pin_memory=False, **kw)


def _per_sample(tmp_path: Path, **kw):
    path = tmp_path / "s.h5"
    if not path.exists():
        write_samples(path, trajectories(5))
    return H5SampleDataset(path, **kw)


def _sparse(tmp_path: Path, **kw):
    path = tmp_path / "a.h5ad"
    if not path.exists():
        write_anndata(path, "csr-gzip")
    return H5SparseDataset(path, **kw)


#: one factory per dataset class: ``tests/test_file_options.py`` fails for a concrete class of
#: the dataset core, or a public dataset, that is missing here
FACTORIES = {
    H5LazyDataset: _lazy,
    RankMemCachedH5Dataset: _rank_cached,
    CombinedHDF5Dataset: _combined,
    H5SampleDataset: _per_sample,
    H5SparseDataset: _sparse,
}


def make_dataset(kind: str, tmp_path: Path, **kw: Any) -> Any:
    """The dataset of class ``kind`` (its name) from ``FACTORIES``, its file in ``tmp_path``."""
    factory = {cls.__name__: f for cls, f in FACTORIES.items()}[kind]
    return factory(tmp_path, **kw)
