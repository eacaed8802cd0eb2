"""``nn-handler rewrite``: write a file again in the layout that trains fastest."""

from __future__ import annotations

import argparse
from typing import Any

from ..rewrite.codecs import choices, levels_help
from ._options import add_storage_option, storage_options_of


def add_rewrite(sub: Any, common: argparse.ArgumentParser) -> None:
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
    p.add_argument("--codec", choices=choices(), default=None,
                   help="default: zstd (gzip without hdf5plugin), none for data that does not "
                   "compress")  # fmt: skip
    p.add_argument("--level", type=int, default=None, help=levels_help())
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
    add_storage_option(p)
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
    from ..rewrite import rewrite_file

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
        storage_options=storage_options_of(args),
    )
    print(report.format())
    return 0
