"""Which requests to send for a batch of byte ranges: neighbours merged, long runs split.

Every request to an object store costs a round trip (tens of milliseconds) whatever its size,
while a few hundred kilobytes more cost about a millisecond. So ranges whose gap is at most
``gap`` bytes go in one request (the gap's bytes are fetched and dropped), and a request is cut
at ``max_request`` bytes so that one long run is fetched by several requests at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "BLOCK_TARGET_NBYTES",
    "MAX_ADJACENT_CHUNKS",
    "Request",
    "adjacent_chunks",
    "plan_requests",
]

#: decoded bytes a chunk sampler's block of adjacent chunks aims at on a remote file
BLOCK_TARGET_NBYTES = 1024**2
#: most adjacent chunks per block (mixing: rows this close in the file stay together)
MAX_ADJACENT_CHUNKS = 8


@dataclass(frozen=True)
class Request:
    """Bytes ``[start, end)`` of the object, serving ``members`` (indices into the ranges)."""

    start: int
    end: int
    members: tuple[int, ...]


def plan_requests(
    ranges: Sequence[tuple[int, int]], *, gap: int, max_request: int
) -> list[Request]:
    """The requests that cover every non-empty range in ``ranges``.

    Ranges are sorted by offset; touching or overlapping ones are always merged, and one that
    starts at most ``gap`` bytes after the run's end joins it while the run stays within
    ``max_request`` bytes. A request exceeds ``max_request`` only through ranges that touch or
    overlap it (they cannot go to another request without overlapping it); the caller splits
    long transfers, so that costs no correctness, and no hole is ever longer than ``gap``.

    Args:
        ranges: ``(offset, length)`` pairs, in any order, overlapping or not.
        gap: Largest hole (bytes) fetched to save a request.
        max_request: Largest merged request (bytes).

    Returns:
        Requests in offset order; each range index is a member of exactly one request (empty
        ranges of none).
    """
    order = sorted((r for r in range(len(ranges)) if ranges[r][1] > 0), key=lambda r: ranges[r])
    requests: list[Request] = []
    start = end = -1
    members: list[int] = []
    for k in order:
        offset, length = ranges[k]
        stop = offset + length
        touching = offset <= end  # overlapping or adjacent: merging adds no bytes
        if members and (touching or (offset <= end + gap and stop - start <= max_request)):
            end = max(end, stop)
            members.append(k)
            continue
        if members:
            requests.append(Request(start, end, tuple(members)))
        start, end, members = offset, stop, [k]
    if members:
        requests.append(Request(start, end, tuple(members)))
    return requests


def adjacent_chunks(chunk_nbytes: int) -> int:
    """Adjacent chunks per sampler block for a remote file whose chunks decode to this size.

    A request costs a round trip (tens of milliseconds) whatever its size, while a megabyte
    more costs about a millisecond: blocks of neighbouring chunks up to ``BLOCK_TARGET_NBYTES``
    decoded (less stored) are fetched by one request each. The cap keeps the mixing cost
    bounded (rows at most ``MAX_ADJACENT_CHUNKS`` chunks apart stay in one block); chunks of
    ``BLOCK_TARGET_NBYTES`` or more (or no chunking: 0) keep a block per chunk.
    """
    if chunk_nbytes <= 0:
        return 1
    return max(1, min(MAX_ADJACENT_CHUNKS, BLOCK_TARGET_NBYTES // chunk_nbytes))
