"""Index every file of an ``H5SampleDataset``: from its sidecar when valid, else by listing it.

Files are indexed in order and only as far as ``limit`` needs. Each file's result is what the
sidecar stores, so a sidecar is reusable by any dataset with the same group and pattern.

A sidecar is checked against the file before use: it must carry the group's fingerprint (link
count and object header, read from the open file), hold at most as many names as the group has
links, and every name must be a well-formed link name that matches ``pattern``; its first and
last names must be datasets of the group. Its size is capped from the group's link count. Any
failure means the index is built again by listing the group.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._io import H5Source, group_fingerprint, is_dataset_member, open_group
from ..._validate import format_names
from .index import SKIPPED_KEPT, FileIndex, NamePattern, list_samples
from .sidecar import file_stamp, load_sidecar, save_sidecar

__all__ = ["IndexResult", "index_files"]

_log = logging.getLogger(__name__)
_MAX_NAME_BYTES = 4096  # longer link names are possible but not in a sidecar we trust


@dataclass(frozen=True)
class IndexResult:
    """Per-file indexes (up to what ``limit`` needs), where each came from, members skipped.

    ``origins`` holds one entry per file: ``"built"`` (listed now), ``"sidecar"`` (loaded) or
    ``"unused"`` (past ``limit``, never opened).
    """

    files: list[FileIndex]
    origins: tuple[str, ...]
    skipped: int


def index_files(
    sources: list[H5Source],
    group: str,
    pattern: NamePattern | None,
    limit: int | None,
    use_sidecar: bool,
) -> IndexResult:
    """Index ``sources`` in order; raise ``ValueError`` when no sample is found at all."""
    params = {"group": group, "pattern": None if pattern is None else _pattern_key(pattern)}
    files: list[FileIndex] = []
    origins: list[str] = []
    total = 0
    for source in sources:
        if limit is not None and total >= limit:
            origins.append("unused")
            continue
        index, origin = _file_index(source, group, pattern, params, use_sidecar)
        _report_file(source, group, index)
        files.append(index)
        origins.append(origin)
        total += len(index)
    if total == 0:
        raise _nothing_found(sources, group, pattern, files)
    return IndexResult(files, tuple(origins), sum(f.skipped for f in files))


def _file_index(
    source: H5Source,
    group: str,
    pattern: NamePattern | None,
    params: dict[str, Any],
    use_sidecar: bool,
) -> tuple[FileIndex, str]:
    if not use_sidecar or not source.is_path:  # a URL has no folder next to it to write in
        return list_samples(open_group(source, group), pattern), "built"
    stamp = file_stamp(source.path)  # taken before listing: a change during the build invalidates
    opened = open_group(source, group)
    fingerprint = group_fingerprint(opened)
    nlinks = fingerprint[0]
    checked = {**params, "fingerprint": fingerprint}
    cached = load_sidecar(source.path, checked, _limits(nlinks))
    loaded = None if cached is None else _from_sidecar(*cached, opened, pattern, nlinks)
    if loaded is not None:
        return loaded, "sidecar"
    if cached is not None:
        _log.debug("sidecar of %r does not match the file; rebuilding the index", source.path)
    index = list_samples(opened, pattern)
    header = {**checked, **stamp, "skipped": index.skipped}
    header.update(skipped_names=list(index.skipped_names), listed=list(index.listed))
    save_sidecar(source.path, {"blob": index.blob, "offsets": index.offsets}, header)
    return index, "built"


def _limits(nlinks: int) -> dict[str, int]:
    """Largest sidecar members a group of ``nlinks`` links can need."""
    return {"blob": nlinks * _MAX_NAME_BYTES, "offsets": 8 * (nlinks + 1)}


def _from_sidecar(
    arrays: dict[str, np.ndarray[Any, Any]],
    header: dict[str, Any],
    group: Any,
    pattern: NamePattern | None,
    nlinks: int,
) -> FileIndex | None:
    """The sidecar's index, or None when it does not hold together or does not fit the file."""
    try:
        blob, offsets = arrays["blob"], arrays["offsets"]
        index = FileIndex(
            blob=blob.astype(np.uint8, copy=False),
            offsets=offsets.astype(np.int64, copy=False),
            skipped=int(header["skipped"]),
            skipped_names=tuple(map(str, header["skipped_names"][:SKIPPED_KEPT])),
            listed=tuple(map(str, header["listed"][:SKIPPED_KEPT])),
        )
    except (KeyError, TypeError, ValueError):
        return None
    sane = (
        blob.dtype == np.uint8
        and offsets.ndim == 1
        and 1 <= len(offsets) <= nlinks + 1
        and offsets[0] == 0
        and offsets[-1] == len(blob)
        and bool(np.all(np.diff(offsets) >= 1))
        and 0 <= index.skipped <= nlinks
    )
    if not sane or not _names_fit(index, group, pattern):
        return None
    return index


def _names_fit(index: FileIndex, group: Any, pattern: NamePattern | None) -> bool:
    """Every name is a link name ``pattern`` selects; the first and last are datasets here."""
    blob, bounds = index.blob.tobytes(), index.offsets.tolist()
    names = [blob[a:b] for a, b in itertools.pairwise(bounds)]
    for name in names:
        if len(name) > _MAX_NAME_BYTES or b"/" in name or b"\0" in name or name in (b".", b".."):
            return False
        if pattern is not None and not pattern.matches(name.decode("utf-8", "surrogateescape")):
            return False
    if len(set(names)) != len(names):
        return False
    return all(is_dataset_member(group, n) for n in {names[0], names[-1]}) if names else True


def _report_file(source: H5Source, group: str, index: FileIndex) -> None:
    if index.skipped:
        _log.warning(
            "%s: skipped %d member(s) of group %r that are not datasets: %s",
            source.path,
            index.skipped,
            group,
            format_names(index.skipped_names) + (" …" if index.skipped > SKIPPED_KEPT else ""),
        )
    if len(index) == 0:
        _log.warning("%s: no sample datasets in group %r", source.path, group)


def _nothing_found(
    sources: list[H5Source], group: str, pattern: NamePattern | None, files: list[FileIndex]
) -> ValueError:
    where = f"group {group!r} of {format_names(s.path for s in sources)}"
    listed = sorted({n for f in files for n in f.listed})
    if pattern is not None:
        return ValueError(
            f"pattern={pattern.describe()!r} matches no dataset in {where}; "
            f"members there include: {format_names(listed)}"
        )
    return ValueError(f"no datasets in {where}; members there: {format_names(listed)}")


def _pattern_key(pattern: NamePattern) -> list[Any]:
    return [pattern.kind, pattern.text, pattern.flags]
