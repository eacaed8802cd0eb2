"""A per-process memo from HDF5 datatypes to what we derived from them (NumPy dtype, checks).

Turning an HDF5 type into a NumPy dtype (``TypeID.dtype``) costs about ten times more than
comparing two types (``TypeID.equal``), and per-sample files repeat the same few types
(every ``label`` attribute is an int64, every sample a float32 array). So each slot (an
attribute name, a file's data) remembers its last type and what was derived from it; a
different type simply replaces the entry.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import h5py
import numpy as np

from ..process import PerProcess

__all__ = ["TypeMemo", "is_string_dtype"]

T = TypeVar("T")
_MAX_SLOTS = 256  # attribute names can be per-sample unique: stay small rather than grow


class TypeMemo(Generic[T]):
    """``slot -> (HDF5 type, derived value)``, dropped on pickle and in a new process."""

    def __init__(self) -> None:
        self._slots: PerProcess[dict[Hashable, tuple[Any, T]]] = PerProcess(dict)

    def get(self, slot: Hashable, tid: Any, derive: Callable[[Any], T]) -> T:
        """Return ``derive(tid)``, reusing the value stored for ``slot`` if its type is equal."""
        slots = self._slots.get()
        hit = slots.get(slot)
        if hit is not None and hit[0].equal(tid):
            return hit[1]
        value = derive(tid)
        if len(slots) >= _MAX_SLOTS:
            slots.clear()
        # a transient copy: a committed type's id would keep its file open past close()
        slots[slot] = (tid.copy(), value)
        return value

    def clear(self) -> None:
        """Forget every entry."""
        self._slots.pop()


def is_string_dtype(dtype: np.dtype[Any]) -> bool:
    """True for fixed- or variable-length strings (bytes or str), as h5py reports them."""
    return dtype.kind in "SU" or h5py.check_string_dtype(dtype) is not None
