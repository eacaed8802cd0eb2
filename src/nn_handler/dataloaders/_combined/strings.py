"""String fields (``guid``, …) of ``CombinedHDF5Dataset``: decoded with ``guid_encoding``.

Files store ids as bytes. They are kept as those bytes (in RAM too) and decoded with the
dataset's ``guid_encoding`` where a ``str`` is needed: in a batch, in ``where=`` and in the
``allowed_guids`` filter (``_io/file/strings.py`` does the decoding and words the errors).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._io import Where, in_rows
from ..._io import check_encoding as check_named_encoding

__all__ = ["ARG", "check_encoding", "in_file"]

#: The argument that chooses the encoding, as messages name it.
ARG = "guid_encoding"


def check_encoding(value: Any) -> str:
    """Return ``value`` if it is a valid ``guid_encoding`` (``"bytes"`` or a text codec).

    Raises:
        TypeError / ValueError: it is not.
    """
    return check_named_encoding(ARG, value)


def in_file(field: str, path: str, rows: np.ndarray[Any, Any]) -> Where:
    """``Where`` for values of ``field`` read from rows ``rows`` of one file."""
    return in_rows(field, ARG, path, rows)
