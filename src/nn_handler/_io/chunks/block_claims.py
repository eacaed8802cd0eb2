"""Who decodes which block of a decoded region: claims every process of the node agrees on.

A region (``decoded.py``) holds, beside the decoded blocks, a state per block (EMPTY, LOADING
or READY), each LOADING block's filler (its pid and start time) and a counter that every settle
moves. A reader claims, under the region's lock, the EMPTY blocks its batch needs (they are its
to decode), and waits for those another process is decoding; nothing is decoded twice, and a
batch waits only for its own blocks, never for the whole dataset.

A filler is known by what the region says of it (``Region.filler_alive``: a lock it holds, or
its pid and start time for memory shared with forked processes only), never by a bare pid: a
block whose filler is gone is claimed again at once. A wait that sees no block settle anywhere
for ``STALL_S`` seconds (a filler stopped, or stuck on a dead disk) claims the blocks it waits
for all the same: they are decoded twice at worst (the same bytes), never waited for forever.
A fill that fails sets its blocks back to EMPTY, unless another process took them over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..process import process_stamp

__all__ = ["EMPTY", "LOADING", "READY", "STALL_S", "BlockClaims", "Progress"]

EMPTY, LOADING, READY = 0, 1, 2
#: seconds a wait may see no block settle anywhere before it decodes the blocks itself
STALL_S = 30.0


@dataclass
class BlockClaims:
    """The claims of one process on one region (see the module docstring).

    Args:
        region: The region (``Region`` or the anonymous one): its ``lock`` and its fillers.
        states: One state per block.
        pids: Each LOADING block's filler: its pid ...
        started: ... and start time.
        settled: One counter, moved by every settle (how a waiter sees progress).
    """

    region: Any
    states: np.ndarray[Any, Any]
    pids: np.ndarray[Any, Any]
    started: np.ndarray[Any, Any]
    settled: np.ndarray[Any, Any]

    def claim(self, ids: np.ndarray[Any, Any], stalled: bool) -> tuple[np.ndarray[Any, Any], bool]:
        """Claim what of ``ids`` (sorted, unique) is this process's to decode now.

        Returns the claimed blocks, and whether others of ``ids`` are still being decoded
        elsewhere (wait, then claim again). ``stalled``: claim those too.
        """
        with self.region.lock():
            state = self.states[ids]
            loading = ids[state == LOADING]
            if loading.size and not stalled:
                gone = self._gone(loading)
                taken = np.concatenate([ids[state == EMPTY], gone])
                others = loading.size > gone.size
            else:
                taken, others = ids[state != READY], False
            taken.sort()
            self.states[taken] = LOADING
            self.pids[taken], self.started[taken] = process_stamp()
            for block in taken.tolist():
                self.region.hold_fill(block)
            return taken, others

    def settle(self, ids: np.ndarray[Any, Any], ok: bool) -> None:
        """``ids`` are decoded (``ok``), or EMPTY again unless another filler took them over."""
        with self.region.lock():
            if ok:
                self.states[ids] = READY
            else:
                pid, started = process_stamp()
                mine = ids[(self.pids[ids] == pid) & (self.started[ids] == started)]
                self.states[mine[self.states[mine] == LOADING]] = EMPTY
            for block in ids.tolist():
                self.region.drop_fill(block)
            self.settled[0] += 1

    def ready(self) -> int:
        """How many blocks are READY (read under the lock: the blocks counted are whole)."""
        with self.region.lock():
            return int(np.count_nonzero(self.states == READY))

    def fillers(self, ids: np.ndarray[Any, Any]) -> list[int]:
        """The pids decoding ``ids`` now, for messages."""
        loading = ids[self.states[ids] == LOADING]
        return sorted(set(self.pids[loading].tolist()))

    def _gone(self, loading: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The blocks of ``loading`` whose filler has ended (one question per filler)."""
        owners = self.pids[loading].astype(np.int64) << 32 | (self.started[loading] & 0xFFFFFFFF)
        gone: list[np.ndarray[Any, Any]] = []
        for owner in np.unique(owners).tolist():
            these = loading[owners == owner]
            block = int(these[0])
            alive = self.region.filler_alive(block, int(self.pids[block]), int(self.started[block]))
            if not alive:
                gone.append(these)
        return np.concatenate(gone) if gone else loading[:0]


class Progress:
    """Whether any block has settled in the last ``STALL_S`` seconds (a waiter's bound)."""

    def __init__(self, claims: BlockClaims) -> None:
        self._claims = claims
        self._seen = int(claims.settled[0])
        self._since = time.monotonic()

    def stalled(self) -> bool:
        now, seen = time.monotonic(), int(self._claims.settled[0])
        if seen != self._seen:
            self._seen, self._since = seen, now
        return now - self._since > STALL_S
