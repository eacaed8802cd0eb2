"""Raw bytes of a data file: one small interface for every read that is not HDF5 metadata.

HDF5 metadata (object headers, chunk indexes) stays with h5py. The bytes of the data themselves
(contiguous datasets, raw chunks) are read by us, and every such read goes through a
``ByteSource``: "read these ``(offset, length)`` ranges into these buffers". A call carries many
ranges, so that an implementation can coalesce neighbours and run them concurrently (a remote
store: one request per run of ranges; the local file: one ``preadv`` per run of adjacent ones).

``LocalFile`` is the first implementation: a descriptor per process (``PerProcess``), opened
lazily and checked to be the file the dataset was built from, and ``os.preadv`` (the GIL is
released while the kernel copies). ``pread`` returns short instead of faulting, so a file
truncated under us is a ``FileChangedError`` naming the file, the range and the size.

A memory map is a capability only a local file has (``Mappable``). Touching a page of a map past
the end of a file that was truncated after it was mapped kills the process with SIGBUS: no Python
exception, no traceback. So ``MappedFile.check(end)`` (one ``fstat`` of the mapped file itself,
whatever the path names now) must pass before the bytes below ``end`` are touched.

``shared_memory`` and ``shared_file_memory`` are the other uses of ``mmap``: anonymous memory (no
file, so no SIGBUS from a shrinking file and no ``/dev/shm`` quota) that forked workers share,
and the regions of node memory (``node_memory.py``) that a node's processes share by name.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import FileChangedError
from ..platform import BINARY, FADVISE, MADVISE, MMAP_FLAGS, PREAD, PREADV, off
from ..process import PerProcess
from .identity import FileIdentity, SourceIdentity, check_identity, identity_of_fd

__all__ = [
    "Buffer",
    "ByteSource",
    "LocalBytes",
    "LocalFile",
    "Mappable",
    "MappedFile",
    "ReadsMetadata",
    "advice_piece",
    "advise_spans",
    "read_at",
    "shared_file_memory",
    "shared_memory",
]

#: A writable buffer: a C-contiguous array, a ``bytearray`` or a writable ``memoryview``.
Buffer = np.ndarray[Any, Any] | bytearray | memoryview

_STAT_EVERY_S = 0.01
_MAX_IOVECS = 512  # below every platform's IOV_MAX (1024 on Linux and macOS)
_PAGE = mmap.PAGESIZE
_ADVISE_GAP = 256 * 1024  # bytes between two ranges read ahead with them (one request)
_DEFAULT_PIECE = 128 * 1024  # Linux's default read-ahead window


@runtime_checkable
class ByteSource(Protocol):
    """The bytes of one data file, read by ranges (see the module docstring)."""

    @property
    def name(self) -> str:
        """The file, for messages."""

    @property
    def identity(self) -> SourceIdentity | None:
        """The file (or object version) as the dataset saw it when built (None: not recorded)."""

    def size(self) -> int:
        """Bytes in the file now."""

    def read_ranges(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """Fill ``buffers[k]`` with the ``ranges[k] = (offset, length)`` bytes of the file.

        Ranges may come in any order, touch or overlap; a zero-length range reads nothing.

        Raises:
            ValueError: a buffer's size is not its range's length, or a range is negative.
            FileChangedError: a range ends past the end of the file, or the file is no longer
                the one ``identity`` describes.
        """

    def close(self) -> None:
        """Release what this process holds (descriptors, connections); reads reopen them."""


@runtime_checkable
class Mappable(ByteSource, Protocol):
    """A byte source that can also be memory-mapped (a local file)."""

    def map(self) -> MappedFile:
        """A read-only map of the whole file (check it before each use: ``MappedFile.check``)."""


@runtime_checkable
class ReadsMetadata(ByteSource, Protocol):
    """A byte source that reads the file's metadata its own way (once per job: a stored object).

    h5py's reads of metadata blocks (``remote/file_object.py``) go through ``read_metadata``; the
    data's own bytes through ``read_ranges``.
    """

    def read_metadata(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """As ``read_ranges``, for ranges of metadata that every process of the job reads."""


@runtime_checkable
class LocalBytes(ByteSource, Protocol):
    """A byte source this machine's kernel reads (a local file).

    A request costs no round trip, the kernel reads ahead where advised, and an open descriptor
    says which file it is.
    """

    def advise(self, starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> None:
        """Ask the kernel to read bytes ``[starts[k], ends[k])`` ahead (no wait)."""

    def descriptor(self) -> int:
        """This process's open descriptor of the file (opened and checked on first use)."""


