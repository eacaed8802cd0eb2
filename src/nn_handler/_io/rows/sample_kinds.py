"""What kind of sample a stored dtype makes: numbers, strings, variable-length arrays, or none.

Checked when a dataset is built, so a dtype torch cannot hold fails there, with the cast that
would work, instead of at the first read with torch's own error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import h5py
import numpy as np

__all__ = ["SampleKind", "SampleKindName", "dataset_dtype", "sample_kind", "unsupported_reason"]

SampleKindName = Literal["numeric", "string", "ragged", "compound", "unsupported"]

# NumPy kind -> itemsizes torch has a dtype for (bool, ints, uints, floats, complex)
_TORCH_SIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}
_WIDEST = {"f": "np.float64", "c": "np.complex128", "i": "np.int64", "u": "np.int64"}


@dataclass(frozen=True)
class SampleKind:
    """The kind of a dtype, and for ``"ragged"`` the dtype of each row's elements."""

    kind: SampleKindName
    base: np.dtype[Any] | None = None  # element dtype of a ragged (variable-length) row
    reason: str = ""  # why an "unsupported" dtype is, and what to do


def dataset_dtype(dset: h5py.Dataset, *, arg: str, key: str, where: str) -> np.dtype[Any]:
    """Return ``dset.dtype``, or raise ``TypeError`` for HDF5 types NumPy has no dtype for.

    HDF5 time types and IEEE quad precision (``float128`` written on other platforms) have
    none; h5py raises a bare ``TypeError`` for them.
    """
    try:
        dtype: np.dtype[Any] = dset.dtype
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{arg}={key!r} in {where!r} has an HDF5 type that NumPy cannot represent ({exc}); "
            "it cannot be read as samples (convert it in the file, e.g. to float64 or int64)"
        ) from exc
    return dtype


def sample_kind(dtype: np.dtype[Any]) -> SampleKind:
    """Classify ``dtype`` (as h5py reports it) into the kind of sample values it makes."""
    if h5py.check_string_dtype(dtype) is not None or dtype.kind in "SU":
        return SampleKind("string")
    if dtype.names:
        return SampleKind("compound")
    vlen = h5py.check_vlen_dtype(dtype)
    if vlen is not None:
        if h5py.check_string_dtype(vlen) is None and _torch_holds(vlen):
            return SampleKind("ragged", base=vlen)
        return SampleKind("unsupported", reason=f"variable-length rows of {vlen}")
    reason = unsupported_reason(dtype)
    return SampleKind("unsupported", reason=reason) if reason else SampleKind("numeric")


def unsupported_reason(dtype: np.dtype[Any]) -> str:
    """Why torch cannot hold ``dtype`` and what cast would work; empty when it can."""
    if h5py.check_ref_dtype(dtype) is not None:
        return "HDF5 object/region references, which are not sample data"
    if dtype.subdtype is not None:
        return (
            f"an HDF5 array type {dtype}; store the array as extra dimensions of the dataset "
            "instead (shape (N, *row_shape))"
        )
    if dtype.kind in _TORCH_SIZES:
        if dtype.itemsize in _TORCH_SIZES[dtype.kind]:
            return ""
        return (
            f"{dtype} ({dtype.itemsize * 8}-bit), which torch has no dtype for; pass a cast "
            f"to {_WIDEST[dtype.kind]} (loses precision beyond it)"
        )
    if dtype.kind in "mM":
        return f"dates/times ({dtype}); pass a cast to np.int64 (ticks since the epoch)"
    if dtype.kind == "V":
        return f"opaque bytes ({dtype}); store them as uint8 (shape (N, {dtype.itemsize}))"
    return f"{dtype}, which torch cannot represent"


def _torch_holds(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in _TORCH_SIZES and dtype.itemsize in _TORCH_SIZES[dtype.kind]
