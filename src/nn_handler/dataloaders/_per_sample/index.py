"""The sample index of ``H5SampleDataset``: which HDF5 dataset is sample ``i``.

Per file, the members of the chosen group are listed with one HDF5 link iteration, filtered by
the name pattern, checked to be datasets (``h5g.get_objinfo``: cheaper than ``h5o.get_info``
and than ``isinstance(group[name], h5py.Dataset)``; ``benchmarks/bench_h5_sample.py`` measures
them) and put in
natural order. Members that are not datasets (groups, named types, dangling links) are skipped
and counted. The whole index is three NumPy arrays: a file number per sample, and the names as
one byte blob with offsets, so forked DataLoader workers share it instead of copying 100k
Python objects each.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._io import is_dataset_member, member_names
from .natural import natural_order

__all__ = ["SKIPPED_KEPT", "FileIndex", "NamePattern", "SampleIndex", "list_samples", "pack_names"]

_REGEX_PREFIX = "re:"
SKIPPED_KEPT = 5  # names of skipped members remembered per file, for messages


@dataclass(frozen=True)
class NamePattern:
    """A glob or regular expression that a member's whole name must match.

    A ``str`` is a glob (``fnmatch`` rules, case-sensitive) unless it starts with ``"re:"``,
    in which case the rest is a regular expression; a compiled ``re.Pattern`` is a regular
    expression. Both must match the whole name (``fullmatch``).
    """

    kind: str  # "glob" or "re"
    text: str
    flags: int
    regex: re.Pattern[str]

    @classmethod
    def parse(cls, pattern: Any) -> NamePattern | None:
        """Return the pattern for ``pattern`` (None passes through) or raise naming it."""
        if pattern is None:
            return None
        if isinstance(pattern, re.Pattern) and isinstance(pattern.pattern, str):
            return cls("re", pattern.pattern, pattern.flags, pattern)
        if not isinstance(pattern, str) or not pattern or pattern == _REGEX_PREFIX:
            raise TypeError(
                "pattern must be None, a non-empty glob string (e.g. 'trajectory_*'), "
                f"'re:<regex>' or a compiled str re.Pattern; got {pattern!r}"
            )
        if not pattern.startswith(_REGEX_PREFIX):
            return cls("glob", pattern, 0, re.compile(fnmatch.translate(pattern)))
        text = pattern[len(_REGEX_PREFIX) :]
        try:
            return cls("re", text, 0, re.compile(text))
        except re.error as exc:
            raise ValueError(
                f"pattern={pattern!r} is not a valid regular expression: {exc}"
            ) from exc

    def matches(self, name: str) -> bool:
        """True when ``name`` matches as a whole."""
        return self.regex.fullmatch(name) is not None

    def describe(self) -> str:
        """Stable text used in reprs, messages and sidecar headers."""
        if self.kind == "glob":
            return self.text
        flags = f" (flags={re.RegexFlag(self.flags)!r})" if self.flags & ~re.UNICODE else ""
        return f"{_REGEX_PREFIX}{self.text}{flags}"


@dataclass(frozen=True)
class FileIndex:
    """One file's samples: names in natural order (blob + offsets) and what was skipped."""

    blob: np.ndarray[Any, np.dtype[np.uint8]]
    offsets: np.ndarray[Any, np.dtype[np.int64]]
    skipped: int
    skipped_names: tuple[str, ...]
    listed: tuple[str, ...]  # a few member names before filtering, for "nothing matched"

    def __len__(self) -> int:
        return len(self.offsets) - 1


def list_samples(group: Any, pattern: NamePattern | None) -> FileIndex:
    """Index the datasets directly in ``group`` (an open group) whose names match ``pattern``."""
    names = member_names(group)
    listed = tuple(_text(n) for n in names[:SKIPPED_KEPT])
    if pattern is not None:
        names = [n for n in names if pattern.matches(_text(n))]
    datasets: list[bytes] = []
    skipped: list[bytes] = []
    for name in names:
        (datasets if is_dataset_member(group, name) else skipped).append(name)
    ordered = [datasets[i] for i in natural_order(datasets)]
    blob, offsets = pack_names(ordered)
    kept = tuple(_text(n) for n in skipped[:SKIPPED_KEPT])
    return FileIndex(blob, offsets, len(skipped), kept, listed)


def pack_names(names: list[bytes]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Return ``names`` as one uint8 blob and int64 offsets (``len(names) + 1`` of them)."""
    blob = np.frombuffer(b"".join(names), dtype=np.uint8).copy()
    offsets = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, names), dtype=np.int64, count=len(names)), out=offsets[1:])
    return blob, offsets


class SampleIndex:
    """All files' samples in order: file number and name of sample ``i``, in NumPy arrays."""

    def __init__(self, files: list[FileIndex], limit: int | None) -> None:
        counts = np.array([len(f) for f in files], dtype=np.int64)
        self.file_no = np.repeat(np.arange(len(files), dtype=np.int32), counts)
        self.blob = np.concatenate([f.blob for f in files]) if files else np.zeros(0, np.uint8)
        bases = np.concatenate([[0], np.cumsum([len(f.blob) for f in files])]).astype(np.int64)
        starts = [f.offsets[:-1] + base for f, base in zip(files, bases, strict=False)]
        self.offsets = np.concatenate([*starts, bases[-1:]]).astype(np.int64)
        if limit is not None and limit < len(self.file_no):
            self.file_no = self.file_no[:limit].copy()
            self.offsets = self.offsets[: limit + 1].copy()
            self.blob = self.blob[: int(self.offsets[-1])].copy()

    def __len__(self) -> int:
        return len(self.file_no)

    def name(self, i: int) -> bytes:
        """Name of sample ``i`` (relative to the group) as bytes."""
        return self.blob[self.offsets[i] : self.offsets[i + 1]].tobytes()


def _text(name: bytes) -> str:
    return name.decode("utf-8", "surrogateescape")
