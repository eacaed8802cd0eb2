"""``nn-handler regions``: the decoded copies a node holds in shared memory, and a sweep.

A decoded copy (a *region*) lives in its user's folder of ``/dev/shm`` (``NN_HANDLER_SHM_DIR``)
while some process uses it. ``--sweep`` removes those no live process uses or keeps (a job that
was killed): the next process of that user that opens a dataset on the node would do the same.
Run by root, both look at every user's folder.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from .._io import NAMED, RegionInfo, folder_owners, list_regions, sweep_regions
from .._validate import format_bytes


def add_regions(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "regions",
        parents=[common],
        help="list (or sweep) the decoded copies this node holds in shared memory",
        description="List the decoded datasets this node holds in shared memory (/dev/shm, or "
        "NN_HANDLER_SHM_DIR): size, whether a process uses them, which file and dataset. "
        "Your own; every user's when run as root.",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="remove the copies no live process uses (what killed jobs left behind)",
    )
    p.set_defaults(handler=_run_regions)


def _run_regions(args: argparse.Namespace) -> int:
    if not NAMED:  # macOS, Windows: decoded copies are never shared by name there
        print("0 B held: decoded copies are shared by name on Linux only")
        return 0
    users = folder_owners() if os.geteuid() == 0 else [os.geteuid()]
    removed = sum(sweep_regions(uid) for uid in users) if args.sweep else 0
    held = 0
    for uid in users:
        for info in list_regions(uid):
            held += info.nbytes
            state = "in use" if info.in_use else "unused"
            print(f"{state:7} {format_bytes(info.nbytes):>10}  {info.path}  {_what(info)}")
    print(f"{format_bytes(held)} held" + (f"; {removed} unused removed" if args.sweep else ""))
    return 0


def _what(info: RegionInfo) -> str:
    """The dataset and file a region holds, from its description."""
    try:
        source = json.loads(info.description)["source"]
        return f"dataset {source['key']!r} of {source['file']['path']!r}"
    except (ValueError, KeyError, TypeError):
        return "(no description)"
