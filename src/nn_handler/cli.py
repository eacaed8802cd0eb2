"""The ``nn-handler`` command: ``inspect``, ``rewrite``, ``bench`` and ``demo``.

Exit codes: 0 success, 2 bad usage (argparse), 1 errors. Errors print one line without a
traceback unless ``--debug`` is given. Every subcommand is built from the public library API.
``inspect`` and ``bench`` take a URL wherever they take a file, with ``--storage-option``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from . import __version__
from ._inspect.values import one_line, safe_text
from ._validate import format_bytes
from .h5inspect import DatasetReport, FileReport, StructureReport, inspect_file, similar_runs

__all__ = ["main"]

# ImportError: a URL whose filesystem package is missing (the message names the package)
_EXPECTED_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError, ImportError)
_URL_HELP = (
    "path of the HDF5 file, or a URL: s3://bucket/key, gs://, az://, http(s)://, any fsspec "
    "URL (credentials from the environment, or --storage-option)"
)
_STORAGE_OPTION_HELP = (
    "for a URL: one fsspec storage option (repeatable), as storage_options={KEY: VALUE}; VALUE "
    'is parsed as JSON when it parses (true, 3, {"region_name": "eu-west-1"}), else kept '
    "as a string; e.g. --storage-option anon=true --storage-option endpoint_url=http://host:9000"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except _EXPECTED_ERRORS as exc:
        if args.debug:
            raise
        message = safe_text(_one_line(exc))  # messages may quote names from a file
        print(f"nn-handler {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"nn-handler {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror  # our messages already name the path
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nn-handler",
        description="Inspect, benchmark and demo fast HDF5 loading for PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"nn-handler {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_inspect(sub, common)
    _add_rewrite(sub, common)
    _add_demo(sub, common)
    _add_bench(sub, common)
    return parser


def _add_inspect(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="show a file's groups, datasets, layout and loading advice",
        description="Print the tree of groups and datasets of an HDF5 file (shape, dtype, "
        "layout, chunking, filters, compression ratio, bytes per sample, attributes) and "
        "specific advice on how to load it fast.",
    )
    p.add_argument("file", help=_URL_HELP)
    _add_storage_option(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--max-datasets", type=int, default=200, help="datasets described in full (default 200)"
    )
    p.set_defaults(handler=_run_inspect)


def _add_storage_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage-option",
        dest="storage_options",
        action="append",
        type=_storage_option,
        metavar="KEY=VALUE",
        help=_STORAGE_OPTION_HELP,
    )


def _storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``: VALUE as JSON when it parses, else the string itself."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def _storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    pairs: list[tuple[str, Any]] | None = args.storage_options
    return None if pairs is None else dict(pairs)


def _add_rewrite(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "rewrite",
        parents=[common],
        help="write a file again in the layout that trains fastest, and check it",
        description="Write IN again as OUT: every dataset chunked along axis 0 in whole rows "
        "(~--chunk-bytes per chunk), compressed on every core; sparse matrices with indptr "
        "recomputed; groups, attributes and dimension scales carried over; optionally rows in a "
        "seeded shuffled order. OUT is written under a temporary name, verified row by row "
        "against IN, then renamed. See docs/cli.md.",
    )
    p.add_argument("input", metavar="IN", help="the HDF5 file (a path or an s3:// / https:// URL)")
    p.add_argument("output", metavar="OUT", help="the file to write (never IN)")
    p.add_argument(
        "--keys", nargs="+", metavar="KEY", help="datasets or groups to write (default all)"
    )
    p.add_argument("--chunk-bytes", default="1MiB", help="decoded bytes per chunk (default 1MiB)")
    p.add_argument("--sparse-chunk-bytes", default="16KiB",
                   help="bytes per chunk of a sparse matrix's data (default 16KiB)")  # fmt: skip
    p.add_argument("--codec", choices=("zstd", "lz4", "gzip", "none"), default=None,
                   help="default: zstd (gzip without hdf5plugin), none for data that does not "
                   "compress")  # fmt: skip
    p.add_argument("--level", type=int, default=None, help="zstd 1-22 (3), gzip 1-9 (4)")
    p.add_argument("--dtype", action="append", default=[], metavar="KEY=DTYPE",
                   help="write KEY as DTYPE, e.g. x=float32 (repeatable)")  # fmt: skip
    p.add_argument(
        "--shuffle-rows",
        type=int,
        metavar="SEED",
        help="write rows in a seeded random order (stored at /_nn_handler/row_order)",
    )
    p.add_argument("--memory", default="2GiB", help="memory the rewrite may use (default 2GiB)")
    p.add_argument("--no-verify", action="store_true", help="skip the row-by-row check")
    p.add_argument(
        "--verify-rows",
        type=int,
        metavar="N",
        help="check a seeded sample of N rows per dataset instead of every row",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--workers", type=int, help="compression threads (default: every core)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _add_storage_option(p)
    p.set_defaults(handler=_run_rewrite, parser=p)


def _pairs(items: list[str], flag: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            parser.error(f"{flag} wants NAME=VALUE, got {item!r}")
        out[key] = value
    return out


def _run_rewrite(args: argparse.Namespace) -> int:
    from .rewrite import rewrite_file

    report = rewrite_file(
        args.input,
        args.output,
        keys=args.keys,
        chunk_bytes=args.chunk_bytes,
        sparse_chunk_bytes=args.sparse_chunk_bytes,
        codec=args.codec,
        level=args.level,
        dtypes=_pairs(args.dtype, "--dtype", args.parser),
        shuffle_rows=args.shuffle_rows,
        memory=args.memory,
        verify=not args.no_verify,
        verify_rows=args.verify_rows,
        dry_run=args.dry_run,
        force=args.force,
        workers=args.workers,
        progress=False if args.no_progress else None,
        storage_options=_storage_options(args),
    )
    print(report.format())
    return 0


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


def _add_demo(sub: Any, common: argparse.ArgumentParser) -> None:
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
    from .demo import run_demo, write_demo_data

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
            f"  training {s.train_samples_per_s:,.0f} samples/s per process; "
            f"loader alone {s.loader_samples_per_s:,.0f} samples/s",
            f"  data: {where}",
        ]
    )


def _add_bench(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bench",
        parents=[common],
        help="time the loader strategies on your file (or the synthetic suite)",
        description="Time every loader strategy on FILE for a bounded time each and recommend "
        "one; with --synthetic, run the benchmark suite on generated data instead. On a URL "
        "every strategy reads over the network (no cache), the baseline is h5py on an fsspec "
        "file object, and --cache-dir DIR also times a node-local cache being filled and read.",
    )
    p.add_argument("file", nargs="?", help=_URL_HELP)
    _add_storage_option(p)
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
    p.add_argument("--synthetic", action="store_true", help="run the benchmark suite")
    p.add_argument("--n", type=int, default=50_000, help="--synthetic: samples per layout")
    p.add_argument("--layouts", help="--synthetic: comma-separated layouts (default: all)")
    p.set_defaults(handler=_run_bench, parser=p)


def _run_bench(args: argparse.Namespace) -> int:
    if args.synthetic == bool(args.file):
        args.parser.error("give either FILE (with --x-key) or --synthetic")
    if args.synthetic and (args.storage_options or args.cache_dir):
        args.parser.error("--storage-option and --cache-dir apply to a FILE URL, not --synthetic")
    if args.synthetic:
        from .bench import run_suite

        layouts = args.layouts.split(",") if args.layouts else None
        run_suite(args.n, args.seconds, layouts, args.batch_size)
        return 0
    if not args.x_key:
        args.parser.error("--x-key is required with FILE")
    from .bench import bench_file

    report = bench_file(
        args.file,
        args.x_key,
        args.y_key,
        seconds=args.seconds,
        batch_size=args.batch_size,
        storage_options=_storage_options(args),
        cache_dir=args.cache_dir,
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
    lines.extend(f"skipped: {s}" for s in report.skipped)
    lines.append("\nrecommendation:")
    lines.extend(f"  - {a}" for a in report.recommendation)
    return "\n".join(lines)


def _run_inspect(args: argparse.Namespace) -> int:
    if args.max_datasets < 1:
        raise ValueError(f"--max-datasets must be >= 1, got {args.max_datasets}")
    report = inspect_file(
        args.file, max_datasets=args.max_datasets, storage_options=_storage_options(args)
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report))
    return 0


_MAX_ATTRS = 6  # per object in text; --json lists them all
_MAX_FIELDS = 8
_MAX_KEYS = 6


def format_report(report: FileReport) -> str:
    """Render an inspection report as an indented, human-readable tree.

    Attributes are one line each (cut to a width), names and values have control characters
    escaped, internal datasets of recognised structures (PyTables indexes) are summarised by
    their structure, and runs of alike datasets are collapsed to "… N more datasets of the
    same shape".
    """
    lines = [
        f"{safe_text(report.path)}  ({format_bytes(report.file_bytes)}, "
        f"superblock v{report.superblock_version}"
        f"{', SWMR-format' if report.swmr_mode_capable else ''})"
    ]
    lines.extend(f"  error: {safe_text(e)}" for e in report.errors)
    for s in report.structures:
        lines.extend(_structure_lines(s))
    hidden = {m for s in report.structures if s.kind == "pytables-index" for m in s.members}
    internal = tuple(s.path + "/" for s in report.structures if s.kind == "pytables-index")
    for group in report.groups:
        if group.attrs and not group.path.startswith(internal):
            lines.append(f"  group {safe_text(group.path)}")
            lines.extend(_attr_lines(group.attrs))
    shown = [d for d in report.datasets if d.path not in hidden]
    for d, more in similar_runs(shown):
        lines.extend(_dataset_lines(d))
        if more:
            lines.append(f"  … {more} more datasets of the same shape and type")
    if report.omitted_datasets:
        lines.append(f"  … {report.omitted_datasets} more datasets not shown (--max-datasets)")
    if report.advice:
        lines.append("advice:")
        lines.extend(f"  - {safe_text(a)}" for a in report.advice)
    # names and attributes come from the file: never let them drive the terminal
    return "\n".join(safe_text(line) for line in lines)


def _structure_lines(s: StructureReport) -> list[str]:
    lines = [f"  {s.kind} {safe_text(s.path)}: {safe_text(s.description)}"]
    if s.keys:
        keys = ", ".join(repr(safe_text(k)) for k in s.keys[:_MAX_KEYS])
        more = f", … {len(s.keys) - _MAX_KEYS} more" if len(s.keys) > _MAX_KEYS else ""
        lines.append(f"      keys: {keys}{more}")
    if s.usage:
        lines.append(f"      use: {safe_text(s.usage)}")
    return lines


def _dataset_lines(d: DatasetReport) -> list[str]:
    head = f"  {safe_text(d.path)}  shape={d.shape} dtype={safe_text(d.dtype)} layout={d.layout}"
    lines = [head + (f"  [{d.role}]" if d.role else "")]
    if d.error is not None:
        return [*lines, f"      unreadable: {safe_text(d.error)}"]
    storage = [f"stored {format_bytes(d.storage_bytes)}"]
    if d.chunks and d.chunk_bytes is not None:
        size = format_bytes(d.chunk_bytes)
        storage.append(f"chunks={d.chunks} ({d.rows_per_chunk} rows/chunk, {size})")
    if d.filters:
        storage.append(f"filters={'+'.join(d.filters)}")
    if d.compression_ratio is not None:
        storage.append(f"ratio {d.compression_ratio:.2f}x")
    if d.bytes_per_sample is not None:
        storage.append(f"{format_bytes(d.bytes_per_sample)}/sample")
    if d.read_strategy:
        storage.append(f"reads: {d.read_strategy}")
    lines.append("      " + ", ".join(storage))
    for f in d.fields[:_MAX_FIELDS]:
        shape = f" {f.shape}" if f.shape else ""
        lines.append(
            f"      field {safe_text(f.name)} ({f.dtype}{shape}): key {safe_text(f.key)!r}"
        )
    if len(d.fields) > _MAX_FIELDS:
        lines.append(f"      … {len(d.fields) - _MAX_FIELDS} more fields (--json lists all)")
    lines.extend(_attr_lines(d.attrs))
    lines.extend(f"      advice: {safe_text(a)}" for a in d.advice)
    return lines


def _attr_lines(attrs: dict[str, Any]) -> list[str]:
    lines = [
        f"      @{safe_text(k)} = {one_line(v, 80)}" for k, v in list(attrs.items())[:_MAX_ATTRS]
    ]
    if len(attrs) > _MAX_ATTRS:
        lines.append(f"      … {len(attrs) - _MAX_ATTRS} more attributes (--json lists all)")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
