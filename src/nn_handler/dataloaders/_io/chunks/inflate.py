"""Inflate a zlib stream straight into a caller's buffer, outside the GIL.

The ``deflate`` package (libdeflate) returns a new ``bytearray`` per call, which the reader then
copies into its place: a second pass over every decoded byte. Its extension module also exports
libdeflate's C functions, so this module calls ``libdeflate_zlib_decompress`` through ``ctypes``
(which drops the GIL for the call) with the destination's own memory: one pass, no allocation.
Each thread keeps its own decompressor (libdeflate's are not thread-safe).

When the symbols are not there (another build of ``deflate``, or the package is missing),
``inflate_into`` inflates with ``deflate.zlib_decompress`` or ``zlib`` and copies: the same
bytes, one copy more.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
import zlib
from typing import Any

import numpy as np

__all__ = ["InflateError", "has_direct_inflate", "inflate_into"]

_SUCCESS, _BAD_DATA, _SHORT_OUTPUT, _INSUFFICIENT_SPACE = 0, 1, 2, 3


class InflateError(ValueError):
    """A zlib stream is corrupt, or does not inflate to exactly the expected length."""


def _load() -> tuple[Any, Any] | None:
    try:
        module: Any = importlib.import_module("deflate._deflate")
        lib = ctypes.CDLL(module.__file__)
        alloc = lib.libdeflate_alloc_decompressor
        inflate = lib.libdeflate_zlib_decompress
    except (ImportError, OSError, AttributeError):
        return None
    alloc.restype = ctypes.c_void_p
    alloc.argtypes = []
    inflate.restype = ctypes.c_int
    inflate.argtypes = [
        ctypes.c_void_p,  # decompressor
        ctypes.c_void_p,  # in
        ctypes.c_size_t,  # in_nbytes
        ctypes.c_void_p,  # out
        ctypes.c_size_t,  # out_nbytes_avail
        ctypes.POINTER(ctypes.c_size_t),  # actual_out_nbytes_ret
    ]
    return alloc, inflate


_LIB = _load()
_local = threading.local()
_libdeflate: Any = None
with contextlib.suppress(ImportError):  # optional: zlib inflates otherwise
    _libdeflate = importlib.import_module("deflate")


def has_direct_inflate() -> bool:
    """True when inflating writes straight into the destination (libdeflate via ctypes)."""
    return _LIB is not None


def _decompressor() -> int:
    handle: int | None = getattr(_local, "handle", None)
    if handle is None:
        assert _LIB is not None
        handle = _LIB[0]()
        if not handle:
            raise MemoryError("libdeflate could not allocate a decompressor")
        # never freed: one small object per thread that ever inflates (pool threads live long)
        _local.handle = handle
    return handle


def _address(buf: Any) -> tuple[int, int, Any]:
    """(address, nbytes, keep-alive) of a contiguous bytes-like object without copying it."""
    if isinstance(buf, bytes):
        return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value or 0, len(buf), buf
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    return int(arr.ctypes.data), int(arr.nbytes), arr


def inflate_into(data: Any, out: np.ndarray[Any, Any]) -> None:
    """Inflate the zlib stream ``data`` into ``out`` (C-contiguous), which it must fill exactly.

    Raises:
        InflateError: the stream is corrupt, or inflates to more or fewer bytes than ``out``.
    """
    if not out.flags.c_contiguous:
        raise ValueError("inflate_into needs a C-contiguous destination")
    expected = out.nbytes
    if _LIB is None:
        _copy_inflated(data, out)
        return
    src, src_len, keep = _address(data)
    actual = ctypes.c_size_t(0)
    code = _LIB[1](_decompressor(), src, src_len, out.ctypes.data, expected, ctypes.byref(actual))
    del keep
    if code == _SUCCESS and actual.value == expected:
        return
    if code == _INSUFFICIENT_SPACE:
        raise InflateError(f"zlib stream inflates to more than the expected {expected} bytes")
    if code in (_SUCCESS, _SHORT_OUTPUT):
        raise InflateError(f"zlib stream inflates to {actual.value} bytes, expected {expected}")
    raise InflateError("zlib stream is corrupt")


def _copy_inflated(data: Any, out: np.ndarray[Any, Any]) -> None:
    expected = out.nbytes
    try:
        if _libdeflate is not None:
            raw: Any = _libdeflate.zlib_decompress(data, expected)
        else:
            stream = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
            raw = zlib.decompress(stream, bufsize=max(expected, 1))
    except Exception as exc:  # DeflateError / zlib.error: both mean a corrupt or long stream
        raise InflateError(f"zlib stream is corrupt or longer than {expected} bytes") from exc
    if len(raw) != expected:
        raise InflateError(f"zlib stream inflates to {len(raw)} bytes, expected {expected}")
    out.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, dtype=np.uint8)
