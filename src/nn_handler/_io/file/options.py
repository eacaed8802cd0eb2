"""FileOptions: how a file is opened, and how a dataset's constructor arguments become one.

Every dataset takes the options as one object (``file_options=FileOptions(...)``) or as the
separate keywords the seeds name (``rdcc_nbytes=``, ``swmr=``, ``storage_options=``, …): one
keyword per ``FileOptions`` field. ``resolve_file_options`` is the one place that turns a
constructor's arguments into the ``FileOptions`` its file is opened with.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..._validate import (
    check_choice,
    check_count,
    check_int_at_most,
    check_non_negative_int,
    check_probability,
    parse_size,
)

__all__ = ["FileOptions", "LockingMode", "resolve_file_options"]

LockingMode = bool | Literal["best-effort"] | None

_LOCKING_CHOICES: tuple[LockingMode, ...] = (True, False, "best-effort", None)
# h5py hands the chunk-cache sizes to HDF5 as a C size_t (bytes) and a C int (slots); a larger
# value would fail as a bare OverflowError at the first open, far from the argument
_MAX_RDCC_NBYTES = 2**64 - 1
_MAX_RDCC_NSLOTS = 2**31 - 1
_HDF5_CACHE = "HDF5's chunk cache (h5py.File(rdcc_nbytes=, rdcc_nslots=))"


@dataclass(frozen=True)
class FileOptions:
    """How a file is opened: HDF5 chunk-cache settings, SWMR and file locking.

    Attributes:
        rdcc_nbytes: Chunk-cache size in bytes for each dataset opened from the file.
        rdcc_nslots: Number of hash slots in the chunk cache (a prime well above the number
            of chunks that fit is best).
        rdcc_w0: Chunk preemption policy, in ``[0, 1]``.
        swmr: Open in SWMR read mode when a SWMR writer has the file open. Every file is
            first opened plainly (read-only), which refuses a truncated or corrupt file at
            once; only a file whose superblock says a writer holds it is then opened in SWMR
            mode. ``False``: never SWMR (a file held by a writer fails to open).
        locking: h5py's ``locking``: ``True``, ``False``, ``"best-effort"`` (lock where
            the file system supports it; the default, which works on NFS/Lustre), or
            ``None`` (HDF5's default, which honours ``HDF5_USE_FILE_LOCKING``).
        allow_external_files: Read datasets whose data lies in other files outside the data
            file's directory (external links, external storage, virtual-dataset sources).
            Off by default: a file could otherwise serve ``/etc/passwd`` as samples.
        storage_options: For a URL (``s3://``, ``gs://``, ``https://``, …): passed to the
            fsspec filesystem (credentials, endpoint, …), as pandas and xarray take them.
            None: credentials from the environment.
        cache_dir: For a URL: a node-local directory that every process on the node shares
            to cache the object's bytes (see ``docs/remote.md``). It must be yours (created
            ``0o700``); one that is not, or is full or read-only, is not used (the store serves
            the reads, and a warning is logged once). None: nothing is written.
        cache_limit: Most bytes ``cache_dir`` may hold (least recently used objects not in use
            are evicted). None: no cap.
        decoded_budget: Bytes of decoded data the node may hold for datasets decoded whole: a
            chunked dataset (compressed, or otherwise not served from a memory map) whose
            decoded size fits is decoded once, in one pass, into memory every worker and rank
            of the node shares, and read from there (``docs/h5_lazy_dataset.md``). An int or a
            size such as ``"4GiB"``; 0: never. None: ``NN_HANDLER_DECODED_BUDGET``, else half
            of the memory available (``MemAvailable``, or the cgroup's limit where lower).
    """

    rdcc_nbytes: int = 256 * 1024**2
    rdcc_nslots: int = 1_000_003
    rdcc_w0: float = 0.75
    swmr: bool = True
    locking: LockingMode = "best-effort"
    allow_external_files: bool = False
    storage_options: Mapping[str, Any] | None = field(default=None, hash=False)
    cache_dir: str | os.PathLike[str] | None = None
    cache_limit: int | None = None
    decoded_budget: int | str | None = None

    def __post_init__(self) -> None:
        check_non_negative_int("rdcc_nbytes", self.rdcc_nbytes)
        check_int_at_most("rdcc_nbytes", self.rdcc_nbytes, _MAX_RDCC_NBYTES, _HDF5_CACHE)
        check_non_negative_int("rdcc_nslots", self.rdcc_nslots)
        check_int_at_most("rdcc_nslots", self.rdcc_nslots, _MAX_RDCC_NSLOTS, _HDF5_CACHE)
        check_probability("rdcc_w0", self.rdcc_w0)
        if not isinstance(self.swmr, bool):
            raise TypeError(f"swmr must be True or False, got {self.swmr!r}")
        if not isinstance(self.allow_external_files, bool):
            raise TypeError(
                f"allow_external_files must be True or False, got {self.allow_external_files!r}"
            )
        check_choice("locking", self.locking, _LOCKING_CHOICES)
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise TypeError(
                f"storage_options must be a dict of fsspec options or None, got "
                f"{self.storage_options!r}"
            )
        if self.cache_dir is not None:
            if not isinstance(self.cache_dir, str | os.PathLike):
                raise TypeError(
                    f"cache_dir must be a directory path or None, got {self.cache_dir!r}"
                )
            object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))
        if self.cache_limit is not None:
            check_count("cache_limit", self.cache_limit, minimum=1)
        if self.decoded_budget is not None:
            budget = parse_size("decoded_budget", self.decoded_budget)
            check_non_negative_int("decoded_budget", budget)
            object.__setattr__(self, "decoded_budget", budget)

    @property
    def decoded_budget_bytes(self) -> int | None:
        """``decoded_budget`` in bytes; None for the default (``chunks/decoded.py``)."""
        return None if self.decoded_budget is None else int(self.decoded_budget)


def resolve_file_options(
    file_options: FileOptions | None,
    constructor: Callable[..., Any],
    arguments: Mapping[str, Any],
) -> FileOptions:
    """The ``FileOptions`` a dataset constructor's call asks for.

    Args:
        file_options: The call's ``file_options=`` (None: built from the keywords).
        constructor: The constructor (``H5LazyDataset.__init__``): its defaults and its name.
        arguments: The call's arguments (the constructor's ``locals()``); those named like a
            ``FileOptions`` field are its keywords.

    Returns:
        ``file_options`` when given, else ``FileOptions`` of the keywords.

    Raises:
        TypeError: ``file_options`` is not a ``FileOptions``, or a keyword set to other than
            the constructor's default disagrees with it (the message names both values).
    """
    keywords = {f.name: arguments[f.name] for f in _FIELDS if f.name in arguments}
    if file_options is None:
        return FileOptions(**keywords)
    where = constructor.__qualname__.removesuffix(".__init__")
    if not isinstance(file_options, FileOptions):
        raise TypeError(
            f"{where}: file_options must be a FileOptions (or None), got {file_options!r}"
        )
    defaults = _defaults(constructor)
    clash = {
        name: value
        for name, value in keywords.items()
        if not _same(value, defaults[name]) and not _same(value, getattr(file_options, name))
    }
    if clash:
        given = ", ".join(
            f"{name}={value!r} (file_options has {getattr(file_options, name)!r})"
            for name, value in clash.items()
        )
        raise TypeError(
            f"{where}: got file_options= and {given}; pass one of them, e.g. "
            "file_options=dataclasses.replace(file_options, ...)"
        )
    return file_options


_FIELDS = dataclasses.fields(FileOptions)


@functools.cache
def _defaults(constructor: Callable[..., Any]) -> dict[str, Any]:
    return {
        name: p.default
        for name, p in inspect.signature(constructor).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, os.PathLike) or isinstance(b, os.PathLike):
        return a is not None and b is not None and os.fspath(a) == os.fspath(b)
    return bool(a is b or a == b)
