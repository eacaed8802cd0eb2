import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.dataloaders.samplers import (
    DistributedEpochSampler,
    EpochShuffleSampler,
    _balanced_contiguous_shard,
    _interleaved_indices,
    epoch_permutation,
)

from helpers.resume import check_resume

worlds = st.integers(1, 9).flatmap(lambda w: st.tuples(st.integers(0, 300), st.just(w)))


@given(worlds)
def test_contiguous_shards_partition_and_balance(tw):
    total, world = tw
    shards = [_balanced_contiguous_shard(total, world, r) for r in range(world)]
    sizes = [e - s for s, e in shards]
    assert shards[0][0] == 0
    assert shards[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(shards))  # disjoint, covering
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first total % world ranks get one more
    assert sum(s == max(sizes) for s in sizes) == (total % world or world)


@given(worlds)
def test_interleaved_shards_partition_and_balance(tw):
    total, world = tw
    parts = [_interleaved_indices(total, world, r) for r in range(world)]
    assert all(p.dtype == np.int64 for p in parts)
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(total))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert parts[0][:3].tolist() == list(range(0, min(total, 3 * world), world))


@pytest.mark.parametrize("fn", [_balanced_contiguous_shard, _interleaved_indices])
def test_shard_helpers_reject_bad_input(fn):
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\), got rank=2"):
        fn(10, 2, 2)
    with pytest.raises(ValueError, match="rank must be in"):
        fn(10, 2, -1)
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        fn(10, 0, 0)
    with pytest.raises(ValueError, match="total must be >= 0, got -3"):
        fn(-3, 2, 0)


@given(st.integers(0, 500), st.integers(0, 2**40), st.integers(0, 50))
def test_epoch_permutation_is_a_pure_permutation(n, seed, epoch):
    perm = epoch_permutation(n, seed, epoch)
    assert sorted(perm.tolist()) == list(range(n))
    assert perm.tolist() == epoch_permutation(n, seed, epoch).tolist()


def test_new_epoch_and_new_seed_give_new_orders():
    base = epoch_permutation(100, 0, 0).tolist()
    assert base != epoch_permutation(100, 0, 1).tolist()
    assert base != epoch_permutation(100, 1, 0).tolist()


@given(st.integers(0, 200), st.integers(0, 1000), st.booleans())
def test_epoch_shuffle_sampler_permutes(n, seed, shuffle):
    s = EpochShuffleSampler(n, seed=seed, shuffle=shuffle)
    s.set_epoch(3)
    order = list(s)
    assert len(s) == n
    assert sorted(order) == list(range(n))
    if not shuffle:
        assert order == list(range(n))


