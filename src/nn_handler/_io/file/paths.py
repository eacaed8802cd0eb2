"""A list of data files given by the user: one path or many, each file at most once.

Every dataset class that takes several files reads each file's samples once per epoch, so a
file listed twice would serve its samples twice. "The same file" is decided by what the file
system says (``FileIdentity.same_file``: device and inode), which sees through every spelling:
``a.h5`` and ``./a.h5``, a symbolic link, a hard link, a path through a bind mount. A path that
does not exist is compared by its resolved spelling, and ``H5Source`` then says it is missing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, Protocol, overload, runtime_checkable

from ..storage.identity import FileIdentity

__all__ = ["BinaryFile", "check_paths"]


@runtime_checkable
class BinaryFile(Protocol):
    """A seekable binary file object (fsspec's, ``io.BytesIO``, …), read through h5py."""

    def read(self, size: int = -1, /) -> bytes:
        """Read up to ``size`` bytes."""

    def seek(self, offset: int, whence: int = 0, /) -> int:
        """Move to ``offset``."""


@overload
def check_paths(
    paths: Any, *, arg: str = "paths", file_objects: Literal[False] = False
) -> list[str]: ...


@overload
def check_paths(
    paths: Any, *, arg: str = "paths", file_objects: Literal[True]
) -> list[str | BinaryFile]: ...


def check_paths(
    paths: Any, *, arg: str = "paths", file_objects: bool = False
) -> list[str] | list[str | BinaryFile]:
    """Return ``paths`` as a non-empty list, each file at most once (see the module docstring).

    Args:
        paths: One path (``str`` / ``os.PathLike``) or a sequence of them.
        arg: The argument's name, for messages.
        file_objects: Also accept binary file objects (read through h5py; never compared).

    Raises:
        TypeError: ``paths`` or one of its entries is not a path (or file object).
        ValueError: ``paths`` is empty, or lists one file twice (the message names both
            spellings).
    """
    if _is_entry(paths, file_objects):
        return [os.fspath(paths) if isinstance(paths, str | os.PathLike) else paths]
    kinds = "paths or file objects" if file_objects else "paths"
    if not isinstance(paths, Sequence) or isinstance(paths, str | bytes):
        raise TypeError(f"{arg} must be a path or a sequence of {kinds}, got {paths!r}")
    if len(paths) == 0:
        raise ValueError(f"{arg} must name at least one HDF5 file, got {paths!r}")
    for item in paths:
        if not _is_entry(item, file_objects):
            raise TypeError(
                f"{arg} must be a path or a sequence of {kinds} ({arg} must hold str or "
                f"os.PathLike entries), got {item!r} in {paths!r}"
            )
    _check_distinct(paths, arg)
    return [os.fspath(p) if isinstance(p, str | os.PathLike) else p for p in paths]


def _is_entry(item: Any, file_objects: bool) -> bool:
    if isinstance(item, str | os.PathLike):
        return True
    return file_objects and isinstance(item, BinaryFile)


def _check_distinct(paths: Sequence[Any], arg: str) -> None:
    seen: dict[Any, str] = {}
    for item in paths:
        if not isinstance(item, str | os.PathLike):
            continue  # a file object: nothing to compare
        path = os.fspath(item)
        key = _file_key(path)
        if key in seen:
            same = f"{path!r} twice" if seen[key] == path else f"{seen[key]!r} and {path!r}"
            raise ValueError(
                f"{arg} lists {same}, the same file; each file may appear once ({arg} must not "
                "repeat a file: its samples would be read twice)"
            )
        seen[key] = path


def _file_key(path: str) -> tuple[int, int] | str:
    """``FileIdentity.file_key`` of an existing file, else its resolved path."""
    try:
        return FileIdentity.of_path(path).file_key
    except OSError:
        return os.path.realpath(path)  # missing: H5Source raises FileNotFoundError next
