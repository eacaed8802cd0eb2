"""The window: one process's decoded blocks, in slots of one preallocated array (the arena).

Row ``r`` of the block in slot ``s`` is row ``s * block_rows + r`` of the arena, so a batch is
served with a single ``np.take`` instead of one copy per block. Memory is only touched as slots
fill. Slots are reused least recently used first; blocks decoded ahead of need (readahead) are
evicted last until they are read.

Several threads may read at once (``batched_loader(worker_mode="thread")``): a batch *pins* the
slots it claimed while it fills and gathers them, so no other thread reuses them meanwhile; a
block another thread is filling is waited for (``wait``), not filled twice. One lock (a
condition) guards the bookkeeping; the filling itself runs outside it.

A ``clear`` (or a new capacity) starts a fresh arena: claims already made keep the one they
hold until they are released, so a running batch never sees its slots change under it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .block_fillers import Geometry

__all__ = ["Claim", "Window"]

_FREE, _LOADING, _READY = 0, 1, 2
_AHEAD = 1 << 40  # recency bonus of blocks decoded ahead of their first read


class _Slots:
    """The window's bookkeeping: which block is in which slot, pins, recency, readiness."""

    def __init__(self, capacity: int, blocks: int) -> None:
        self.capacity = capacity
        self.slot_of = np.full(blocks, -1, dtype=np.int64)
        self.block_in = np.full(capacity, -1, dtype=np.int64)
        self.pins = np.zeros(capacity, dtype=np.int64)
        self.used = np.zeros(capacity, dtype=np.int64)  # tick of the last use (LRU)
        self.state = np.zeros(capacity, dtype=np.int8)
        self.tick = 0

    def claim(
        self, ids: np.ndarray[Any, Any], touch: bool = True
    ) -> tuple[np.ndarray[Any, Any], list[int], list[int]]:
        """Pin a slot for each block ``ids``: (slots, blocks to fill now, blocks to await).

        A slot of -1 means no slot was free: the caller fills that block outside the window.
        ``touch=False`` (readahead) leaves the recency of blocks already held as it is.
        """
        self.tick += 1
        slots = self.slot_of[ids].copy()
        held = slots >= 0
        self.pins[slots[held]] += 1
        if touch:
            self.used[slots[held]] = self.tick
        awaited = ids[held][self.state[slots[held]] == _LOADING].tolist()
        missing = np.flatnonzero(~held)
        free = self._least_recent(missing.size)
        for pos, slot in zip(missing.tolist(), free.tolist(), strict=False):
            old = int(self.block_in[slot])
            if old >= 0:
                self.slot_of[old] = -1
            block = int(ids[pos])
            self.block_in[slot], self.slot_of[block] = block, slot
            self.pins[slot], self.used[slot], self.state[slot] = 1, self.tick, _LOADING
            slots[pos] = slot
        fresh = ids[missing[: free.size]].tolist()
        return slots, fresh, awaited

    def _least_recent(self, k: int) -> np.ndarray[Any, Any]:
        """Up to ``k`` unpinned slots, least recently used first (ties: lower slot first)."""
        if k == 0:
            return np.empty(0, dtype=np.int64)
        free = np.flatnonzero(self.pins == 0)
        if k < free.size:  # only the k oldest: a sort of every slot per claim cost 1 ms with
            # 16,000 slots of small chunks, called for each chunk a sparse batch reads alone
            free = free[np.argpartition(self.used[free], k - 1)[:k]]
        return free[np.lexsort((free, self.used[free]))]

    def release(self, slots: np.ndarray[Any, Any]) -> None:
        np.subtract.at(self.pins, slots[slots >= 0], 1)

    def settle(self, block: int, slot: int, ok: bool) -> None:
        """Mark ``block`` filled, or forget it (a later read fills it again and says why)."""
        if self.block_in[slot] != block:
            return
        if ok:
            self.state[slot] = _READY
        else:
            self.slot_of[block], self.block_in[slot], self.state[slot] = -1, -1, _FREE

    @property
    def filled(self) -> int:
        return int(np.count_nonzero(self.state == _READY))


@dataclass(frozen=True)
class Claim:
    """Slots pinned for sorted, unique blocks ``ids`` (see ``Window.claim``)."""

    arena: np.ndarray[Any, Any]  # (capacity, block_rows, *row_shape)
    ids: np.ndarray[Any, Any]
    slots: np.ndarray[Any, Any]  # one per id; -1: no slot was free
    fresh: list[int]  # blocks this claim fills
    awaited: list[int]  # blocks another thread is filling
    state: _Slots

    def slot(self, block: int) -> int:
        return int(self.slots[np.searchsorted(self.ids, block)])