class LocalFile:
    """A file on a local (or network) file system, read with ``preadv``; a ``ByteSource``.

    Args:
        path: The file.
        identity: The file as the dataset saw it when built (each process's descriptor is
            checked against it when opened), or None to check nothing but the sizes read.
        growing: The file may grow (a SWMR writer appends to it).
    """

    def __init__(
        self, path: str, identity: FileIdentity | None = None, *, growing: bool = False
    ) -> None:
        self.path = path
        self._identity = identity
        self.growing = growing
        # descriptor and the lock that guards closing it belong to one process: see process.py
        self._fd: PerProcess[_Descriptor] = PerProcess()
        self._lock: PerProcess[threading.Lock] = PerProcess(threading.Lock)

    @property
    def name(self) -> str:
        """The file's path."""
        return self.path

    @property
    def identity(self) -> FileIdentity | None:
        """The file as the dataset saw it when built."""
        return self._identity

    def size(self) -> int:
        """Bytes in the file now (``fstat`` of this process's descriptor)."""
        return int(os.fstat(self.descriptor()).st_size)

    def read_ranges(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """Fill each buffer with its range of the file (see ``ByteSource.read_ranges``).

        Adjacent ranges (one ends where the next starts) are read with one ``preadv``.
        """
        if len(ranges) != len(buffers):
            raise ValueError(f"{len(ranges)} ranges but {len(buffers)} buffers")
        fd = self.descriptor()
        if len(ranges) == 1:  # the common case (one chunk), kept short: ~1 us over a bare pread
            offset, length = ranges[0]
            _check_size(buffers[0], offset, length)
            got = _preadv(fd, buffers, offset) if length else 0
            if got != length:
                self._read_rest(fd, offset, offset + length, buffers, got)
            return
        for (offset, length), buf in zip(ranges, buffers, strict=True):
            _check_size(buf, offset, length)
        first = 0
        while first < len(ranges):
            last, end = first + 1, ranges[first][0] + ranges[first][1]
            while last < len(ranges) and last - first < _MAX_IOVECS and ranges[last][0] == end:
                end += ranges[last][1]
                last += 1
            run = buffers[first:last]
            got = _preadv(fd, run, ranges[first][0]) if end > ranges[first][0] else 0
            self._read_rest(fd, ranges[first][0], end, run, got)
            first = last

    def map(self) -> MappedFile:
        """A read-only map of the file (see ``MappedFile``)."""
        return MappedFile(self.path, self._identity, growing=self.growing)

    def advise(self, starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> None:
        """Have the kernel read bytes ``[starts[k], ends[k])`` ahead (no wait).

        One ``POSIX_FADV_WILLNEED`` per span (``advise_spans``): the kernel reads each in large
        requests while the caller decodes what it read before.
        """
        if not FADVISE:
            off("posix_fadvise", "cold bytes are read when asked for, not ahead")
            return
        if starts.size == 0:
            return
        fd = self.descriptor()
        for lo, hi in advise_spans(starts, ends, piece=advice_piece(fd)):
            os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)

    def descriptor(self) -> int:
        """This process's descriptor of the file, opened (and checked) on first use."""
        return self._fd.get_or_make(self._open).fd

    def close(self) -> None:
        """Close this process's descriptor (the next read reopens it)."""
        with self._lock.get():
            held = self._fd.pop()
        if held is not None:
            held.close()

    def _open(self) -> _Descriptor:
        fd = os.open(self.path, os.O_RDONLY | BINARY | getattr(os, "O_CLOEXEC", 0))
        try:
            if self._identity is not None:  # the file the dataset was built from, not a new one
                check_identity(self.path, self._identity, identity_of_fd(fd), growing=self.growing)
        except BaseException:
            os.close(fd)
            raise
        return _Descriptor(fd)

    def _read_rest(
        self, fd: int, offset: int, end: int, buffers: Sequence[Buffer], got: int
    ) -> None:
        """Read on after a first ``preadv`` of bytes ``[offset, end)`` that gave ``got`` bytes."""
        while offset + got < end:
            more = _preadv(fd, _after([_bytes(b) for b in buffers], got), offset + got)
            if more <= 0:
                raise FileChangedError(
                    f"{self.path!r} ends before byte {end} (it has {os.fstat(fd).st_size} "
                    f"bytes; bytes [{offset}, {end}) were asked for): it was truncated after "
                    "the dataset was built. Build the dataset again",
                    self.path,
                )
            got += more

    def __repr__(self) -> str:
        return f"LocalFile({self.path!r})"


class _Descriptor:
    """A read-only file descriptor, closed when dropped (in the process that holds it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):  # already closed
                os.close(fd)

    def __del__(self) -> None:
        self.close()


def _check_size(buf: Buffer, offset: int, length: int) -> None:
    # writable and C-contiguous: preadv asks for that itself (see _preadv)
    nbytes = len(buf) if isinstance(buf, bytearray) else buf.nbytes
    if offset < 0 or length < 0 or nbytes != length:
        raise ValueError(
            f"range (offset={offset}, length={length}) needs a buffer of {length} bytes, got "
            f"{nbytes} bytes"
        )


def _bytes(buf: Buffer) -> memoryview:
    """``buf`` as a flat view of bytes (to read the rest of a short read into)."""
    target: Any = buf.reshape(-1).view(np.uint8) if isinstance(buf, np.ndarray) else buf
    return memoryview(target).cast("B")


def _after(views: list[memoryview], skip: int) -> list[memoryview]:
    """The views with their first ``skip`` bytes (altogether) dropped; empty views left out."""
    rest = []
    for view in views:
        if skip >= view.nbytes:
            skip -= view.nbytes
            continue
        rest.append(view[skip:])
        skip = 0
    return rest


def read_at(
    fd: int, name: str, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]
) -> None:
    """Fill each buffer with its ``(offset, length)`` range of the open file ``fd`` (``name``).

    For files that are not a dataset's data file (a cache entry's bytes, opened and checked by
    their owner); short reads are read on.

    Raises:
        OSError: the file ends before a range does (it was cut short).
    """
    for (offset, length), buffer in zip(ranges, buffers, strict=True):
        view, done = _bytes(buffer), 0
        while done < length:
            got = _preadv(fd, [view[done:length]], offset + done)
            if got <= 0:
                raise OSError(f"{name!r} ends before byte {offset + length}")
            done += got


def _preadv(fd: int, buffers: Sequence[Buffer], offset: int) -> int:
    try:
        if PREADV:
            return int(os.preadv(fd, buffers, offset))  # type: ignore[arg-type]  # ndarrays too
        view = _writable(buffers[0])  # platforms without preadv: one buffer at a time, a copy
    except (BufferError, TypeError, ValueError) as exc:  # read-only, or strided: refused
        raise ValueError(f"buffers must be writable and C-contiguous ({exc})") from exc
    data = os.pread(fd, view.nbytes, offset) if PREAD else _seek_and_read(fd, view.nbytes, offset)
    view[: len(data)] = data
    return len(data)


def _writable(buf: Buffer) -> memoryview:
    """``buf`` as a flat view of its bytes, refused when read-only or not C-contiguous."""
    target: Any = buf  # (numpy arrays export the buffer protocol; the stubs do not say so)
    view = memoryview(target)
    if view.readonly or not view.c_contiguous:
        raise ValueError("a read-only or strided buffer")
    return view.cast("B")


_seek_lock = threading.Lock()


def _seek_and_read(fd: int, length: int, offset: int) -> bytes:
    """``pread`` where there is none (Windows): move the file position, then read.

    The position is the descriptor's, shared by every thread: one read at a time per process.
    """
    off("os.pread", "reads of a file take turns in each process (a lock around seek and read)")
    with _seek_lock:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, length)


class MappedFile:
    """A read-only memory map of one file, checked against the file's size before use.

    The map is made through a descriptor that is checked against ``identity`` first (so it maps
    the file the dataset was built from, not one renamed into its place since). ``check`` then
    compares the path's identity with ``identity`` again (rewritten, replaced or truncated:
    ``FileChangedError``) and asks the map for the mapped file's own size (its duplicate
    descriptor; one descriptor per map, as ``np.memmap``). Make one with ``LocalFile.map``.

    Args:
        path: The file.
        identity: The file as the dataset saw it when built, or None to check only sizes.
        growing: The file may grow (a SWMR writer appends to it).

    Raises:
        FileChangedError: the file is no longer the one ``identity`` describes.
    """

    def __init__(self, path: str, identity: FileIdentity | None, growing: bool = False) -> None:
        fd = os.open(path, os.O_RDONLY | BINARY | getattr(os, "O_CLOEXEC", 0))
        try:
            current = identity_of_fd(fd)
            if identity is not None:
                check_identity(path, identity, current, growing=growing)
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if current.size else None
            self._piece = advice_piece(fd) if MADVISE else _DEFAULT_PIECE
        finally:
            os.close(fd)  # the map holds its own duplicate: one descriptor per map, as np.memmap
        self.path = path
        self.identity = identity
        self.growing = growing
        self._stat_at = -1.0
        self.data: np.ndarray[Any, np.dtype[np.uint8]] = (
            np.zeros(0, np.uint8) if self._map is None else np.frombuffer(self._map, np.uint8)
        )

    def read_randomly(self) -> None:
        """Fault in only the page a gather touches (``MADV_RANDOM``), not a window around it.

        For rows asked for with ``advise`` first: the kernel otherwise reads up to its whole
        read-ahead window around each row not yet arrived, many times the row's bytes on a file
        bigger than the page cache.
        """
        if self._map is not None and MADVISE:
            self._map.madvise(mmap.MADV_RANDOM)

    def advise(self, starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> None:
        """Have the kernel read bytes ``[starts[k], ends[k])`` of the map now, all at once.

        A gather from a cold map otherwise faults its pages in one after the other (one
        request in flight, where the disk serves many at once at its queue depth).
        ``MADV_WILLNEED`` queues the reads of every span (``advise_spans``) and returns.
        """
        if not MADVISE:
            off("madvise", "pages of a memory map are read as a gather touches them")
            return
        if self._map is None or starts.size == 0:
            return
        size, piece = self.data.size, self._piece
        for lo, hi in advise_spans(starts // _PAGE * _PAGE, np.minimum(ends, size), piece=piece):
            if hi > lo:
                self._map.madvise(mmap.MADV_WILLNEED, lo, hi - lo)

    def check(self, end: int, identity: bool = True) -> None:
        """Raise ``FileChangedError`` unless bytes ``[0, end)`` of the map are safe to touch.

        ``identity=False`` skips the path's ``stat`` (the caller just checked the same file
        through another descriptor), and so does a call within ``_STAT_EVERY_S`` of the last
        stat (a ``stat`` costs ~2-3 us, a batch of small rows ~20 us); the mapped file's size,
        which is what keeps SIGBUS away, is checked on every call.
        """
        now = time.monotonic()
        if identity and self.identity is not None and now - self._stat_at >= _STAT_EVERY_S:
            self._stat_at = now
            st = os.stat(self.path)
            if not self.identity.matches(st):
                current = FileIdentity.of_stat(st)
                check_identity(self.path, self.identity, current, growing=self.growing)
        size = 0 if self._map is None else self._map.size()  # fstat of the mapped file
        if size < end or self.data.size < end:
            raise FileChangedError(
                f"{self.path!r} is {size} bytes now, but reading it needs {end}: it was "
                "truncated after the dataset was built. Build the dataset again",
                self.path,
            )


def shared_memory(nbytes: int) -> mmap.mmap:
    """``nbytes`` (at least 1) of zeroed anonymous memory, shared with processes forked later.

    ``MAP_SHARED | MAP_ANONYMOUS``: pages are only allocated when first written, and are backed
    by the kernel's internal shmem mount, not by ``/dev/shm`` (whose 64 MB Docker default would
    end a write past it with SIGBUS). Windows has no such flags (and no fork): there the memory
    is this process's own.
    """
    if not MMAP_FLAGS:
        return mmap.mmap(-1, max(1, int(nbytes)))
    return mmap.mmap(-1, max(1, int(nbytes)), flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)


def shared_file_memory(fd: int, nbytes: int, *, writable: bool = True) -> mmap.mmap:
    """The first ``nbytes`` of the file ``fd`` (a region of node memory), mapped shared.

    Pages are mapped as they are first touched, not at once: populating a 2 GB region when it
    is mapped cost ~1 s before the first batch, in every process that joined it (a page is
    allocated before it is written: ``Region.reserve``).
    """
    if not writable:
        return mmap.mmap(fd, nbytes, access=mmap.ACCESS_READ)
    return mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def advise_spans(
    starts: np.ndarray[Any, Any],
    ends: np.ndarray[Any, Any],
    gap: int = _ADVISE_GAP,
    piece: int | None = None,
) -> list[tuple[int, int]]:
    """Byte ranges ``[starts[k], ends[k])`` (apart or overlapping, any order) as sorted spans.

    Ranges less than ``gap`` bytes apart join one span: one large request reads them and the
    bytes between, where a request each would cost a seek each. ``piece``: spans longer than
    this are cut into pieces of it (``advice_piece``).
    """
    if starts.size == 0:
        return []
    order = np.argsort(starts, kind="stable")
    lo, hi = starts[order], np.maximum.accumulate(ends[order])
    cuts = np.flatnonzero(lo[1:] - hi[:-1] > gap) + 1
    firsts, lasts = np.r_[0, cuts], np.r_[cuts - 1, lo.size - 1]
    spans = list(zip(lo[firsts].tolist(), hi[lasts].tolist(), strict=True))
    if piece is None:
        return spans
    pieces: list[tuple[int, int]] = []
    for lo_, hi_ in spans:
        pieces += [(a, min(hi_, a + piece)) for a in range(lo_, hi_, piece)] or [(lo_, hi_)]
    return pieces


def advice_piece(fd: int) -> int:
    """The most bytes one read-ahead advice reads on the device holding ``fd``'s file.

    Linux reads at most the device's read-ahead window per ``WILLNEED`` (the rest of a longer
    advice is never read), so longer spans are asked for in pieces of it:
    ``/sys/class/bdi/MAJ:MIN/read_ahead_kb``, else 128 KiB.
    """
    try:
        dev = os.fstat(fd).st_dev
    except OSError:
        return _DEFAULT_PIECE
    return _piece_of_device(os.major(dev), os.minor(dev))


@functools.cache
def _piece_of_device(major: int, minor: int) -> int:
    try:
        with open(f"/sys/class/bdi/{major}:{minor}/read_ahead_kb", encoding="ascii") as f:
            kib = int(f.read().strip())
    except (OSError, ValueError):
        return _DEFAULT_PIECE
    return max(_DEFAULT_PIECE, kib * 1024)
