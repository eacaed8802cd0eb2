"""H5Source: one HDF5 file, opened lazily in whichever process reads it.

The handle is private to the process that opened it. A source copied into a forked DataLoader
worker notices the new pid and reopens; a pickled source (spawn / forkserver) carries only its
path and options. Dataset objects are cached per process because HDF5's chunk cache lives on the
open dataset: looking a key up again per batch throws the cache away.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import re
import threading
import weakref
from dataclasses import dataclass, field, replace
from typing import IO, Any

import h5py

from ..._validate import (
    format_names,
)
from .. import notice_board
from ..errors import (
    CorruptFileError,
    FileChangedError,
    explain_open_error,
    is_corruption,
    is_writer_flag_error,
)
from ..process import PerProcess
from ..storage.byte_source import ByteSource, LocalFile
from ..storage.identity import FileIdentity, SourceIdentity, check_identity, identity_of_fd
from ..storage.region_sweep import sweep_now_and_then
from ..storage.remote.file_object import SourceFile
from ..storage.remote.urls import is_url
from .options import FileOptions

__all__ = [
    "H5Source",
    "close_inherited_sources",
    "dataset_keys",
    "load_plugins",
]

# Sources with an open handle in some process; h5_worker_init_fn walks it in a new worker.
_OPEN_SOURCES: weakref.WeakSet[H5Source] = weakref.WeakSet()
_PLUGINS = {"loaded": False}
# what h5py says for a path that does not exist (as opposed to one it cannot read)
_MISSING = re.compile(r"doesn't exist|does not exist|not found|component not found", re.I)


@dataclass
class _OpenFile:
    """This process's handle on the file and the datasets looked up through it."""

    file: h5py.File
    fd: int = -1  # HDF5's descriptor of the open file, for identity checks (-1: none)
    datasets: dict[str, h5py.Dataset] = field(default_factory=dict)


