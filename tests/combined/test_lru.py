from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.dataloaders._combined.cache import LRUSlots, SampleCache, unique_in_order


class ModelLRU:
    """Reference: an OrderedDict of keys, one access at a time."""

    def __init__(self, capacity):
        self.capacity, self.keys = capacity, OrderedDict()

    def access(self, key):
        if key in self.keys:
            self.keys.move_to_end(key)
            return True
        if self.capacity:
            if len(self.keys) == self.capacity:
                self.keys.popitem(last=False)
            self.keys[key] = None
        return False


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.lists(st.lists(st.integers(0, 12), max_size=8), max_size=25))
def test_fetch_matches_an_lru_model(capacity, batches):
    cache = SampleCache(capacity, {"x": ((2,), np.dtype(np.int64)), "s": ((), np.dtype(object))})
    model = ModelLRU(capacity)
    reads = []

    def read(keys):
        reads.append(keys.tolist())
        return {
            "x": np.stack([keys, -keys], axis=1),
            "s": np.array([f"k{k}" for k in keys], dtype=object),
        }

    for batch in batches:
        idx = np.array(batch, dtype=np.int64)
        out, misses = cache.fetch(idx, read)
        assert out["x"][:, 0].tolist() == batch and out["x"][:, 1].tolist() == [-k for k in batch]
        assert out["s"].tolist() == [f"k{k}" for k in batch]
        # the model sees the batch's distinct keys in first-seen order: hits touched, then the
        # misses inserted (the batch is looked up before any of its misses is stored)
        distinct = list(dict.fromkeys(batch))
        held = [k for k in distinct if k in model.keys]
        for key in held:
            model.access(key)
        new = [k for k in distinct if k not in held]
        for key in new:
            model.access(key)
        assert misses == len(new)
        assert (reads.pop() if new else []) == new
        assert cache.keys() == list(model.keys)
        assert len(cache) <= capacity
    assert reads == []


def test_lru_slots_reuse_the_evicted_slot():
    lru = LRUSlots(2)
    assert lru.assign([10, 11]).tolist() == [0, 1]
    assert lru.lookup([10, 99]).tolist() == [0, -1]  # 10 is now most recent
    assert lru.assign([12]).tolist() == [1]  # 11 evicted, its slot reused
    assert 11 not in lru and lru.keys() == [10, 12]
    assert lru.assign([1, 2, 3]).tolist() == [-1, 0, 1]  # only the last two fit
    with pytest.raises(KeyError, match="key 3 already holds slot 1"):
        lru.assign([3])
    lru.clear()
    assert len(lru) == 0 and LRUSlots(0).assign([1]).tolist() == [-1]
    with pytest.raises(ValueError, match="capacity must be >= 0, got -1"):
        LRUSlots(-1)


def test_cache_clear_releases_storage():
    cache = SampleCache(4, {"x": ((3,), np.dtype(np.float32))})
    cache.put([5], {"x": np.ones((1, 3), dtype=np.float32)})
    assert cache.capacity == 4 and len(cache) == 1
    np.testing.assert_array_equal(cache.gather("x", cache.lookup([5])), np.ones((1, 3)))
    cache.clear()
    assert len(cache) == 0 and cache.lookup([5]).tolist() == [-1]


@given(st.lists(st.integers(-5, 5), max_size=30))
def test_unique_in_order(values):
    idx = np.array(values, dtype=np.int64)
    keys, inverse = unique_in_order(idx)
    assert keys.tolist() == list(dict.fromkeys(values))
    assert keys[inverse].tolist() == values
