"""Undo a dataset's whole filter pipeline into a caller's buffer, outside the GIL and HDF5's lock.

``ChunkPipeline.decode_into(raw, filter_mask, out)`` turns one raw chunk into its decoded bytes,
written straight into ``out`` (a slot of the decoded-chunk window, or the caller's batch). It
covers the filters h5py users meet most:

| filter (id) | decoded by |
|---|---|
| deflate / gzip (1) | libdeflate through ``ctypes``, into the destination (``_inflate_into``) |
| byte-shuffle (2) | NumPy, one strided copy per byte plane |
| Fletcher-32 (3) | verified with ``_decode.fletcher32`` and stripped |
| blosc (32001), lz4 (32004), bitshuffle (32008), zstd (32015) | ``hdf5plugin``'s own filter |
| | libraries (they export the codecs' C functions), through ``ctypes`` |
| blosc2 (32026) | the ``blosc2`` package (chunks and b2nd frames) |

``ctypes`` releases the GIL for every C call, so the decode threads really run in parallel, and
nothing here touches HDF5, so they do not queue on h5py's global lock either. A pipeline is only
built when every filter is covered and its library loads; otherwise ``pipeline_for`` returns
None and the reader keeps h5py (``hdf5plugin`` missing means h5py could not read the file
either). Every step checks that it produced exactly the expected number of bytes and raises
``ChunkDecodeError`` otherwise: the reader reports the chunk as corrupt (``CorruptFileError``)
rather than hand it to HDF5, whose filters may return uninitialised memory for a short stream.
Only ``UnsupportedChunkError`` (a variant of a filter we do not decode) falls back to h5py.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import h5py
import numpy as np

from . import codec as _decode
from .codec import ChunkDecodeError
from .inflate import InflateError, inflate_into

__all__ = [
    "ChunkPipeline",
    "UnsupportedChunkError",
    "pipeline_for",
    "supported_filters",
    "unshuffle_into",
]

DEFLATE, SHUFFLE, FLETCHER32 = 1, 2, 3
BLOSC, LZ4, BITSHUFFLE, ZSTD, BLOSC2 = 32001, 32004, 32008, 32015, 32026
_CHECKSUM = 4
_SIZE_KEEPING = frozenset({SHUFFLE, FLETCHER32})  # steps whose output size is fixed by the chunk
_BSHUF_LZ4, _BSHUF_ZSTD = 2, 3

Buffer = np.ndarray[Any, Any]  # 1-d, uint8, C-contiguous


class UnsupportedChunkError(ChunkDecodeError):
    """A chunk in a variant of its filter that we do not decode (h5py's filter may)."""


@dataclass(frozen=True)
class _Step:
    code: int
    values: tuple[int, ...]
    itemsize: int  # the dataset's element size (byte-shuffle default)


@dataclass(frozen=True)
class ChunkPipeline:
    """How to undo one dataset's filters (see the module docstring).

    Attributes:
        steps: The filters in pipeline (write) order.
        chunk_nbytes: Bytes of one decoded chunk.
    """

    steps: tuple[_Step, ...]
    chunk_nbytes: int
    _by_mask: dict[int, tuple[_Step, ...]] = field(default_factory=dict, compare=False)

    def decode_into(self, raw: Buffer, filter_mask: int, out: Buffer) -> None:
        """Decode ``raw`` (uint8) into ``out`` (uint8, exactly ``chunk_nbytes``).

        Raises:
            ChunkDecodeError: the chunk does not decode to exactly ``chunk_nbytes`` bytes, a
                checksum does not match, or a stream is corrupt.
        """
        if out.nbytes != self.chunk_nbytes:
            raise ValueError(f"out holds {out.nbytes} bytes, a chunk {self.chunk_nbytes}")
        active = self._active(filter_mask)
        current = raw
        for k in reversed(range(len(active))):
            step = active[k]
            size = self._undone_nbytes(active[:k], step, current)
            if step.code == FLETCHER32:
                current = _verified(current, size)
                continue
            assert size is not None  # only a checksum step checks an unknown size
            dest = out if k == 0 else _scratch(size, k % 2)
            _UNDO[step.code](step, current, dest)
            current = dest
        if current is not out:  # no filter left to write into ``out`` (masks, checksum last)
            if current.nbytes != out.nbytes:
                raise ChunkDecodeError(
                    f"chunk decoded to {current.nbytes} bytes, expected {out.nbytes}"
                )
            out[:] = current

    def _undone_nbytes(self, inner: tuple[_Step, ...], step: _Step, data: Buffer) -> int | None:
        """Bytes ``step`` must turn ``data`` into (Fletcher-32: the bytes it must be given).

        Below only size-keeping steps, that is one chunk plus the inner checksums; over
        compressed bytes (a pipeline that shuffles or sums after compressing) a shuffle keeps
        the stream's size and a sum checks whatever is there (None).
        """
        if all(s.code in _SIZE_KEEPING for s in inner):
            sums = sum(s.code == FLETCHER32 for s in inner)
            return self.chunk_nbytes + _CHECKSUM * (sums + (step.code == FLETCHER32))
        if step.code == FLETCHER32:
            return None
        if step.code == SHUFFLE:
            return int(data.nbytes)
        raise UnsupportedChunkError("a chunk compressed twice: its inner size is not recorded")

    def _active(self, mask: int) -> tuple[_Step, ...]:
        found = self._by_mask.get(mask)
        if found is None:
            found = tuple(s for i, s in enumerate(self.steps) if not mask >> i & 1)
            self._by_mask[mask] = found
        return found


_local = threading.local()


def _scratch(size: int, which: int) -> Buffer:
    """A reused per-thread buffer of ``size`` bytes (two per thread, for ping-pong steps)."""
    key = f"scratch{which}"
    buf: Buffer | None = getattr(_local, key, None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1), dtype=np.uint8)
        setattr(_local, key, buf)
    return buf[:size]


