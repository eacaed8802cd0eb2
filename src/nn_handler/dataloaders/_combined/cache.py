"""Bounded least-recently-used bookkeeping: key -> slot maps and a per-field sample store.

``LRUSlots`` maps keys to a fixed set of slot numbers and recycles the slot of the least recently
used key; ``SampleCache`` keeps one preallocated NumPy array per field indexed by those slots, so
a batch's hits are gathered and its misses stored with one NumPy call per field. Only the key ->
slot map is a Python dict, and it never holds more than ``capacity`` entries.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..._io import IndexArray
from ..._validate import check_non_negative_int

__all__ = ["LRUSlots", "SampleCache", "unique_in_order"]

Rows = dict[str, np.ndarray[Any, Any]]


class LRUSlots:
    """Maps up to ``capacity`` keys to slot numbers ``0 .. capacity - 1``, in LRU order.

    Args:
        capacity: Most keys held at once (0 holds none).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = check_non_negative_int("capacity", capacity)
        self._slots: OrderedDict[int, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def keys(self) -> list[int]:
        """Keys from least to most recently used."""
        return list(self._slots)

    def lookup(self, keys: Iterable[int]) -> IndexArray:
        """Return each key's slot (``-1`` when absent); found keys become most recently used."""
        found = []
        for key in keys:
            slot = self._slots.get(key)
            if slot is None:
                found.append(-1)
            else:
                self._slots.move_to_end(key)
                found.append(slot)
        return np.array(found, dtype=np.int64)

    def assign(self, keys: Iterable[int]) -> IndexArray:
        """Give each new key a slot, evicting least recently used keys; return the slots.

        Keys must not be held already. When more keys arrive than ``capacity``, only the last
        ``capacity`` are kept (as if inserted one by one) and the others get ``-1``.
        """
        wanted = list(keys)
        skip = max(0, len(wanted) - self.capacity)
        slots = np.full(len(wanted), -1, dtype=np.int64)
        for pos in range(skip, len(wanted)):
            key = wanted[pos]
            if key in self._slots:
                raise KeyError(f"key {key!r} already holds slot {self._slots[key]}")
            if len(self._slots) < self.capacity:
                slot = len(self._slots)
            else:
                _, slot = self._slots.popitem(last=False)
            self._slots[key] = slot
            slots[pos] = slot
        return slots

    def clear(self) -> None:
        """Forget every key."""
        self._slots.clear()


class SampleCache:
    """Decoded samples of several fields, bounded by count, evicted least recently used.

    Args:
        capacity: Most samples held (0 disables the cache).
        fields: ``{field: (row_shape, dtype)}`` of what each sample holds.
    """

    def __init__(
        self, capacity: int, fields: Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]]
    ) -> None:
        self._slots = LRUSlots(capacity)
        self._fields = dict(fields)
        self._store: dict[str, np.ndarray[Any, Any]] = {}

    @property
    def capacity(self) -> int:
        """Most samples held."""
        return self._slots.capacity

    def __len__(self) -> int:
        return len(self._slots)

    def keys(self) -> list[int]:
        """Cached keys from least to most recently used."""
        return self._slots.keys()

    def lookup(self, keys: Iterable[int]) -> IndexArray:
        """Return each key's slot or ``-1``; hits become most recently used."""
        return self._slots.lookup(keys)

    def fetch(
        self, idx: IndexArray, read: Callable[[IndexArray], Mapping[str, np.ndarray[Any, Any]]]
    ) -> tuple[Rows, int]:
        """Return ``({field: rows of idx}, misses)``, reading and caching the samples not held.

        A batch is looked up as a whole: each distinct key missing from the cache is one miss
        and is read once (``read(missing keys)``); every other entry of ``idx``, repeats of a
        missing key included, is a hit. Hits become most recently used, then the misses are
        stored in request order.
        """
        keys, inverse = unique_in_order(idx)
        slots = self.lookup(keys.tolist())
        hit = slots >= 0
        missing = keys[~hit]
        fresh = read(missing) if missing.size else {}
        out: Rows = {}
        for field, (shape, dtype) in self._fields.items():
            values = np.empty((keys.size, *shape), dtype=dtype)
            if missing.size < keys.size:
                values[hit] = self.gather(field, slots[hit])
            if missing.size:
                values[~hit] = fresh[field]
            out[field] = values[inverse]
        if missing.size:
            self.put(missing.tolist(), fresh)
        return out, int(missing.size)

    def gather(self, field: str, slots: IndexArray) -> np.ndarray[Any, Any]:
        """Return the rows of ``field`` held in ``slots`` (all valid)."""
        return self._store[field][slots]

    def put(self, keys: Iterable[int], rows: Mapping[str, np.ndarray[Any, Any]]) -> None:
        """Store samples ``keys`` (not cached yet) whose fields are rows aligned with them."""
        slots = self._slots.assign(keys)
        kept = slots >= 0
        if not kept.any():
            return
        for field, values in rows.items():
            store = self._store.get(field)
            if store is None:
                # np.empty reserves address space only: pages are touched as slots fill
                shape, dtype = self._fields[field]
                store = self._store[field] = np.empty((self.capacity, *shape), dtype=dtype)
            store[slots[kept]] = values[kept]

    def clear(self) -> None:
        """Drop every sample and release the storage."""
        self._slots.clear()
        self._store = {}


def unique_in_order(idx: IndexArray) -> tuple[IndexArray, IndexArray]:
    """Return ``(keys, inverse)``: distinct values, first seen first; ``keys[inverse] == idx``."""
    uniq, first, inverse = np.unique(idx, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return uniq[order], rank[inverse.reshape(-1)]
