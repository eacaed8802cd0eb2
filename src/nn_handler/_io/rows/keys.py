"""Dataset keys: ``"path/to/dataset"`` or ``"path/to/dataset:field"`` for one compound field.

One parser for every place a key is accepted (``H5LazyDataset``, ``RankMemCachedH5Dataset``,
``CombinedHDF5Dataset`` fields, the CLI). HDF5 link names may themselves contain ``':'``, so a key
is resolved against the file: a dataset whose full path equals the key wins; otherwise each
``':'`` (from the right) is tried as the separator between a compound dataset and one of its
field names (field names may contain ``':'`` too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h5py

from ..._validate import format_names

__all__ = ["FIELD_SEPARATOR", "ResolvedKey", "field_key", "resolve_key", "splits"]

#: Separates a compound dataset's path from one of its field names in a key.
FIELD_SEPARATOR = ":"


@dataclass(frozen=True)
class ResolvedKey:
    """A key as found in one file: the dataset path and, for a compound column, its field."""

    key: str
    path: str
    field: str | None = None


def field_key(path: str, field: str) -> str:
    """Return the key that selects ``field`` of the compound dataset at ``path``."""
    return f"{path}{FIELD_SEPARATOR}{field}"


def splits(key: str) -> list[tuple[str, str]]:
    """Every ``(dataset path, field)`` reading of ``key``, the rightmost separator first."""
    out = []
    at = key.rfind(FIELD_SEPARATOR)
    while at > 0:
        if at < len(key) - 1:
            out.append((key[:at], key[at + 1 :]))
        at = key.rfind(FIELD_SEPARATOR, 0, at)
    return out


def resolve_key(group: h5py.Group, key: str, *, arg: str, where: str) -> ResolvedKey | None:
    """Find ``key`` in ``group``; None when neither a dataset nor a compound field matches.

    Args:
        group: The open file (or group) to look in.
        key: A dataset path, or ``"<dataset>:<field>"``.
        arg: The argument that gave ``key`` (for error messages).
        where: The file's path (for error messages).

    Raises:
        TypeError: ``key`` names a group, or selects a field of a dataset that is not compound.
        KeyError: ``key`` selects a field that the compound dataset does not have.
    """
    if _get(group, key) is not None:
        return ResolvedKey(key, key)  # a full name wins, ':' and all
    first_problem: Exception | None = None
    for path, field in splits(key):
        obj = _get(group, path)
        if obj is None:
            continue
        if isinstance(obj, h5py.Dataset) and obj.dtype.names and field in obj.dtype.names:
            return ResolvedKey(key, path, field)
        if first_problem is None:
            first_problem = _field_problem(obj, path, field, key, arg, where)
    if first_problem is not None:
        raise first_problem
    return None


def _get(group: h5py.Group, path: str) -> Any:
    try:
        return group.get(path)
    except (KeyError, ValueError, OSError):  # a dangling link, or a name HDF5 refuses
        return None


def _field_problem(obj: Any, path: str, field: str, key: str, arg: str, where: str) -> Exception:
    if not isinstance(obj, h5py.Dataset):
        return TypeError(
            f"{arg}={key!r} in {where!r}: {path!r} is a group; a ':' in a key selects a field "
            "of a compound (table) dataset"
        )
    names = obj.dtype.names
    if not names:
        return TypeError(
            f"{arg}={key!r} in {where!r}: {path!r} has dtype {obj.dtype}, not a compound "
            f"(table) dtype, so it has no field {field!r}; pass {path!r} without ':{field}'"
        )
    return KeyError(
        f"{arg}={key!r} in {where!r}: the compound dataset {path!r} has no field {field!r}; "
        f"its fields are {format_names(names)}, e.g. {field_key(path, names[0])!r}"
    )
