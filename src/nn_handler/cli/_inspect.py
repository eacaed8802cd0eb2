"""``nn-handler inspect``: a file's tree, layout and loading advice, as text or JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._inspect.values import one_line, safe_text
from .._validate import format_bytes
from ..h5inspect import DatasetReport, FileReport, StructureReport, inspect_file, similar_runs
from ._options import URL_HELP, add_storage_option, storage_options_of


def add_inspect(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="show a file's groups, datasets, layout and loading advice",
        description="Print the tree of groups and datasets of an HDF5 file (shape, dtype, "
        "layout, chunking, filters, compression ratio, bytes per sample, attributes) and "
        "specific advice on how to load it fast.",
    )
    p.add_argument("file", help=URL_HELP)
    add_storage_option(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--max-datasets", type=int, default=200, help="datasets described in full (default 200)"
    )
    p.set_defaults(handler=_run_inspect)


def _run_inspect(args: argparse.Namespace) -> int:
    if args.max_datasets < 1:
        raise ValueError(f"--max-datasets must be >= 1, got {args.max_datasets}")
    report = inspect_file(
        args.file, max_datasets=args.max_datasets, storage_options=storage_options_of(args)
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
