"""The in-RAM limit (uncompressed data): a NumPy gather of the same random batches from RAM."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import h5py
import numpy as np
import torch

from nn_handler.bench.contenders import LIMIT, X_KEY, Case
from nn_handler.bench.timing import Result, batch_len, shuffled_batches, timed_pass

from ..registry import Peer, register

if TYPE_CHECKING:
    from ..cases import WorkloadCase

NAME = "in-RAM NumPy gather"


def layouts(case: Case) -> list[Result]:
    """Uncompressed layouts: gather the suite's random batches from the images in RAM."""
    if case.compressed:
        return []

    def gather() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for b in shuffled_batches(len(case.images), case.batch_size):
            yield torch.from_numpy(case.images[b]), torch.from_numpy(case.labels[b])

    for _ in gather():  # untimed pass: the first touch of a fresh array runs ~2x slower
        pass
    return [
        timed_pass(f"{LIMIT}: in-RAM gather", gather(), case.sample_bytes, case.budget_s, batch_len)
    ]


class _Gather:
    """The workload's rows loaded into RAM once; ``measure`` gathers random batches."""

    name = NAME

    def __init__(self, case: WorkloadCase) -> None:
        self.case = case
        with h5py.File(case.path, "r") as f:
            self.images = f[X_KEY][()]

    def measure(self) -> tuple[float, float]:
        """(samples/s, samples per CPU-second of this thread)."""
        case = self.case
        order = np.random.default_rng(0).permutation(case.n)
        batches = [order[i : i + case.batch_size] for i in range(0, case.n, case.batch_size)]
        for b in batches[:8]:  # warm: the first touch of fresh memory is slower
            np.take(self.images, b, axis=0)
        samples, start, cpu = 0, time.perf_counter(), time.thread_time()
        for b in batches:
            samples += len(torch.from_numpy(np.take(self.images, b, axis=0)))
            if time.perf_counter() - start > case.budget_s:
                break
        cpu = time.thread_time() - cpu
        return samples / (time.perf_counter() - start), samples / max(cpu, 1e-9)


def workloads(case: WorkloadCase) -> _Gather | None:
    """The limit of an uncompressed workload (None: compressed)."""
    return None if case.workload.compressed else _Gather(case)


register(Peer(NAME, "limit", {"layouts": layouts, "workloads": workloads}))
