"""HDF5 attributes of one sample, read through the low-level API and decoded into labels.

Decoding rules (the README repeats them):

* 0-d numbers and bools become Python ``int`` / ``float`` / ``complex`` / ``bool``;
* strings (variable or fixed length, bytes or UTF-8) become ``str`` (bytes that are not UTF-8
  are kept through ``surrogateescape``, like h5py does for variable-length strings);
* arrays stay NumPy arrays; string arrays become NumPy ``str`` arrays;
* an empty (null dataspace) attribute becomes ``None``; 0-d compounds stay ``numpy.void``;
* object references cannot be labels (they do not survive the trip out of a worker): error.

Reading goes through ``h5py.h5a`` directly, with each attribute name's HDF5 type memoized per
process: the high-level ``AttributeManager`` costs more per attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..._validate import format_names
from ..file.types import TypeMemo

__all__ = ["LabelReader", "attribute_names", "decode_value"]

_SCALAR_KINDS = "biufc"


@dataclass(frozen=True)
class _AttrType:
    """How to read an attribute of one HDF5 type."""

    dtype: np.dtype[Any]  # element dtype to read into (top-level array types split off)
    subshape: tuple[int, ...]  # extra axes of a top-level HDF5 array type
    mtype: Any  # memory type for AttrID.read
    is_reference: bool
    is_string: bool


class LabelReader:
    """Reads the labels of samples: all attributes, or the given names (per-process memo)."""

    def __init__(self, names: Sequence[bytes] | None) -> None:
        self.names = None if names is None else list(names)
        self._types: TypeMemo[_AttrType] = TypeMemo()

    def read(self, obj_id: Any, where: Callable[[], str]) -> dict[str, Any]:
        """Return ``{attribute name: decoded value}`` for the object ``obj_id``.

        Raises:
            KeyError: a requested attribute is missing; the message names the sample
                (``where()``) and lists the attributes it has.
            TypeError: an attribute holds object references.
        """
        wanted = attribute_names(obj_id) if self.names is None else self.names
        labels: dict[str, Any] = {}
        for raw in wanted:
            try:
                attr = h5py.h5a.open(obj_id, raw)
            except KeyError:
                if self.names is None:  # listed a moment ago: not a user error
                    raise
                raise _missing(obj_id, raw, self.names, where) from None
            key = raw.decode("utf-8", "surrogateescape")
            labels[key] = self._read_attribute(attr, raw, key, where)
        return labels

    def clear(self) -> None:
        """Forget the memoized types."""
        self._types.clear()

    def _read_attribute(self, attr: Any, raw: bytes, key: str, where: Callable[[], str]) -> Any:
        kind = self._types.get(raw, attr.get_type(), _attr_type)
        shape = attr.shape
        if shape is None:  # null dataspace (h5py.Empty)
            return None
        if kind.is_reference:
            raise TypeError(
                f"attribute {key!r} of sample {where()} holds HDF5 object references, which "
                "cannot be labels; pass attrs=[...] with the attribute names you need"
            )
        arr = np.zeros(shape + kind.subshape, dtype=kind.dtype)
        attr.read(arr, mtype=kind.mtype)
        return decode_value(arr, kind.is_string)


def attribute_names(obj_id: Any) -> list[bytes]:
    """Return the attribute names of an open object, in name order."""
    found: list[bytes] = []
    h5py.h5a.iterate(obj_id, found.append)
    return found


def _attr_type(tid: Any) -> _AttrType:
    # the same steps as h5py's AttributeManager.__getitem__
    dtype = tid.dtype
    mtype = h5py.h5t.py_create(dtype)
    is_reference = h5py.h5t.check_ref_dtype(dtype) is not None
    base, subshape = dtype.subdtype if dtype.subdtype is not None else (dtype, ())
    return _AttrType(base, tuple(subshape), mtype, is_reference, _is_string(base))


def _is_string(dtype: np.dtype[Any]) -> bool:
    string = h5py.h5t.check_string_dtype(dtype)
    return dtype.kind == "S" or (string is not None and string.length is None)


def _missing(obj_id: Any, raw: bytes, names: Sequence[bytes], where: Callable[[], str]) -> KeyError:
    have = [n.decode("utf-8", "surrogateescape") for n in attribute_names(obj_id)]
    asked = [n.decode("utf-8", "surrogateescape") for n in names]
    return KeyError(
        f"attrs={asked!r}: sample {where()} has no attribute "
        f"{raw.decode('utf-8', 'surrogateescape')!r}; it has: {format_names(have)}"
    )


def decode_value(arr: np.ndarray[Any, Any], is_string: bool | None = None) -> Any:
    """Apply the label decoding rules to an attribute read as an array."""
    if _is_string(arr.dtype) if is_string is None else is_string:
        return _decode_strings(arr)
    if arr.ndim > 0:
        return arr
    if arr.dtype.kind in _SCALAR_KINDS:
        return arr.item()
    return arr[()]


def _decode_strings(arr: np.ndarray[Any, Any]) -> Any:
    texts = [_text(v) for v in arr.flat]
    if arr.ndim == 0:
        return texts[0]
    return np.array(texts, dtype=str).reshape(arr.shape)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)
