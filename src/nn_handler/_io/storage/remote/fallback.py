"""What a read through the node cache does when the cache itself fails it.

The cache's own failures (a full or read-only disk, a file that is not ours, a read that fails)
must never fail a read of the object: ``CachedFile`` turns the cache off and serves the read
from the store. ``cache_side`` marks the blocks that work on the cache only, so that their
``OSError`` (and only theirs: ``FileChangedError`` and ``RemoteReadError`` of the store are
``OSError`` too) becomes a ``CacheFailedError``; one raised after the missing pieces were
fetched carries them, and ``serve_fetched`` then uses them instead of fetching them again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..byte_source import Buffer
from .intervals import empty, missing, union

__all__ = ["CacheFailedError", "Fetch", "Part", "cache_side", "serve_fetched"]

Fetch = Callable[[Sequence[tuple[int, int]], Sequence[Buffer]], None]  # a read from the store
Part = tuple[int, np.ndarray[Any, np.dtype[np.uint8]]]  # bytes of the object from an offset


class CacheFailedError(Exception):
    """An ``OSError`` of the cache itself (never of the store), and what was fetched by then."""

    def __init__(self, error: OSError, fetched: list[Part] | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.fetched = fetched


@contextlib.contextmanager
def cache_side() -> Iterator[None]:
    """The block works on the cache only: its ``OSError`` is the cache's (``CacheFailedError``)."""
    try:
        yield
    except OSError as exc:
        raise CacheFailedError(exc) from exc


def serve_fetched(
    fetched: list[Part],
    ranges: Sequence[tuple[int, int]],
    buffers: Sequence[Buffer],
    fetch: Fetch,
) -> None:
    """Fill the buffers from the parts already fetched, fetching only the rest from the store."""
    have = union(empty(), [(start, start + len(part)) for start, part in fetched])
    rest = missing(have, ranges)
    more = [np.empty(end - start, np.uint8) for start, end in rest]
    if rest:
        fetch([(start, end - start) for start, end in rest], more)
    parts = [*fetched, *((start, part) for (start, _), part in zip(rest, more, strict=True))]
    for (offset, length), buffer in zip(ranges, buffers, strict=True):
        out = np.frombuffer(buffer, np.uint8)
        for start, part in parts:
            lo, hi = max(offset, start), min(offset + length, start + len(part))
            if lo < hi:
                out[lo - offset : hi - offset] = part[lo - start : hi - start]
