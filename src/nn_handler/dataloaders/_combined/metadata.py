"""Sample selection over metadata columns: vectorized filters and the global (file, row) index.

Filters run file by file, in the fixed order of ``sample_filters.FILTERS``, each on the rows that
survived the ones before it, so a sample removed by several filters counts once, for the first.
Each filter reads only the field it needs, and only the surviving rows; large fields (one-hot
targets, signals) are read in blocks of about 32 MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..._io import IndexArray, decode_strings
from ..._validate import format_names
from .fields import FieldInfo, FileSchema
from .sample_filters import FilterSpec
from .strings import in_file

__all__ = [
    "ColumnSource",
    "check_filter_fields",
    "check_time_axis",
    "concat_index",
    "has_class",
    "removed_total",
    "select_rows",
    "valid_steps",
]

BoolArray = npt.NDArray[np.bool_]
_BLOCK_BYTES = 32 * 1024**2


class ColumnSource(Protocol):
    """Reads the fields of one file (the dataset passes its open-file pool)."""

    schema: FileSchema

    def read(self, field: str, rows: IndexArray) -> np.ndarray[Any, Any]:
        """Return rows ``rows`` (sorted, unique) of ``field`` as stored."""
        ...


def select_rows(spec: FilterSpec, columns: ColumnSource) -> tuple[IndexArray, dict[str, int]]:
    """Return the rows of one file that pass every filter, and how many each filter removed."""
    rows = np.arange(columns.schema.length, dtype=np.int64)
    removed: dict[str, int] = {}
    for name in spec.active():
        if rows.size:
            keep = _STEPS[name](spec, columns, rows)
            removed[name] = int(rows.size - np.count_nonzero(keep))
            rows = rows[keep]
        else:
            removed[name] = 0
    return rows, removed


def concat_index(kept: Sequence[tuple[int, IndexArray]]) -> tuple[IndexArray, IndexArray]:
    """Return ``(file_of, row_of)``: file number and row of every sample, in file order."""
    if not kept:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    file_of = np.concatenate([np.full(r.size, f, dtype=np.int64) for f, r in kept])
    return file_of, np.concatenate([r for _, r in kept])


def has_class(target: np.ndarray[Any, Any], k: int) -> BoolArray:
    """True per sample where one-hot ``target`` (``(n, C)`` or ``(n, …, C)``) marks class ``k``."""
    hit = target[..., k] > 0
    return np.asarray(hit.reshape(target.shape[0], math.prod(hit.shape[1:])).any(axis=1))


def valid_steps(rows: np.ndarray[Any, Any], time_axis: int) -> BoolArray:
    """Return ``(n, T)``: a time step is valid when all its values are finite and one is nonzero.

    ``time_axis`` indexes the axes of one sample (``rows`` has the batch axis in front).
    """
    axis = time_axis % (rows.ndim - 1) + 1
    steps = np.moveaxis(rows, axis, 1)
    per_step = math.prod(steps.shape[2:])
    steps = steps.reshape(rows.shape[0], rows.shape[axis], per_step)
    valid = (steps != 0).any(axis=2)
    if steps.dtype.kind in "fc":
        valid &= np.isfinite(steps).all(axis=2)
    return np.asarray(valid)


def _guid_step(spec: FilterSpec, cols: ColumnSource, rows: IndexArray) -> BoolArray:
    assert spec.allowed_guids is not None
    stored = cols.read("guid", rows)
    where = in_file("guid", cols.schema.path, rows)
    return np.isin(decode_strings(stored, spec.guid_encoding, where), spec.allowed_guids)


def _flag_step(field: str) -> Callable[[FilterSpec, ColumnSource, IndexArray], BoolArray]:
    def step(spec: FilterSpec, cols: ColumnSource, rows: IndexArray) -> BoolArray:
        values = cols.read(field, rows)
        return np.asarray(values.astype(bool) == getattr(spec, field))

    return step


def _epoch_step(spec: FilterSpec, cols: ColumnSource, rows: IndexArray) -> BoolArray:
    epoch = cols.read("epoch", rows).astype(np.float64)
    keep = np.ones(rows.size, dtype=bool)  # NaN fails both comparisons: removed
    if spec.epoch_min is not None:
        keep &= epoch >= spec.epoch_min
    if spec.epoch_max is not None:
        keep &= epoch <= spec.epoch_max
    return keep


def _label_step(spec: FilterSpec, cols: ColumnSource, rows: IndexArray) -> BoolArray:
    assert spec.label is not None
    k = spec.label
    return _blockwise(cols, "target", rows, lambda block: has_class(block, k))


def _valid_step(spec: FilterSpec, cols: ColumnSource, rows: IndexArray) -> BoolArray:
    assert spec.min_valid_fraction is not None
    frac = spec.min_valid_fraction

    def passes(block: np.ndarray[Any, Any]) -> BoolArray:
        valid = valid_steps(block, spec.time_axis)
        count = valid.sum(axis=1)
        return np.asarray((count > 0) & (count >= frac * valid.shape[1]))

    return _blockwise(cols, spec.valid_field, rows, passes)


def _where_step(spec: FilterSpec, cols: ColumnSource, rows: IndexArray) -> BoolArray:
    assert spec.where is not None
    schema = cols.schema
    everything = np.arange(schema.length, dtype=np.int64)
    table = {
        name: _column(cols, name, everything, spec.guid_encoding if info.is_string else None)
        for name, info in schema.fields.items()
        if info.row_shape == ()
    }
    try:
        mask = np.asarray(spec.where(table))
    except KeyError as exc:
        raise KeyError(
            f"where= asked for column {exc.args[0]!r}, which {schema.path!r} does not have; it "
            f"gets the one-value-per-sample fields: {format_names(table)}"
        ) from exc
    if mask.dtype != np.bool_ or mask.shape != (schema.length,):
        raise TypeError(
            f"where= must return a boolean array of shape ({schema.length},) for "
            f"{schema.path!r}; got dtype {mask.dtype} and shape {mask.shape}"
        )
    return mask[rows]


def _column(
    cols: ColumnSource, name: str, rows: IndexArray, encoding: str | None
) -> np.ndarray[Any, Any]:
    """A whole column for ``where=``: string fields decoded with ``encoding`` (None: none)."""
    values = cols.read(name, rows)
    if encoding is None:
        return values
    return decode_strings(values, encoding, in_file(name, cols.schema.path, rows))


_STEPS: dict[str, Callable[[FilterSpec, ColumnSource, IndexArray], BoolArray]] = {
    "allowed_guids": _guid_step,
    "cs_label": _flag_step("cs_label"),
    "bg_label": _flag_step("bg_label"),
    "epoch_range": _epoch_step,
    "label": _label_step,
    "min_valid_fraction": _valid_step,
    "where": _where_step,
}


def check_filter_fields(spec: FilterSpec, schema: FileSchema) -> None:
    """Raise a clear error when a field a filter reads has the wrong kind or shape."""
    for field in ("cs_label", "bg_label", "epoch"):
        if field in spec.needs():
            _numeric_column(schema, field, spec.needs()[field], scalar=True)
    if spec.label is not None:
        info = _numeric_column(schema, "target", "label", scalar=False)
        classes = info.row_shape[-1]
        if spec.label >= classes:
            raise ValueError(
                f"label={spec.label!r} is outside the class range 0..{classes - 1} of field "
                f"'target' ({info.key!r}, one-hot with {classes} classes) in {schema.path!r}"
            )
    if spec.min_valid_fraction is not None:
        info = _numeric_column(schema, spec.valid_field, "min_valid_fraction", scalar=False)
        check_time_axis(spec.time_axis, info.row_shape, spec.valid_field)


def check_time_axis(time_axis: int, row_shape: tuple[int, ...], field: str) -> None:
    """Raise ``ValueError`` unless ``time_axis`` indexes an axis of one sample of ``field``."""
    if not -len(row_shape) <= time_axis < len(row_shape):
        raise ValueError(
            f"time_axis={time_axis!r} is not an axis of field {field!r}, whose samples have "
            f"shape {row_shape}; pass an axis in [{-len(row_shape)}, {len(row_shape)})"
            if row_shape
            else f"field {field!r} has one value per sample (no time axis); valid-step "
            "detection needs a signal field with a time axis (valid_field=)"
        )


def _blockwise(
    cols: ColumnSource, field: str, rows: IndexArray, fn: Callable[[Any], BoolArray]
) -> BoolArray:
    step = max(1, _BLOCK_BYTES // max(1, cols.schema.fields[field].row_nbytes))
    parts = [fn(cols.read(field, rows[i : i + step])) for i in range(0, rows.size, step)]
    return np.concatenate(parts)


def _numeric_column(schema: FileSchema, field: str, arg: str, *, scalar: bool) -> FieldInfo:
    info = schema.fields[field]
    if info.is_string or info.dtype.kind not in "biuf":
        raise TypeError(
            f"{arg} needs a numeric field {field!r}, but {info.key!r} in {schema.path!r} "
            f"has dtype {info.dtype}"
        )
    if scalar and info.row_shape != ():
        raise ValueError(
            f"{arg} needs one value per sample in field {field!r}, but {info.key!r} in "
            f"{schema.path!r} has samples of shape {info.row_shape}"
        )
    if not scalar and info.row_shape == ():
        raise ValueError(
            f"{arg} needs field {field!r} with at least one axis per sample (one-hot classes or "
            f"time steps), but {info.key!r} in {schema.path!r} has one value per sample"
        )
    return info


def removed_total(per_file: Iterable[Mapping[str, int]], names: Iterable[str]) -> dict[str, int]:
    """Sum per-file removal counts for each filter name."""
    totals = dict.fromkeys(names, 0)
    for counts in per_file:
        for name, n in counts.items():
            totals[name] += n
    return totals
