"""Sidecar files that keep a built sample index next to its HDF5 file.

``data.h5`` gets ``data.h5.nnh-index.npz``: a NumPy ``.npz`` (no pickles) with the member
names as one byte blob plus offsets, and a JSON header recording the format version, the build
parameters (group, pattern) and the data file's size and modification time (ns) *before* the
build. A sidecar is used only when all of those still match; anything else (stale, other
parameters, unreadable, corrupt) means "build again", said in a debug log line.

Writes are atomic (a uniquely named temporary file in the same directory, then ``os.replace``),
so concurrent writers (DDP ranks starting together) and readers never see half a file. A
directory that cannot be written is not an error: the caller goes on without a sidecar.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import zipfile
from typing import Any

import numpy as np

__all__ = ["SIDECAR_SUFFIX", "file_stamp", "load_sidecar", "save_sidecar", "sidecar_path"]

SIDECAR_SUFFIX = ".nnh-index.npz"
_VERSION = 1
_log = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray[Any, Any]]


def sidecar_path(data_path: str) -> str:
    """Return where the sidecar of ``data_path`` lives."""
    return data_path + SIDECAR_SUFFIX


def file_stamp(data_path: str) -> dict[str, int]:
    """Return the size and modification time (ns) that validate a sidecar."""
    st = os.stat(data_path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def load_sidecar(data_path: str, params: dict[str, Any]) -> tuple[Arrays, dict[str, Any]] | None:
    """Return ``(arrays, header)`` from a sidecar matching ``params`` and the file, else None."""
    path = sidecar_path(data_path)
    if not os.path.exists(path):
        return None
    try:
        arrays = _read_npz(path)
        header = json.loads(arrays.pop("header").tobytes().decode("utf-8"))
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        _log.debug("sidecar %r is unreadable (%s); rebuilding the index", path, exc)
        return None
    expected = {"version": _VERSION, **params, **file_stamp(data_path)}
    stale = {k: (header.get(k), v) for k, v in expected.items() if header.get(k) != v}
    if stale:
        _log.debug("sidecar %r is stale (%s); rebuilding the index", path, stale)
        return None
    return arrays, header


def _read_npz(path: str) -> Arrays:
    # our own handle: np.load leaks the one it opens when the content is not NumPy's
    with open(path, "rb") as fh:
        loaded = np.load(fh, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with loaded:
            return {k: loaded[k] for k in loaded.files}


def save_sidecar(data_path: str, arrays: Arrays, header: dict[str, Any]) -> bool:
    """Write the sidecar atomically; return False (with a log line) where it cannot be written.

    ``header`` must hold the build parameters and the ``file_stamp`` taken before the build.
    """
    path = sidecar_path(data_path)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    blob = json.dumps({"version": _VERSION, **header}, sort_keys=True).encode("utf-8")
    try:
        # os.open honours the umask (mkstemp would make the sidecar private to this user)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            members: dict[str, Any] = {"header": np.frombuffer(blob, dtype=np.uint8), **arrays}
            np.savez(fh, **members)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        _log.info("cannot write the index sidecar %r (%s); going on without it", path, exc)
        return False
    return True
