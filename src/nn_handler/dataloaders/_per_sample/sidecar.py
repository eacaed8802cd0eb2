"""Sidecar files that keep a built sample index next to its HDF5 file.

``data.h5`` gets ``data.h5.nnh-index.npz``: a NumPy ``.npz`` (no pickles) with the member
names as one byte blob plus offsets, and a JSON header recording the format version, the build
parameters (group, pattern), the data file's identity *before* the build (size, modification
and status-change times in ns, inode, device: rewriting a file and setting its mtime back still
changes its ctime) and a fingerprint of the group (its link count and object header). A sidecar
is used only when all of those still match; anything else (stale, other parameters, unreadable,
corrupt, too large) means "build again", said in a debug log line.

A sidecar is data from disk, never trusted for more than an index: it is read without pickles,
each member's declared size is capped before anything is inflated (``limits``), the ``.npy``
headers are checked against their payloads, and the caller validates the names against the file.

Writes are atomic (a uniquely named temporary file in the same directory, then ``os.replace``),
so concurrent writers (DDP ranks starting together) and readers never see half a file. A
directory that cannot be written is not an error: the caller goes on without a sidecar.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import secrets
import zipfile
from typing import Any

import numpy as np

from ..._io import BINARY, FileIdentity

__all__ = [
    "DEFAULT_LIMITS",
    "SIDECAR_SUFFIX",
    "file_stamp",
    "load_sidecar",
    "save_sidecar",
    "sidecar_path",
]

SIDECAR_SUFFIX = ".nnh-index.npz"
_VERSION = 2
_NPY_HEADER_MAX = 4096  # an .npy header is ~128 bytes; anything bigger is not ours
#: default caps on the bytes of each member (callers pass tighter ones from the group's size)
DEFAULT_LIMITS = {"header": 1024**2, "blob": 256 * 1024**2, "offsets": 64 * 1024**2}
_ALLOWED_DTYPES = {"header": "u1", "blob": "u1", "offsets": "i8"}
_log = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray[Any, Any]]


def sidecar_path(data_path: str) -> str:
    """Return where the sidecar of ``data_path`` lives."""
    return data_path + SIDECAR_SUFFIX


def file_stamp(data_path: str) -> dict[str, int]:
    """Return the identity of the data file that validates a sidecar.

    ``FileIdentity`` (its status-change time included: a rewrite that sets the mtime back
    still moves it), under the key names sidecars already on disk use: they stay valid.
    """
    return FileIdentity.of_path(data_path).as_record()


def load_sidecar(
    data_path: str, params: dict[str, Any], limits: dict[str, int] | None = None
) -> tuple[Arrays, dict[str, Any]] | None:
    """Return ``(arrays, header)`` from a sidecar matching ``params`` and the file, else None.

    ``limits`` caps the bytes of each member (``header``, ``blob``, ``offsets``); a sidecar
    over a cap is not read (``DEFAULT_LIMITS`` when None).
    """
    path = sidecar_path(data_path)
    if not os.path.exists(path):
        return None
    try:
        arrays = _read_npz(path, {**DEFAULT_LIMITS, **(limits or {})})
        header = json.loads(arrays.pop("header").tobytes().decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        _log.debug("sidecar %r is unreadable (%s); rebuilding the index", path, exc)
        return None
    expected = {"version": _VERSION, **params, **file_stamp(data_path)}
    stale = {k: (header.get(k), v) for k, v in expected.items() if header.get(k) != v}
    if stale:
        _log.debug("sidecar %r is stale (%s); rebuilding the index", path, stale)
        return None
    return arrays, header


def _read_npz(path: str, limits: dict[str, int]) -> Arrays:
    """Read our members of an ``.npz`` with every size capped and no pickles."""
    if os.path.getsize(path) > sum(limits.values()) + 64 * 1024:
        raise ValueError(f"the file is larger than an index of this group can be ({limits})")
    arrays: Arrays = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if name not in limits or name in arrays:
                raise ValueError(f"unexpected member {info.filename!r}")
            cap = limits[name] + _NPY_HEADER_MAX
            if info.file_size > cap:  # declared size: checked before anything is inflated
                raise ValueError(f"member {name!r} declares {info.file_size} bytes (cap {cap})")
            with archive.open(info) as fh:
                arrays[name] = _parse_npy(fh.read(cap + 1), name, cap)
    return arrays


def _parse_npy(data: bytes, name: str, cap: int) -> np.ndarray[Any, Any]:
    """One 1-d ``.npy`` of the dtype ``name`` must have; its header must match its payload."""
    if len(data) > cap:
        raise ValueError(f"member {name!r} holds more than {cap} bytes")
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    read_header = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, fortran, dtype = read_header(stream, max_header_size=_NPY_HEADER_MAX)
    if dtype.hasobject or dtype.newbyteorder("<").str[1:] != _ALLOWED_DTYPES[name]:
        raise ValueError(f"member {name!r} has dtype {dtype}, not {_ALLOWED_DTYPES[name]}")
    payload = data[stream.tell() :]
    if len(shape) != 1 or fortran or shape[0] * dtype.itemsize != len(payload):
        raise ValueError(f"member {name!r}: header {shape} does not match {len(payload)} bytes")
    return np.frombuffer(payload, dtype=dtype).astype(dtype.newbyteorder("="))


def save_sidecar(data_path: str, arrays: Arrays, header: dict[str, Any]) -> bool:
    """Write the sidecar atomically; return False (with a log line) where it cannot be written.

    ``header`` must hold the build parameters and the ``file_stamp`` taken before the build.
    """
    path = sidecar_path(data_path)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    blob = json.dumps({"version": _VERSION, **header}, sort_keys=True).encode("utf-8")
    try:
        # os.open honours the umask (mkstemp would make the sidecar private to this user)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | BINARY, 0o666)
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
