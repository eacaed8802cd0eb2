"""Building the global index of ``CombinedHDF5Dataset``: scan files, check fields, filter.

Rules for fields (documented on the dataset):

* required in every file: each ``load_fields`` entry, every field an active filter reads, and
  ``valid_field`` when the validity mask is returned; a file without one is an error that names
  the file, the field and the fields it has;
* ``load_fields=None`` loads the known fields present in *every* file; a field present in only
  some files is left out (logged once with the files that lack it), so batches never mix shapes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..._io import IndexArray, as_bytes_array
from ..._validate import format_names
from .batch import BatchPlan
from .fields import (
    VALID_MASK,
    FileSchema,
    OutputField,
    check_filters_of,
    check_present,
    output_fields,
    scan_file,
)
from .file_pool import FileColumns, FilePool
from .metadata import (
    check_filter_fields,
    check_time_axis,
    concat_index,
    removed_total,
    select_rows,
)
from .sample_filters import FilterSpec

__all__ = ["IndexResult", "build_index"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexResult:
    """The global index and what building it found."""

    file_of: IndexArray  # file number of each sample
    row_of: IndexArray  # row of each sample inside its file
    schemas: list[FileSchema]
    removed: dict[str, int]  # per filter, summed over files
    scanned: int  # samples before filtering
    files_kept: int  # files with at least one sample left
    nbytes: int  # bytes read to evaluate the filters


def build_index(
    pool: FilePool,
    spec: FilterSpec,
    load_fields: Sequence[str] | None,
    valid_mask: bool,
    in_memory: bool,
) -> tuple[IndexResult, BatchPlan]:
    """Scan every file of ``pool``, check the fields, run the filters; return index and plan.

    With ``in_memory``, loaded fields with one value per sample are read for the kept rows and
    returned in ``plan.resident``.

    Raises:
        KeyError: a file lacks a required field.
        ValueError / TypeError: unknown ``load_fields`` entries, fields that disagree across
            files, a ``label`` outside the class range, and other bad combinations.
    """
    schemas = [scan_file(pool.source(i), pool.keys) for i in range(len(pool.sources))]
    loads = _choose_fields(schemas, load_fields, pool.keys)
    needed = {**spec.needs(), **dict.fromkeys(loads, "load_fields")}
    if valid_mask:
        needed.setdefault(spec.valid_field, "return_valid_mask")
    for i, schema in enumerate(schemas):
        check_present(schema, needed, pool.keys, pool.sources[i])
        check_filters_of(schema, needed, pool.source(i))  # counted against the open-file cap
        check_filter_fields(spec, schema)
    plan = _plan(schemas, loads, spec, valid_mask)
    small = [n for n, f in plan.fields.items() if f.row_shape == () and n in loads and in_memory]
    kept: list[tuple[int, IndexArray]] = []
    per_file: list[dict[str, int]] = []
    parts: dict[str, list[np.ndarray[Any, Any]]] = {name: [] for name in small}
    nbytes = 0
    for i, schema in enumerate(schemas):
        columns = FileColumns(pool, i, schema)
        rows, removed = select_rows(spec, columns)
        per_file.append(removed)
        if rows.size:
            kept.append((i, rows))
            for name in small:
                parts[name].append(_resident(columns.read(name, rows), plan.fields[name]))
        nbytes += columns.nbytes
    file_of, row_of = concat_index(kept)
    result = IndexResult(
        file_of=file_of,
        row_of=row_of,
        schemas=schemas,
        removed=removed_total(per_file, spec.active()),
        scanned=sum(s.length for s in schemas),
        files_kept=len(kept),
        nbytes=nbytes,
    )
    _report(result)
    resident = {name: _concat(chunks, plan.fields[name]) for name, chunks in parts.items()}
    return result, replace(plan, resident=resident)


def _resident(values: np.ndarray[Any, Any], spec: OutputField) -> np.ndarray[Any, Any]:
    if spec.kind == "string":  # the stored bytes: a quarter of NumPy's str, no Python objects
        return as_bytes_array(values)  # decoded per batch, where a bad one names its row
    return values.astype(spec.dtype, copy=False)


def _concat(chunks: list[np.ndarray[Any, Any]], spec: OutputField) -> np.ndarray[Any, Any]:
    if chunks:
        return np.concatenate(chunks)
    return np.empty(0, dtype="S1" if spec.kind == "string" else spec.dtype)


def _choose_fields(
    schemas: Sequence[FileSchema], load_fields: Sequence[str] | None, keys: dict[str, str]
) -> list[str]:
    everywhere = [n for n in keys if all(n in s.fields for s in schemas)]
    somewhere = [n for n in keys if any(n in s.fields for s in schemas)]
    if load_fields is None:
        partial = [n for n in somewhere if n not in everywhere]
        for name in partial:
            lacking = [s.path for s in schemas if name not in s.fields]
            _log.info(
                "field %r is not loaded: %d of %d files lack it (%s); pass load_fields=[...] "
                "including it to require it in every file",
                name,
                len(lacking),
                len(schemas),
                format_names(lacking),
            )
        return everywhere
    if not load_fields:
        raise ValueError(
            f"load_fields is empty; pass None to load every field, or some of "
            f"{format_names(somewhere)}"
        )
    for name in load_fields:
        if name not in keys:
            hint = " (return it with return_valid_mask=True)" if name == VALID_MASK else ""
            raise ValueError(
                f"load_fields entry {name!r} is not a field{hint}; available fields: "
                f"{format_names(somewhere)}. Add fields with field_names={{name: 'path/in/file'}}"
            )
    return list(load_fields)


def _plan(
    schemas: Sequence[FileSchema], loads: list[str], spec: FilterSpec, valid_mask: bool
) -> BatchPlan:
    fields = output_fields(schemas, loads)
    if not valid_mask:
        return BatchPlan(fields, encoding=spec.guid_encoding)
    signal = output_fields(schemas, [spec.valid_field])[spec.valid_field]
    if signal.kind == "string":
        raise TypeError(
            f"return_valid_mask needs a numeric signal, but valid_field={spec.valid_field!r} "
            "holds strings"
        )
    check_time_axis(spec.time_axis, signal.row_shape, spec.valid_field)
    steps = signal.row_shape[spec.time_axis]
    fields[VALID_MASK] = OutputField(VALID_MASK, (steps,), np.dtype(bool), "other")
    return BatchPlan(fields, spec.valid_field, spec.time_axis, spec.guid_encoding)


def _report(result: IndexResult) -> None:
    total = int(result.file_of.size)
    removed = ", ".join(f"{name}: {n}" for name, n in result.removed.items()) or "no filters"
    skipped = len(result.schemas) - result.files_kept
    _log.info(
        "CombinedHDF5Dataset: %d of %d samples kept from %d of %d files (removed by %s; "
        "%d files without samples skipped)",
        total,
        result.scanned,
        result.files_kept,
        len(result.schemas),
        removed,
        skipped,
    )
    if total == 0:
        _log.warning("CombinedHDF5Dataset: no sample is left after the filters (%s)", removed)
