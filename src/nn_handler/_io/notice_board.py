"""Notices said once for a whole job: the process that builds the datasets and its workers.

A DataLoader worker finds what its parent finds (the same small ``/dev/shm``, the same file), and
a notice said once per process came once per worker, and again every epoch from the workers of
the next. A *board* records which notices some process of the job has said: a small memory file
(``memfd``, not in ``/dev/shm``, so a full ``/dev/shm`` does not matter) made by the process that
builds a dataset (``handle()``, called by ``H5Source``) and shared with every worker it starts:
a forked worker inherits it, a spawned or forkserver worker receives its descriptor with the
dataset (``BoardHandle`` pickles as the descriptor while a process is being started, as
``multiprocessing`` passes descriptors; one per pickle, however many files the dataset holds).

A process *claims* a notice by appending a record (the key's hash, its pid and start time) to
the board, then reading the board: the process whose record for that key comes first says it.
Appends to a file opened with ``O_APPEND`` are atomic, so every process agrees who was first,
with no lock to wait for. Records are 32 bytes and never straddle a page. Where there is no
board (not Linux; a process that received a dataset without one), ``claim`` says yes: the
notice is said once per process, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from multiprocessing import context, reduction
from typing import Any

from .notices import say_once
from .platform import MEMFD, off
from .process import process_stamp
from .storage.byte_source import read_at

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows (no memory files there either)
    fcntl = None  # type: ignore[assignment]

__all__ = ["BoardHandle", "claim", "handle", "say_once_for_job"]

_RECORD = struct.Struct("<QQq8x")  # key hash, pid, start time, padding: 32 bytes
_MAX_BYTES = 1 << 20  # a board this full (32k claims) is not read: every process says its own


class _Board:
    """The job's board: a descriptor of the memory file, opened for appending."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def make(cls) -> _Board | None:
        """A new, empty board; None where the platform has no memory files."""
        if not MEMFD or fcntl is None:
            off("memory files (memfd_create)", "a notice for the job is said once per process")
            return None
        try:
            fd = os.memfd_create("nn_handler-notices", getattr(os, "MFD_CLOEXEC", 0))
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        except OSError:
            return None
        return cls(fd)

    def first(self, key_hash: int) -> tuple[int, int] | None:
        """The (pid, start time) of the first record of ``key_hash``, or None."""
        size = os.fstat(self.fd).st_size // _RECORD.size * _RECORD.size
        if size > _MAX_BYTES:
            return None
        data = bytearray(size)
        read_at(self.fd, "the notice board", [(0, size)], [data])
        for found, pid, started in _RECORD.iter_unpack(data):
            if found == key_hash:
                return pid, started
        return None


_board: _Board | None = None


def handle() -> BoardHandle:
    """The handle of this process's board, made now if it has none (see the module docstring)."""
    global _board
    if _board is None:
        _board = _Board.make()
    return _HANDLE


def claim(key: str) -> bool:
    """True when this process is the first of the job to say the notice ``key``.

    Also True where the board cannot answer (none, or it fails): better said twice than never.
    """
    board = _board
    if board is None:
        return True
    key_hash = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
    me = process_stamp()
    try:
        os.write(board.fd, _RECORD.pack(key_hash, *me))
        first = board.first(key_hash)
    except OSError:
        return True
    return first is None or first == me


def say_once_for_job(key: str, message: str) -> bool:
    """Log ``message`` (WARNING) once for the whole job: by the first process to claim ``key``."""
    return say_once(key, message, first=lambda: claim(key))


class BoardHandle:
    """This process's board, as it travels to a spawned or forkserver worker (see above)."""

    def __reduce__(self) -> tuple[Any, ...]:
        board = _board
        if board is None or context.get_spawning_popen() is None:
            return (_no_board, ())  # (copied, or pickled to a file: the board stays here)
        return (_adopt, (reduction.DupFd(board.fd),))


_HANDLE = BoardHandle()


def _no_board() -> BoardHandle:
    return _HANDLE


def _adopt(dup: Any) -> BoardHandle:
    """In a new worker: take the board of the process that started it."""
    global _board
    fd = dup.detach()
    if _board is None:
        _board = _Board(fd)
    elif fd != _board.fd:  # (a second dataset from the same parent brought its board again)
        with contextlib.suppress(OSError):
            os.close(fd)
    return _HANDLE
