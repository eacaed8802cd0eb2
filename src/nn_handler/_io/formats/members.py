"""What a file holds: groups, their members, and the datasets under a key.

The per-sample and many-file datasets decide what a sample is; these functions only answer
questions about the file's tree (and turn h5py's answers into plain values), so that nothing
outside ``_io`` handles h5py objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..._validate import format_names
from ..file.source import H5Source
from ..rows.keys import resolve_key
from ..rows.sample_kinds import dataset_dtype

__all__ = [
    "FieldLayout",
    "describe_field",
    "group_fingerprint",
    "is_dataset_member",
    "member_names",
    "open_dataset_id",
    "open_group",
]


@dataclass(frozen=True)
class FieldLayout:
    """Where a key's samples live: the dataset path, its length, one row's shape and dtype."""

    path: str
    length: int
    row_shape: tuple[int, ...]
    dtype: np.dtype[Any]


def describe_field(source: H5Source, key: str, *, arg: str) -> FieldLayout | None:
    """Resolve ``key`` (a dataset, or ``"<dataset>:<field>"``) to its layout; None if absent.

    Raises:
        TypeError: the key names a group, or a type NumPy cannot represent.
        ValueError: the dataset is a scalar (samples are read along axis 0).
    """
    where = source.path
    resolved = resolve_key(source.file, key, arg=arg, where=where)
    if resolved is None:
        return None
    obj = source.file[resolved.path]
    if not isinstance(obj, h5py.Dataset):
        raise TypeError(f"{arg} ({key!r}) in {where!r} is a group, not a dataset")
    if obj.shape is None or len(obj.shape) == 0:
        raise ValueError(
            f"{arg} ({key!r}) in {where!r} is a scalar dataset; "
            "per-sample fields need samples along axis 0"
        )
    dtype = dataset_dtype(obj, arg=arg, key=key, where=where)
    row_shape = tuple(int(s) for s in obj.shape[1:])
    if resolved.field is not None:  # one column of a compound dataset
        sub: np.dtype[Any] = dtype.fields[resolved.field][0]  # type: ignore[index]
        dtype, row_shape = sub.base, (*row_shape, *sub.shape)
    return FieldLayout(resolved.path, int(obj.shape[0]), row_shape, dtype)


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


def group_fingerprint(group: Any) -> list[int]:
    """Cheap facts about ``group`` that change when its members do: link count, address, size.

    With the file's stamp, a sidecar index built for another group (or for this group before a
    member was added, removed or renamed) does not match.
    """
    info = h5py.h5o.get_info(group.id)
    nlinks = int(group.id.get_num_objs())
    return [nlinks, int(info.addr), int(info.hdr.space.total), int(info.hdr.nmesgs)]


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
