"""The work folder next to the output (``PATH + ".parts"``) and its manifest.

The manifest says what the parts hold: rows, datasets (shapes, dtypes), chunk grid, and the
file's attributes (which name the model and the source). Every writer of a job writes the same
manifest; the first to get there creates it (a hard link of a finished temporary file, so no
reader ever sees half of it), the others check theirs against it. Parts made for anything else
(another length, model, key or shape) are refused, never mixed into this file.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST", "FORMAT", "folder_for", "read_manifest", "settle_manifest"]

MANIFEST = "manifest.json"
FORMAT = 1


def folder_for(path: Path) -> Path:
    """The work folder of the output file ``path``."""
    return path.with_name(path.name + ".parts")


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest, or None when there is none yet."""
    try:
        text = (folder / MANIFEST).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    data: dict[str, Any] = json.loads(text)
    return data


def settle_manifest(folder: Path, wanted: Mapping[str, Any]) -> None:
    """Make ``wanted`` the folder's manifest, or check it against the one already there.

    Raises:
        ValueError: the folder holds parts of another output (the message names what differs).
    """
    folder.mkdir(parents=True, exist_ok=True)
    found = read_manifest(folder)
    if found is None:
        found = _create(folder, {"format": FORMAT, **wanted})
    check_same(folder, found, wanted)


def check_same(folder: Path, found: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
    """Raise unless every field of ``wanted`` is the same in ``found``.

    Raises:
        ValueError: naming each field that differs, with both values.
    """
    wanted = {"format": FORMAT, **wanted}
    differ = [
        f"{name}: the parts hold {found.get(name)!r}, this run {value!r}"
        for name, value in wanted.items()
        if found.get(name) != value
    ]
    if differ:
        raise ValueError(
            f"the work folder {str(folder)!r} holds the parts of another output "
            f"({'; '.join(differ)}); they are never mixed into this file: remove the folder "
            "to start afresh, or write to another path"
        )


def _create(folder: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    """Create the manifest unless another writer did first; return the one in place."""
    temporary = folder / f".manifest-{uuid.uuid4().hex}"
    temporary.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
    try:
        os.link(temporary, folder / MANIFEST)  # fails when it exists: never half written
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    found = read_manifest(folder)
    assert found is not None
    return found
