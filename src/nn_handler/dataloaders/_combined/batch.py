"""Batch reads for ``CombinedHDF5Dataset``: group by file, one read per (file, field), outputs.

A batch of global samples becomes NumPy arrays in request order (``read_rows``), then tensors
of the requested dtype and lists of ``str`` (``to_batch``); ``_tensors.split`` makes one dict
per sample of that for ``__getitems__``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..._io import IndexArray, Where, decode_strings
from .._tensors.tensors import to_tensor
from .fields import VALID_MASK, OutputField
from .file_pool import FilePool
from .metadata import valid_steps
from .strings import ARG, in_file

__all__ = [
    "BatchPlan",
    "FLOAT_DTYPES",
    "check_float_dtype",
    "group_by_file",
    "read_rows",
    "to_batch",
]

#: Float dtypes a dataset may return, and the NumPy dtype that casts to each (bfloat16: torch).
FLOAT_DTYPES: dict[torch.dtype, np.dtype[Any] | None] = {
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: None,
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
}

Output = torch.Tensor | list[Any]


@dataclass(frozen=True)
class BatchPlan:
    """What a batch holds and where each field comes from.

    ``resident`` holds fields kept in RAM, aligned with the global index (strings as UTF-8
    bytes); every other field is read from the files.
    """

    fields: dict[str, OutputField]  # every returned field, the validity mask included
    valid_field: str | None = None  # signal the mask is computed from (None: no mask)
    time_axis: int = -1
    encoding: str = "utf-8"  # of string fields (``guid_encoding``)
    resident: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)

    @property
    def stored(self) -> list[str]:
        """Fields read from the files (the mask's signal included even if not returned)."""
        names = [n for n in self.fields if n != VALID_MASK and n not in self.resident]
        if self.valid_field is not None and self.valid_field not in names:
            names.append(self.valid_field)
        return names


def group_by_file(files: IndexArray) -> Iterator[tuple[int, IndexArray]]:
    """Yield ``(file number, positions)`` for each file that ``files`` mentions."""
    if files.size == 0:
        return
    if files[0] == files[-1] and np.all(files == files[0]):
        yield int(files[0]), np.arange(files.size, dtype=np.int64)
        return
    order = np.argsort(files, kind="stable")
    ordered = files[order]
    cuts = (np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, files.size], strict=True):
        yield int(ordered[lo]), order[lo:hi]


def read_rows(
    pool: FilePool, plan: BatchPlan, idx: IndexArray, file_of: IndexArray, row_of: IndexArray
) -> tuple[dict[str, np.ndarray[Any, Any]], int]:
    """Return ``({field: array in request order}, bytes read from files)`` for samples ``idx``.

    ``file_of`` / ``row_of`` map every sample of the dataset to its file and row.
    """
    out = {
        name: np.empty((idx.size, *spec.row_shape), dtype=spec.dtype)
        for name, spec in plan.fields.items()
    }
    files, rows = file_of[idx], row_of[idx]
    paths = [source.path for source in pool.sources]
    for name, column in plan.resident.items():
        where = Where(name, ARG, lambda k: (paths[int(files[k])], f"row {int(rows[k])}"))
        out[name][...] = _decoded(column[idx], plan, name, where)
    stored = plan.stored
    nbytes = 0
    for file_no, pos in group_by_file(files if stored else files[:0]):
        wanted = rows[pos]
        for name, reader in zip(stored, pool.readers(file_no, stored), strict=True):
            values = reader.read(wanted)
            nbytes += values.nbytes
            if name in out:
                where = in_file(name, paths[file_no], wanted)
                out[name][pos] = _decoded(values, plan, name, where)
            if name == plan.valid_field:
                out[VALID_MASK][pos] = valid_steps(values, plan.time_axis)
    return out, nbytes


def _decoded(
    values: np.ndarray[Any, Any], plan: BatchPlan, name: str, where: Where
) -> np.ndarray[Any, Any]:
    if plan.fields[name].kind != "string":
        return values
    return decode_strings(values, plan.encoding, where)


def to_batch(
    arrays: Mapping[str, np.ndarray[Any, Any]],
    fields: Mapping[str, OutputField],
    dtype: torch.dtype,
    pin: bool,
) -> dict[str, Output]:
    """Return tensors (float fields cast to ``dtype``) and lists of ``str`` for string fields."""
    batch: dict[str, Output] = {}
    for name, values in arrays.items():
        kind = fields[name].kind
        if kind == "string":
            batch[name] = values.tolist()
            continue
        tensor = _cast(values, dtype) if kind == "float" else to_tensor(values)
        batch[name] = tensor.pin_memory() if pin else tensor
    return batch


def _cast(values: np.ndarray[Any, Any], dtype: torch.dtype) -> torch.Tensor:
    np_dtype = FLOAT_DTYPES[dtype]
    if np_dtype is not None:
        return to_tensor(values, np_dtype)
    return to_tensor(values).to(dtype)  # bfloat16 has no NumPy dtype: torch casts


def check_float_dtype(dtype: Any) -> torch.dtype:
    """Return ``dtype`` if it is one of ``FLOAT_DTYPES``, else raise ``TypeError`` listing them."""
    try:
        known = dtype in FLOAT_DTYPES
    except TypeError:  # unhashable
        known = False
    if not known:
        allowed = ", ".join(str(d) for d in FLOAT_DTYPES)
        raise TypeError(f"dtype must be one of {allowed}; got {dtype!r}")
    result: torch.dtype = dtype
    return result
