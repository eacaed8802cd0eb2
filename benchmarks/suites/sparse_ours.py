"""Ours in the sparse suite's tables: ``H5SparseDataset`` through ``batched_loader``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from nn_handler.dataloaders import H5SparseDataset, batched_loader
from nn_handler.dataloaders.h5_sparse_dataset import Output

from ..cases import Contender

__all__ = ["ours"]


def ours(
    path: str,
    batch: int,
    sampler: Callable[[H5SparseDataset], Any],
    name: str,
    output: Output = "dense",
    **loader_kwargs: Any,
) -> Contender:
    """``H5SparseDataset`` read through ``batched_loader`` with the sampler ``sampler`` builds.

    ``output`` is the dataset's batch type, ``loader_kwargs`` go to ``batched_loader``
    (``num_workers``, ...).
    """

    def make() -> Iterable[Any]:
        ds = H5SparseDataset(path, output=output)
        return batched_loader(ds, batch, sampler=sampler(ds), **loader_kwargs)

    def order() -> np.ndarray[Any, Any]:
        return np.fromiter(sampler(H5SparseDataset(path)), dtype=np.int64)

    return Contender(name, make, order)
