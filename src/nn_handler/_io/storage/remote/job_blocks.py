"""The file's metadata once per job: one rank fetches each block, the others get it from it.

h5py opens an object and walks its chunk indexes by reading metadata blocks (``file_object.py``).
In a job of many nodes every node would fetch the same blocks; with ``torch.distributed`` up,
the job already has a key-value store that every rank reaches (the default group's). So a
metadata block is fetched by the first rank that asks for it (it claims the block's key with an
atomic counter), which publishes the bytes under that key; every other rank waits for them
there instead of asking the store of objects. The key holds the URL, the object's version (size
and ETag / version id / date, as recorded at open) and the range: a rank that saw another
version asks for other keys, so a changed object is never served from a stale block.

Nothing waits without a bound: a block not published within the remote's own time limit
(``RetryPolicy.total_s + attempt_s``: the claiming rank died, or is stuck) is fetched by the
waiting rank itself, and a claiming rank whose fetch failed publishes that it failed, so the
others fetch at once (and fail with their own message, if the store fails them too). The store
is only asked for by non-collective calls (claim, publish, wait): ranks need not open files in
step. Which store serves the job is registered from above (``set_job_store``): this layer does
not know torch.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..byte_source import Buffer
from ..identity import ObjectVersion

__all__ = ["JobStore", "job_store", "set_job_store", "shared_read"]

_PREFIX = "nn_handler/metadata/"
_OK, _FAILED = b"\x01", b"\x00"


class JobStore(Protocol):
    """A key-value store every process of the job reaches (a process group's store)."""

    def claim(self, key: str) -> bool:
        """True for the first caller of the whole job to claim ``key``, False for every other."""

    def publish(self, key: str, value: bytes) -> None:
        """Set ``key`` to ``value`` for every process of the job."""

    def wait_for(self, key: str, timeout_s: float) -> bytes | None:
        """``key``'s value once published; None when it is not within ``timeout_s``."""


class _Remote(Protocol):
    """What ``shared_read`` needs of the object: its URL, its version and a plain read."""

    url: str

    @property
    def identity(self) -> ObjectVersion:
        """The version recorded at open."""

    def read_ranges(self, ranges: Sequence[tuple[int, int]], buffers: Sequence[Buffer]) -> None:
        """Fetch the ranges from the store of objects."""


_provider: Callable[[], JobStore | None] | None = None


def set_job_store(provider: Callable[[], JobStore | None] | None) -> None:
    """Register what gives this process's job store (None when it has none at the moment)."""
    global _provider
    _provider = provider


def job_store() -> JobStore | None:
    """The job's store for this process now (None: no job, or none registered)."""
    return _provider() if _provider is not None else None


def shared_read(
    remote: _Remote,
    ranges: Sequence[tuple[int, int]],
    buffers: Sequence[Buffer],
    store: JobStore,
    wait_s: float,
) -> None:
    """Fill ``buffers`` with ``ranges`` of ``remote``, each range fetched once per job.

    The ranges this process claims first are fetched (together) and published (a process
    claims ranges only when it is the first to ask for this very set of them); the rest are
    waited for, at most ``wait_s`` in all, and those not published by then (or published as
    failed) are fetched here.
    """
    keys = [_key(remote, offset, length) for offset, length in ranges]
    # the call is claimed first: the ranks asking for the same blocks at once leave them all to
    # one rank (one request), not claim one each (as many requests as ranks)
    leads = len(keys) == 1 or store.claim(_PREFIX + _digest("\0".join(keys)))
    mine = [k for k, key in enumerate(keys) if store.claim(key)] if leads else []
    if mine:
        _fetch_and_publish(remote, ranges, buffers, store, keys, mine)
    deadline = time.monotonic() + wait_s
    late = []
    for k in sorted(set(range(len(ranges))) - set(mine)):
        value = store.wait_for(keys[k], max(deadline - time.monotonic(), 0.0))
        if value is None or value[:1] != _OK or len(value) - 1 != ranges[k][1]:
            late.append(k)
            continue
        _view(buffers[k])[:] = np.frombuffer(value, np.uint8, offset=1)
    if late:
        remote.read_ranges([ranges[k] for k in late], [buffers[k] for k in late])


def _fetch_and_publish(
    remote: _Remote,
    ranges: Sequence[tuple[int, int]],
    buffers: Sequence[Buffer],
    store: JobStore,
    keys: list[str],
    mine: list[int],
) -> None:
    try:
        remote.read_ranges([ranges[k] for k in mine], [buffers[k] for k in mine])
    except BaseException:
        for k in mine:  # the others fetch for themselves at once instead of waiting out the bound
            store.publish(keys[k], _FAILED)
        raise
    for k in mine:
        store.publish(keys[k], _OK + _view(buffers[k]).tobytes())


def _key(remote: _Remote, offset: int, length: int) -> str:
    version = remote.identity.as_record()
    return _PREFIX + _digest(f"{remote.url}\0{sorted(version.items())!r}\0{offset}\0{length}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _view(buffer: Buffer) -> np.ndarray[tuple[int], np.dtype[np.uint8]]:
    flat: np.ndarray[tuple[int], np.dtype[np.uint8]] = np.frombuffer(buffer, np.uint8)
    return flat
