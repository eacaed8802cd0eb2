"""Timing with a budget, results and tables: shared by the benchmark suite and scripts.

Every benchmark measures its baseline and its limit in the same process, on the same data, and
reports ratios: absolute numbers drift on shared machines, ratios much less.
"""

from __future__ import annotations

import itertools
import os
import platform
import time
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
import torch

__all__ = [
    "Result",
    "batch_len",
    "best_of",
    "check_names",
    "epochs",
    "format_table",
    "machine_line",
    "print_table",
    "shuffled_batches",
    "timed_call",
    "timed_pass",
]


@dataclass
class Result:
    """One timed measurement: ``samples`` read in ``seconds``, ``sample_bytes`` each."""

    name: str
    samples: int
    seconds: float
    sample_bytes: int

    @property
    def rate(self) -> float:
        """Samples per second."""
        return self.samples / self.seconds if self.seconds > 0 else float("nan")

    @property
    def mb_per_s(self) -> float:
        """Decoded megabytes (1e6 bytes) per second."""
        return self.rate * self.sample_bytes / 1e6


def timed_pass(
    name: str,
    batches: Iterable[Any],
    sample_bytes: int,
    budget_s: float,
    count: Callable[[Any], int],
    warmup: int = 2,
) -> Result:
    """Consume ``batches`` until exhausted or ``budget_s`` elapsed; count samples seen.

    The first ``warmup`` batches are consumed untimed (allocator, page faults, worker start).
    """
    it = iter(batches)
    for _ in range(warmup):
        next(it, None)
    samples = 0
    start = time.perf_counter()
    for batch in it:
        samples += count(batch)
        if time.perf_counter() - start > budget_s:
            break
    return Result(name, samples, time.perf_counter() - start, sample_bytes)


def epochs(loader: Any, sampler: Any = None) -> Generator[Any, None, None]:
    """Epoch after epoch of ``loader``, as a training loop iterates, to fill a time budget.

    ``set_epoch(epoch)`` is called on ``sampler`` (default: the loader's, if any) before each
    epoch when it has one; ``loader`` may be any iterable. Stops after an epoch that yields nothing.
    """
    for epoch in itertools.count():
        owner = getattr(loader, "sampler", None) if sampler is None else sampler
        set_epoch = getattr(owner, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        served = False
        for batch in loader:
            served = True
            yield batch
        if not served:
            return


def timed_call(name: str, fn: Callable[[], int], sample_bytes: int) -> Result:
    """Time one call of ``fn``, which returns how many samples it read."""
    start = time.perf_counter()
    samples = fn()
    return Result(name, samples, time.perf_counter() - start, sample_bytes)


def best_of(
    calls: list[tuple[str, Callable[[], int]]], sample_bytes: int, rounds: int
) -> list[Result]:
    """Each ``(name, fn)`` timed once per round, ``rounds`` rounds; the fastest of each.

    ``fn`` returns how many samples it read. The calls alternate within every round, so they
    share the machine's noise. Results come back in the order of ``calls``.
    """
    best: dict[str, Result] = {}
    for _ in range(rounds):
        for name, fn in calls:
            result = timed_call(name, fn, sample_bytes)
            if name not in best or result.rate > best[name].rate:
                best[name] = result
    return [best[name] for name, _ in calls]


def batch_len(batch: Any) -> int:
    """Number of samples in a collated batch: ``x``, ``(x, y)`` or a dict of fields."""
    if isinstance(batch, Mapping):
        batch = next(iter(batch.values()))
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(first.shape[0])


def shuffled_batches(n: int, batch_size: int, seed: int = 0) -> Iterator[np.ndarray[Any, Any]]:
    """The index batches of one shuffled pass (the same order for every contender)."""
    order = np.random.default_rng(seed).permutation(n)
    for i in range(0, n, batch_size):
        yield order[i : i + batch_size]


def print_table(title: str, rows: list[Result], ratios: dict[str, tuple[str, str]]) -> None:
    """Print results and named ratios ``{label: (numerator name, denominator name)}``."""
    print(format_table(title, rows, ratios))


def format_table(title: str, rows: list[Result], ratios: dict[str, tuple[str, str]]) -> str:
    """Return ``print_table``'s Markdown text."""
    lines = [
        f"\n## {title}\n",
        "| loader | samples | s | samples/s | MB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    by_name = {r.name: r for r in rows}
    for r in rows:
        lines.append(
            f"| {r.name} | {r.samples} | {r.seconds:.2f} | {r.rate:,.0f} | {r.mb_per_s:,.0f} |"
        )
    shown = [
        (label, num, den)
        for label, (num, den) in ratios.items()
        if num in by_name and den in by_name
    ]
    if shown:
        lines.append("")
        lines.extend(
            f"- {label}: {by_name[num].rate / by_name[den].rate:.2f}×" for label, num, den in shown
        )
    return "\n".join(lines)


def machine_line() -> str:
    """One line describing the machine and library versions."""
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}, numpy {np.__version__}"
    )


def check_names(what: str, chosen: Iterable[str], known: Collection[str]) -> None:
    """Refuse names a suite does not know (``what``: "layouts", "workloads", ...).

    Raises:
        ValueError: a name of ``chosen`` is not in ``known`` (the message lists the known ones).
    """
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown!r}; known: {', '.join(known)}")
