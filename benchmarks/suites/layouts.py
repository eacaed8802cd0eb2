"""The layout suite (``python benchmarks/run.py``): ours, peers and limits on every layout.

Writes synthetic 3×32×32 float32 images in each layout (contiguous; chunked; chunked + gzip;
chunked + gzip + shuffle; blosc / zstd when ``hdf5plugin`` is installed) and times, on each
file in one process: the baseline, every peer in the registry with a ``"layouts"`` adapter
(``(Case) -> list[Result]``, empty when skipped), our random-order loaders, every registered
limit, then our one-pass reads; one Markdown table per layout with the ratios, the
shuffle-quality table and the targets. Our loaders and the tables are the package's own
(``nn_handler.bench.suite``), the peers and targets are this suite's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from nn_handler.bench.contenders import (
    BASELINE,
    H5PY_LOAD,
    LIMIT,
    NAIVE,
    ONE_PASS,
    PRELOAD,
    RANDOM_ORDER,
    Contender,
)
from nn_handler.bench.suite import SEQUENTIAL_H5PY, Table, run_suite

from ..harness import Check, format_targets
from ..registry import adapters
from .workloads import run_workloads

__all__ = ["contenders", "main", "run", "targets"]

CHUNK_SAMPLER = "H5LazyDataset batched, ChunkShuffleSampler"


def contenders() -> list[Contender]:
    """Baseline, peers, our random-order loaders, limits, our one-pass reads: the row order."""
    return [
        *BASELINE,
        *adapters("layouts", kind="peer").values(),
        *RANDOM_ORDER,
        *adapters("layouts", kind="limit").values(),
        *ONE_PASS,
    ]


def run(n: int = 50_000, seconds: float = 10.0, **options: Any) -> list[Table]:
    """Run the suite and print its tables, shuffle quality and targets; return the tables.

    Arguments as ``nn_handler.bench.run_suite``'s, with this suite's contenders (the baseline,
    the registered peers, our loaders, the registered limits, the one-pass reads).

    Raises:
        ValueError: an unknown layout name (the message lists the known ones).
    """
    out = options.get("out", print)
    tables = run_suite(n, seconds, contenders=contenders(), **options)
    out(targets(tables))
    return tables


def targets(tables: list[Table]) -> str:
    """The targets on the chunked + gzip layout, measured."""
    lines = ["\n## Targets (chunked-64+gzip)\n"]
    gzip = next((t for t in tables if t.layout == "chunked-64+gzip"), None)
    if gzip is None:
        return "\n".join([*lines, "- chunked-64+gzip was not run"])
    goals = [
        ("ChunkShuffleSampler / naive >= 20", CHUNK_SAMPLER, NAIVE, 20.0),
        ("ChunkShuffleSampler / sequential limit >= 0.7", CHUNK_SAMPLER, LIMIT, 0.7),
        ("read_range / sequential h5py >= 1.5", "sequential read_range", SEQUENTIAL_H5PY, 1.5),
        ("rank-cache preload / h5py load into RAM >= 1.5", PRELOAD, H5PY_LOAD, 1.5),
    ]
    checks = []
    for label, num, den, goal in goals:
        top, bottom = gzip.rate(num), gzip.rate(den)
        ratio = None if top is None or bottom is None else top / bottom
        checks.append(Check(label, ratio, goal))
    return "\n".join([*lines, *format_targets(checks)])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python benchmarks/run.py [--n N] [--seconds S] [--layouts a,b]``.

    ``--workloads W1,W2,W3,W4`` runs the streaming workloads instead (``suites.workloads``):
    ``num_workers`` 0 and 2, limits, peers and shuffle quality, medians of ``--rounds``.
    """
    parser = argparse.ArgumentParser(description="nn_handler benchmark suite")
    parser.add_argument("--n", type=int, default=50_000, help="samples per layout")
    parser.add_argument("--seconds", type=float, default=10.0, help="budget per contender")
    parser.add_argument("--layouts", default=None, help="comma-separated layout names")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--chunk-rows", type=int, default=64)
    parser.add_argument("--workdir", default=None, help="directory for the temporary files")
    parser.add_argument(
        "--workloads",
        default=None,
        help="comma-separated workloads (W1,W2,W3,W4,W2-blosc-lz4,W2-zstd,RC) instead of layouts",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="workloads: rows × this")
    parser.add_argument("--rounds", type=int, default=3, help="workloads: alternating rounds")
    args = parser.parse_args(argv)
    if args.workloads:
        run_workloads(
            args.workloads.split(","),
            scale=args.scale,
            seconds=args.seconds,
            rounds=args.rounds,
            batch_size=args.batch_size,
            workdir=args.workdir,
        )
        return 0
    layouts = args.layouts.split(",") if args.layouts else None
    run(
        args.n,
        args.seconds,
        layouts=layouts,
        batch_size=args.batch_size,
        chunk_rows=args.chunk_rows,
        workdir=args.workdir,
    )
    return 0
