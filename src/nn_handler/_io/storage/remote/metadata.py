"""Parsed metadata kept in an object's cache entry: chunk indexes, walked once per node.

Walking a chunk index means h5py reading every B-tree node of a dataset one after another:
hundreds of dependent reads (round trips, for a cold object; Python file-object calls for a
cached one). The first process on a node that walks it saves the result in the object's cache
entry (``cache_dir.py``: the entry belongs to one URL and version, so another version never sees
it) as ``meta/<hash of the key>.npz``: plain int64 arrays and the dataset's key, shape and
chunk shape, written aside and renamed into place (atomic), read back with
``allow_pickle=False``. The next process, rank or epoch loads it instead of walking again.

Nothing in such a file is trusted: a file that does not load, whose SHA-256 over its arrays
does not match (damage since it was written), that names another dataset, shape or chunking, or
holds an entry that no chunk index of this object could have (coordinates not on the chunk grid
or not strictly increasing, a chunk outside the object's bytes) is ignored, and the index is
walked again (and saved over it). The layout check then checks a loaded index as it checks a
walked one (``file/layout.py``). The SHA-256 is the index's checksum, as the CRC-32 of each
piece is the cached bytes' (``pieces.py``).

The ``meta`` folder (made ``0o700``) and its files (``0o600``) are opened without following
symbolic links and used only when they are ours (``owned.py``): a link, or a file another user
put there, is ignored like a damaged one (and a save replaces the link, never its target).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.lib.npyio import NpzFile

from ..chunk_index import ChunkIndex
from .owned import FOLDER_MODE, open_file, open_folder

__all__ = ["FORMAT", "MetadataStore"]

#: the layout of the saved arrays; a file of another format is ignored
FORMAT = 1
_ARRAYS = ("format", "key", "shape", "chunks", "coords", "offsets", "sizes", "masks", "digest")
_SUMMED = _ARRAYS[:-1]
_UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


class MetadataStore:
    """The parsed metadata of one object version, in its cache entry's ``meta`` folder.

    Args:
        entry: The cache entry's directory.
        size: Bytes in the object (every saved address must lie within them).
    """

    def __init__(self, entry: Path, size: int) -> None:
        self.folder = entry / "meta"
        self.size = size

    def load_index(
        self, key: str, shape: tuple[int, ...], chunks: tuple[int, ...]
    ) -> ChunkIndex | None:
        """The chunk index saved for dataset ``key``; None when absent or not valid."""
        try:
            with contextlib.ExitStack() as stack:
                folder = _closing(stack, self._folder(create=False))
                # (our handle: np.load leaks its own when the file is not a zip)
                f = stack.enter_context(os.fdopen(self._open(folder, key, os.O_RDONLY), "rb"))
                saved = np.load(f, allow_pickle=False)
                if not isinstance(saved, NpzFile) or set(saved.files) != set(_ARRAYS):
                    return None
                arrays = {name: saved[name] for name in _ARRAYS}
        except _UNREADABLE:
            return None
        return _valid_index(arrays, key, shape, chunks, self.size)

    def save_index(
        self, key: str, shape: tuple[int, ...], chunks: tuple[int, ...], index: ChunkIndex
    ) -> None:
        """Save ``index`` for dataset ``key`` (atomically; a failure to write is ignored).

        Entries are saved in the order of their chunks' coordinates (readers of a
        ``ChunkIndex`` place chunks by coordinates, not by position), which the load checks.
        An index the load would refuse (chunks off the grid or past the shape) is not saved.
        """
        if not _on_grid(index.coords, shape, chunks):
            return
        order = np.argsort(_linear(index.coords, shape, chunks), kind="stable")
        index = ChunkIndex(
            index.coords[order], index.offsets[order], index.sizes[order], index.masks[order]
        )
        arrays: dict[str, Any] = {
            "format": np.array(FORMAT, dtype=np.int64),
            "key": np.array(key),
            "shape": np.array(shape, dtype=np.int64),
            "chunks": np.array(chunks, dtype=np.int64),
            "coords": index.coords,
            "offsets": index.offsets,
            "sizes": index.sizes,
            "masks": index.masks,
        }
        with contextlib.suppress(OSError):  # full, read-only, not ours: the next process walks
            folder = self._folder(create=True)
            try:
                _write(folder, _name(key), lambda f: np.savez(f, digest=_digest(arrays), **arrays))
            finally:
                os.close(folder)

    def _folder(self, create: bool) -> int:
        """The ``meta`` folder's descriptor (made ``0o700`` if ``create``): ours, not a link.

        (The entry is opened the same way, from the cache folder: never through a link.)
        """
        entry_path = self.folder.parent
        root = os.open(entry_path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            entry = open_folder(entry_path.name, root, str(entry_path))
        finally:
            os.close(root)
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.folder.name, FOLDER_MODE, dir_fd=entry)
            return open_folder(self.folder.name, entry, str(self.folder))
        finally:
            os.close(entry)

    def _open(self, folder: int, key: str, flags: int) -> int:
        return open_file(_name(key), flags, folder, str(self.folder / _name(key)))


def _name(key: str) -> str:
    return f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def _closing(stack: contextlib.ExitStack, fd: int) -> int:
    stack.callback(os.close, fd)
    return fd


def _write(folder: int, name: str, write: Callable[[BinaryIO], None]) -> None:
    """Write file ``name`` in ``folder`` aside, then rename it into place (atomic).

    Raises:
        OSError: it could not be written (nothing is left behind).
    """
    spare = f".{uuid.uuid4().hex}.npz"
    fd = open_file(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL, folder, spare)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(spare, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(spare, dir_fd=folder)
        raise


def _valid_index(
    arrays: dict[str, np.ndarray[Any, Any]],
    key: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    size: int,
) -> ChunkIndex | None:
    """The saved index when it is one this dataset of this object can have, else None."""
    coords, offsets, sizes, masks = (arrays[n] for n in ("coords", "offsets", "sizes", "masks"))
    if not np.array_equal(arrays["digest"], _digest(arrays)):
        return None  # damaged since it was written (a plausible wrong offset is caught here)
    rank = len(shape)
    header_ok = (
        arrays["format"].shape == ()
        and int(arrays["format"]) == FORMAT
        and arrays["key"].dtype.kind == "U"
        and arrays["key"].shape == ()
        and str(arrays["key"]) == key
        and _ints(arrays["shape"]).tolist() == list(shape)
        and _ints(arrays["chunks"]).tolist() == list(chunks)
    )
    if not header_ok or len(chunks) != rank:
        return None
    n = len(offsets)
    if not (
        all(a.dtype == np.int64 for a in (coords, offsets, sizes, masks))
        and coords.shape == (n, rank)
        and offsets.shape == sizes.shape == masks.shape == (n,)
    ):
        return None
    if not _entries_fit(coords, offsets, sizes, masks, shape, chunks, size):
        return None
    return ChunkIndex(coords, offsets, sizes, masks)


def _entries_fit(
    coords: np.ndarray[Any, Any],
    offsets: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any],
    masks: np.ndarray[Any, Any],
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    size: int,
) -> bool:
    """Chunks on the grid, in strictly increasing order, inside the shape and the object."""
    if len(coords) == 0:
        return True
    if not _on_grid(coords, shape, chunks):
        return False
    if np.any(offsets < 0) or np.any(sizes < 1) or np.any(masks < 0):
        return False
    if np.any(offsets > size - sizes):  # (no overflow: both are below 2**63)
        return False
    # saved in the order of the chunks' coordinates: strictly increasing, so no chunk twice
    return bool(np.all(np.diff(_linear(coords, shape, chunks)) > 0))


def _on_grid(coords: np.ndarray[Any, Any], shape: tuple[int, ...], chunks: tuple[int, ...]) -> bool:
    """Every coordinate a multiple of the chunk shape, inside the dataset's shape."""
    grid = np.array(chunks, dtype=np.int64)
    extent = np.array(shape, dtype=np.int64)
    if coords.ndim != 2 or coords.shape[1] != len(chunks) or np.any(grid <= 0):
        return False
    if len(coords) > int(np.prod(-(-extent // grid))):
        return False
    return not (np.any(coords < 0) or np.any(coords % grid) or np.any(coords >= extent))


def _linear(
    coords: np.ndarray[Any, Any], shape: tuple[int, ...], chunks: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """Each chunk's position on the chunk grid, row-major (coordinates must be on the grid)."""
    grid = np.array(chunks, dtype=np.int64)
    dims = tuple(int(d) for d in np.maximum(-(-np.array(shape, dtype=np.int64) // grid), 1))
    linear: np.ndarray[Any, Any] = np.ravel_multi_index(tuple((coords // grid).T), dims)
    return linear


def _digest(arrays: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """SHA-256 over every saved array's dtype, shape and bytes, as 32 uint8."""
    total = hashlib.sha256()
    for name in _SUMMED:
        array = np.ascontiguousarray(arrays[name])
        total.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        total.update(array.tobytes() if array.dtype.kind in "iuU" else b"?")
    return np.frombuffer(total.digest(), dtype=np.uint8)


def _ints(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return array.ravel() if array.dtype.kind in "iu" else np.array([None])