class H5Source:
    """A lazily opened, fork-aware and picklable handle on one HDF5 file.

    Args:
        path: Path of the HDF5 file; a URL (``s3://bucket/key``, ``gs://``, ``az://``,
            ``https://``, any fsspec URL: read by byte ranges, see ``options.storage_options``
            and ``options.cache_dir``); or a seekable binary file object (for example one from
            fsspec), read through h5py only and picklable to reach spawn / forkserver workers.
        options: How to open the file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        RemoteAccessError: a URL's store finds no credentials or refuses them.
        IsADirectoryError: ``path`` is a directory.
        OSError: ``path`` exists but is not an HDF5 file.
    """

    def __init__(self, path: str | os.PathLike[str] | IO[bytes], options: FileOptions) -> None:
        self._fileobj: IO[bytes] | None = None
        self._remote: ByteSource | None = None
        #: the file as it was when first opened (what layouts were computed from)
        self.identity: SourceIdentity | None = None
        if hasattr(path, "read") and hasattr(path, "seek"):
            self._fileobj = path  # type: ignore[assignment]
            self.path = f"<file object {type(path).__name__}>"
        elif is_url(path):
            self.path = os.fspath(path)
            self._remote = _open_remote(self.path, options)
            self.identity = self._remote.identity
        else:
            self.path = os.fspath(path)
            _check_is_hdf5(self.path)
        self.options = options
        self._lock: PerProcess[threading.Lock] = PerProcess(threading.Lock)
        self._open_file: PerProcess[_OpenFile] = PerProcess()
        #: a SWMR writer held the file when it was first opened: it may grow while we read
        self.may_grow = False
        # this job's notice board: workers that unpickle the source share it (one line a job)
        self._board = notice_board.handle()

    @property
    def is_path(self) -> bool:
        """True when the source is a file on disk (not a file object, not a URL)."""
        return self._fileobj is None and self._remote is None

    @property
    def is_remote(self) -> bool:
        """True when the source is a URL, read by byte ranges (and cached, with a cache_dir)."""
        return self._remote is not None

    @property
    def is_open(self) -> bool:
        """True when this process holds an open handle."""
        opened = self._open_file.peek()
        return opened is not None and bool(opened.file.id.valid)

    @property
    def file(self) -> h5py.File:
        """The open ``h5py.File`` for this process, opened on first use."""
        return self._opened().file

    def _opened(self) -> _OpenFile:
        opened = self._open_file.peek()
        if opened is not None:
            return opened
        with self._lock.get():
            if self._open_file.inherited:
                self._forget()
            opened = self._open_file.peek()
            if opened is None:
                opened = self._open_file.set(self._open())
                _OPEN_SOURCES.add(self)
            return opened

    def dataset(self, key: str, *, arg: str = "key", chunk_cache: bool = True) -> h5py.Dataset:
        """Return the dataset at ``key`` (cached per process; nested paths allowed).

        ``chunk_cache=False`` opens it with HDF5's chunk cache off, for readers that keep
        decoded chunks themselves (HDF5 shares one cache between all opens of a dataset, so a
        key is read through one of the two kinds only).

        Raises:
            KeyError: ``key`` is missing; the message lists the datasets the file has.
            TypeError: ``key`` names a group, not a dataset.
            CorruptFileError: ``key`` exists but its metadata cannot be read.
        """
        opened = self._opened()
        handle = opened.file
        cached = opened.datasets.get(key if chunk_cache else f"{key}\0nocache")
        if cached is not None:
            return cached
        if not chunk_cache:
            return self._open_uncached(key, arg)
        obj = self._lookup(handle, key, arg)
        if obj is None:
            raise KeyError(
                f"{arg}={key!r} not found in {self.path!r}; the file has datasets: "
                f"{format_names(dataset_keys(handle))}"
            )
        if not isinstance(obj, h5py.Dataset):
            raise TypeError(
                f"{arg}={key!r} in {self.path!r} is a {type(obj).__name__}, not a dataset; "
                f"datasets in the file: {format_names(dataset_keys(handle))}"
            )
        opened.datasets[key] = obj
        return obj

    def _lookup(self, handle: h5py.File, key: str, arg: str) -> Any:
        """``handle[key]``, None when missing; a damaged object is an error, not "missing"."""
        try:
            return handle[key]
        except (KeyError, RuntimeError, OSError) as exc:
            text = str(exc.args[0]) if exc.args else str(exc)
            if _MISSING.search(text):
                return None
            if is_corruption(text):
                raise CorruptFileError(
                    f"{arg}={key!r} in {self.path!r} cannot be read: the file is damaged ({text})",
                    self.path,
                ) from exc
            raise KeyError(f"{arg}={key!r} in {self.path!r} cannot be opened: {text}") from exc

    def _open_uncached(self, key: str, arg: str) -> h5py.Dataset:
        self.dataset(key, arg=arg)  # the checks and error messages of a plain lookup
        opened = self._opened()
        opened.datasets.pop(key, None)  # another thread may have popped it already
        dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
        dapl.set_chunk_cache(self.options.rdcc_nslots, 0, self.options.rdcc_w0)
        dset = h5py.Dataset(h5py.h5d.open(opened.file.id, key.encode(), dapl))
        opened.datasets[f"{key}\0nocache"] = dset
        return dset

    def close(self) -> None:
        """Close this process's handle (a later read reopens it)."""
        with self._lock.get():
            self._forget()

    def check_unchanged(self) -> bool:
        """Raise ``FileChangedError`` if the open file is no longer the one first opened.

        One ``fstat`` of HDF5's own descriptor (the file HDF5 reads, whatever the path names
        now). Returns whether it checked: not for file objects, nor while this process has the
        file closed (the next open checks).
        """
        opened, recorded = self._open_file.peek(), self.identity
        if opened is None or opened.fd < 0 or not isinstance(recorded, FileIdentity):
            return False  # (an object's every read is conditional on its version instead)
        fd = opened.fd
        try:
            st = os.fstat(fd)
        except OSError:  # closed under us: the next open checks again
            return False
        if not recorded.matches(st):  # (asking h5py for the SWMR mode costs more than fstat)
            current = FileIdentity.of_stat(st)
            check_identity(self.path, recorded, current, growing=self.may_grow or self.swmr_mode)
        return True

    def refresh(self) -> bool:
        """Look at the file again; True when its datasets may hold rows appended since.

        A local file that no SWMR writer holds and whose identity is still the recorded one
        costs one ``stat`` and returns False (URLs and file objects: False, nothing done: an
        object's version is checked by every read). A file a SWMR writer holds (or held: it
        may have appended before closing it) returns True: this process's handle is closed
        (the next read opens it afresh: shapes, chunk indexes and HDF5's chunk cache as the
        file is now) and the recorded identity moves to the file as it is now, so a file that
        later shrinks below it is caught.

        Raises:
            FileChangedError: another file is at the path now, the file shrank, or (without a
                SWMR writer) it was rewritten since the dataset was built.
        """
        recorded = self.identity
        if not self.is_path or not isinstance(recorded, FileIdentity):
            return False
        st = os.stat(self.path)
        growing = self.may_grow or self.swmr_mode
        if recorded.matches(st) and not growing:
            return False
        if not growing:  # has a SWMR writer taken it since? (a first open checks identity)
            growing = bool(self._opened().file.swmr_mode)
        current = FileIdentity.of_stat(st)
        check_identity(self.path, recorded, current, growing=growing)
        if not growing:
            return False  # (the file was the same: only its status or times were touched)
        # (a file whose writer has closed it since is followed too: it may have grown before)
        self.may_grow = True
        self.identity = current
        # Open afresh rather than ``h5py.Dataset.refresh()`` each dataset: with one dataset
        # open twice (with and without a chunk cache) and both refreshed, HDF5 found no chunk
        # but the first, and ``read_direct_chunk`` returned chunk 0's bytes for every chunk
        # (h5py 3.16 / HDF5 2.0). A new open reads the metadata as it is now.
        with self._lock.get():
            self._forget()
        return True

    def byte_source(self) -> ByteSource | None:
        """The file's bytes for our own reads of data (None for a file object: h5py reads it).

        A URL's source reads by ranges (through the node's cache with a ``cache_dir``); a local
        file's is checked against ``identity`` as recorded now (call it after the first open).
        """
        if self._remote is not None:
            return self._remote
        if not self.is_path or not isinstance(self.identity, FileIdentity | None):
            return None
        return LocalFile(self.path, self.identity, growing=self.may_grow)

    @property
    def swmr_mode(self) -> bool:
        """True when this process has the file open in SWMR read mode (a writer holds it)."""
        opened = self._open_file.peek()
        return bool(opened is not None and opened.file.swmr_mode)

    def set_options(self, options: FileOptions) -> None:
        """Open with ``options`` from now on (closes this process's handle; reads reopen it)."""
        with self._lock.get():
            self.options = options
            self._forget()

    def set_cache_nbytes(self, nbytes: int) -> None:
        """Use ``nbytes`` as ``rdcc_nbytes`` from now on, keeping this process's handle open.

        Decoded-chunk caches read the budget at each batch; HDF5's own chunk cache takes it
        when the file is next opened in a process.
        """
        with self._lock.get():
            self.options = replace(self.options, rdcc_nbytes=nbytes)

    @property
    def inherited(self) -> bool:
        """True when this object holds a handle that another process opened."""
        return self._open_file.inherited

    def forget_if_inherited(self) -> None:
        """Drop a handle that another process opened (used in fresh workers)."""
        with self._lock.get():
            if self._open_file.inherited:
                self._forget()

    def _forget(self) -> None:
        opened = self._open_file.pop()
        _OPEN_SOURCES.discard(self)
        if opened is not None:
            # an id already invalidated (e.g. by HDF5 in a forked child) must not block reopening
            with contextlib.suppress(Exception):
                opened.file.close()

    def _open(self) -> _OpenFile:
        load_plugins()
        # what killed jobs left in node memory goes when any process of the node opens a file
        sweep_now_and_then()
        target: Any = self._fileobj if self._fileobj is not None else self.path
        if self._remote is not None:  # h5py reads the metadata through the same (cached) bytes
            target = SourceFile(self._remote)
        opts = self.options
        kwargs: dict[str, Any] = {
            "rdcc_nbytes": opts.rdcc_nbytes,
            "rdcc_nslots": opts.rdcc_nslots,
            "rdcc_w0": opts.rdcc_w0,
        }
        if opts.locking is not None:
            kwargs["locking"] = opts.locking
        try:
            # a plain open checks the file's length and metadata checksums at once; in SWMR
            # mode HDF5 would retry a bad checksum for minutes and accept a truncated file
            handle = h5py.File(target, "r", **kwargs)
        except OSError as exc:
            if isinstance(target, SourceFile):
                target.raise_failure()  # a store that failed is not a damaged file
            if not (opts.swmr and self.is_path and is_writer_flag_error(exc)):
                raise explain_open_error(self.path, exc) from exc
            handle = self._open_swmr(target, kwargs)
        return _OpenFile(handle, fd=self._remember_identity(handle))

    def _open_swmr(self, target: Any, kwargs: dict[str, Any]) -> h5py.File:
        """Open a file that a SWMR writer holds (its superblock says so) in SWMR read mode."""
        try:
            return h5py.File(target, "r", swmr=True, **kwargs)
        except (OSError, ValueError) as exc:
            raise explain_open_error(self.path, exc) from exc

    def _remember_identity(self, handle: h5py.File) -> int:
        """Record the file's identity at the first open; compare with it at every other.

        Returns HDF5's descriptor of the file, or -1 when it has none we can check.
        """
        if not self.is_path or handle.driver != "sec2":
            return -1
        try:
            fd = int(handle.id.get_vfd_handle())
            current = identity_of_fd(fd)
        except (OSError, TypeError, ValueError):
            return -1
        if not isinstance(self.identity, FileIdentity):
            self.identity = current
            self.may_grow = bool(handle.swmr_mode)
        else:
            try:
                growing = self.may_grow or bool(handle.swmr_mode)
                check_identity(self.path, self.identity, current, growing=growing)
            except FileChangedError:
                handle.close()
                raise
        return fd

    def __repr__(self) -> str:
        status = "open" if self.is_open else "closed"
        return f"H5Source({self.path!r}, {status})"