def _verified(data: Buffer, size: int | None) -> Buffer:
    if size is not None and data.nbytes != size:
        raise ChunkDecodeError(f"chunk holds {data.nbytes} bytes, expected {size} with its sum")
    stripped: Buffer = _decode._strip_checksum(data)
    return stripped


# -- the steps -----------------------------------------------------------------------------


def _inflate(step: _Step, src: Buffer, dest: Buffer) -> None:
    try:
        inflate_into(src, dest)
    except InflateError as exc:
        raise ChunkDecodeError(str(exc)) from exc


def unshuffle_into(src: Buffer, dest: Buffer, itemsize: int) -> None:
    """Undo HDF5's byte-shuffle of ``src`` into ``dest`` (same length, both uint8).

    Bytes past the last whole element stay in place, as in HDF5's filter.
    """
    if src.nbytes != dest.nbytes:
        raise ChunkDecodeError(f"shuffled chunk holds {src.nbytes} bytes, expected {dest.nbytes}")
    count = src.size // itemsize if itemsize > 1 else 0
    if count < 2:
        dest[:] = src
        return
    body = count * itemsize
    planes, rows = src[:body].reshape(itemsize, count), dest[:body].reshape(count, itemsize)
    for k in range(itemsize):  # one strided copy per byte plane
        rows[:, k] = planes[k]
    dest[body:] = src[body:]


def _unshuffle(step: _Step, src: Buffer, dest: Buffer) -> None:
    itemsize = int(step.values[0]) if step.values else step.itemsize
    unshuffle_into(src, dest, itemsize)


def _zstd(step: _Step, src: Buffer, dest: Buffer) -> None:
    lib = _lib("libh5zstd")
    dctx = getattr(_local, "zstd_dctx", None)
    if dctx is None:
        dctx = _local.zstd_dctx = lib.ZSTD_createDCtx()  # one per thread, never shared
    got = lib.ZSTD_decompressDCtx(dctx, _ptr(dest), dest.nbytes, _ptr(src), src.nbytes)
    if got != dest.nbytes:  # error codes are huge size_t values: never equal
        raise ChunkDecodeError(f"zstd chunk is corrupt or not {dest.nbytes} bytes long")