@settings(max_examples=60)
@given(st.integers(1, 120), st.integers(0, 200), st.integers(0, 5))
def test_epoch_shuffle_sampler_pads_and_drops_from_its_own_order(n, num, epoch):
    s = EpochShuffleSampler(n, seed=4, num_samples=num)
    s.set_epoch(epoch)
    order = list(s)
    assert len(order) == len(s) == num
    assert s.num_padded == max(0, num - n)
    assert s.num_dropped == max(0, n - num)
    perm = epoch_permutation(n, 4, epoch).tolist()
    assert order == (perm * (num // n + 1))[:num]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 40), st.integers(0, 50), st.booleans())
def test_epoch_shuffle_sampler_resumes_anywhere(n, num, shuffle):
    if n == 0 and num > 0:
        return
    check_resume(lambda: EpochShuffleSampler(n, seed=7, shuffle=shuffle, num_samples=num))


def test_warns_once_when_an_epoch_repeats():
    s = EpochShuffleSampler(10, seed=1)
    first = list(s)
    with pytest.warns(UserWarning, match=r"call sampler.set_epoch\(epoch\) before each epoch"):
        assert list(s) == first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(s)  # once only
        s.set_epoch(1)
        assert list(s) != first
        unshuffled = EpochShuffleSampler(5, shuffle=False)
        list(unshuffled), list(unshuffled)  # the same order is what was asked for


def test_set_epoch_to_another_epoch_cancels_a_resume():
    s = EpochShuffleSampler(10, seed=1)
    s.load_state_dict({"seed": 1, "epoch": 2, "consumed": 4, "data_len": 10, "num_samples": 10})
    s.set_epoch(3)
    assert len(list(s)) == 10


def test_state_dict_is_strict():
    s = EpochShuffleSampler(10)
    state = s.state_dict()
    assert state == {"seed": 0, "epoch": 0, "consumed": 0, "data_len": 10, "num_samples": 10}
    with pytest.raises(KeyError, match="must have keys"):
        s.load_state_dict({"seed": 0, "epoch": 0})
    with pytest.raises(KeyError, match="must have keys"):
        s.load_state_dict({**state, "extra": 1})
    with pytest.raises(ValueError, match="saved with data_len=11 but this sampler has data_len=10"):
        s.load_state_dict({**state, "data_len": 11})
    with pytest.raises(ValueError, match="consumed=11 exceeds the epoch length 10"):
        s.load_state_dict({**state, "consumed": 11})


def test_epoch_shuffle_sampler_bad_input():
    with pytest.raises(ValueError, match="data_len must be >= 0, got -1"):
        EpochShuffleSampler(-1)
    with pytest.raises(TypeError, match="shuffle must be True or False"):
        EpochShuffleSampler(3, shuffle="yes")
    with pytest.raises(ValueError, match="an empty shard has no samples to repeat"):
        EpochShuffleSampler(0, num_samples=2)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        EpochShuffleSampler(3).set_epoch(-1)
    assert list(EpochShuffleSampler(0)) == []


@settings(max_examples=80)
@given(worlds, st.sampled_from(["pad", "drop"]), st.integers(0, 3), st.booleans())
def test_distributed_sampler_disjoint_equal_covering(tw, equal_steps, epoch, shuffle):
    total, world = tw
    samplers = [
        DistributedEpochSampler(
            total, seed=5, shuffle=shuffle, rank=r, world_size=world, equal_steps=equal_steps
        )
        for r in range(world)
    ]
    orders = []
    for s in samplers:
        s.set_epoch(epoch)
        orders.append(list(s))
    lengths = {len(o) for o in orders}
    assert len(lengths) == 1  # every rank runs the same number of steps
    assert lengths.pop() == len(samplers[0])
    flat = [i for o in orders for i in o]
    s0 = samplers[0]
    if equal_steps == "pad":
        assert set(flat) == set(range(total))
        assert len(flat) - total == s0.num_padded < world
    else:
        assert len(set(flat)) == len(flat)  # nothing twice
        assert total - len(flat) == s0.num_dropped < world


def test_distributed_sampler_pads_when_fewer_samples_than_ranks():
    orders = [
        list(DistributedEpochSampler(2, rank=r, world_size=4, shuffle=False)) for r in range(4)
    ]
    assert orders == [[0], [1], [0], [1]]
    dropped = [
        list(DistributedEpochSampler(2, rank=r, world_size=4, equal_steps="drop")) for r in range(4)
    ]
    assert dropped == [[], [], [], []]


def test_distributed_sampler_new_epoch_new_order_and_resume():
    s = DistributedEpochSampler(50, rank=1, world_size=3, seed=2)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first
    check_resume(lambda: DistributedEpochSampler(50, rank=1, world_size=3, seed=2))
    # a state is the same on every rank (global progress): rank 0 loads what rank 1 saved
    DistributedEpochSampler(50, rank=0, world_size=3).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="saved with data_len=50 but this sampler has"):
        DistributedEpochSampler(51, rank=0, world_size=3).load_state_dict(s.state_dict())


def test_distributed_sampler_detects_world_from_env(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    s = DistributedEpochSampler(10)
    assert (s.rank, s.world_size) == (2, 3)
    with pytest.raises(ValueError, match="equal_steps must be one of 'pad', 'drop'; got 'round'"):
        DistributedEpochSampler(10, equal_steps="round")
