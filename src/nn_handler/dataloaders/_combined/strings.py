"""String fields (``guid``, …) of ``CombinedHDF5Dataset``: stored bytes to ``str``, or not.

Files store ids as bytes (fixed-length, variable-length, ASCII- or UTF-8-tagged). They are kept
as those bytes (in RAM too) and decoded with the dataset's ``guid_encoding`` where a ``str`` is
needed: in a batch, in ``where=`` and in the ``allowed_guids`` filter. Bytes that the encoding
cannot decode raise ``DataFileError`` naming the file, the field, the row and the bytes;
``guid_encoding="bytes"`` hands the bytes over undecoded.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any

import numpy as np

from .._io.errors import DataFileError

#: ``(field, locate)``: the field's name and a function from a value's position to its
#: ``(file path, row)``, for the message.
Where = tuple[str, Callable[[int], tuple[str, int]]]

__all__ = ["BYTES", "Where", "as_bytes_array", "check_encoding", "decode_strings", "in_file"]

#: ``guid_encoding`` value that returns the stored bytes undecoded.
BYTES = "bytes"


def check_encoding(value: Any) -> str:
    """Return ``value`` if it is ``"bytes"`` or the name of a Python text codec.

    Raises:
        TypeError: not a str.
        ValueError: no codec of that name.
    """
    if not isinstance(value, str):
        raise TypeError(
            f"guid_encoding must be a codec name such as 'utf-8' or 'latin-1', or 'bytes', got "
            f"{type(value).__name__} {value!r}"
        )
    if value == BYTES:
        return value
    try:
        info = codecs.lookup(value)
    except LookupError as exc:
        raise ValueError(
            f"guid_encoding={value!r} is not a Python codec; pass a codec name such as "
            f"'utf-8', 'latin-1' or 'cp1252', or 'bytes' to get the stored bytes"
        ) from exc
    if not getattr(
        info, "_is_text_encoding", True
    ):  # e.g. 'zlib_codec' or 'base64' turn bytes into bytes
        raise ValueError(f"guid_encoding={value!r} is not a text encoding (bytes to str)")
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


def in_file(field: str, path: str, rows: np.ndarray[Any, Any]) -> Where:
    """``Where`` for values read from rows ``rows`` of one file."""
    return field, lambda k: (path, int(rows[k]))


def decode_strings(
    values: np.ndarray[Any, Any], encoding: str, where: Where
) -> np.ndarray[Any, Any]:
    """``values`` as a ``str`` array decoded with ``encoding`` (``"bytes"``: as ``S`` bytes).

    Args:
        values: Stored string values, as read or as kept in RAM.
        encoding: ``"bytes"`` or a Python text codec (``check_encoding``).
        where: The field and where each value is stored, for the message.

    Raises:
        DataFileError: a value is not valid in ``encoding``; names the first such row.
    """
    raw = as_bytes_array(values)
    if encoding == BYTES:
        return raw
    try:
        decoded: np.ndarray[Any, Any] = np.char.decode(raw, encoding)
    except UnicodeDecodeError as exc:
        raise _not_decodable(raw, encoding, where) from exc
    return decoded


def _not_decodable(raw: np.ndarray[Any, Any], encoding: str, where: Where) -> DataFileError:
    field, locate = where
    for k, value in enumerate(raw.ravel().tolist()):
        try:
            value.decode(encoding)
        except UnicodeDecodeError as exc:
            shown = value if len(value) <= 32 else value[:32] + b"..."
            path, row = locate(k)
            return DataFileError(
                f"{field} of row {row} in {path!r} is not {encoding} ({shown!r}: {exc.reason}); "
                f"pass guid_encoding= (a codec such as 'latin-1', or 'bytes' to get the stored "
                f"bytes) or fix the file",
                path,
            )
    raise AssertionError("unreachable: numpy failed to decode what Python decodes")
