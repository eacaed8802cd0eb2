"""``nn-handler demo``: write a small dataset and train on it with the loaders."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from typing import Any

_SAMPLE_SIZES = {"small": 2000, "default": 8000, "large": 50_000}


def _samples(text: str) -> int:
    if text in _SAMPLE_SIZES:
        return _SAMPLE_SIZES[text]
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 10:
        raise argparse.ArgumentTypeError(
            f"expected small, default, large or a number >= 10, got {text!r}"
        )
    return value


def add_demo(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="write a learnable HDF5 set and train a small model on it",
        description="Write a synthetic, learnable HDF5 dataset (4-class noisy signals, chunked "
        "and gzip-compressed like real recordings), train a small 1-D CNN on it with "
        "NNHandler, evaluate, and report accuracy and throughput.",
    )
    p.add_argument("--out", metavar="DIR", help="write the data here and keep it")
    p.add_argument(
        "--loader",
        choices=("lazy", "rank-cached", "combined"),
        default="lazy",
        help="H5LazyDataset with workers (default), RankMemCachedH5Dataset, or "
        "CombinedHDF5Dataset over several recording files",
    )
    p.add_argument(
        "--samples",
        type=_samples,
        default="default",
        help="small (2000), default (8000), large (50000) or a number",
    )
    p.add_argument("--epochs", type=int, default=3, help="training epochs (default 3)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="DataLoader workers per process (default: 2, fewer per DDP rank)",
    )
    p.add_argument(
        "--distributed",
        type=int,
        default=1,
        metavar="N",
        help="train with DDP on N local processes (gloo)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo, write_demo_data

    with contextlib.ExitStack() as stack:
        folder = args.out or stack.enter_context(tempfile.TemporaryDirectory(prefix="nnh-demo-"))
        print(f"writing {args.samples} samples to {folder} (chunked, gzip) ...")
        data = write_demo_data(folder, args.samples)
        summary = run_demo(
            data,
            loader=args.loader,
            epochs=args.epochs,
            batch_size=args.batch_size,
            workers=args.workers,
            distributed=args.distributed,
            progress=False if args.no_progress else None,
        )
        print(_demo_summary(summary, kept=bool(args.out)))
    return 0


def _demo_summary(s: Any, *, kept: bool) -> str:
    where = (
        s.data_folder
        if kept
        else f"{s.data_folder} (temporary, now deleted; keep it with --out DIR)"
    )
    return "\n".join(
        [
            "",
            f"summary ({s.loader} loader, {s.world_size} process"
            f"{'es' if s.world_size > 1 else ''}, "
            f"{s.epochs} epoch{'s' if s.epochs > 1 else ''}, {s.seconds:.1f} s):",
            f"  validation accuracy {s.val_accuracy:.1%} on {s.val_samples} samples "
            f"(chance {s.chance:.0%}), loss {s.val_loss:.3f}",
            f"  training {s.train_samples_per_s:,.0f} samples/s per process, waiting for data "
            f"{s.train_wait_share:.0%} of the time; loader alone "
            f"{s.loader_samples_per_s:,.0f} samples/s",
            f"  data: {where}",
        ]
    )
