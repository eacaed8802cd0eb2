"""Column: how rows of one key become sample values (tensors, strings, class indices, blobs).

* numbers: tensors, cast to the requested dtype first;
* strings (fixed or variable length, bytes or str): Python ``str`` (a list of ``str`` for a
  batch), or class indices (``int64`` tensors) through a label map;
* variable-length rows (an encoded image, an audio clip, any blob: HDF5 ``vlen`` of numbers):
  one 1-D tensor per sample; a batch is stacked when every row has the same length and a list of
  tensors otherwise.

A batch of values that differ in shape (or are not tensors) is a list (``split.collect``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..._io import (
    Reader,
    SampleKind,
    Where,
    as_index_array,
    decode_strings,
    normalize_index,
    sample_kind,
)
from ..._validate import format_names
from .split import collect, split_batch
from .tensors import to_tensor

__all__ = ["ENCODING_ARG", "Column", "label_map_from"]

#: The argument that chooses how string keys are decoded, as messages name it.
ENCODING_ARG = "label_encoding"


class Column:
    """Converts rows of one key read by a reader into sample values.

    Args:
        arg: The argument that named the key (``"x_key"``), for messages.
        key: The key.
        dtype: The stored dtype (a field's dtype for compound keys).
        row_shape: Shape of one row.
        cast: NumPy dtype numbers (and ragged rows) are cast to, or None.
        cast_arg: The argument that gave ``cast`` (``"x_dtype"``), for messages.
        label_map: ``{label: class index}`` for string rows, or None to return ``str``.
        encoding: How string rows are decoded: a Python text codec, or ``"bytes"`` to return
            the stored bytes (``label_encoding``).
        origin: The file's path and the key's length, to name the row a string that does not
            decode comes from.

    Raises:
        TypeError: the dtype cannot become sample values, or a cast / label map does not fit it.
    """

    def __init__(
        self,
        arg: str,
        key: str,
        dtype: np.dtype[Any],
        row_shape: tuple[int, ...],
        cast: np.dtype[Any] | None,
        cast_arg: str,
        label_map: Mapping[str, int] | None = None,
        *,
        encoding: str = "utf-8",
        origin: tuple[str, int] = ("", 0),
    ) -> None:
        self.kind: SampleKind = sample_kind(dtype)
        if self.kind.kind == "unsupported" and cast is not None and _castable(dtype):
            self.kind = SampleKind("numeric")  # float128 with x_dtype=np.float64, and the like
        self.cast = cast
        self.label_map = label_map
        self.row_shape = row_shape
        self.encoding = encoding
        self._field = f"{arg}={key!r}"
        self._origin = origin
        _check(self.kind, arg, key, dtype, row_shape, cast, cast_arg, label_map)

    @property
    def is_string(self) -> bool:
        """True for string rows."""
        return self.kind.kind == "string"

    def read_one(self, reader: Reader, index: Any) -> Any:
        """Read row ``index`` of ``reader`` and return it as a sample value."""
        if self.kind.kind == "numeric":
            return to_tensor(reader.read_row(index), self.cast)
        # object rows (blobs, vlen strings) go through the batch path: a single vlen row read
        # on its own would come back as an array of its elements, not one object
        at = np.array([normalize_index(index, reader.length)], dtype=np.int64)
        return self.samples(reader.read(at), at)[0]

    def samples(self, rows: np.ndarray[Any, Any], indices: Any) -> list[Any]:
        """Every row of a batch (read at ``indices``) as its own sample value."""
        kind = self.kind.kind
        if kind == "numeric":
            return split_batch(to_tensor(rows, self.cast))
        if kind == "ragged":
            return [to_tensor(np.asarray(r), self.cast) for r in rows.tolist()]
        texts = self.texts(rows, indices)
        if self.label_map is None:
            return texts.tolist()  # type: ignore[no-any-return]
        return split_batch(torch.from_numpy(self._indices(texts)))

    def batch(self, rows: np.ndarray[Any, Any], indices: Any) -> torch.Tensor | list[Any]:
        """A whole batch read at ``indices``: stacked where rows agree in shape, else a list."""
        if self.kind.kind == "numeric":
            return to_tensor(rows, self.cast)
        if self.is_string and self.label_map is not None:
            return torch.from_numpy(self._indices(self.texts(rows, indices)))
        return collect(self.samples(rows, indices))

    def texts(self, rows: np.ndarray[Any, Any], indices: Any) -> np.ndarray[Any, Any]:
        """String rows read at ``indices``, decoded (``S`` bytes for ``"bytes"``).

        Raises:
            DataFileError: a row is not valid in the encoding; names the file and the row.
        """
        path, length = self._origin

        def locate(k: int) -> tuple[str, str]:  # only on an error: no index work per batch
            return path, f"row {int(as_index_array(indices, length)[k])}"

        return decode_strings(rows, self.encoding, Where(self._field, ENCODING_ARG, locate))

    def _indices(self, texts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        assert self.label_map is not None
        mapping = self.label_map
        flat = texts.ravel().tolist()
        try:
            out = np.fromiter((mapping[t] for t in flat), dtype=np.int64, count=len(flat))
        except KeyError as exc:
            raise KeyError(
                f"label {exc.args[0]!r} is not in the label map; known labels: "
                f"{format_names(mapping)}"
            ) from None
        shaped: np.ndarray[Any, Any] = out.reshape(texts.shape)
        return shaped


def label_map_from(
    classes: Sequence[str] | str | None,
    label_map: Mapping[str, int] | None,
    labels: Callable[[], Iterable[str]],
) -> dict[str, int] | None:
    """Build ``{label: index}`` from ``classes`` (a list, or ``"auto"``) or ``label_map``.

    ``labels`` is called only for ``classes="auto"`` and returns every stored label.

    Raises:
        TypeError / ValueError: both are given, or one is malformed.
    """
    if classes is not None and label_map is not None:
        raise TypeError("pass classes= or label_map=, not both")
    if label_map is not None:
        return _checked_map(label_map)
    if classes is None:
        return None
    if isinstance(classes, str):
        if classes != "auto":
            raise ValueError(
                f"classes must be a list of labels or 'auto' (every stored label, sorted), "
                f"got {classes!r}"
            )
        classes = sorted(set(labels()))
    names = list(classes)
    if not all(isinstance(c, str) for c in names) or len(set(names)) != len(names):
        raise ValueError(f"classes must be distinct strings, got {classes!r}")
    return {name: i for i, name in enumerate(names)}


def _checked_map(label_map: Any) -> dict[str, int]:
    if not isinstance(label_map, Mapping):
        raise TypeError(f"label_map must be a mapping {{label: class index}}, got {label_map!r}")
    result = {}
    for label, index in label_map.items():
        if not isinstance(label, str) or isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(
                f"label_map must map str labels to int indices, got {label!r}: {index!r}"
            )
        result[label] = index
    return result


def _castable(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in "biufcmM" and dtype.subdtype is None and dtype.names is None


def _check(
    kind: SampleKind,
    arg: str,
    key: str,
    dtype: np.dtype[Any],
    row_shape: tuple[int, ...],
    cast: np.dtype[Any] | None,
    cast_arg: str,
    label_map: Mapping[str, int] | None,
) -> None:
    where = f"{arg}={key!r} (dtype {dtype})"
    if kind.kind == "unsupported":
        raise TypeError(f"{where} holds {kind.reason}")
    if kind.kind == "compound":
        fields = ", ".join(repr(f"{key}:{n}") for n in (dtype.names or ())[:6])
        raise TypeError(
            f"{where} is a compound (table) dataset; pick one field with "
            f"'<dataset>:<field>', e.g. {fields}"
        )
    if label_map is not None and kind.kind != "string":
        raise TypeError(f"{where}: classes= / label_map= map string labels; this key holds numbers")
    if kind.kind == "ragged" and row_shape:
        raise TypeError(f"{where}: variable-length rows are read from 1-d datasets only")
    if cast is not None and kind.kind == "string":
        raise TypeError(
            f"{where} holds strings, which {cast_arg}={cast} cannot cast; samples are str, or "
            "class indices with classes= / label_map="
        )
    if cast is not None and (cast.kind not in "biufc" or sample_kind(cast).kind != "numeric"):
        raise TypeError(f"{cast_arg}={cast} is not a dtype torch can hold; pass e.g. np.float32")