def _lz4(step: _Step, src: Buffer, dest: Buffer) -> None:
    # H5Z-LZ4: u64 BE total, u32 BE block size, then per block u32 BE size + data (raw if full)
    if src.nbytes < 12:
        raise ChunkDecodeError(f"lz4 chunk of {src.nbytes} bytes has no header")
    total = int.from_bytes(src[:8].tobytes(), "big")
    block = int.from_bytes(src[8:12].tobytes(), "big")
    if total != dest.nbytes or (block == 0 and total):
        raise ChunkDecodeError(f"lz4 chunk holds {total} bytes, expected {dest.nbytes}")
    lib, pos, done = _lib("libh5lz4"), 12, 0
    while done < total:
        n = min(block, total - done)
        if pos + 4 > src.nbytes:
            raise ChunkDecodeError("lz4 chunk ends inside a block header")
        size = int.from_bytes(src[pos : pos + 4].tobytes(), "big")
        pos += 4
        if size > src.nbytes - pos:
            raise ChunkDecodeError("lz4 block runs past the end of its chunk")
        if size == n:  # stored uncompressed
            dest[done : done + n] = src[pos : pos + n]
        elif lib.LZ4_decompress_safe(_ptr(src, pos), _ptr(dest, done), size, n) != n:
            raise ChunkDecodeError("lz4 block is corrupt")
        pos, done = pos + size, done + n


def _bitshuffle(step: _Step, src: Buffer, dest: Buffer) -> None:
    # bshuf_h5filter.c: cd_values = (major, minor, elem size, block size, compression, level)
    values = step.values
    elem = int(values[2]) if len(values) > 2 else step.itemsize
    compression = int(values[4]) if len(values) > 4 else 0
    lib = _lib("libh5bshuf")
    if compression in (_BSHUF_LZ4, _BSHUF_ZSTD):
        if src.nbytes < 12:
            raise ChunkDecodeError(f"bitshuffle chunk of {src.nbytes} bytes has no header")
        total = int.from_bytes(src[:8].tobytes(), "big")
        block = int.from_bytes(src[8:12].tobytes(), "big") // max(elem, 1)
        if total != dest.nbytes or elem <= 0 or total % elem:
            raise ChunkDecodeError(f"bitshuffle chunk holds {total} bytes, expected {dest.nbytes}")
        fn = lib.bshuf_decompress_lz4 if compression == _BSHUF_LZ4 else lib.bshuf_decompress_zstd
        used = fn(_ptr(src, 12), _ptr(dest), total // elem, elem, block)
        if used < 0 or used > src.nbytes - 12:
            raise ChunkDecodeError(f"bitshuffle chunk is corrupt (code {used})")
    elif compression == 0:
        if src.nbytes != dest.nbytes or elem <= 0 or src.nbytes % elem:
            raise ChunkDecodeError(f"bitshuffled chunk holds {src.nbytes} bytes")
        block = int(values[3]) if len(values) > 3 else 0
        if lib.bshuf_bitunshuffle(_ptr(src), _ptr(dest), src.nbytes // elem, elem, block) < 0:
            raise ChunkDecodeError("bitshuffled chunk is corrupt")
    else:
        raise UnsupportedChunkError(f"bitshuffle compression {compression} is not supported")


def _blosc(step: _Step, src: Buffer, dest: Buffer) -> None:
    lib = _lib("libh5blosc")
    nbytes = ctypes.c_size_t(0)
    if lib.blosc_cbuffer_validate(_ptr(src), src.nbytes, ctypes.byref(nbytes)) != 0:
        raise ChunkDecodeError("blosc chunk header is corrupt")
    if nbytes.value != dest.nbytes:
        raise ChunkDecodeError(f"blosc chunk holds {nbytes.value} bytes, expected {dest.nbytes}")
    if lib.blosc_decompress_ctx(_ptr(src), _ptr(dest), dest.nbytes, 1) != dest.nbytes:
        raise ChunkDecodeError("blosc chunk is corrupt")


def _blosc2(step: _Step, src: Buffer, dest: Buffer) -> None:
    blosc2: Any = _module("blosc2")
    try:
        if src[2:9].tobytes() == b"b2frame":  # a b2nd array (chunks of 2+ dimensions)
            # The array reads the frame in place: keep the bytes alive while it does (a
            # temporary freed at once made blosc2 < 4 read freed memory: garbage or an error)
            frame = src.tobytes()
            array = np.ascontiguousarray(blosc2.ndarray_from_cframe(frame)[...])
            if array.nbytes != dest.nbytes:
                raise ChunkDecodeError(
                    f"blosc2 frame holds {array.nbytes} bytes, expected {dest.nbytes}"
                )
            dest[:] = array.reshape(-1).view(np.uint8)
            return
        nbytes, cbytes, _ = blosc2.get_cbuffer_sizes(src)
        if nbytes != dest.nbytes or cbytes > src.nbytes:
            raise ChunkDecodeError(f"blosc2 chunk holds {nbytes} bytes, expected {dest.nbytes}")
        blosc2.decompress2(src, dst=dest, nthreads=1)
    except (RuntimeError, ValueError) as exc:
        raise ChunkDecodeError(f"blosc2 chunk is corrupt: {exc}") from exc


_UNDO: dict[int, Callable[[_Step, Buffer, Buffer], None]] = {
    DEFLATE: _inflate,
    SHUFFLE: _unshuffle,
    ZSTD: _zstd,
    LZ4: _lz4,
    BITSHUFFLE: _bitshuffle,
    BLOSC: _blosc,
    BLOSC2: _blosc2,
}


def _ptr(buf: Buffer, offset: int = 0) -> int:
    return int(buf.ctypes.data) + offset


# -- libraries -----------------------------------------------------------------------------


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "ZSTD_createDCtx": (ctypes.c_void_p, []),
    "ZSTD_decompressDCtx": (
        ctypes.c_size_t,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t],
    ),
    "LZ4_decompress_safe": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int],
    ),
    "bshuf_decompress_lz4": (
        ctypes.c_int64,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t],
    ),
    "bshuf_decompress_zstd": (
        ctypes.c_int64,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t],
    ),
    "bshuf_bitunshuffle": (
        ctypes.c_int64,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t],
    ),
    "blosc_cbuffer_validate": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)],
    ),
    "blosc_decompress_ctx": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int],
    ),
}
_NEEDS = {
    "libh5zstd": ("ZSTD_createDCtx", "ZSTD_decompressDCtx"),
    "libh5lz4": ("LZ4_decompress_safe",),
    "libh5bshuf": ("bshuf_decompress_lz4", "bshuf_decompress_zstd", "bshuf_bitunshuffle"),
    "libh5blosc": ("blosc_cbuffer_validate", "blosc_decompress_ctx"),
}
_PLUGIN_LIBS = {ZSTD: "libh5zstd", LZ4: "libh5lz4", BITSHUFFLE: "libh5bshuf", BLOSC: "libh5blosc"}