class Window:
    """One process's window of decoded blocks (``len`` / ``nbytes`` / ``clear`` like a cache).

    Args:
        geometry: The dataset's blocks.
    """

    def __init__(self, geometry: Geometry) -> None:
        self.geometry = geometry
        self.lock = threading.Condition()
        self._state: _Slots | None = None
        self._arena: np.ndarray[Any, Any] | None = None

    def __len__(self) -> int:
        state = self._state
        return 0 if state is None else state.filled

    @property
    def nbytes(self) -> int:
        """Bytes of decoded blocks held now."""
        return len(self) * self.geometry.block_nbytes

    @property
    def pins(self) -> int:
        """Slots pinned now, counted once per claim (0 when no batch is running)."""
        return 0 if self._state is None else int(self._state.pins.sum())

    def clear(self) -> None:
        """Drop every decoded block (running batches finish on the arena they hold)."""
        with self.lock:
            self._state, self._arena = None, None

    def holds(self, block: int) -> bool:
        """True when ``block`` is decoded in the window now."""
        with self.lock:
            state = self._state
            if state is None:
                return False
            slot = int(state.slot_of[block])
            return slot >= 0 and int(state.state[slot]) == _READY

    def claim(self, ids: np.ndarray[Any, Any], capacity: int) -> Claim:
        """Pin a slot for each of blocks ``ids`` (sorted, unique); release with ``release``."""
        with self.lock:
            arena, state = self._current(capacity)
            slots, fresh, awaited = state.claim(ids)
        return Claim(arena, ids, slots, fresh, awaited, state)

    def claim_ahead(self, ids: np.ndarray[Any, Any], capacity: int) -> Claim | None:
        """Pin slots for the blocks of ``ids`` not held yet, to fill ahead of need.

        Half of ``ids`` in unpinned slots is left alone (readahead must not evict what running
        batches need); of the blocks not held, as many are claimed as the other unpinned slots
        hold, the first ones first: a window still being filled leaves room for the start of
        the next, so the decode threads never run dry between windows. None when no block is
        claimed. Each fresh block is unpinned by ``settle_ahead``.
        """
        with self.lock:
            arena, state = self._current(capacity)
            room = int(np.count_nonzero(state.pins == 0)) - ids.size // 2
            ids = ids[state.slot_of[ids] < 0][: max(0, room)]
            if ids.size == 0:
                return None
            slots, fresh, _ = state.claim(ids, touch=False)
            is_fresh = np.isin(ids, fresh)
            state.release(slots[~is_fresh])  # only blocks being filled stay pinned
            # filled ahead, not read yet: evict these last (a read resets their recency)
            state.used[slots[is_fresh]] = state.tick + _AHEAD
        return Claim(arena, ids, slots, fresh, [], state)

    def settle(self, claim: Claim, ok: bool) -> None:
        """The claim's fresh blocks are filled (``ok``) or failed: wake threads awaiting them."""
        with self.lock:
            for block in claim.fresh:
                claim.state.settle(block, claim.slot(block), ok)
            self.lock.notify_all()

    def settle_ahead(self, claim: Claim, block: int, ok: bool) -> None:
        """One block filled ahead is done (``ok``) or failed; its slot is unpinned."""
        slot = claim.slot(block)
        with self.lock:
            claim.state.settle(block, slot, ok)
            claim.state.pins[slot] -= 1
            self.lock.notify_all()

    def wait(self, claim: Claim) -> bool:
        """Wait for the blocks other threads are filling; False when one of them failed."""
        slots = claim.slots[np.isin(claim.ids, claim.awaited)]
        with self.lock:
            while np.any(claim.state.state[slots] == _LOADING):
                self.lock.wait(timeout=1.0)
            return bool(np.all(claim.state.state[slots] == _READY))

    def release(self, claim: Claim) -> None:
        """Unpin the claim's slots."""
        with self.lock:
            claim.state.release(claim.slots)

    def _current(self, capacity: int) -> tuple[np.ndarray[Any, Any], _Slots]:
        """The arena and its bookkeeping, (re)built when missing or resized."""
        if self._state is None or self._arena is None or self._state.capacity != capacity:
            geometry = self.geometry
            self._state = _Slots(capacity, geometry.count)
            shape = (capacity, geometry.block_rows, *geometry.row_shape)
            self._arena = np.empty(shape, geometry.dtype)
        return self._arena, self._state
