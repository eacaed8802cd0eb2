"""Errors for files that cannot be read correctly, and the translation of HDF5's open errors.

Every error names the file (and the dataset, where there is one) and the problem in words a user
can act on. All are ``OSError`` subclasses, so code that already catches I/O errors keeps working,
and each takes the message as its only required argument, so the DataLoader can re-raise one that
happened in a worker.
"""

from __future__ import annotations

import errno
import re

__all__ = [
    "CorruptFileError",
    "DataFileError",
    "ExternalDataError",
    "FileChangedError",
    "MissingFilterError",
    "RemoteAccessError",
    "RemoteReadError",
    "explain_open_error",
    "is_corruption",
    "is_writer_flag_error",
]

# errno of a failed lock: held by another process (EAGAIN), none on this file system (ENOLCK),
# or not supported (ENOTSUPP, 524 on Linux NFS)
_LOCK_ERRNOS = (errno.EAGAIN, errno.ENOLCK, 524)
_LOCK_TEXT = re.compile(r"unable to (?:un)?lock file|file locking|errno = (?:11|37|524)\b", re.I)
_TRUNCATED = re.compile(r"truncated file", re.I)
_NOT_HDF5 = re.compile(r"file signature not found|not an hdf5 file", re.I)
_WRITER = re.compile(r"already open for write|file consistency flags", re.I)
_SYSTEM = re.compile(r"errno = \d+|permission denied|too many open files|no such file", re.I)
# users catch these from nn_handler.errors: tracebacks, reprs and pickles name that module
_PUBLIC = "nn_handler.errors"
_EXTERNAL = re.compile(r"external (?:link|file)|unable to open file", re.I)


class DataFileError(OSError):
    """A data file cannot be read correctly; ``path`` is the file."""

    __module__ = _PUBLIC

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class CorruptFileError(DataFileError):
    """The file is truncated, damaged, or says something that its own bytes contradict."""

    __module__ = _PUBLIC


class FileChangedError(DataFileError):
    """The file changed (rewritten, replaced, truncated) after the dataset was built."""

    __module__ = _PUBLIC


class MissingFilterError(DataFileError, RuntimeError):
    """A dataset needs an HDF5 filter (compression plugin) that is not installed.

    Also a ``RuntimeError``, so code that catches ``RuntimeError`` for it keeps working.
    """

    __module__ = _PUBLIC


class ExternalDataError(DataFileError, PermissionError):
    """A dataset's data lives in another file outside the data file's directory (refused)."""

    __module__ = _PUBLIC


class RemoteReadError(DataFileError):
    """An object store kept failing (errors, time-outs, a stopped server, short replies).

    The message names the URL, the last status and what was tried (how many attempts, for how
    long). Raised after transient failures were retried within a bounded time, or at once for
    a failure no retry can fix.
    """

    __module__ = _PUBLIC


class RemoteAccessError(DataFileError, PermissionError):
    """An object store refused us: no credentials found, or the ones found are not allowed.

    The message names the URL and the environment variables (or ``storage_options`` keys) to set.
    """

    __module__ = _PUBLIC


def is_corruption(text: str) -> bool:
    """True when an HDF5 error message (opening an object) says the file's bytes are damaged.

    Anything but a missing external file, a system error (``errno = …``) or a locking failure.
    """
    return not (_SYSTEM.search(text) or _LOCK_TEXT.search(text) or _EXTERNAL.search(text))


def is_writer_flag_error(exc: BaseException) -> bool:
    """True when HDF5 refused a plain open because a (SWMR) writer has the file open."""
    return bool(_WRITER.search(str(exc)))


def explain_open_error(path: str, exc: BaseException) -> OSError:
    """Return an error for ``exc`` (from opening ``path``) that names the real cause."""
    text = getattr(exc, "strerror", None) or str(exc)
    code = getattr(exc, "errno", None)
    if code in _LOCK_ERRNOS or _LOCK_TEXT.search(text):
        return _os_error(
            code,
            f"cannot lock {path!r} ({text}); if another process is writing it, wait for it to "
            "close the file; on NFS/Lustre pass locking=False (safe for read-only use) or set "
            "HDF5_USE_FILE_LOCKING=FALSE",
        )
    if _TRUNCATED.search(text):
        return CorruptFileError(
            f"{path!r} is truncated: it is shorter than its own superblock says ({text}); "
            "the copy or download was cut short, or a writer died before closing it",
            path,
        )
    if _NOT_HDF5.search(text):
        return CorruptFileError(
            f"{path!r} is not an HDF5 file, or its first bytes are damaged ({text})", path
        )
    if _WRITER.search(text):
        return OSError(
            f"cannot open {path!r}: a writer has it open, or died without closing it ({text}); "
            "wait for the writer, open with swmr=True if it writes in SWMR mode, or clear the "
            "flag of a dead writer with `h5clear -s`"
        )
    if code is None and not _SYSTEM.search(text):
        # the signature is there (checked before opening) but HDF5 cannot make sense of the
        # metadata after it: bad checksums, versions, sizes, addresses, ring types, …
        return CorruptFileError(
            f"{path!r} is corrupt: HDF5 cannot read its metadata ({text})", path
        )
    return _os_error(code, f"cannot open HDF5 file {path!r}: {text}")


def _os_error(code: int | None, message: str) -> OSError:
    return OSError(message) if code is None else OSError(code, message)
