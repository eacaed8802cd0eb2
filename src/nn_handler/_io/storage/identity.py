"""Which file we built a dataset from: a cheap identity (size, mtime, ctime, inode, device).

Byte offsets, chunk tables and lengths are computed once, from the file as it was when the
dataset was built, and then used in every process for the whole run. A file rewritten, replaced
or truncated at the same path makes them wrong, so each process compares the file it opens (and,
before each batch, the file it reads) with the identity recorded at build time. One ``fstat`` is
about a microsecond.

The status-change time (ctime) is part of it: a file rewritten in place keeps its size and can
be given its old modification time back (``touch -r``, ``rsync -t``, a restore, a file system
with coarse timestamps), but no user can set its ctime back. A ``chmod`` or a new hard link
changes it too: rare while a loader reads, and then an error to rebuild, never stale bytes.

A file held open by a SWMR writer may grow (the writer appends); it may not shrink or become
another file. Every other change is an error that names the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import FileChangedError

__all__ = ["FileIdentity", "ObjectVersion", "SourceIdentity", "check_identity", "identity_of_fd"]


@dataclass(frozen=True)
class FileIdentity:
    """Size, modification and status-change times (ns), inode and device of one file."""

    size: int
    mtime_ns: int
    ino: int
    dev: int
    ctime_ns: int = 0

    @classmethod
    def of_stat(cls, st: os.stat_result) -> FileIdentity:
        """The identity of a ``stat`` result."""
        return cls(
            int(st.st_size), int(st.st_mtime_ns), int(st.st_ino), int(st.st_dev),
            int(st.st_ctime_ns),
        )  # fmt: skip

    @classmethod
    def of_path(cls, path: str) -> FileIdentity:
        """The identity of the file at ``path`` now (symbolic links followed)."""
        return cls.of_stat(os.stat(path))

    def as_record(self) -> dict[str, int]:
        """The identity as a JSON-able dict (size, times in ns, inode and device)."""
        return {
            "size": self.size, "mtime_ns": self.mtime_ns, "ino": self.ino, "dev": self.dev,
            "ctime_ns": self.ctime_ns,
        }  # fmt: skip

    @property
    def file_key(self) -> tuple[int, int]:
        """``(device, inode)``: the same for every name of one file (links, other spellings)."""
        return self.dev, self.ino

    def same_file(self, other: FileIdentity) -> bool:
        """True when ``other`` is this very file (same inode on the same device), changed or not.

        Hard links and symbolic links to one file are the same file; a copy, or a file renamed
        into its place, is not.
        """
        return self.file_key == other.file_key

    def matches(self, st: os.stat_result) -> bool:
        """True when ``st`` is this identity (the per-batch fast path: no object built)."""
        return (
            st.st_size == self.size
            and st.st_mtime_ns == self.mtime_ns
            and st.st_ino == self.ino
            and st.st_dev == self.dev
            and st.st_ctime_ns == self.ctime_ns
        )


@dataclass(frozen=True)
class ObjectVersion:
    """One version of an object in a store: its size and what the store calls that version.

    ``etag`` is the store's entity tag (quotes kept, as sent in ``If-Match``); ``version`` the
    store's version id or generation when it keeps versions; ``modified`` the Last-Modified
    text for stores that give neither. Two reads of one version see the same bytes.
    """

    size: int
    etag: str | None = None
    version: str | None = None
    modified: str | None = None

    def as_record(self) -> dict[str, int | str | None]:
        """The version as a JSON-able dict."""
        return {
            "size": self.size,
            "etag": self.etag,
            "version": self.version,
            "modified": self.modified,
        }

    def describe(self) -> str:
        """A short text for messages: size and whichever tags the store gave."""
        tags = [f"{k}={v!r}" for k, v in self.as_record().items() if v is not None]
        return ", ".join(tags)


#: What a ``ByteSource`` records about its bytes: a local file's or a stored object's identity.
SourceIdentity = FileIdentity | ObjectVersion


def identity_of_fd(fd: int) -> FileIdentity:
    """The identity of the open file ``fd`` (the file itself, whatever its path is now)."""
    return FileIdentity.of_stat(os.fstat(fd))


def check_identity(
    path: str, recorded: FileIdentity, current: FileIdentity, *, growing: bool = False
) -> None:
    """Raise ``FileChangedError`` unless ``current`` is the file ``recorded`` described.

    Args:
        path: The file, for the message.
        recorded: The identity when the dataset was built.
        current: The identity now.
        growing: The file is open in SWMR mode: it may grow and be modified by its writer.
    """
    if current == recorded:
        return
    if growing and recorded.same_file(current) and current.size >= recorded.size:
        return
    raise FileChangedError(
        f"{path!r} changed after the dataset was built ({_describe(recorded, current)}); the "
        "offsets and lengths read from it no longer hold. Build the dataset again (and do not "
        "rewrite a file while a loader reads it: write a new file and rename it into place "
        "between runs)",
        path,
    )


def _describe(old: FileIdentity, new: FileIdentity) -> str:
    changes = []
    if not old.same_file(new):
        changes.append("it was replaced by another file")
    if old.size != new.size:
        changes.append(f"size {old.size} -> {new.size} bytes")
    if old.mtime_ns != new.mtime_ns:
        changes.append("modified")
    elif old.same_file(new) and old.ctime_ns != new.ctime_ns:
        changes.append(
            "its status changed with the same size and modification time: rewritten in place "
            "with its old time put back, or its permissions or links changed"
        )
    return ", ".join(changes)
