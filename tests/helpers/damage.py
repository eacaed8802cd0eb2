"""Helpers that damage HDF5 files on purpose, and run code that might crash in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import h5py
import numpy as np

# body of a fixed-point datatype message as HDF5 writes it for a little-endian int32 in an
# object header of version 1 (libver "earliest", no checksum): class/version, flags, size,
# bit offset, bit precision
_INT32_TYPE = bytes([0x10, 0x08, 0, 0, 4, 0, 0, 0, 0, 0, 32, 0])


def flip_byte(path: Path | str, offset: int, mask: int = 0xFF) -> None:
    """XOR the byte at ``offset`` with ``mask``."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ mask]))


def chunk_infos(path: Path | str, key: str = "x") -> list[Any]:
    """h5py's ``StoreInfo`` of every chunk of ``key``."""
    with h5py.File(path, "r") as f:
        dsid = f[key].id
        return [dsid.get_chunk_info(i) for i in range(dsid.get_num_chunks())]


def reduce_precision(path: Path | str, precision: int) -> None:
    """Make the one int32 dataset of an "earliest"-format file a ``precision``-bit integer.

    HDF5 then sign-extends (or masks) the low ``precision`` bits on read: the stored bytes are
    no longer the values. HDF5 2.0 opens precisions down to 16 bits of 32 without complaint.
    """
    raw = bytearray(Path(path).read_bytes())
    assert raw.count(_INT32_TYPE) == 1, "expected exactly one int32 datatype message"
    raw[raw.find(_INT32_TYPE) + 10] = precision
    Path(path).write_bytes(bytes(raw))


def run_python(code: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (a crash or hang there cannot take pytest down)."""
    merged = {**os.environ, "PYTHONFAULTHANDLER": "1", **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=merged,
    )


def signal_name(returncode: int) -> str:
    """``"SIGSEGV"`` for a process killed by signal 11, ``"exit 1"`` otherwise."""
    if returncode < 0:
        import signal

        return signal.Signals(-returncode).name
    return f"exit {returncode}"


def rows(n: int, width: int = 4, dtype: Any = np.float32) -> np.ndarray:
    """``n`` distinct rows; row i holds i*width+1 … (no zeros: a zero-filled row is visible)."""
    return (np.arange(n * width, dtype=np.float64).reshape(n, width) + 1).astype(dtype)
