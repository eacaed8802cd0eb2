"""Stored strings to ``str``, in the encoding a user chose, or an error naming the row.

Files store strings as bytes (fixed-length, variable-length, ASCII- or UTF-8-tagged), and HDF5
checks neither tag: a "UTF-8" string may hold any bytes. Every dataset class decodes them here,
with the encoding its ``*_encoding=`` argument names (``"utf-8"`` by default, any Python text
codec, or ``"bytes"`` for the stored bytes undecoded). Bytes the encoding cannot decode raise
``DataFileError`` naming the file, the field, the row, the bytes and the argument to pass.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataFileError

__all__ = [
    "BYTES",
    "Where",
    "as_bytes_array",
    "check_encoding",
    "decode_strings",
    "in_rows",
]

#: Encoding value that returns the stored bytes undecoded.
BYTES = "bytes"
_SHOWN_BYTES = 32


@dataclass(frozen=True)
class Where:
    """Where decoded values come from, for the message.

    Attributes:
        field: What the values are (``"guid"``, ``"y_key='labels'"``).
        arg: The argument that chooses the encoding (``"guid_encoding"``).
        locate: From a value's position in the array to its file's path and its place there
            (``"row 17"``, ``"sample 'trajectory_3'"``).
    """

    field: str
    arg: str
    locate: Callable[[int], tuple[str, str]]


def check_encoding(arg: str, value: Any) -> str:
    """Return ``value`` if it is ``"bytes"`` or the name of a Python text codec.

    Args:
        arg: The argument's name, for the message.
        value: What was passed.

    Raises:
        TypeError: not a str.
        ValueError: no codec of that name, or one that is not bytes to str.
    """
    if not isinstance(value, str):
        raise TypeError(
            f"{arg} must be a codec name such as 'utf-8' or 'latin-1', or 'bytes', got "
            f"{type(value).__name__} {value!r}"
        )
    if value == BYTES:
        return value
    try:
        info = codecs.lookup(value)
    except LookupError as exc:
        raise ValueError(
            f"{arg}={value!r} is not a Python codec; pass a codec name such as "
            f"'utf-8', 'latin-1' or 'cp1252', or 'bytes' to get the stored bytes"
        ) from exc
    # e.g. 'zlib_codec' or 'base64' turn bytes into bytes
    if not getattr(info, "_is_text_encoding", True):
        raise ValueError(f"{arg}={value!r} is not a text encoding (bytes to str)")
    return value


def as_bytes_array(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Stored string values (fixed or variable length) as a NumPy bytes (``S``) array.

    A ``str`` h5py already decoded is encoded back as UTF-8 (HDF5's only non-ASCII charset).
    """
    if values.dtype.kind == "S":
        return values
    if values.dtype.kind == "U":
        encoded: np.ndarray[Any, Any] = np.char.encode(values, "utf-8")
        return encoded
    flat = [v if isinstance(v, bytes) else str(v).encode() for v in values.ravel().tolist()]
    return np.array(flat, dtype=bytes).reshape(values.shape)


def in_rows(field: str, arg: str, path: str, rows: np.ndarray[Any, Any]) -> Where:
    """``Where`` for values read from rows ``rows`` of the file at ``path``."""
    return Where(field, arg, lambda k: (path, f"row {int(rows[k])}"))


def decode_strings(
    values: np.ndarray[Any, Any], encoding: str, where: Where
) -> np.ndarray[Any, Any]:
    """``values`` as a ``str`` array decoded with ``encoding`` (``"bytes"``: as ``S`` bytes).

    Args:
        values: Stored string values, as read or as kept in RAM.
        encoding: ``"bytes"`` or a Python text codec (``check_encoding``).
        where: What the values are and where each is stored, for the message.

    Raises:
        DataFileError: a value is not valid in ``encoding``; names the first such row.
    """
    if encoding == BYTES:
        return as_bytes_array(values)
    if values.size == 0:  # np.char.decode of an empty S array returns an S array
        return np.empty(values.shape, dtype=str)
    try:
        if values.dtype.kind == "S":
            decoded: np.ndarray[Any, Any] = np.char.decode(values, encoding)
            return decoded
        # variable length (objects): a list is faster than an S array through np.char
        flat = [
            v.decode(encoding) if isinstance(v, bytes) else str(v) for v in values.ravel().tolist()
        ]
    except UnicodeDecodeError as exc:
        raise _not_decodable(as_bytes_array(values), encoding, where) from exc
    return np.array(flat, dtype=str).reshape(values.shape)


def _not_decodable(raw: np.ndarray[Any, Any], encoding: str, where: Where) -> DataFileError:
    for k, value in enumerate(raw.ravel().tolist()):
        try:
            value.decode(encoding)
        except UnicodeDecodeError as exc:
            shown = value if len(value) <= _SHOWN_BYTES else value[:_SHOWN_BYTES] + b"..."
            path, place = where.locate(k)
            return DataFileError(
                f"{where.field} of {place} in {path!r} is not {encoding} ({shown!r}: "
                f"{exc.reason}); pass {where.arg}= (a codec such as 'latin-1', or 'bytes' to "
                f"get the stored bytes) or fix the file",
                path,
            )
    raise AssertionError("unreachable: numpy failed to decode what Python decodes")
