"""The filters of ``hdf5plugin`` undone outside HDF5, with ``imagecodecs`` (and ``blosc2``).

Each reads HDF5's framing of its codec (the plugin's own header, where it has one), checks it
against the destination, and lets the library decode into the destination with the GIL
released. Without the library a filter is not decodable here and h5py reads the dataset. Both
libraries are imported on first use (``libraries.py``): asking whether a step is ``available``
imports the one its codec needs. Each ``Decoder`` here is the decode half of its filter's record
in ``codec_registry.py``.
"""

from __future__ import annotations

import functools
import importlib
import struct
from typing import Any

import numpy as np

from .decoders import (
    Buffer,
    ChunkDecodeError,
    Decoder,
    Step,
    UnsupportedChunkError,
    call,
    scratch,
)
from .libraries import IMAGECODECS

__all__ = [
    "BITSHUFFLE_DECODER",
    "BLOSC2_DECODER",
    "BLOSC_DECODER",
    "LZ4_DECODER",
    "ZSTD_DECODER",
]

_BSHUF_NONE, _BSHUF_LZ4, _BSHUF_ZSTD = 0, 2, 3
_BSHUF_MULT = 8  # bitshuffle blocks hold a multiple of 8 elements; the rest is stored as is
_BSHUF_TARGET = 8192  # bytes of bitshuffle's default block (bshuf_default_block_size)
_BE_U32 = struct.Struct(">I")


@functools.cache
def _blosc2_package() -> Any:
    """The ``blosc2`` package, or None; imported on first use (it takes ~0.2 s)."""
    try:
        return importlib.import_module("blosc2")
    except ImportError:
        return None


def _header(src: Buffer, name: str) -> tuple[int, int]:
    """(decoded bytes, block bytes) from the 12-byte big-endian header of lz4 / bitshuffle."""
    if src.nbytes < 12:
        raise ChunkDecodeError(f"{name} chunk of {src.nbytes} bytes has no header")
    total, block = struct.unpack_from(">QI", src.data)
    return int(total), int(block)


