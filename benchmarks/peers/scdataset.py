"""scDataset (``BlockShuffling`` + ``fetch_factor``): over an h5py dataset, or AnnData backed.

``layouts`` and ``workloads``: rows of the file's h5py datasets, fetched sorted (h5py fancy
indexing), the fetch (batch × ``fetch_factor``) capped at 256 MiB. ``sparse``: the ``.h5ad``
opened by anndata in backed mode, with the fetch callback of scDataset's documentation
(``adata[idx].X.toarray()``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from nn_handler.bench.contenders import X_KEY, Y_KEY, Case
from nn_handler.bench.timing import Result, batch_len, timed_pass

from ..cases import Contender
from ..registry import Peer, register

if TYPE_CHECKING:
    from ..cases import WorkloadCase

NAME = "scDataset BlockShuffling"
SPARSE_SETTINGS = ((16, 16), (64, 16))  # (block_size, fetch_factor); the first: its docs' example
_FETCH_BYTES = 256 * 1024**2  # scDataset's fetch (batch × fetch_factor) capped at this


class _H5Rows:
    """What scDataset indexes: rows of one h5py dataset, opened lazily in each process."""

    def __init__(self, path: str, n: int) -> None:
        self.path, self.n = path, n
        self._handle: tuple[int, Any, Any] | None = None

    def __len__(self) -> int:
        return self.n

    def fetch(self, idx: np.ndarray[Any, Any]) -> tuple[Any, Any]:
        if self._handle is None or self._handle[0] != os.getpid():
            f = h5py.File(self.path, "r")
            self._handle = (os.getpid(), f[X_KEY], f[Y_KEY])
        _, x, y = self._handle
        return x[idx], y[idx]  # scDataset sorts each fetch: h5py fancy indexing

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "n": self.n, "_handle": None}


def _fetch(collection: _H5Rows, idx: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    return collection.fetch(np.asarray(idx))


def _batch(data: tuple[Any, Any], rows: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    x, y = data
    return torch.from_numpy(x[rows]), torch.from_numpy(y[rows])


def _rows_loader(
    path: str, n: int, batch: int, chunk_rows: int | None, row_nbytes: int, workers: int
) -> Iterable[Any] | None:
    """scDataset over rows ``[0, n)`` of ``path``'s h5py datasets (None: not installed).

    ``BlockShuffling`` in blocks of the file's chunk (at least 8 rows), the fetch (batch ×
    ``fetch_factor``) capped at 256 MiB.
    """
    try:
        sc: Any = importlib.import_module("scdataset")
    except ImportError:
        return None
    fetch = max(1, min(16, _FETCH_BYTES // (batch * row_nbytes)))
    ds: IterableDataset[Any] = sc.scDataset(
        _H5Rows(path, n),
        sc.BlockShuffling(block_size=max(8, chunk_rows or 8)),
        batch_size=batch,
        fetch_factor=fetch,
        fetch_callback=_fetch,
        batch_callback=_batch,
    )
    return DataLoader(ds, batch_size=None, num_workers=workers)


def layouts(case: Case) -> list[Result]:
    """scDataset (when installed) over the layout's file, one process."""
    n, batch, sample = len(case.images), case.batch_size, case.sample_bytes
    loader = _rows_loader(case.path, n, batch, case.chunk_rows, sample, 0)
    if loader is None:
        return []
    return [timed_pass(NAME, loader, sample, case.budget_s, batch_len)]


def workloads(case: WorkloadCase, workers: int) -> Iterable[Any] | None:
    """scDataset over the workload's file at ``workers`` workers (None: not installed)."""
    w = case.workload
    return _rows_loader(case.path, case.n, case.batch_size, w.chunk_rows, w.row_nbytes, workers)


def sparse(path: str, batch: int) -> list[Contender]:
    """The sparse suite's contenders: one per ``SPARSE_SETTINGS`` (none: not installed)."""
    found = [sparse_contender(path, batch, block, fetch) for block, fetch in SPARSE_SETTINGS]
    return [c for c in found if c is not None]


def sparse_contender(path: str, batch: int, block: int, fetch: int) -> Contender | None:
    """``BlockShuffling(block)``, ``fetch_factor=fetch`` on the ``.h5ad`` (None: not installed)."""
    try:
        sc = importlib.import_module("scdataset")
        ad = importlib.import_module("anndata")
    except ImportError:
        return None

    def build(callback: Callable[[Any, Any], Any]) -> Any:
        adata = ad.read_h5ad(path, backed="r")
        return sc.scDataset(
            adata,
            sc.BlockShuffling(block_size=block),
            batch_size=batch,
            fetch_factor=fetch,
            fetch_callback=callback,
            seed=0,
        )

    def fetch_rows(adata: Any, idx: Any) -> Any:  # the callback of scDataset's AnnData example
        return adata[idx].X.toarray().astype(np.float32)

    def order() -> np.ndarray[Any, Any]:  # the same strategy, fetching indices instead of rows
        return np.concatenate(list(build(lambda _adata, idx: np.asarray(idx))))

    name = f"scDataset BlockShuffling({block}), fetch_factor={fetch}"
    return Contender(name, lambda: build(fetch_rows), order)


register(Peer(NAME, "peer", {"layouts": layouts, "workloads": workloads, "sparse": sparse}))
