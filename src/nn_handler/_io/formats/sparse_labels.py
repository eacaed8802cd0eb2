"""Per-row labels of a sparse dataset: AnnData ``obs`` columns or plain datasets, held in RAM.

A label is found by name: first as a column of the file's ``obs`` (AnnData), then as a path in
the file. Encodings read:

* ``categorical`` (``codes`` + ``categories``): class indices, the categories exposed; a missing
  value (code -1) stays -1 (``CrossEntropyLoss(ignore_index=-1)`` skips it);
* strings (``string-array`` or any string dataset; ``nullable-string-array``, whose masked
  entries become -1): class indices into the sorted distinct strings;
* numbers and booleans (``array``; ``nullable-integer`` / ``nullable-boolean`` without masked
  entries): returned as they are.

Across several files the categories are merged (the first file's order, then new ones in the
order they appear) and every file's codes are remapped to the merged list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..._validate import format_names
from ..file.strings import decode_strings, in_rows

__all__ = ["LabelColumn", "Strings", "merge_labels", "read_label"]

#: ``(encoding, argument)``: how stored strings are decoded, and the argument that chose it.
Strings = tuple[str, str]


@dataclass(frozen=True)
class LabelColumn:
    """One file's labels: class indices with their categories, or plain numbers."""

    values: np.ndarray[Any, Any]
    categories: list[Any] | None


def read_label(
    f: h5py.File, obs_key: str | None, label: str, n_rows: int, path: str, strings: Strings
) -> LabelColumn:
    """Read label ``label`` (an ``obs`` column or a path) for the ``n_rows`` rows of a file.

    ``strings`` is ``(encoding, argument)``: how stored strings are decoded (``"bytes"``:
    categories are the stored bytes) and the argument a message names.

    Raises:
        DataFileError: a stored string is not valid in the encoding.
        KeyError: no such column or dataset; the message lists the ``obs`` columns.
        ValueError: its length is not ``n_rows``, or it has masked numbers.
        TypeError: its encoding or dtype cannot be a label.
    """
    obj = None
    if obs_key is not None and "/" not in label:
        obj = f.get(f"{obs_key}/{label}")
    if obj is None:
        obj = f.get(label)
    if obj is None:
        columns = list(f[obs_key].keys()) if obs_key is not None else []
        raise KeyError(
            f"label={label!r} is neither an obs column nor a dataset of {path!r}; "
            f"obs columns: {format_names(c for c in columns if c != '_index')}"
        )
    column = _decode(obj, f"label={label!r} in {path!r}", _Strings(*strings, path))
    if column.values.shape != (n_rows,):
        raise ValueError(
            f"label={label!r} in {path!r} has shape {column.values.shape}, but the matrix has "
            f"{n_rows} rows; a label needs one value per row"
        )
    return column


def _decode(obj: Any, what: str, strings: _Strings) -> LabelColumn:
    encoding = obj.attrs.get("encoding-type", "")
    # a format tag, compared with the names below: undecodable bytes simply match none
    encoding = encoding.decode("utf-8", "replace") if isinstance(encoding, bytes) else str(encoding)
    if isinstance(obj, h5py.Group):
        if encoding == "categorical":
            categories = strings.plain(obj["categories"])
            return LabelColumn(np.asarray(obj["codes"][()]), list(categories.tolist()))
        if encoding in ("nullable-integer", "nullable-boolean", "nullable-string-array"):
            return _nullable(obj, encoding, what, strings)
        raise TypeError(f"{what} is a group with encoding-type {encoding!r}, not a label column")
    return _from_values(strings.plain(obj), what)


def _nullable(obj: h5py.Group, encoding: str, what: str, strings: _Strings) -> LabelColumn:
    values = strings.plain(obj["values"])
    mask = np.asarray(obj["mask"][()], dtype=bool)
    if encoding == "nullable-string-array":
        categories = np.unique(values[~mask])  # a masked entry's stored value is no category
        codes = np.searchsorted(categories, values).astype(np.int64)
        codes[mask] = -1
        return LabelColumn(_smallest(codes), list(categories.tolist()))
    if mask.any():
        raise ValueError(
            f"{what} has {int(mask.sum())} missing values ({encoding}); fill them, or store the "
            "column as categorical (missing entries then read as -1)"
        )
    return LabelColumn(values, None)


def _from_values(values: np.ndarray[Any, Any], what: str) -> LabelColumn:
    if values.dtype.kind in "US":
        categories, codes = np.unique(values, return_inverse=True)
        return LabelColumn(_smallest(codes.astype(np.int64)), list(categories.tolist()))
    if values.dtype.kind in "biuf":
        return LabelColumn(values, None)
    raise TypeError(f"{what} has dtype {values.dtype}, which is neither numbers nor strings")


@dataclass(frozen=True)
class _Strings:
    encoding: str
    arg: str
    path: str

    def plain(self, dset: h5py.Dataset) -> np.ndarray[Any, Any]:
        """Strings decoded (a str array; ``S`` bytes for ``"bytes"``), numbers untouched."""
        values = np.asarray(dset[()])
        if dset.dtype.kind not in "OS":
            return values
        where = in_rows(f"label {dset.name!r}", self.arg, self.path, np.arange(values.size))
        return decode_strings(values, self.encoding, where)


def merge_labels(columns: list[LabelColumn], label: str) -> LabelColumn:
    """Concatenate the files' labels; categories merged and codes remapped.

    Raises:
        TypeError: some files hold class labels and others numbers.
    """
    kinds = {c.categories is None for c in columns}
    if len(kinds) > 1:
        raise TypeError(
            f"label={label!r} is categorical (or strings) in some files and numbers in others"
        )
    if columns[0].categories is None:
        return LabelColumn(np.concatenate([c.values for c in columns]), None)
    merged: dict[Any, int] = {}
    for column in columns:
        for value in column.categories or []:
            merged.setdefault(value, len(merged))
    parts = []
    for column in columns:
        table = np.array([merged[v] for v in column.categories or []] + [-1], dtype=np.int64)
        parts.append(table[column.values.astype(np.int64)])  # code -1 picks the trailing -1
    return LabelColumn(_smallest(np.concatenate(parts)), list(merged))


def _smallest(codes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Codes in the smallest signed integer type that holds them (labels of 100M rows add up)."""
    top = int(codes.max()) if codes.size else 0
    for dtype in (np.int8, np.int16, np.int32):
        if top <= np.iinfo(dtype).max:
            return codes.astype(dtype)
    return codes.astype(np.int64)
