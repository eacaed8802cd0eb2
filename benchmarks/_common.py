"""Shared helpers for the benchmark scripts: timing with a budget, tables, synthetic files.

Every script measures its baseline and its limit in the same process, on the same data, and
reports ratios: absolute numbers drift on shared machines, ratios much less.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
import torch


@dataclass
class Result:
    """One timed measurement."""

    name: str
    samples: int
    seconds: float
    sample_bytes: int

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("nan")

    @property
    def mb_per_s(self) -> float:
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


def batch_len(batch: Any) -> int:
    """Number of samples in a collated batch: ``x`` or ``(x, y)``."""
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(first.shape[0])


def shuffled_batches(n: int, batch_size: int, seed: int = 0) -> Iterator[np.ndarray]:
    """The index batches of one shuffled pass (the same order for every contender)."""
    order = np.random.default_rng(seed).permutation(n)
    for i in range(0, n, batch_size):
        yield order[i : i + batch_size]


def print_table(title: str, rows: list[Result], ratios: dict[str, tuple[str, str]]) -> None:
    """Print results and named ratios ``{label: (numerator name, denominator name)}``."""
    print(f"\n## {title}\n")
    print("| loader | samples | s | samples/s | MB/s |")
    print("|---|---:|---:|---:|---:|")
    by_name = {r.name: r for r in rows}
    for r in rows:
        print(f"| {r.name} | {r.samples} | {r.seconds:.2f} | {r.rate:,.0f} | {r.mb_per_s:,.0f} |")
    if ratios:
        print()
        for label, (num, den) in ratios.items():
            if num in by_name and den in by_name:
                print(f"- {label}: {by_name[num].rate / by_name[den].rate:.2f}×")


def machine_line() -> str:
    """One line describing the machine and library versions."""
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}, numpy {np.__version__}"
    )


LAYOUTS: dict[str, dict[str, Any]] = {
    "contiguous": {},
    "chunked-64": {"chunks": True},
    "chunked-64+gzip": {"chunks": True, "compression": "gzip"},
}


def write_images(path: str, n: int, layouts: Iterable[str], chunk_rows: int = 64) -> np.ndarray:
    """Write ``n`` float32 images of 3×32×32 in each layout (keys = layout names) + labels."""
    rng = np.random.default_rng(0)
    # smooth-ish images compress like real data (white noise would not compress at all)
    base = rng.standard_normal((n, 3, 1, 32)).astype(np.float32)
    images = np.repeat(base, 32, axis=2) + rng.standard_normal((n, 3, 32, 32)).astype(
        np.float32
    ) * np.float32(0.05)
    images = np.round(images, 2)
    with h5py.File(path, "w") as f:
        f["labels"] = rng.integers(0, 10, size=n)
        for name in layouts:
            kw = dict(LAYOUTS[name])
            if kw.pop("chunks", False):
                kw["chunks"] = (chunk_rows, 3, 32, 32)
            f.create_dataset(name, data=images, **kw)
    return images
