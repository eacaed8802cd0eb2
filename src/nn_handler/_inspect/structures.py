"""Structures other software writes into HDF5, recognised by ``inspect`` and named with their keys.

* pandas ``to_hdf``: ``format="table"`` (a compound ``table`` dataset; columns grouped into
  ``values_block_N`` fields, or one field per ``data_columns`` entry) and ``format="fixed"``
  (``blockN_values`` arrays, ``blockN_items`` column names);
* PyTables tables (compound datasets with ``CLASS="TABLE"``) and their internal index groups
  (``_i_*``), which hold nothing to train on;
* sparse matrices: AnnData (``encoding-type`` ``csr_matrix`` / ``csc_matrix``) and 10x Genomics
  (``data``, ``indices``, ``indptr``, ``shape``) groups, whose member arrays are not samples;
* AnnData categorical columns (``codes`` + ``categories``);
* dimension scales (HDF5 ``DIMENSION_SCALE``, netCDF dimensions).

Column names that pandas stores pickled are read without unpickling: only plain protocol-0
lists of strings are parsed, as text.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any

import h5py

from nn_handler._io import describe_layout, detect_layout, field_key, filters_of

__all__ = ["Structure", "detect", "is_dimension_scale", "pickled_names"]

_SPARSE_PARTS = ("data", "indices", "indptr")
# protocol 0: "V<text>" pushes a str (after an "a" APPEND of the previous one on the same line)
_PICKLED_STR = re.compile(r"^a?V(.*)$")
_NETCDF_DIMENSION = "This is a netCDF dimension but not a netCDF variable"


@dataclass(frozen=True)
class Structure:
    """Something recognised in the file: what it is, where, and how to load it.

    Attributes:
        path: Group or dataset it is rooted at.
        kind: ``"pandas-table"``, ``"pandas-fixed"``, ``"pytables-table"``, ``"pytables-index"``,
            ``"anndata"``, ``"sparse-matrix"``, ``"categorical"``.
        description: One line saying what it holds.
        keys: Keys to pass to the datasets (``"df/table:values_block_0"``, …).
        usage: A constructor call that loads it, or an empty string.
        members: Dataset paths that belong to it.
        member_roles: A member's role when it differs from ``kind`` (``"pandas-pickled"``,
            ``"pandas-labels"``).
    """

    path: str
    kind: str
    description: str
    keys: list[str] = field(default_factory=list)
    usage: str = ""
    members: list[str] = field(default_factory=list)
    member_roles: dict[str, str] = field(default_factory=dict)


def detect(
    handle: h5py.File, file_path: str, groups: list[str], datasets: list[str]
) -> list[Structure]:
    """Return the structures found among ``groups`` / ``datasets`` (paths, root excluded)."""
    found: list[Structure] = []
    for path in ["/", *groups]:
        obj = _get(handle, path)
        if isinstance(obj, h5py.Group):
            with contextlib.suppress(Exception):  # an odd group is simply not a structure
                found.extend(_group_structures(obj, path, file_path, datasets))
    claimed = {m for s in found for m in s.members}
    for path in datasets:
        obj = None if path in claimed else _get(handle, path)
        if isinstance(obj, h5py.Dataset) and _text(obj.attrs, "CLASS") == "TABLE":
            with contextlib.suppress(Exception):  # e.g. a table of HDF5 time types
                found.append(_pytables_table(obj, path, file_path))
    return found


def _group_structures(
    group: h5py.Group, path: str, file_path: str, datasets: list[str]
) -> list[Structure]:
    attrs = group.attrs
    pandas_type = _text(attrs, "pandas_type")
    encoding = _text(attrs, "encoding-type")
    name = path.rsplit("/", 1)[-1]
    if pandas_type and "table" in pandas_type:
        return [_pandas_table(group, path, file_path)]
    if pandas_type:
        return [_pandas_fixed(group, path, pandas_type, file_path)]
    if name.startswith("_i_") and _text(attrs, "CLASS") == "TINDEX":
        members = [d for d in datasets if d.startswith(path + "/")]
        return [Structure(path, "pytables-index", f"PyTables index ({len(members)} datasets): "
                          "internal, nothing to train on", members=members)]  # fmt: skip
    if encoding == "anndata":
        return [_anndata(group, file_path)]
    if encoding in ("csr_matrix", "csc_matrix") or _is_10x(group):
        return [_sparse(group, path, encoding or "10x", file_path)]
    if encoding == "categorical":
        return [_categorical(group, path)]
    return []


def _pandas_table(group: h5py.Group, path: str, file_path: str) -> Structure:
    table = group.get("table")
    prefix = path.strip("/")
    table_path = f"{prefix}/table" if prefix else "table"
    members = [table_path]
    if not isinstance(table, h5py.Dataset) or not table.dtype.names:
        return Structure(path, "pandas-table", "pandas table without a readable 'table' dataset")
    names = list(table.dtype.names)
    columns = [_describe_field(table, n) for n in names]
    keys = [field_key(table_path, n) for n in names]
    numeric = [n for n in names if n != "index" and table.dtype[n].base.kind in "biuf"]
    usage = ""
    if numeric:
        usage = f'H5LazyDataset("{file_path}", x_key="{field_key(table_path, numeric[0])}")'
    text = (
        f"pandas DataFrame (to_hdf format='table'), {table.shape[0]} rows: {'; '.join(columns)} "
        "(to_hdf(..., data_columns=True) stores each column as its own field)"
    )
    return Structure(path, "pandas-table", text, keys, usage, members)


def _describe_field(table: h5py.Dataset, name: str) -> str:
    sub = table.dtype[name]
    columns = pickled_names(table.attrs.get(f"{name}_kind"))
    shape = f"{sub.shape}" if sub.shape else ""
    held = f" = columns {', '.join(columns)}" if columns and columns != [name] else ""
    return f"{name} ({sub.base}{shape}){held}"


def _pandas_fixed(group: h5py.Group, path: str, pandas_type: str, file_path: str) -> Structure:
    prefix = f"{path.strip('/')}/".lstrip("/")
    keys, parts, roles = [], [], {}
    for name in ("axis0", "axis1", *(f"block{i}_items" for i in range(_blocks(group)))):
        if name != "axis1" and isinstance(group.get(name), h5py.Dataset):
            roles[prefix + name] = "pandas-labels"  # column names, not samples
    for i in range(_blocks(group)):
        values, items = group.get(f"block{i}_values"), group.get(f"block{i}_items")
        if not isinstance(values, h5py.Dataset):
            continue
        names = [_decode(v) for v in items[()]] if isinstance(items, h5py.Dataset) else []
        key = f"{prefix}block{i}_values"
        if values.dtype.kind == "O" or h5py.check_vlen_dtype(values.dtype) is not None:
            roles[key] = "pandas-pickled"
            parts.append(f"{key}: object columns {', '.join(names)} (pickled by pandas)")
            continue
        keys.append(key)
        parts.append(f"{key} ({values.dtype}, columns {', '.join(names)})")
    usage = f'H5LazyDataset("{file_path}", x_key="{keys[0]}")' if keys else ""
    text = f"pandas {pandas_type} (to_hdf format='fixed'): " + ("; ".join(parts) or "no blocks")
    return Structure(path, "pandas-fixed", text, keys, usage, list(roles), roles)


def _blocks(group: h5py.Group) -> int:
    try:
        return int(group.attrs.get("nblocks", 0))
    except (TypeError, ValueError):
        return 0


def _pytables_table(table: h5py.Dataset, path: str, file_path: str) -> Structure:
    names = list(table.dtype.names or ())
    keys = [field_key(path, n) for n in names]
    fields = ", ".join(_describe_field(table, n) for n in names)
    missing = [f.title for f in filters_of(table) if not f.available]
    if missing:  # naming a constructor that would refuse the key helps no one
        text = f"PyTables table: {fields}; filter {', '.join(missing)} is not available here"
        return Structure(path, "pytables-table", text, keys)
    usage = f'H5LazyDataset("{file_path}", x_key="{keys[0]}")' if keys else ""
    return Structure(path, "pytables-table", f"PyTables table: {fields}", keys, usage)


def _anndata(root: h5py.Group, file_path: str) -> Structure:
    x = root.get("X")
    if isinstance(x, h5py.Group):
        how = f'sparse X: H5SparseDataset("{file_path}", group="X")'
    elif isinstance(x, h5py.Dataset):
        how = f'dense X {x.shape}: H5LazyDataset("{file_path}", x_key="X")'
    else:
        how = "no X"
    return Structure("/", "anndata", f"AnnData (.h5ad): {how}; obs / var hold per-cell / "
                     "per-gene columns")  # fmt: skip


def _sparse(group: h5py.Group, path: str, encoding: str, file_path: str) -> Structure:
    members = [f"{path.strip('/')}/{p}".lstrip("/") for p in (*_SPARSE_PARTS, "shape")]
    members = [m for m in members if m.rsplit("/", 1)[-1] in group]
    shape = group.attrs.get("shape")
    if shape is None and isinstance(group.get("shape"), h5py.Dataset):
        shape = group["shape"][()]
    dims = "x".join(str(int(s)) for s in shape) if shape is not None else "?"
    label = "AnnData" if encoding != "10x" else "10x Genomics"
    fmt = encoding.replace("_matrix", "").upper() if encoding != "10x" else "CSC"
    text = (
        f"{label} sparse matrix ({fmt}, {dims}): data/indices/indptr are not samples on their own"
    )
    try:
        layout = detect_layout(group.file, path.strip("/") or "/", file_path)
    except (KeyError, ValueError) as exc:  # the message says why H5SparseDataset cannot read it
        return Structure(path, "sparse-matrix", f"{text}; {exc}", members=members)
    rows, usage = describe_layout(group.file, layout, file_path)
    return Structure(path, "sparse-matrix", f"{text}; {rows}", usage=usage, members=members)


def _categorical(group: h5py.Group, path: str) -> Structure:
    prefix = path.strip("/")
    categories = group.get("categories")
    count = categories.shape[0] if isinstance(categories, h5py.Dataset) and categories.shape else 0
    return Structure(
        path,
        "categorical",
        f"AnnData categorical column ({count} categories in '{prefix}/categories')",
        keys=[f"{prefix}/codes"],
        usage=f"y_key='{prefix}/codes' (class indices; -1 marks a missing value)",
    )


def _is_10x(group: h5py.Group) -> bool:
    return all(isinstance(group.get(p), h5py.Dataset) for p in (*_SPARSE_PARTS, "shape"))


def is_dimension_scale(dset: h5py.Dataset) -> tuple[bool, bool]:
    """``(is a dimension scale, is a netCDF dimension without a variable)``."""
    if _text(dset.attrs, "CLASS") != "DIMENSION_SCALE":
        return False, False
    return True, _text(dset.attrs, "NAME").startswith(_NETCDF_DIMENSION)


def pickled_names(raw: Any) -> list[str]:
    """Column names from a pandas protocol-0 pickled list of str, parsed as text; else []."""
    if not isinstance(raw, (bytes, str)):
        return []
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if not text.startswith("(lp"):
        return []
    return [m.group(1) for line in text.splitlines() if (m := _PICKLED_STR.match(line))]


def _text(attrs: Any, name: str) -> str:
    try:
        value = attrs.get(name)
    except Exception:  # an attribute h5py cannot read is not a marker we know
        return ""
    return _decode(value) if value is not None else ""


def _decode(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(getattr(value, "item", lambda: value)())


def _get(handle: h5py.File, path: str) -> Any:
    try:
        return handle[path]
    except Exception:  # unreadable objects are reported by the caller
        return None