@cache
def _lib_or_none(stem: str) -> Any:
    """One of ``hdf5plugin``'s filter libraries with the functions we call typed, or None."""
    plugins = _module("hdf5plugin")
    if plugins is None:
        return None
    found = sorted(glob.glob(os.path.join(plugins.PLUGIN_PATH, f"{stem}.*")))
    try:
        lib = ctypes.CDLL(found[0]) if found else None
        for name in _NEEDS[stem] if lib is not None else ():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = _SIGNATURES[name]
    except (OSError, AttributeError):
        return None
    return lib


def _lib(stem: str) -> Any:
    lib = _lib_or_none(stem)
    if lib is None:  # pipeline_for checked it: only a broken install gets here
        raise ChunkDecodeError(f"hdf5plugin's {stem} could not be loaded")
    return lib


def supported_filters() -> set[int]:
    """Filter ids this module can decode in this environment."""
    found = {DEFLATE, SHUFFLE, FLETCHER32}
    found |= {code for code, stem in _PLUGIN_LIBS.items() if _lib_or_none(stem) is not None}
    if _module("blosc2") is not None:
        found.add(BLOSC2)
    return found


def pipeline_for(dset: h5py.Dataset) -> ChunkPipeline | None:
    """The pipeline for a chunked dataset whose every filter we decode, else None.

    Like ``_decode.codec_for``, it needs a file datatype whose bytes equal h5py's in-memory type.
    """
    if dset.chunks is None or dset.is_virtual or dset.dtype.hasobject:
        return None
    plist = dset.id.get_create_plist()
    filters = [plist.get_filter(i) for i in range(plist.get_nfilters())]
    supported = supported_filters()
    if not filters or any(int(f[0]) not in supported for f in filters):
        return None
    if dset.dtype.itemsize == 0 or not _decode._same_type(dset):
        return None
    itemsize = dset.dtype.itemsize
    steps = tuple(
        _Step(int(code), tuple(int(v) for v in values), itemsize) for code, _, values, _ in filters
    )
    return ChunkPipeline(steps, math.prod(int(c) for c in dset.chunks) * itemsize)
