"""Decode raw HDF5 chunks outside the HDF5 library: deflate, byte-shuffle and Fletcher-32.

h5py runs every HDF5 call under one global lock, so threads cannot decompress in parallel
through it. The raw (still filtered) bytes of a chunk come out of ``read_direct_chunk`` quickly;
this module undoes the filter pipeline in plain Python: the inflater releases the GIL and the
un-shuffle is one NumPy transpose, so a thread pool decodes chunks in parallel. The inflater is
libdeflate (the optional ``deflate`` package, ``pip install nn-handler[fast]``, ~2.5x faster
than zlib here) when installed, else the standard library's ``zlib``; both return the same bytes.

Only pipelines built from these three filters are claimed (any order, any repetition; a
per-chunk ``filter_mask`` skips filters); anything else returns no codec and the reader keeps
using h5py. A chunk that does not decode to exactly one chunk of bytes, or whose checksum does not
match, raises ``ChunkDecodeError``. Inflating stops at a bound a little above one chunk: a forged
stream that would inflate to gigabytes costs one chunk of memory, not gigabytes.
"""

from __future__ import annotations

import importlib
import math
import sys
import zlib
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np


def _optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover - depends on the environment
        return None


# optional: libdeflate inflates ~2.5x faster than zlib, and releases the GIL as zlib does
_libdeflate: Any = _optional("deflate")

__all__ = [
    "DEFLATE",
    "ChunkCodec",
    "ChunkDecodeError",
    "codec_for",
    "fletcher32",
    "inflate",
    "inflate_head",
    "unshuffle",
]

DEFLATE = _DEFLATE = int(h5py.h5z.FILTER_DEFLATE)
_SHUFFLE = int(h5py.h5z.FILTER_SHUFFLE)
_FLETCHER32 = int(h5py.h5z.FILTER_FLETCHER32)
_SUPPORTED = {_DEFLATE, _SHUFFLE, _FLETCHER32}
_CHECKSUM_BYTES = 4
_MOD = 65535  # Fletcher-32 sums are kept modulo 2**16 - 1


class ChunkDecodeError(ValueError):
    """A raw chunk could not be decoded here (bad checksum, wrong size, corrupt stream)."""


@dataclass(frozen=True)
class ChunkCodec:
    """How to undo one dataset's filter pipeline.

    Attributes:
        filters: ``(filter id, parameter)`` in pipeline (write) order; the parameter is the
            element size for byte-shuffle and unused otherwise.
        chunk_shape: Shape of one chunk.
        dtype: The dataset's dtype (its in-memory bytes equal the file's).
    """

    filters: tuple[tuple[int, int], ...]
    chunk_shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def chunk_nbytes(self) -> int:
        """Bytes of one decoded chunk."""
        return math.prod(self.chunk_shape) * self.dtype.itemsize

    @property
    def inflate_bound(self) -> int:
        """Bytes an inflated stream holds at most.

        That is the chunk, any checksums inside it, and the few bytes per block that a deflate
        stream nested inside another filter may add.
        """
        checksums = sum(code == _FLETCHER32 for code, _ in self.filters)
        slack = self.chunk_nbytes // 64 + 64 * len(self.filters) if len(self.filters) > 1 else 0
        return self.chunk_nbytes + _CHECKSUM_BYTES * checksums + slack

    def decode(self, raw: bytes, filter_mask: int = 0) -> np.ndarray[Any, Any]:
        """Return one chunk as an array of ``chunk_shape`` (read-only view of the decoded bytes).

        Raises:
            ChunkDecodeError: the bytes do not decode to one chunk.
        """
        data: bytes | bytearray | np.ndarray[Any, Any] = raw
        for position in reversed(range(len(self.filters))):
            if filter_mask >> position & 1:
                continue  # HDF5 skipped this (optional) filter when it wrote the chunk
            code, param = self.filters[position]
            data = _undo(code, param, data, self.inflate_bound)
        flat = np.frombuffer(data, dtype=np.uint8)
        if flat.size != self.chunk_nbytes:
            raise ChunkDecodeError(
                f"chunk decoded to {flat.size} bytes, expected {self.chunk_nbytes}"
            )
        return flat.view(self.dtype).reshape(self.chunk_shape)

    def decode_head(
        self, raw: bytes, nbytes: int, filter_mask: int = 0
    ) -> np.ndarray[Any, Any] | None:
        """Return the first ``nbytes`` decoded bytes (uint8), inflating only that far.

        None when the pipeline is not plain deflate (byte-shuffle and checksums need the
        whole chunk): the caller decodes the chunk instead.

        Raises:
            ChunkDecodeError: the stream is corrupt or shorter than ``nbytes``.
        """
        if filter_mask or tuple(code for code, _ in self.filters) != (_DEFLATE,):
            return None
        return inflate_head(raw, nbytes)


def inflate_head(raw: Any, nbytes: int) -> np.ndarray[Any, Any]:
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


