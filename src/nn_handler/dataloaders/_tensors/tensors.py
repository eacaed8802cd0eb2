"""NumPy → torch conversion shared by the datasets: casts, byte order, and dtype checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..._io import sample_kind, unsupported_reason

__all__ = ["check_tensor_dtype", "to_tensor", "torch_dtype"]

_TORCH_KINDS = "biufc"  # bool, signed, unsigned, float, complex


def check_tensor_dtype(
    arg: str, key: str, stored: np.dtype[Any], cast: np.dtype[Any] | None
) -> None:
    """Raise ``TypeError`` when rows of ``stored`` dtype (after ``cast``) cannot become tensors.

    The message says what would work: a cast (``float128`` -> ``np.float64``), a field of a
    compound dataset (``'<dataset>:<field>'``), or ``H5LazyDataset`` for strings and blobs.
    """
    final = cast if cast is not None else stored
    kind = sample_kind(stored).kind
    if final.kind in _TORCH_KINDS and final.fields is None and not unsupported_reason(final):
        if cast is not None and kind not in ("numeric", "unsupported"):
            raise TypeError(
                f"{arg}={key!r} has dtype {stored}, which cannot be cast to {cast}; "
                f"only numeric and bool datasets can be cast{_hint(kind, key, stored)}"
            )
        return
    reason = unsupported_reason(final) if kind in ("numeric", "unsupported") else ""
    raise TypeError(
        f"{arg}={key!r} has dtype {stored}"
        + (f" (cast to {cast})" if cast is not None else "")
        + f", which torch cannot represent{': ' + reason if reason else ''}"
        + _hint(kind, key, stored)
    )


def _hint(kind: str, key: str, stored: np.dtype[Any]) -> str:
    if kind == "compound":
        names = ", ".join(repr(f"{key}:{n}") for n in (stored.names or ())[:4])
        return f"; it is a compound (table) dataset: pick one field, e.g. {names}"
    if kind in ("string", "ragged"):
        return (
            "; H5LazyDataset returns strings as str (or class indices with classes=) and "
            "variable-length rows as 1-d tensors"
        )
    return ""


def to_tensor(arr: np.ndarray[Any, Any], dtype: np.dtype[Any] | None = None) -> torch.Tensor:
    """Return ``arr`` as a tensor, cast to ``dtype`` first when given (shares memory if it can)."""
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    elif not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not arr.flags.writeable:
        arr = arr.copy()
    return torch.from_numpy(arr)


def torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    """The torch dtype NumPy's ``dtype`` becomes in ``torch.from_numpy``.

    Raises:
        TypeError: torch has no such dtype.
    """
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
