"""h5torch (``h5torch.Dataset``): per-sample reads through ``DataLoader(shuffle=True)``."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from nn_handler.bench.contenders import Case
from nn_handler.bench.timing import Result, batch_len, timed_pass

from ..registry import Peer, register

if TYPE_CHECKING:
    from ..cases import WorkloadCase

NAME = "h5torch"


def _module() -> Any | None:
    try:
        return importlib.import_module("h5torch")
    except ImportError:
        return None


def layouts(case: Case) -> list[Result]:
    """``h5torch.Dataset`` (when installed) in a random order, one process."""
    h5torch = _module()
    if h5torch is None:
        return []
    ds = h5torch.Dataset(case.path)
    gen = torch.Generator().manual_seed(0)
    loader = DataLoader(ds, batch_size=case.batch_size, shuffle=True, num_workers=0, generator=gen)
    result = timed_pass(NAME, loader, case.sample_bytes, case.budget_s, batch_len)
    ds.close()
    return [result]


def workloads(case: WorkloadCase, workers: int) -> Iterable[Any] | None:
    """``h5torch.Dataset`` (when installed) in a random order at ``workers`` workers."""
    h5torch = _module()
    if h5torch is None:
        return None
    ds = h5torch.Dataset(case.path)
    gen = torch.Generator().manual_seed(0)
    # h5torch's Dataset holds an open h5py File, which cannot be pickled: it reaches workers
    # only by fork, what its users must ask for where forkserver is the default (Python 3.14)
    context = "fork" if workers else None
    return DataLoader(
        ds,
        batch_size=case.batch_size,
        shuffle=True,
        num_workers=workers,
        generator=gen,
        multiprocessing_context=context,
    )


register(Peer(NAME, "peer", {"layouts": layouts, "workloads": workloads}))
