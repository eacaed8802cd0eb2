"""HDF5's byte-shuffle undone: c-blosc's SIMD unshuffle (through ``imagecodecs``), else NumPy.

HDF5 shuffles a whole chunk as one block: all first bytes of the elements, then all second
bytes, and so on. A Blosc (version 1 format) chunk of one block, flagged byte-shuffled and not
split, whose one stream is stored as is (its stored size equals the block's: c-blosc copies
such a stream instead of decompressing it), holds exactly those bytes behind a 24-byte header.
``blosc_decode`` of that frame copies the block once and unshuffles it with SSE2 / AVX2: 4–6×
the NumPy plane copies here, with the GIL released. The header is written into ``FRAME`` bytes
of room before the shuffled bytes (``decoders.scratch`` leaves that room), so the chunk is not
copied to be framed.

Whether c-blosc unshuffles such a frame as HDF5's filter would is checked once per process on
a small buffer (``blosc_unshuffles``); when it does not, or ``imagecodecs`` is missing, or the
chunk does not fit the format (elements of more than 255 bytes, a size that is not a whole
number of elements), the NumPy copy runs instead.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import numpy as np

from .libraries import IMAGECODECS

__all__ = [
    "FRAME",
    "blosc_unshuffles",
    "framed_fits",
    "unshuffle_framed",
    "unshuffle_head",
    "unshuffle_planes",
]

FRAME = 24  # Blosc's header (16 bytes), the one block's start (4) and its stream's size (4)

_VERSION, _BLOSCLZ_VERSION = 2, 1  # Blosc's format version; blosclz's (never called here)
_SHUFFLED, _NOT_SPLIT = 0x01, 0x10  # header flags (compressor bits 5-7: 0, blosclz)
_MAX_TYPESIZE = 255  # the header's typesize is one byte
_MAX_BYTES = (2**31 - 1 - 255 * 4) // 3  # c-blosc's BLOSC_MAX_BLOCKSIZE
_HEADER = struct.Struct("<BBBBiiiii")  # version, versionlz, flags, typesize, nbytes,
#                                        blocksize, cbytes, bstarts[0], csize of the stream


def unshuffle_planes(src: np.ndarray[Any, Any], dest: np.ndarray[Any, Any], itemsize: int) -> None:
    """Undo the shuffle of ``src`` into ``dest`` (uint8, same length) with NumPy.

    Bytes past the last whole element stay in place, as in HDF5's filter.
    """
    count = src.size // itemsize if itemsize > 1 else 0
    if count < 2:
        dest[:] = src
        return
    body = count * itemsize
    planes, rows = src[:body].reshape(itemsize, count), dest[:body].reshape(count, itemsize)
    for k in range(itemsize):  # one strided copy per byte plane: faster than a transpose
        rows[:, k] = planes[k]
    dest[body:] = src[body:]


def unshuffle_head(
    src: np.ndarray[Any, Any], nbytes: int, itemsize: int
) -> np.ndarray[Any, Any] | None:
    """The first ``nbytes`` bytes of ``src`` (a whole shuffled chunk, uint8) put back together.

    Only the elements those bytes hold are gathered from the byte planes: a few rows of a chunk
    cost their own bytes, not the whole chunk's unshuffle. None when they reach the bytes past
    the last whole element (HDF5 leaves those in place; the caller decodes the whole chunk).
    """
    count = src.size // itemsize if itemsize > 1 else 0
    if count < 2:
        return src[:nbytes].copy() if itemsize == 1 else None
    elements = -(-nbytes // itemsize)
    if elements > count:
        return None
    planes = src[: count * itemsize].reshape(itemsize, count)
    head = np.empty((elements, itemsize), np.uint8)
    head[...] = planes[:, :elements].T
    return head.reshape(-1)[:nbytes]


def framed_fits(nbytes: int, itemsize: int) -> bool:
    """True when ``nbytes`` bytes of ``itemsize``-byte elements are unshuffled by c-blosc.

    That needs a c-blosc that passed ``blosc_unshuffles``, elements of 2 to 255 bytes, at least
    two of them and no bytes past the last one.
    """
    if not 1 < itemsize <= _MAX_TYPESIZE or nbytes % itemsize or nbytes > _MAX_BYTES:
        return False
    return nbytes >= 2 * itemsize and blosc_unshuffles()


def unshuffle_framed(
    framed: np.ndarray[Any, Any], dest: np.ndarray[Any, Any], itemsize: int
) -> bool:
    """Undo the shuffle of ``framed[FRAME:]`` into ``dest`` with c-blosc; False when it failed.

    ``framed``'s first ``FRAME`` bytes are overwritten (the Blosc header); the caller checked
    ``framed_fits``. On False the caller unshuffles with ``unshuffle_planes``.
    """
    _write_header(framed, framed.size - FRAME, itemsize)
    return _blosc(framed, dest)


def _write_header(framed: np.ndarray[Any, Any], nbytes: int, itemsize: int) -> None:
    # one block of nbytes, not split, stored as is: its stream starts after bstarts[0]
    block_start = FRAME - 4
    header = _HEADER.pack(
        _VERSION, _BLOSCLZ_VERSION, _SHUFFLED | _NOT_SPLIT, itemsize, nbytes, nbytes,
        FRAME + nbytes, block_start, nbytes,
    )  # fmt: skip
    framed[:FRAME] = np.frombuffer(header, np.uint8)


def _blosc(framed: np.ndarray[Any, Any], dest: np.ndarray[Any, Any]) -> bool:
    decode = IMAGECODECS.blosc_decode
    if decode is None:  # blosc_unshuffles said no: only a test that took it away gets here
        return False
    try:
        got = decode(framed, numthreads=1, out=dest)
    except (RuntimeError, ValueError):  # imagecodecs.BloscError: the NumPy copy then runs
        return False
    return len(got) == dest.size


@functools.cache
def blosc_unshuffles() -> bool:
    """True when c-blosc (``imagecodecs``) unshuffles a framed block exactly as HDF5 would.

    Checked once per process, on 64 elements of 4 bytes and 65 of 3 bytes, against NumPy.
    """
    if IMAGECODECS.blosc_decode is None:
        return False
    for count, itemsize in ((64, 4), (65, 3)):
        values = np.arange(count * itemsize, dtype=np.uint64).astype(np.uint8) * np.uint8(7)
        shuffled = values.reshape(count, itemsize).T.ravel()
        framed = np.empty(FRAME + shuffled.size, np.uint8)
        framed[FRAME:] = shuffled
        _write_header(framed, shuffled.size, itemsize)
        out = np.zeros_like(values)
        if not _blosc(framed, out) or not np.array_equal(out, values):
            return False
    return True
