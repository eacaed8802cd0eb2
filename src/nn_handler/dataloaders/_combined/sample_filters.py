"""FilterSpec: the validated filter arguments of ``CombinedHDF5Dataset``.

Every check happens here, before any file is opened, so a bad argument fails fast with a message
that names it, shows the value and says what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._io import BYTES, as_bytes_array
from ..._validate import check_callable, check_int, check_non_negative_int, check_probability
from .strings import check_encoding

__all__ = ["FILTERS", "FilterSpec", "WhereFn"]

WhereFn = Callable[[dict[str, np.ndarray[Any, Any]]], Any]
#: Filter names, in the order they run (and the keys of the removal counts).
FILTERS = (
    "allowed_guids",
    "cs_label",
    "bg_label",
    "epoch_range",
    "label",
    "min_valid_fraction",
    "where",
)


@dataclass(frozen=True)
class FilterSpec:
    """Validated filter arguments (see ``CombinedHDF5Dataset`` for their meaning)."""

    allowed_guids: np.ndarray[Any, Any] | None = None
    cs_label: bool | None = None
    bg_label: bool | None = None
    epoch_min: float | None = None
    epoch_max: float | None = None
    label: int | None = None
    min_valid_fraction: float | None = None
    valid_field: str = "fhr_st"
    time_axis: int = -1
    where: WhereFn | None = None
    guid_encoding: str = "utf-8"  # how stored string fields are decoded (strings.py)

    @classmethod
    def build(
        cls,
        *,
        allowed_guids: Any = None,
        cs_label: Any = None,
        bg_label: Any = None,
        epoch_min: Any = None,
        epoch_max: Any = None,
        label: Any = None,
        min_valid_fraction: Any = None,
        valid_field: Any = "fhr_st",
        time_axis: Any = -1,
        where: Any = None,
        guid_encoding: Any = "utf-8",
    ) -> FilterSpec:
        """Check every argument and return the spec.

        Raises:
            TypeError / ValueError: naming the argument, its value and what is allowed.
        """
        lo, hi = _bound("epoch_min", epoch_min), _bound("epoch_max", epoch_max)
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(
                f"epoch_min={epoch_min!r} is greater than epoch_max={epoch_max!r}; the range "
                "is inclusive, so epoch_min <= epoch_max"
            )
        if not isinstance(valid_field, str) or not valid_field:
            raise TypeError(f"valid_field must be a non-empty field name, got {valid_field!r}")
        check_callable("where", where)
        encoding = check_encoding(guid_encoding)
        return cls(
            allowed_guids=_guid_array(allowed_guids, encoding),
            cs_label=_flag("cs_label", cs_label),
            bg_label=_flag("bg_label", bg_label),
            epoch_min=lo,
            epoch_max=hi,
            label=None if label is None else check_non_negative_int("label", label),
            min_valid_fraction=None
            if min_valid_fraction is None
            else check_probability("min_valid_fraction", min_valid_fraction),
            valid_field=valid_field,
            time_axis=check_int("time_axis", time_axis),
            where=where,
            guid_encoding=encoding,
        )

    def needs(self) -> dict[str, str]:
        """Return ``{field: argument}`` for every field an active filter reads."""
        wanted = {
            "guid": self.allowed_guids is not None and "allowed_guids",
            "cs_label": self.cs_label is not None and "cs_label",
            "bg_label": self.bg_label is not None and "bg_label",
            "epoch": _epoch_active(self) and "epoch_min/epoch_max",
            "target": self.label is not None and "label",
            self.valid_field: self.min_valid_fraction is not None and "min_valid_fraction",
        }
        return {field: str(arg) for field, arg in wanted.items() if arg}

    def active(self) -> tuple[str, ...]:
        """Names of the filters in use, in the order they run."""
        on = {
            "allowed_guids": self.allowed_guids is not None,
            "cs_label": self.cs_label is not None,
            "bg_label": self.bg_label is not None,
            "epoch_range": _epoch_active(self),
            "label": self.label is not None,
            "min_valid_fraction": self.min_valid_fraction is not None,
            "where": self.where is not None,
        }
        return tuple(name for name in FILTERS if on[name])


def _epoch_active(spec: FilterSpec) -> bool:
    return spec.epoch_min is not None or spec.epoch_max is not None


def _guid_array(value: Any, encoding: str) -> np.ndarray[Any, Any] | None:
    """The ids as the stored ids will read: bytes (str as UTF-8) or str (bytes decoded)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(
            "allowed_guids must be an iterable of ids (e.g. a list of str), got "
            f"{type(value).__name__} {value!r}"
        )
    items = list(value)
    bad = [v for v in items if not isinstance(v, (str, bytes, np.str_, np.bytes_))]
    if bad:
        raise TypeError(f"allowed_guids must hold str or bytes ids, got {bad[0]!r}")
    if encoding == BYTES:
        return np.unique(as_bytes_array(np.array(items, dtype=object)))
    try:
        decoded = [v.decode(encoding) if isinstance(v, bytes) else str(v) for v in items]
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"allowed_guids holds bytes that are not {encoding} ({exc.object!r}); pass them as "
            "str, or guid_encoding= set to their encoding ('bytes' compares bytes)"
        ) from exc
    return np.unique(np.array(decoded, dtype=str))


def _flag(name: str, value: Any) -> bool | None:
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    raise TypeError(f"{name} must be True, False or None, got {value!r}")


def _bound(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number or None, got {value!r}")
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)
