"""Column names and column subsets (a gene panel) of sparse matrices, one map per file.

A subset is a list of column names (matched against each file's names: files may order their
genes differently) or of column numbers. Each file gets ``column_map``: for every stored column
its position in the output, or -1 when it is not selected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ColumnMap", "check_columns_arg", "column_map"]

_SHOWN = 5


@dataclass(frozen=True)
class ColumnMap:
    """Where each stored column of one file goes in the output.

    Attributes:
        positions: Per stored column, its output column or -1 (None: every column, unchanged).
        n_out: Output columns.
        increasing: True when kept columns keep their order (sorted rows stay sorted).
    """

    positions: np.ndarray[Any, Any] | None
    n_out: int
    increasing: bool


def column_map(
    columns: Sequence[Any] | None, names: np.ndarray[Any, Any] | None, n_cols: int, where: str
) -> ColumnMap:
    """Return the map that selects ``columns`` (names or numbers) from a file's columns.

    Raises:
        TypeError: ``columns`` mixes names and numbers, or holds other things.
        KeyError: a name is not a column of the file, or names a column twice in the file.
        IndexError: a number is out of range.
        ValueError: a column is asked for twice.
    """
    if columns is None:
        return ColumnMap(None, n_cols, True)
    wanted = _positions(columns, names, n_cols, where)
    positions = np.full(n_cols, -1, dtype=np.int64)
    positions[wanted] = np.arange(wanted.size)
    return ColumnMap(positions, int(wanted.size), bool(np.all(np.diff(wanted) > 0)))


def check_columns_arg(columns: Any) -> list[Any] | None:
    """Return ``columns`` as a list after type checks (None passes through)."""
    if columns is None:
        return None
    if isinstance(columns, str | bytes) or not isinstance(columns, Sequence | np.ndarray):
        raise TypeError(
            "columns must be a sequence of column names (str) or column numbers (int), "
            f"got {type(columns).__name__} {columns!r}"
        )
    items = list(columns.tolist() if isinstance(columns, np.ndarray) else columns)
    kinds = {_kind(c) for c in items}
    if not items or None in kinds or len(kinds) > 1:
        raise TypeError(
            "columns must be a non-empty sequence of only names (str) or only numbers (int), "
            f"got {_preview(items)}"
        )
    if len(set(items)) != len(items):
        twice = sorted({str(c) for c in items if items.count(c) > 1})
        raise ValueError(f"columns asks for {_preview(twice)} more than once")
    return items


def _kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "name"
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return "number"
    return None


def _positions(
    columns: Sequence[Any], names: np.ndarray[Any, Any] | None, n_cols: int, where: str
) -> np.ndarray[Any, Any]:
    if not isinstance(columns[0], str):
        wanted = np.asarray(columns, dtype=np.int64)
        bad = wanted[(wanted < 0) | (wanted >= n_cols)]
        if bad.size:
            raise IndexError(
                f"columns holds {int(bad[0])}, outside the {n_cols} columns of {where}"
            )
        return wanted
    if names is None:
        raise KeyError(
            f"columns are names but {where} stores no column names (no var index / features); "
            "pass column numbers instead"
        )
    order = np.argsort(names, kind="stable")
    sorted_names = names[order]
    asked = np.asarray(columns, dtype=str)
    found = np.searchsorted(sorted_names, asked)
    found = np.minimum(found, max(0, names.size - 1))
    ok = sorted_names[found] == asked if names.size else np.zeros(asked.size, bool)
    if not ok.all():
        missing = asked[~ok].tolist()
        raise KeyError(
            f"{len(missing)} of the {asked.size} columns are not in {where}: {_preview(missing)}"
        )
    after = np.minimum(found + 1, names.size - 1)
    twice = (after != found) & (sorted_names[after] == asked)
    if twice.any():
        raise KeyError(
            f"{where} names columns {_preview(asked[twice].tolist())} more than once; "
            "select them by number instead"
        )
    return order[found].astype(np.int64)


def _preview(items: list[Any]) -> str:
    shown = ", ".join(repr(v) for v in items[:_SHOWN])
    return f"[{shown}{', …' if len(items) > _SHOWN else ''}]"
