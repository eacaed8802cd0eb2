"""NumPy → torch conversion shared by the datasets: casts, byte order, and dtype checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["check_tensor_dtype", "to_tensor"]

_TORCH_KINDS = "biufc"  # bool, signed, unsigned, float, complex


def check_tensor_dtype(
    arg: str, key: str, stored: np.dtype[Any], cast: np.dtype[Any] | None
) -> None:
    """Raise ``TypeError`` when rows of ``stored`` dtype (after ``cast``) cannot become tensors."""
    final = cast if cast is not None else stored
    if final.kind in _TORCH_KINDS and final.fields is None:
        if cast is not None and stored.kind not in _TORCH_KINDS:
            raise TypeError(
                f"{arg}={key!r} has dtype {stored}, which cannot be cast to {cast}; "
                "only numeric and bool datasets can be cast"
            )
        return
    raise TypeError(
        f"{arg}={key!r} has dtype {stored}"
        + (f" (cast to {cast})" if cast is not None else "")
        + ", which torch cannot represent; pass a numeric dtype cast or read this field "
        "with CombinedHDF5Dataset, which returns strings as str"
    )


def to_tensor(arr: np.ndarray[Any, Any], dtype: np.dtype[Any] | None = None) -> torch.Tensor:
    """Return ``arr`` as a tensor, cast to ``dtype`` first when given (shares memory if it can)."""
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    elif not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not arr.flags.writeable:
        arr = arr.copy()
    return torch.from_numpy(arr)