def _undo(
    code: int, param: int, data: bytes | bytearray | np.ndarray[Any, Any], bound: int
) -> bytes | bytearray | np.ndarray[Any, Any]:
    if code == _DEFLATE:
        return inflate(data, bound)
    if code == _SHUFFLE:
        return unshuffle(np.frombuffer(data, dtype=np.uint8), param)
    return _strip_checksum(np.frombuffer(data, dtype=np.uint8))


def inflate(data: bytes | bytearray | np.ndarray[Any, Any], bound: int) -> bytes | bytearray:
    """Inflate one complete zlib stream that holds at most ``bound`` bytes.

    Never produces more than ``bound + 1`` bytes, whatever the stream says.

    Raises:
        ChunkDecodeError: the stream is corrupt, truncated, or inflates past ``bound``.
    """
    if _libdeflate is not None:
        try:
            # libdeflate checks the end of the stream and its Adler-32 and writes at most bound
            out: bytearray = _libdeflate.zlib_decompress(data, bound)
            return out
        except _libdeflate.DeflateError:
            pass  # corrupt, or longer than bound: zlib says which, in words
    stream = data.tobytes() if isinstance(data, np.ndarray) else data
    inflater = zlib.decompressobj()
    try:
        out_z = inflater.decompress(stream, bound + 1)
    except zlib.error as exc:
        raise ChunkDecodeError(f"deflate stream is corrupt: {exc}") from exc
    if len(out_z) > bound:
        raise ChunkDecodeError(f"deflate stream inflates past {bound} bytes, more than one chunk")
    if not inflater.eof:
        raise ChunkDecodeError("deflate stream is truncated (it ends before its end marker)")
    return out_z


def unshuffle(buf: np.ndarray[Any, Any], itemsize: int) -> np.ndarray[Any, Any]:
    """Undo HDF5's byte-shuffle of ``buf`` (uint8) for elements of ``itemsize`` bytes.

    The shuffle stores byte 0 of every element, then byte 1, …; bytes past the last whole
    element are left in place, as in HDF5's filter.
    """
    count = buf.size // itemsize if itemsize > 1 else 0
    if count < 2:
        return buf
    out = np.empty_like(buf)
    body = count * itemsize
    planes, dest = buf[:body].reshape(itemsize, count), out[:body].reshape(count, itemsize)
    for k in range(itemsize):  # one strided copy per byte plane: ~3x faster than a transpose
        dest[:, k] = planes[k]
    out[body:] = buf[body:]
    return out


def fletcher32(buf: np.ndarray[Any, Any]) -> int:
    """HDF5's Fletcher-32 checksum of ``buf`` (uint8), exactly as ``H5_checksum_fletcher32``.

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


def _strip_checksum(buf: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if buf.size < _CHECKSUM_BYTES:
        raise ChunkDecodeError(f"chunk of {buf.size} bytes is too short for a Fletcher-32 sum")
    body = buf[:-_CHECKSUM_BYTES]
    stored = int.from_bytes(buf[-_CHECKSUM_BYTES:].tobytes(), "little")
    computed = fletcher32(body)
    # HDF5 before 1.6.3 stored the sum with the bytes of each half swapped; it accepts both
    swapped = bytearray(computed.to_bytes(4, sys.byteorder))
    swapped[0::2], swapped[1::2] = swapped[1::2], swapped[0::2]
    if stored not in (computed, int.from_bytes(bytes(swapped), sys.byteorder)):
        raise ChunkDecodeError("data error detected by Fletcher-32 checksum")
    return body


def codec_for(dset: h5py.Dataset) -> ChunkCodec | None:
    """Return the codec for a chunked dataset whose filters we decode, else None.

    Requires a chunked, non-virtual dataset with at least one filter, every filter one of
    deflate / shuffle / Fletcher-32, and a file datatype whose bytes equal h5py's in-memory
    type (so no HDF5 type conversion would change them).
    """
    if dset.chunks is None or dset.is_virtual or dset.dtype.hasobject:
        return None
    plist = dset.id.get_create_plist()
    filters = tuple(plist.get_filter(i) for i in range(plist.get_nfilters()))
    if not filters or any(int(f[0]) not in _SUPPORTED for f in filters):
        return None
    if dset.dtype.itemsize == 0 or not _same_type(dset):
        return None
    size = dset.dtype.itemsize
    pipeline = tuple((int(code), _param(int(code), values, size)) for code, _, values, _ in filters)
    return ChunkCodec(pipeline, tuple(int(c) for c in dset.chunks), dset.dtype)


def _param(code: int, values: tuple[int, ...], itemsize: int) -> int:
    if code != _SHUFFLE:
        return 0
    return int(values[0]) if values else itemsize


def _same_type(dset: h5py.Dataset) -> bool:
    try:
        return bool(dset.id.get_type().equal(h5py.h5t.py_create(dset.dtype)))
    except (TypeError, ValueError):
        return False
