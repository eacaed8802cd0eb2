"""What an output file holds: its datasets (name, one row's shape, dtype) and its chunk grid.

Every dataset of one file shares one chunk grid (``chunk_rows`` rows per chunk), chosen from the
widest row alone: the grid is a pure function of the rows' shapes and dtypes, never of how many
processes write, so every writer of a job cuts the same chunks and the file's bytes cannot
depend on the number of writers.

Why about 1 MiB a chunk: our loaders decode whole chunks (a random sample decodes its chunk), the
default chunk cache holds 256 MiB, and a chunk read costs a fixed ~10 µs in h5py plus its index
entry. At 1 MiB the fixed costs are under 1 % of a chunk's inflate time, a sequential read runs
at the codec's speed, a random row decodes at most 1 MiB, and the cache holds 256 chunks: the
window ``ChunkShuffleSampler`` needs. HDF5's own advice (chunks between 10 KiB and 1 MiB; larger
chunks than the cache are never cached) points the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import check_positive_int

__all__ = ["CHUNK_BYTES", "OutputLayout", "OutputSpec", "choose_chunk_rows"]

#: the target size of one chunk of the widest dataset (module docstring)
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class OutputSpec:
    """One dataset of the output file.

    Attributes:
        name: The dataset's path in the file (``"predictions"``, ``"predictions/0"``, ...).
        shape: One row's shape (``()`` for one number per sample).
        dtype: The stored type (a NumPy dtype string, e.g. ``"<f4"``).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if any(size == 0 for size in self.shape):
            raise ValueError(
                f"output {self.name!r} has rows of shape {self.shape}, with no values; HDF5 "
                "cannot chunk an empty dimension: return at least one value per sample"
            )

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The dtype as a ``np.dtype``."""
        return np.dtype(self.dtype)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.numpy_dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (for the work folder's manifest)."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutputSpec:
        """The inverse of ``to_json``."""
        return cls(str(data["name"]), tuple(int(s) for s in data["shape"]), str(data["dtype"]))


def choose_chunk_rows(n_rows: int, specs: Sequence[OutputSpec], target: int = CHUNK_BYTES) -> int:
    """Rows per chunk: about ``target`` bytes of the widest dataset, at least 1, at most ``n_rows``.

    Args:
        n_rows: Rows of the file (samples of the dataset).
        specs: The file's datasets.
        target: Bytes of one chunk of the widest dataset.

    Returns:
        The rows of every chunk but the last.
    """
    widest = max((spec.row_bytes for spec in specs), default=1)
    return max(1, min(n_rows, target // max(widest, 1)))


@dataclass(frozen=True)
class OutputLayout:
    """The rows of a file and its chunk grid, shared by all its datasets.

    Attributes:
        n_rows: Rows of every dataset (one per sample).
        chunk_rows: Rows per chunk (the last chunk holds the rest).
        specs: The datasets, in the order outputs come (a model's tuple or dict order).
    """

    n_rows: int
    chunk_rows: int
    specs: tuple[OutputSpec, ...]

    def __post_init__(self) -> None:
        check_positive_int("n_rows", self.n_rows)
        check_positive_int("chunk_rows", self.chunk_rows)

    @property
    def n_chunks(self) -> int:
        """Chunks of each dataset."""
        return -(-self.n_rows // self.chunk_rows)

    def chunk_span(self, chunk: int) -> tuple[int, int]:
        """``(start, stop)``: the rows of ``chunk``."""
        start = chunk * self.chunk_rows
        return start, min(start + self.chunk_rows, self.n_rows)

    def chunks(self) -> Iterator[tuple[int, int, int]]:
        """``(chunk, start, stop)`` for every chunk, in order."""
        for chunk in range(self.n_chunks):
            yield (chunk, *self.chunk_span(chunk))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (for the work folder's manifest)."""
        return {
            "n_rows": self.n_rows,
            "chunk_rows": self.chunk_rows,
            "specs": [spec.to_json() for spec in self.specs],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutputLayout:
        """The inverse of ``to_json``."""
        specs = tuple(OutputSpec.from_json(s) for s in data["specs"])
        return cls(int(data["n_rows"]), int(data["chunk_rows"]), specs)
