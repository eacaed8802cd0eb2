"""``nn-handler bench``: time the loader strategies on a file (or the synthetic suite)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._validate import format_bytes
from ._options import URL_HELP, add_storage_option, storage_options_of


def add_bench(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bench",
        parents=[common],
        help="time the loader strategies on your file (or the synthetic suite)",
        description="Time every loader strategy on FILE for a bounded time each and recommend "
        "one; with --synthetic, run the benchmark suite on generated data instead. On a URL "
        "every strategy reads over the network (no cache), the baseline is h5py on an fsspec "
        "file object, and --cache-dir DIR also times a node-local cache being filled and read.",
    )
    p.add_argument("file", nargs="?", help=URL_HELP)
    add_storage_option(p)
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="for a URL: also time the fastest strategy filling a node-local cache in DIR and "
        "reading it back (in a scratch folder inside DIR, removed afterwards)",
    )
    p.add_argument("--x-key", help="dataset of the inputs (required with FILE)")
    p.add_argument("--y-key", help="dataset of the targets (optional)")
    p.add_argument("--seconds", type=float, default=3.0, help="budget per strategy (default 3)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument(
        "--step-ms",
        type=float,
        metavar="MS",
        help="your training step's length: also time the fastest strategy under a simulated "
        "step of MS milliseconds at each num_workers, and print the wait share of each and "
        "the smallest num_workers that keeps it under 5 %%",
    )
    p.add_argument("--synthetic", action="store_true", help="run the benchmark suite")
    p.add_argument("--n", type=int, default=50_000, help="--synthetic: samples per layout")
    p.add_argument("--layouts", help="--synthetic: comma-separated layouts (default: all)")
    p.set_defaults(handler=_run_bench, parser=p)


def _run_bench(args: argparse.Namespace) -> int:
    if args.synthetic == bool(args.file):
        args.parser.error("give either FILE (with --x-key) or --synthetic")
    if args.synthetic and (args.storage_options or args.cache_dir):
        args.parser.error("--storage-option and --cache-dir apply to a FILE URL, not --synthetic")
    if args.synthetic and args.step_ms is not None:
        args.parser.error("--step-ms applies to a FILE, not --synthetic")
    if args.synthetic:
        from ..bench import run_suite

        layouts = args.layouts.split(",") if args.layouts else None
        run_suite(args.n, args.seconds, layouts, args.batch_size)
        return 0
    if not args.x_key:
        args.parser.error("--x-key is required with FILE")
    from ..bench import bench_file

    report = bench_file(
        args.file,
        args.x_key,
        args.y_key,
        seconds=args.seconds,
        batch_size=args.batch_size,
        storage_options=storage_options_of(args),
        cache_dir=args.cache_dir,
        step_ms=args.step_ms,
        log_fn=lambda line: print(line, file=sys.stderr),
    )
    print(format_bench(report))
    return 0


def format_bench(report: Any) -> str:
    """Render a ``bench_file`` report: a table with ratios to the best, then the advice."""
    best = report.best.rate
    lines = [
        f"{report.path}: {report.x_key}"
        + (f" + {report.y_key}" if report.y_key else "")
        + f", {report.samples} samples of {format_bytes(report.sample_bytes)}, reads: "
        f"{report.strategy}" + (f", {report.chunk_rows} rows/chunk" if report.chunk_rows else ""),
        "",
        "| strategy | samples/s | MB/s | vs best |",
        "|---|---:|---:|---:|",
    ]
    for r in report.results:
        lines.append(f"| {r.name} | {r.rate:,.0f} | {r.mb_per_s:,.1f} | {r.rate / best:.2f} |")
    if report.remote:
        lines.append(
            "\nover the network, without cache_dir: each pass fetches again every chunk the "
            "process no longer holds decoded (ChunkShuffleSampler holds its window; other "
            "orders up to rdcc_nbytes of decoded chunks, so a small file is fetched once)"
        )
    if report.preload_s is not None:
        lines.append(f"\nRankMemCachedH5Dataset preload: {report.preload_s:.2f} s")
    if report.step_ms is not None:
        lines.extend(_step_lines(report))
    lines.extend(f"skipped: {s}" for s in report.skipped)
    lines.append("\nrecommendation:")
    lines.extend(f"  - {a}" for a in report.recommendation)
    return "\n".join(lines)


def _step_lines(report: Any) -> list[str]:
    from ..bench.step_wait import LIMIT, enough_workers

    lines = [
        f"\nwith a {report.step_ms:g} ms step ({report.step_strategy}):",
        "| num_workers | step waits | samples/s |",
        "|---:|---:|---:|",
    ]
    for w in report.step_waits:
        lines.append(f"| {w.workers} | {w.wait_share:.1%} | {w.samples_per_s:,.0f} |")
    enough = enough_workers(report.step_waits)
    if enough is not None:
        lines.append(f"num_workers={enough.workers} keeps the wait under {LIMIT:.0%}")
    else:
        last = report.step_waits[-1]
        lines.append(
            f"no setting keeps the wait under {LIMIT:.0%} (at num_workers={last.workers}: "
            f"{last.wait_share:.0%}): this file and order cannot feed a {report.step_ms:g} ms "
            "step on this machine; see the recommendation below for a faster order or layout"
        )
    return lines