def _lz4(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    total, _ = _header(src, "lz4")
    if total != dest.nbytes:
        raise ChunkDecodeError(f"lz4 chunk holds {total} bytes, expected {dest.nbytes}")
    return call("lz4", IMAGECODECS.lz4h5_decode, src, dest)


def _bitshuffle(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    # bshuf_h5filter.c: cd_values = (major, minor, elem size, block size, compression, level)
    values = step.values
    elem = int(values[2]) if len(values) > 2 and values[2] else step.itemsize
    if _bshuf_compression(step) == _BSHUF_NONE:
        if src.nbytes != dest.nbytes or src.nbytes % elem:
            raise ChunkDecodeError(f"bitshuffled chunk holds {src.nbytes} bytes")
        block = int(values[3]) if len(values) > 3 else 0
        return call(
            "bitshuffle",
            IMAGECODECS.bitshuffle_decode,
            src.data,
            dest,
            itemsize=elem,
            blocksize=block,
        )
    total, block_bytes = _header(src, "bitshuffle")
    if total != dest.nbytes or total % elem:
        raise ChunkDecodeError(f"bitshuffle chunk holds {total} bytes, expected {dest.nbytes}")
    block = block_bytes // elem or max(_BSHUF_TARGET // elem // _BSHUF_MULT * _BSHUF_MULT, 128)
    if block % _BSHUF_MULT:
        raise ChunkDecodeError(f"bitshuffle block of {block} elements is not a multiple of 8")
    # every block's compressed bytes, then the last count % 8 elements as they are; decompress
    # them all into one buffer, then un-bitshuffle it in one call (the same blocks)
    count = total // elem
    tail = count % block - count % block % _BSHUF_MULT
    tmp = scratch(total, 2)
    sizes = [block * elem] * (count // block) + ([tail * elem] if tail else [])
    end = _decompress_blocks(step, src, tmp, sizes)
    rest = total % (_BSHUF_MULT * elem)
    if src.nbytes - end < rest:
        raise ChunkDecodeError("bitshuffle chunk is shorter than its header says")
    tmp[total - rest :] = src[end : end + rest]
    return call(
        "bitshuffle", IMAGECODECS.bitshuffle_decode, tmp.data, dest, itemsize=elem, blocksize=block
    )


def _decompress_blocks(step: Step, src: Buffer, tmp: Buffer, sizes: list[int]) -> int:
    """Decompress bitshuffle's blocks (``sizes`` bytes each) one after the other into ``tmp``.

    Returns:
        Where the blocks end in ``src``.
    """
    frame, end = _frame(src, sizes)
    if not sizes:  # fewer than 8 elements: all stored as they are
        return end
    lz4 = _bshuf_compression(step) == _BSHUF_LZ4
    # bitshuffle frames lz4 blocks as HDF5's lz4 filter does (a header with the total and the
    # block size, a big-endian size before each block) but never stores a block raw, which
    # lz4h5_decode assumes of a block as long as its data: one C call unless a block is that long
    (block_bytes,) = struct.unpack_from(">I", src.data, 8)
    same_blocks = all(n == block_bytes for n in sizes[:-1]) and 0 < sizes[-1] <= block_bytes
    raw = any(size == n for (_, size), n in zip(frame, sizes, strict=True))
    if lz4 and IMAGECODECS.lz4h5_decode is not None and same_blocks and not raw:
        framed = scratch(end, 3)
        framed[:] = src[:end]
        framed[:8] = np.frombuffer(struct.pack(">Q", sum(sizes)), np.uint8)
        got = call("bitshuffle's lz4", IMAGECODECS.lz4h5_decode, framed, tmp[: sum(sizes)])
        if got.nbytes != sum(sizes):
            raise ChunkDecodeError(f"bitshuffle's blocks decode to {got.nbytes} bytes")
        return end
    name, decompress = ("lz4", IMAGECODECS.lz4_decode) if lz4 else ("zstd", IMAGECODECS.zstd_decode)
    done = 0
    for (start, size), nbytes in zip(frame, sizes, strict=True):
        block = src[start : start + size]
        got = call(f"bitshuffle's {name}", decompress, block, tmp[done : done + nbytes])
        if got.nbytes != nbytes:
            raise ChunkDecodeError(f"bitshuffle block does not decode to {nbytes} bytes")
        done += nbytes
    return end


def _frame(src: Buffer, sizes: list[int]) -> tuple[list[tuple[int, int]], int]:
    """(start, size) of each block's compressed bytes, and where the blocks end."""
    data, end, pos, blocks = src.data, src.nbytes, 12, []
    for _ in sizes:
        if pos + 4 > end:
            raise ChunkDecodeError("bitshuffle chunk ends inside a block header")
        (size,) = _BE_U32.unpack_from(data, pos)
        if not 0 < size <= end - pos - 4:
            raise ChunkDecodeError("bitshuffle block runs past the end of its chunk")
        blocks.append((pos + 4, size))
        pos += 4 + size
    return blocks, pos


def _bshuf_compression(step: Step) -> int:
    return int(step.values[4]) if len(step.values) > 4 else _BSHUF_NONE


def _blosc(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    # blosc's 16-byte header: version, versionlz, flags, typesize, nbytes, blocksize, cbytes
    if src.nbytes < 16:
        raise ChunkDecodeError(f"blosc chunk of {src.nbytes} bytes has no header")
    nbytes, _, cbytes = struct.unpack_from("<III", src.data, 4)
    if cbytes > src.nbytes:  # blosc reads cbytes without checking them against the buffer
        raise ChunkDecodeError(f"blosc chunk says {cbytes} bytes, holds {src.nbytes}")
    if nbytes != dest.nbytes:
        raise ChunkDecodeError(f"blosc chunk holds {nbytes} bytes, expected {dest.nbytes}")
    return call("blosc", IMAGECODECS.blosc_decode, src, dest, numthreads=1)


def _blosc2(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    # the blosc2 package, not imagecodecs: hdf5plugin writes b2nd frames, which only it reads
    blosc2: Any = _blosc2_package()
    if blosc2 is None:  # decodable() checked it: only a broken install gets here
        raise UnsupportedChunkError("the blosc2 package is not installed")
    try:
        if src[2:9].tobytes() == b"b2frame":  # a b2nd array
            # The array reads the frame in place: keep the bytes alive while it does (a
            # temporary freed at once made blosc2 < 4 read freed memory: garbage or an error)
            frame = src.tobytes()
            array = np.ascontiguousarray(blosc2.ndarray_from_cframe(frame)[...])
            if array.nbytes != dest.nbytes:
                raise ChunkDecodeError(
                    f"blosc2 frame holds {array.nbytes} bytes, expected {dest.nbytes}"
                )
            dest[:] = array.reshape(-1).view(np.uint8)
            return dest
        nbytes, cbytes, _ = blosc2.get_cbuffer_sizes(src)
        if nbytes != dest.nbytes or cbytes > src.nbytes:
            raise ChunkDecodeError(f"blosc2 chunk holds {nbytes} bytes, expected {dest.nbytes}")
        blosc2.decompress2(src, dst=dest, nthreads=1)
    except (RuntimeError, ValueError) as exc:
        raise ChunkDecodeError(f"blosc2 chunk is corrupt: {exc}") from exc
    return dest


def _zstd(step: Step, src: Buffer, dest: Buffer) -> Buffer:
    return call("zstd", IMAGECODECS.zstd_decode, src, dest)


def _bitshuffle_available(step: Step) -> bool:
    compressor = {
        _BSHUF_NONE: True,
        _BSHUF_LZ4: IMAGECODECS.lz4_decode,
        _BSHUF_ZSTD: IMAGECODECS.zstd_decode,
    }
    return (
        IMAGECODECS.bitshuffle_decode is not None
        and compressor.get(_bshuf_compression(step)) is not None
    )


def _blosc2_available(step: Step) -> bool:
    return _blosc2_package() is not None


#: The decode half of each plugin filter's record (``codec_registry``: its id and name).
ZSTD_DECODER = Decoder(_zstd, lambda step: IMAGECODECS.zstd_decode is not None)
LZ4_DECODER = Decoder(_lz4, lambda step: IMAGECODECS.lz4h5_decode is not None)
BITSHUFFLE_DECODER = Decoder(_bitshuffle, _bitshuffle_available)
BLOSC_DECODER = Decoder(_blosc, lambda step: IMAGECODECS.blosc_decode is not None)
BLOSC2_DECODER = Decoder(_blosc2, _blosc2_available)
