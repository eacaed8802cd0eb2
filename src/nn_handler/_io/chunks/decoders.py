"""HDF5's filters undone one at a time, from a raw buffer into a caller's buffer.

Each decoder writes into the destination it is given and returns the part of it that it filled;
``ChunkPipeline`` (``codecs.py``) chains them and checks sizes. This module holds what every
decoder shares and HDF5's built-in filters; ``plugins.py`` holds the filters of ``hdf5plugin``.
Each ``Decoder`` is the decode half of its filter's record in ``codec_registry.py`` (which gives
its id; this table is checked against the records by ``tests/io/test_codec_registry.py``).
The work is done by ``imagecodecs`` (``pip install nn-handler[fast]``; imported on first use,
``libraries.py``), whose functions release the GIL, with a standard-library or NumPy fallback for
HDF5's built-in filters:

| filter (id) | decoded by | without the library |
|---|---|---|
| deflate / gzip (1) | ``imagecodecs.deflate_decode`` (libdeflate) | ``zlib``, one copy |
| byte-shuffle (2) | c-blosc's unshuffle via ``imagecodecs.blosc_decode`` (``shuffle.py``) | NumPy |
| Fletcher-32 (3) | ``imagecodecs.h5checksum_fletcher32`` | NumPy sums |
| blosc (32001) | ``imagecodecs.blosc_decode`` | h5py |
| lz4 (32004) | ``imagecodecs.lz4h5_decode`` (HDF5's lz4 framing) | h5py |
| bitshuffle (32008) | ``bitshuffle_decode``, each block after ``lz4`` / ``zstd`` | h5py |
| zstd (32015) | ``imagecodecs.zstd_decode`` | h5py |
| blosc2 (32026) | the ``blosc2`` package (chunks and b2nd frames) | h5py |

A stream that is corrupt, or that does not fit its destination, raises ``ChunkDecodeError``; a
variant we do not decode raises ``UnsupportedChunkError`` (the reader lets h5py decode it).
"""

from __future__ import annotations

import sys
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .libraries import IMAGECODECS, Decode, library
from .shuffle import FRAME, blosc_unshuffles, framed_fits, unshuffle_framed, unshuffle_planes

__all__ = [
    "CHECKSUM",
    "CHECKSUM_BYTES",
    "INFLATE",
    "UNSHUFFLE",
    "Buffer",
    "ChunkDecodeError",
    "Decode",
    "Decoder",
    "Filter",
    "Step",
    "UnsupportedChunkError",
    "call",
    "fletcher32",
    "fletcher32_numpy",
    "inflate_head",
    "inflate_into",
    "inflate_many",
    "library",
    "scratch",
    "strip_checksum",
    "unshuffle_into",
    "unshuffle_rows",
]

CHECKSUM_BYTES = 4  # a Fletcher-32 sum, stored after the chunk
_COPY = 4  # the scratch buffer a shuffled chunk is framed in when it came from elsewhere
_MOD = 65535  # Fletcher-32 sums are kept modulo 2**16 - 1

Buffer = np.ndarray[Any, Any]  # 1-d, uint8, C-contiguous


class ChunkDecodeError(ValueError):
    """A raw chunk could not be decoded here (bad checksum, wrong size, corrupt stream)."""


class UnsupportedChunkError(ChunkDecodeError):
    """A chunk in a variant of its filter that we do not decode (h5py's filter may)."""


@dataclass(frozen=True)
class Step:
    """One filter of a dataset's pipeline.

    Attributes:
        code: The HDF5 filter id.
        values: The filter's ``cd_values`` as the file stores them.
        itemsize: The dataset's element size (the default of byte-shuffle and bitshuffle).
    """

    code: int
    values: tuple[int, ...]
    itemsize: int


#: Undoes one step: (step, source, destination) -> the part of the destination it filled.
Filter = Callable[[Step, Buffer, Buffer], Buffer]


def _always(step: Step) -> bool:
    return True


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Decoder:
    """How one filter is undone here: the decode half of its codec record (``codec_registry``).

    Attributes:
        undo: Undoes one step into the destination it is given.
        available: Whether a step of it (its ``cd_values``) can be undone in this environment
            (imports the library it asks about).
        prepare: Imports what ``undo`` calls and runs its once-per-process checks, now:
            ``pipeline_for`` calls it in the process that builds a dataset, so that forked
            workers inherit the library instead of each importing it at its first chunk.
    """

    undo: Filter
    available: Callable[[Step], bool] = field(default=_always)
    prepare: Callable[[], None] = field(default=_nothing)


_local = threading.local()


def scratch(size: int, which: int) -> Buffer:
    """A reused per-thread buffer of ``size`` bytes (``which`` tells a caller's apart).

    ``FRAME`` bytes of room are kept before it: a shuffled chunk inflated into it is framed
    for c-blosc's unshuffle in place (``shuffle.py``).
    """
    buffers: dict[int, Buffer] | None = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    buf = buffers.get(which)
    if buf is None or buf.size < FRAME + size:
        buf = buffers[which] = np.empty(FRAME + size, dtype=np.uint8)
    return buf[FRAME : FRAME + size]