def _open_remote(url: str, options: FileOptions) -> ByteSource:
    """The object at ``url`` as a ``ByteSource``: its version asked for now, cached if asked.

    With a cache directory, the processes of the node that open it at once ask once
    (``storage/remote/node_version.py``). Where a node cache cannot work (Windows: no ``flock``,
    no owner checks) the object is read from the store, as without one (said once, at DEBUG).
    """
    from ..platform import off
    from ..storage.remote.cache_dir import NODE_CACHE
    from ..storage.remote.cached_file import CachedFile
    from ..storage.remote.failures import RetryPolicy
    from ..storage.remote.node_version import open_checked
    from ..storage.remote.object_file import RemoteFile

    if options.cache_dir is not None and not NODE_CACHE:
        off("a node cache (flock, file owners)", "objects are read from the store, not cached")
    if options.cache_dir is None or not NODE_CACHE:
        return RemoteFile(url, options.storage_options)
    root = os.fspath(options.cache_dir)
    policy = RetryPolicy()  # (RemoteFile's: the bound of one version request, retries included)
    remote = open_checked(
        root,
        url,
        lambda version: RemoteFile(url, options.storage_options, version=version),
        wait_s=policy.total_s + policy.attempt_s,
    )
    return CachedFile(remote, root, options.cache_limit)


