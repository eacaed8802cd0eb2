"""The file around the data: groups, attributes, datasets copied as stored, dimension scales.

Attributes are copied through HDF5's own types (``h5a``), so a fixed-length ASCII string stays
one, an enum stays an enum. References cannot be copied (they point into the input file):
dimension scales, which HDF5 keeps as reference attributes, are attached again by name once
every dataset exists; any other reference attribute is left out and reported.
"""

from __future__ import annotations

import h5py
import numpy as np

__all__ = ["DIMENSION_ATTRS", "attach_scales", "copy_as_stored", "copy_attrs", "make_groups"]

#: Attributes HDF5's dimension-scale API owns: never copied, rebuilt by ``attach_scales``.
DIMENSION_ATTRS = frozenset({"DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME"})


def make_groups(src: h5py.File, dst: h5py.File, groups: list[str], skipped: list[str]) -> None:
    """Create ``groups`` (parents first) in ``dst`` with their attributes; root attrs too."""
    copy_attrs(src, dst, "/", skipped)
    for path in sorted(groups, key=lambda p: p.count("/")):
        if path not in dst:
            dst.create_group(path)
        copy_attrs(src[path], dst[path], path, skipped)


def copy_attrs(src: h5py.HLObject, dst: h5py.HLObject, path: str, skipped: list[str]) -> None:
    """Copy every attribute of ``src`` to ``dst`` with its HDF5 type; report what cannot be."""
    scale = _is_scale(src)
    for name in src.attrs:
        if name in ("DIMENSION_LIST", "REFERENCE_LIST") or (scale and name in DIMENSION_ATTRS):
            continue
        try:
            _copy_attr(src, dst, name)
        except (TypeError, ValueError, OSError, KeyError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            skipped.append(f"{path}@{name}: {reason}")


def _copy_attr(src: h5py.HLObject, dst: h5py.HLObject, name: str) -> None:
    aid = src.attrs.get_id(name)
    tid = aid.get_type()
    if _has_references(tid):
        raise TypeError("a reference into the input file")
    space = aid.get_space()
    encoded = name.encode("utf-8", "surrogateescape")
    if name in dst.attrs:
        del dst.attrs[name]
    new = h5py.h5a.create(dst.id, encoded, tid, space)
    if space.get_simple_extent_type() == h5py.h5s.NULL:
        return
    data = np.empty(space.shape, dtype=aid.dtype)
    aid.read(data)
    new.write(data)


def _has_references(tid: h5py.h5t.TypeID) -> bool:
    cls = tid.get_class()
    if cls == h5py.h5t.REFERENCE:
        return True
    if cls == h5py.h5t.COMPOUND:
        return any(_has_references(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if cls in (h5py.h5t.ARRAY, h5py.h5t.VLEN):
        return _has_references(tid.get_super())
    return False


def copy_as_stored(src: h5py.File, dst: h5py.File, path: str) -> None:
    """Copy the dataset at ``path`` as it is stored (HDF5's object copy: no decoding)."""
    parent, _, name = path.rpartition("/")
    src.copy(src[path], dst[parent or "/"], name=name)
    for attr in ("DIMENSION_LIST", "REFERENCE_LIST"):  # references into the input
        if attr in dst[path].attrs:
            del dst[path].attrs[attr]


def attach_scales(src: h5py.File, dst: h5py.File, paths: list[str], skipped: list[str]) -> None:
    """Make scales of the scales among ``paths`` and attach them as in ``src``."""
    for path in paths:
        if _is_scale(src[path]) and not h5py.h5ds.is_scale(dst[path].id):
            dst[path].make_scale(_scale_name(src[path]))
    for path in paths:
        src_dset = src[path]
        if _is_scale(src_dset) or "DIMENSION_LIST" not in src_dset.attrs:
            continue
        for axis, dim in enumerate(src_dset.dims):
            for scale in dim.values():
                target = (scale.name or "").lstrip("/")
                if target in dst and h5py.h5ds.is_scale(dst[target].id):
                    dst[path].dims[axis].attach_scale(dst[target])
                else:
                    skipped.append(f"{path}: dimension scale {target!r} of axis {axis} not "
                                   "written (not among the keys)")  # fmt: skip


def _is_scale(obj: h5py.HLObject) -> bool:
    return isinstance(obj, h5py.Dataset) and bool(h5py.h5ds.is_scale(obj.id))


def _scale_name(dset: h5py.Dataset) -> str:
    name = dset.attrs.get("NAME", b"")
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