def _framed(src: Buffer) -> Buffer | None:
    """``src`` with the ``FRAME`` bytes before it, when it is what ``scratch`` returned."""
    base = src.base
    buffers: dict[int, Buffer] = getattr(_local, "buffers", {})
    if not isinstance(base, np.ndarray) or not any(base is b for b in buffers.values()):
        return None
    offset = src.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return base[: FRAME + src.size] if offset == FRAME else None


def call(name: str, decode: Decode | None, src: Any, dest: Buffer, **kw: Any) -> Buffer:
    """Run a library decoder into ``dest``; its errors become ``ChunkDecodeError``."""
    if decode is None:  # pipeline_for checked it: only a broken install gets here
        raise UnsupportedChunkError(f"no {name} decoder is installed")
    if len(src) == 0:
        raise ChunkDecodeError(f"{name} chunk is empty")
    try:
        filled = decode(src, out=dest, **kw)
    except (RuntimeError, ValueError, IndexError) as exc:
        raise ChunkDecodeError(f"{name} chunk is corrupt ({exc})") from exc
    return dest[: len(filled)]


# -- HDF5's own filters ----------------------------------------------------------------------


def inflate_into(src: Buffer, dest: Buffer) -> Buffer:
    """Inflate the zlib stream ``src`` into ``dest``; return the part it filled.

    Never writes past ``dest``, whatever the stream says.

    Raises:
        ChunkDecodeError: the stream is corrupt, truncated, or inflates past ``dest``.
    """
    deflate = IMAGECODECS.deflate_decode
    if deflate is not None and src.nbytes:
        try:
            filled = deflate(src, out=dest)  # libdeflate checks the end and Adler-32
            return dest[: len(filled)]
        except (RuntimeError, ValueError):
            pass  # corrupt, or longer than dest: zlib says which, in words
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(src.data, dest.nbytes + 1)
    except zlib.error as exc:
        raise ChunkDecodeError(f"deflate stream is corrupt: {exc}") from exc
    if len(data) > dest.nbytes:
        raise ChunkDecodeError(
            f"deflate stream inflates to more than the expected {dest.nbytes} bytes"
        )
    if not inflater.eof:
        raise ChunkDecodeError("deflate stream is truncated (it ends before its end marker)")
    dest[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return dest[: len(data)]


def inflate_many(raw: Buffer, spans: Sequence[tuple[int, int]], out: Buffer) -> None:
    """Inflate the zlib streams ``raw[o:o + n]`` of ``spans`` into the rows of ``out``.

    For many small chunks (``ChunkPipeline.decode_many``): zlib's call costs well under a
    microsecond where a libdeflate decoder is set up per call (~4 us), and all chunks are copied
    into ``out`` (uint8, one row of exactly one chunk per span) at once. Each stream must end,
    pass its Adler-32 and inflate to exactly one row; inflating stops one byte past a row.

    Raises:
        ChunkDecodeError: a stream is corrupt, truncated, or of the wrong length (it names the
            span's position).
    """
    nbytes = out.shape[1]
    data = raw.data
    parts: list[bytes] = []
    for k, (start, size) in enumerate(spans):
        inflater = zlib.decompressobj()
        try:
            part = inflater.decompress(data[start : start + size], nbytes + 1)
        except zlib.error as exc:
            raise ChunkDecodeError(f"deflate stream {k} of the run is corrupt: {exc}") from exc
        if len(part) != nbytes or not inflater.eof:
            raise ChunkDecodeError(
                f"deflate stream {k} of the run inflates to {len(part)}"
                f"{'' if inflater.eof else '+ (unterminated)'} bytes, expected {nbytes}"
            )
        parts.append(part)
    out.reshape(-1)[:] = np.frombuffer(b"".join(parts), dtype=np.uint8)


def inflate_head(raw: Any, nbytes: int) -> Buffer:
    """The first ``nbytes`` bytes (uint8) a zlib stream inflates to, inflating only that far.

    Raises:
        ChunkDecodeError: the stream is corrupt or inflates to fewer than ``nbytes`` bytes.
    """
    try:
        head = zlib.decompressobj().decompress(raw, nbytes)
    except zlib.error as exc:
        raise ChunkDecodeError(f"deflate stream is corrupt: {exc}") from exc
    if len(head) != nbytes:
        raise ChunkDecodeError(f"chunk decoded to {len(head)} bytes, expected {nbytes}")
    return np.frombuffer(head, dtype=np.uint8)


def unshuffle_into(src: Buffer, dest: Buffer, itemsize: int) -> None:
    """Undo HDF5's byte-shuffle of ``src`` into ``dest`` (same length, both uint8).

    c-blosc's SIMD unshuffle when it can (``shuffle.py``; ``src`` is framed where it lies when
    it came from ``scratch``, else copied into a scratch buffer first: a copy costs a fraction
    of the NumPy unshuffle), else NumPy. Bytes past the last whole element stay in place, as in
    HDF5's filter.
    """
    if src.nbytes != dest.nbytes:
        raise ChunkDecodeError(f"shuffled chunk holds {src.nbytes} bytes, expected {dest.nbytes}")
    if framed_fits(src.nbytes, itemsize):
        framed = _framed(src)
        if framed is None:
            framed = _framed_copy(src)
        if unshuffle_framed(framed, dest, itemsize):
            return
    unshuffle_planes(src, dest, itemsize)


def _framed_copy(src: Buffer) -> Buffer:
    """``src`` copied into a scratch buffer, with the ``FRAME`` bytes before it."""
    scratch(src.nbytes, _COPY)[:] = src
    buffers: dict[int, Buffer] = _local.buffers
    return buffers[_COPY][: FRAME + src.nbytes]


def unshuffle_rows(src: Buffer, dest: Buffer, itemsize: int) -> None:
    """``unshuffle_into`` for every row of ``src`` (uint8, one chunk per row) at once."""
    if src.shape != dest.shape:
        raise ChunkDecodeError(f"shuffled chunks hold {src.shape} bytes, expected {dest.shape}")
    rows, nbytes = src.shape
    count = nbytes // itemsize if itemsize > 1 else 0
    if count < 2 or count * itemsize != nbytes:  # (a tail of bytes: the one-chunk way)
        for k in range(rows):
            unshuffle_into(src[k], dest[k], itemsize)
        return
    planes, values = src.reshape(rows, itemsize, count), dest.reshape(rows, count, itemsize)
    for k in range(itemsize):
        values[:, :, k] = planes[:, k]


def fletcher32(buf: np.ndarray[Any, Any]) -> int:
    """HDF5's Fletcher-32 checksum of ``buf`` (uint8): imagecodecs (HDF5's C code), else NumPy."""
    checksum = IMAGECODECS.h5checksum_fletcher32  # HDF5's own C code
    if checksum is not None and buf.size:
        return int(checksum(buf))
    return fletcher32_numpy(buf)


def fletcher32_numpy(buf: np.ndarray[Any, Any]) -> int:
    """HDF5's Fletcher-32 checksum of ``buf`` (uint8), with NumPy.

    HDF5 sums big-endian 16-bit words (an odd last byte is the high byte of a last word) and
    reduces lazily, so a non-zero sum congruent to 0 is stored as 65535: the result is
    ``1 + (sum - 1) % 65535`` for each positive sum and 0 only for all-zero data.
    """
    data = buf if buf.size % 2 == 0 else np.append(buf, np.uint8(0))
    words = data.view(">u2").astype(np.uint64)
    if words.size == 0 or not words.any():
        return 0
    weights = np.arange(words.size, 0, -1, dtype=np.uint64) % _MOD  # word i counts size-i times
    low = int(words.sum())
    high = int((words * weights).sum(dtype=np.uint64))
    return ((1 + (high - 1) % _MOD) << 16) | (1 + (low - 1) % _MOD)


def strip_checksum(buf: Buffer) -> Buffer:
    """``buf`` without its trailing Fletcher-32 sum, once the sum matches.

    Raises:
        ChunkDecodeError: the buffer is too short to hold a sum, or the sum does not match.
    """
    if buf.size < CHECKSUM_BYTES:
        raise ChunkDecodeError(f"chunk of {buf.size} bytes is too short for a Fletcher-32 sum")
    body = buf[:-CHECKSUM_BYTES]
    stored = int.from_bytes(buf[-CHECKSUM_BYTES:].tobytes(), "little")
    computed = fletcher32(body)
    # HDF5 before 1.6.3 stored the sum with the bytes of each half swapped; it accepts both
    swapped = bytearray(computed.to_bytes(4, sys.byteorder))
    swapped[0::2], swapped[1::2] = swapped[1::2], swapped[0::2]
    if stored not in (computed, int.from_bytes(bytes(swapped), sys.byteorder)):
        raise ChunkDecodeError("data error detected by Fletcher-32 checksum")
    return body


def _inflate(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    return inflate_into(src, dest)


def _unshuffle(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    unshuffle_into(src, dest, int(step.values[0]) if step.values else step.itemsize)
    return dest


def _checksum(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    # (the pipeline strips sums itself: a sum checks its input and writes no destination)
    return strip_checksum(src)


def _load_inflate() -> None:
    IMAGECODECS.load("deflate_decode")


def _load_unshuffle() -> None:
    IMAGECODECS.load("blosc_decode")
    blosc_unshuffles()


def _load_checksum() -> None:
    IMAGECODECS.load("h5checksum_fletcher32")


#: HDF5's built-in filters, undone here with or without ``imagecodecs``.
INFLATE = Decoder(_inflate, prepare=_load_inflate)
UNSHUFFLE = Decoder(_unshuffle, prepare=_load_unshuffle)
CHECKSUM = Decoder(_checksum, prepare=_load_checksum)
