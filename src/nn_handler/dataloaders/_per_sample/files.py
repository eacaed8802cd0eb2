"""Index every file of an ``H5SampleDataset``: from its sidecar when valid, else by listing it.

Files are indexed in order and only as far as ``limit`` needs. Each file's result is what the
sidecar stores, so a sidecar is reusable by any dataset with the same group and pattern.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validate import format_names
from .._io.members import open_group
from .._io.source import H5Source
from .index import SKIPPED_KEPT, FileIndex, NamePattern, list_samples
from .sidecar import file_stamp, load_sidecar, save_sidecar

__all__ = ["IndexResult", "index_files"]

_log = logging.getLogger(__name__)


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
    if not use_sidecar:
        return list_samples(open_group(source, group), pattern), "built"
    cached = load_sidecar(source.path, params)
    loaded = None if cached is None else _from_sidecar(*cached)
    if loaded is not None:
        return loaded, "sidecar"
    stamp = file_stamp(source.path)  # taken before listing: a change during the build invalidates
    index = list_samples(open_group(source, group), pattern)
    header = {**params, **stamp, "skipped": index.skipped}
    header.update(skipped_names=list(index.skipped_names), listed=list(index.listed))
    save_sidecar(source.path, {"blob": index.blob, "offsets": index.offsets}, header)
    return index, "built"


def _from_sidecar(
    arrays: dict[str, np.ndarray[Any, Any]], header: dict[str, Any]
) -> FileIndex | None:
    """The sidecar's index, or None when its content does not hold together."""
    try:
        blob, offsets = arrays["blob"], arrays["offsets"]
        index = FileIndex(
            blob=blob.astype(np.uint8, copy=False),
            offsets=offsets.astype(np.int64, copy=False),
            skipped=int(header["skipped"]),
            skipped_names=tuple(map(str, header["skipped_names"])),
            listed=tuple(map(str, header["listed"])),
        )
    except (KeyError, TypeError, ValueError):
        return None
    sane = (
        blob.dtype == np.uint8
        and offsets.ndim == 1
        and len(offsets) >= 1
        and offsets[0] == 0
        and offsets[-1] == len(blob)
        and bool(np.all(np.diff(offsets) >= 0))
    )
    return index if sane else None


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
