"""Building an in-memory cache of some rows of a file: plan, check, allocate, fill, report.

Used by ``RankMemCachedH5Dataset`` at construction. Every step that can fail for lack of memory
fails before anything is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..._io import H5Source, Reader, open_reader
from .._tensors.tensors import check_tensor_dtype
from . import memory as _memory
from .preload import preload_rows

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = [
    "PROGRESS_BYTES",
    "CachePlan",
    "fill_caches",
    "open_readers",
    "plan_cache",
    "progress_bar",
]

PROGRESS_BYTES = 256 * 1024**2  # smaller loads finish before a progress bar would help


@dataclass(frozen=True)
class CachePlan:
    """What one key's cache will hold: ``count`` rows of ``reader`` as ``dtype``."""

    reader: Reader
    dtype: np.dtype[Any]
    count: int

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.count, *self.reader.row_shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def describe(self) -> str:
        """``"(rows, *row_shape) stored->cached"`` for reprs."""
        reader = self.reader
        return f"{(reader.length, *reader.row_shape)} {reader.dtype}->{self.dtype}"


def open_readers(source: H5Source, x_key: str, y_key: str | None) -> list[Reader]:
    """Readers for ``x_key`` (and ``y_key``), checked to have the same length."""
    readers = [open_reader(source, x_key, arg="x_key")]
    if y_key is not None:
        readers.append(open_reader(source, y_key, arg="y_key"))
        if readers[1].length != readers[0].length:
            raise ValueError(
                f"x_key={x_key!r} has {readers[0].length} samples but y_key={y_key!r} has "
                f"{readers[1].length}; both need the same length along axis 0"
            )
    return readers


def plan_cache(reader: Reader, arg: str, cast: np.dtype[Any] | None, count: int) -> CachePlan:
    """Plan ``count`` rows of ``reader`` cast to ``cast`` (stored dtype, native order if None).

    Raises:
        TypeError: the result would be a dtype torch cannot hold.
    """
    check_tensor_dtype(arg, reader.key, reader.dtype, cast)
    final = cast if cast is not None else reader.dtype.newbyteorder("=")
    return CachePlan(reader, final, count)


def fill_caches(
    plans: list[CachePlan],
    rows: range,
    *,
    shared: bool,
    what: str,
    progress: Callable[[int], tqdm[Any]],
) -> list[torch.Tensor]:
    """Check the caches fit, allocate them and read ``rows`` into them.

    Args:
        plans: One plan per key.
        rows: The file rows to cache (the same for every key).
        shared: Allocate in shared memory.
        what: Who needs the memory, for error messages.
        progress: Makes the progress bar for a total number of bytes.

    Raises:
        MemoryError: the caches would not fit (checked before anything is allocated).
    """
    nbytes = sum(plan.nbytes for plan in plans)
    _memory.check_fits(nbytes, what, shared=shared)
    caches = []
    with progress(nbytes) as bar:
        for plan in plans:
            cache = _memory.allocate(plan.shape, plan.dtype, shared=shared)
            preload_rows(plan.reader, rows, cache.numpy(), bar.update)
            caches.append(cache)
    return caches


def progress_bar(nbytes: int, desc: str, show: bool) -> tqdm[Any]:
    """A byte progress bar, drawn only when ``show`` and ``nbytes`` is large, on a terminal."""
    from tqdm.auto import tqdm  # (on first use: a worker that unpickles the dataset never draws)

    return tqdm(
        total=nbytes,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=None if show and nbytes >= PROGRESS_BYTES else True,  # None: TTY only
        leave=False,
    )