def dataset_keys(group: h5py.Group) -> list[str]:
    """Return the paths of every dataset below ``group`` (links to them included)."""
    found: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            found.append(name)

    try:
        group.visititems(visit)
    except (RuntimeError, KeyError, OSError):  # a damaged file: list what could be read
        found.append("… (the rest cannot be listed: the file is damaged)")
    return found


def close_inherited_sources() -> int:
    """Close every handle this process inherited from its parent; return how many."""
    count = 0
    for source in list(_OPEN_SOURCES):
        if source.inherited:
            source.forget_if_inherited()
            count += 1
    return count


def load_plugins() -> None:
    """Import ``hdf5plugin`` once if installed: it registers blosc, zstd, lz4, … with HDF5."""
    if _PLUGINS["loaded"]:
        return
    _PLUGINS["loaded"] = True
    with contextlib.suppress(ImportError, OSError):
        importlib.import_module("hdf5plugin")


def _check_is_hdf5(path: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, f"HDF5 file not found: path={path!r}", path)
    if os.path.isdir(path):
        raise IsADirectoryError(
            errno.EISDIR, f"path={path!r} is a directory; pass the path of an .h5 file", path
        )
    if not h5py.is_hdf5(path):
        raise OSError(
            errno.EINVAL,
            f"path={path!r} is not an HDF5 file (no HDF5 signature found); "
            "pass a file written by h5py/HDF5",
            path,
        )
