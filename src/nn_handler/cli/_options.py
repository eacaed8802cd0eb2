"""What the subcommands share: a file-or-URL argument and ``--storage-option``."""

from __future__ import annotations

import argparse
import json
from typing import Any

URL_HELP = (
    "path of the HDF5 file, or a URL: s3://bucket/key, gs://, az://, http(s)://, any fsspec "
    "URL (credentials from the environment, or --storage-option)"
)
STORAGE_OPTION_HELP = (
    "for a URL: one fsspec storage option (repeatable), as storage_options={KEY: VALUE}; VALUE "
    'is parsed as JSON when it parses (true, 3, {"region_name": "eu-west-1"}), else kept '
    "as a string; e.g. --storage-option anon=true --storage-option endpoint_url=http://host:9000"
)


def add_storage_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage-option",
        dest="storage_options",
        action="append",
        type=_storage_option,
        metavar="KEY=VALUE",
        help=STORAGE_OPTION_HELP,
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


def storage_options_of(args: argparse.Namespace) -> dict[str, Any] | None:
    pairs: list[tuple[str, Any]] | None = args.storage_options
    return None if pairs is None else dict(pairs)
