"""Memory stays bounded: the RSS of the main process and of every DataLoader worker does not grow
from epoch 2 to epoch 5, for every dataset class, with fork and with spawn.

Workers are persistent, so each is measured (psutil) at the end of every epoch; epoch 1 fills
the caches (decoded chunks, sample caches, page cache). ``NN_HANDLER_RSS_REPORT=path.json``
writes the figures there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from torch.utils.data import DataLoader

from nn_handler.dataloaders import (
    CombinedHDF5Dataset,
    H5LazyDataset,
    H5SampleDataset,
    H5SparseDataset,
    RankMemCachedH5Dataset,
)

from helpers.dataset_classes import dataset_classes
from helpers.sparse_files import write_anndata

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.slow

EPOCHS = 5
SAMPLES, WIDTH = 1200, 256
GROWTH_LIMIT = 16 * 1024**2  # allocator noise is a few MiB; a per-batch leak is far more
_FIGURES: dict[str, Any] = {}


def _write(folder: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, WIDTH)).astype(np.float32)
    y = rng.integers(0, 5, SAMPLES)
    lazy = folder / "lazy.h5"
    with h5py.File(lazy, "w") as f:
        f.create_dataset("x", data=x, chunks=(32, WIDTH), compression="gzip")
        f["y"] = y
    combined = []
    for i in range(3):
        path = folder / f"c{i}.h5"
        part = slice(i * SAMPLES // 3, (i + 1) * SAMPLES // 3)
        with h5py.File(path, "w") as f:
            f["fhr_st"] = x[part]
            f["weight"] = y[part].astype(np.float32)
        combined.append(path)
    samples = folder / "samples.h5"
    with h5py.File(samples, "w") as f:
        for i in range(SAMPLES // 2):
            f[f"s{i}"] = x[i]
    sparse = write_anndata(folder / "sparse.h5ad", "csr-gzip", n_obs=SAMPLES)
    return {"lazy": lazy, "combined": combined, "samples": samples, "sparse": sparse}


def _quiet(_message: str) -> None:
    pass


#: one factory per dataset class (``test_every_dataset_class_is_measured`` checks the list)
FACTORIES: dict[type, Callable[[dict[str, Any]], Any]] = {
    H5LazyDataset: lambda files: H5LazyDataset(files["lazy"], "x", "y"),
    RankMemCachedH5Dataset: lambda files: RankMemCachedH5Dataset(
        files["lazy"], "x", "y", rank=0, world_size=1, log_fn=_quiet
    ),
    CombinedHDF5Dataset: lambda files: CombinedHDF5Dataset(
        files["combined"], cache_size=200, pin_memory=False
    ),
    H5SampleDataset: lambda files: H5SampleDataset(files["samples"], attrs=False),
    H5SparseDataset: lambda files: H5SparseDataset(files["sparse"]),
}


def _dataset(kind: str, files: dict[str, Any]) -> Any:
    return {cls.__name__: make for cls, make in FACTORIES.items()}[kind](files)


def test_every_dataset_class_is_measured():
    assert set(FACTORIES) == dataset_classes()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("rss"))


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("kind", [cls.__name__ for cls in FACTORIES])
def test_rss_is_flat_over_five_epochs(files, kind, context):
    main = psutil.Process()
    before = {c.pid for c in main.children(recursive=True)}
    loader = DataLoader(
        _dataset(kind, files),
        batch_size=50,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context=context,
    )
    per_epoch: list[dict[str, int]] = []
    workers: list[Any] = []
    for _ in range(EPOCHS):
        for _batch in loader:
            pass
        if not workers:
            workers = [c for c in main.children(recursive=True) if c.pid not in before]
            workers = [w for w in workers if _is_worker(w)]
        per_epoch.append(
            {
                "main": main.memory_info().rss,
                **{f"worker{i}": w.memory_info().rss for i, w in enumerate(workers)},
            }
        )
    del loader  # shuts the persistent workers down
    assert len(workers) == 2
    growth = {name: per_epoch[-1][name] - per_epoch[1][name] for name in per_epoch[0]}
    _record(f"{kind}/{context}", per_epoch, growth)
    assert max(growth.values()) < GROWTH_LIMIT, growth


def _is_worker(proc: Any) -> bool:
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    # not multiprocessing's helpers (a pytest run may have "forkserver" in its own arguments)
    helpers = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
    return not any(helper in line for helper in helpers)


def _record(name: str, per_epoch: list[dict[str, int]], growth: dict[str, int]) -> None:
    mib = 1024**2
    _FIGURES[name] = {
        "rss_epoch5_mib": {k: round(v / mib, 1) for k, v in per_epoch[-1].items()},
        "growth_epoch2_to_5_mib": {k: round(v / mib, 2) for k, v in growth.items()},
    }
    report = os.environ.get("NN_HANDLER_RSS_REPORT")
    if report:
        Path(report).write_text(json.dumps(_FIGURES, indent=1))
