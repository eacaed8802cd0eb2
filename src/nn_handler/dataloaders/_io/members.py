"""What a file holds: groups, their members, and the datasets under a key.

The per-sample and many-file datasets decide what a sample is; these functions only answer
questions about the file's tree (and turn h5py's answers into plain values), so that nothing
outside ``_io`` handles h5py objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import h5py
import numpy as np

from ..._validate import format_names
from .source import H5Source

__all__ = [
    "Member",
    "describe_member",
    "is_dataset_member",
    "member_names",
    "open_dataset_id",
    "open_group",
]


@dataclass(frozen=True)
class Member:
    """A path in a file: a dataset (with its shape and dtype) or a group."""

    kind: Literal["dataset", "group"]
    shape: tuple[int, ...] | None = None
    dtype: np.dtype[Any] | None = None


def describe_member(source: H5Source, key: str) -> Member | None:
    """Return what ``key`` names in ``source``'s file, or None when nothing is there."""
    obj = source.file.get(key)
    if obj is None:
        return None
    if not isinstance(obj, h5py.Dataset):
        return Member("group")
    shape = None if obj.shape is None else tuple(int(s) for s in obj.shape)
    return Member("dataset", shape, obj.dtype)


def open_group(source: H5Source, group: str, *, arg: str = "group") -> Any:
    """Return the open group ``group`` of ``source`` (an ``h5py.Group``).

    Raises:
        KeyError: ``group`` is missing or names a dataset; the message lists the groups.
    """
    obj = source.file.get(group)
    if isinstance(obj, h5py.Group):
        return obj
    what = "is a dataset, not a group" if obj is not None else "not found"
    raise KeyError(f"{arg}={group!r} {what} in {source.path!r}; its groups: {_groups(source)}")


def member_names(group: Any) -> list[bytes]:
    """Return the names of the links directly in ``group``, in name order."""
    names: list[bytes] = []
    group.id.links.iterate(names.append)
    return names


def is_dataset_member(group: Any, name: bytes) -> bool:
    """True when ``name`` in ``group`` leads to a dataset (False for groups, dangling links)."""
    try:
        return bool(h5py.h5g.get_objinfo(group.id, name).type == h5py.h5g.DATASET)
    except (KeyError, OSError, RuntimeError):  # dangling soft or external link
        return False


def open_dataset_id(source: H5Source, path: bytes) -> Any:
    """Open the dataset at ``path`` with the low-level API (an ``h5py.h5d.DatasetID``).

    Cheaper than ``file[path]`` per call: no path normalization and no ``h5py.Dataset``
    wrapper, which matters when every sample is its own dataset.
    """
    return h5py.h5d.open(source.file.id, path)


def _groups(source: H5Source) -> str:
    found = ["/"]

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Group):
            found.append("/" + name)

    source.file.visititems(visit)
    return format_names(found)
