"""``nn-handler bench --step-ms``: how long a training step of a given length waits for data.

The step is simulated by sleeping ``step_ms`` per batch: like a step on a GPU, it leaves the
CPU to the loader (a step that keeps every core busy would leave the workers less). The loader
is the fastest batched strategy ``bench_file`` timed, with ``num_workers`` 0, 1, 2, 4, ... up to
the usable cores, each for the same time; each setting's first batch (workers starting) is left
out. The first setting whose wait is under ``LIMIT`` ends the search.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._validate import usable_cores
from ..dataloaders import H5LazyDataset, WaitMeter, batched_loader
from .timing import epochs

__all__ = ["LIMIT", "StepWait", "enough_workers", "time_step_waits", "worker_counts"]

#: the wait share a loader should keep under to leave the step alone
LIMIT = 0.05


@dataclass(frozen=True)
class StepWait:
    """One ``num_workers`` setting under the simulated step.

    Attributes:
        workers: ``num_workers``.
        wait_share: Part of the time the step waited for its batch.
        samples_per_s: Samples per second through the loop (step included).
    """

    workers: int
    wait_share: float
    samples_per_s: float


def worker_counts(cores: int | None = None) -> list[int]:
    """0, 1, 2, 4, ... up to ``cores`` (the usable cores), which ends the list."""
    cores = usable_cores() if cores is None else cores
    counts, n = [0], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return [*counts, cores] if cores > 0 else counts


def time_step_waits(
    open_dataset: Callable[[], H5LazyDataset],
    sampler_for: Callable[[H5LazyDataset], Any],
    batch_size: int,
    step_ms: float,
    seconds: float,
    say: Callable[[str], None],
) -> list[StepWait]:
    """The wait at each ``worker_counts()`` setting, until one keeps it under ``LIMIT``."""
    found: list[StepWait] = []
    for workers in worker_counts():
        say(f"timing a {step_ms:g} ms step with num_workers={workers} ...")
        ds = open_dataset()
        try:
            loader = batched_loader(
                ds, batch_size, sampler=sampler_for(ds), num_workers=workers,
                persistent_workers=workers > 0,
            )  # fmt: skip
            found.append(_time(loader, workers, step_ms / 1e3, seconds))
        finally:
            ds.close()
        if found[-1].wait_share < LIMIT:
            break
    return found


def enough_workers(waits: list[StepWait]) -> StepWait | None:
    """The smallest setting whose wait is under ``LIMIT`` (None: none of them)."""
    return next((w for w in waits if w.wait_share < LIMIT), None)


def _time(loader: Any, workers: int, step_s: float, seconds: float) -> StepWait:
    meter = WaitMeter(epochs(loader), warmup=1)
    ends = None
    for _batch in meter:
        time.sleep(step_s)
        now = time.perf_counter()
        ends = ends or now + seconds
        if now >= ends:
            break
    summary = meter.summary()
    return StepWait(workers, summary.wait_share, summary.samples_per_s or 0.0)
