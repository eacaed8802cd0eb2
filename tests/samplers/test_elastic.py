"""Elastic resume of the splitting samplers: a state saved on N ranks resumes on M."""

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.dataloaders import ChunkShuffleSampler, DistributedEpochSampler, ShardEpochSampler
from nn_handler.dataloaders.samplers.shards import shard_rows
from nn_handler.distributed import World


def _distributed(n, world, rank, equal_steps, seed, workers):
    return DistributedEpochSampler(
        n, rank=rank, world_size=world, seed=seed, equal_steps=equal_steps
    )


def _chunked(n, world, rank, equal_steps, seed, workers):
    batch = 3 if workers > 1 else None
    return ChunkShuffleSampler(
        n, block_size=5, window_chunks=2, rank=rank, world_size=world, seed=seed,
        equal_steps=equal_steps, batch_size=batch, num_workers=workers,
    )  # fmt: skip


MAKERS = {"distributed": _distributed, "chunk": _chunked}

# one phase: (world size, fraction of the phase's per-rank count consumed, DataLoader workers)
phases_st = st.lists(
    st.tuples(st.integers(1, 5), st.floats(0, 1), st.sampled_from([0, 2, 3])),
    min_size=1,
    max_size=4,
)


def run_phases(kind, n, phases, equal_steps, seed, epoch=2):
    """Train each phase's share on its world, save on one rank, load on every rank of the next.

    Returns every index trained (all phases; the last one runs to the end of the epoch) and
    the per-rank counts of every phase.
    """
    make = MAKERS[kind]
    trained: list[int] = []
    counts: list[list[int]] = []
    state = None
    for i, (world, fraction, workers) in enumerate(phases):
        last = i == len(phases) - 1
        samplers = [make(n, world, rank, equal_steps, seed, workers) for rank in range(world)]
        orders = []
        for sampler in samplers:
            if state is not None:
                sampler.load_state_dict(dict(state))
            sampler.set_epoch(epoch)
            # where this world starts counting: past the saved position when the split is the
            # same (an exact resume), 0 when this world starts a new phase
            offset = sampler.state_dict()["consumed"]
            orders.append(list(sampler))
        counts.append([len(o) for o in orders])
        take = len(orders[0]) if last else int(fraction * len(orders[0]))
        for order in orders:
            trained += order[:take]
        saver = samplers[(i * 7) % world]  # any rank's state describes the whole world
        state = {**saver.state_dict(), "consumed": offset + take}
    return trained, counts


@pytest.mark.parametrize("kind", sorted(MAKERS))
@given(
    n=st.integers(0, 120),
    phases=phases_st,
    equal_steps=st.sampled_from(["pad", "drop"]),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=80, deadline=None)
def test_every_sample_once_across_worlds(kind, n, phases, equal_steps, seed):
    trained, counts = run_phases(kind, n, phases, equal_steps, seed)
    assert all(len(set(c)) == 1 for c in counts)  # equal steps on every rank, every phase
    seen = Counter(trained)
    assert set(seen) <= set(range(n))
    if equal_steps == "pad":
        assert set(seen) == set(range(n))  # every sample
        pads = sum(seen.values()) - n
        # a phase pads its last global step only: at most world_size - 1 each
        assert 0 <= pads <= sum(world - 1 for world, _, _ in phases)
    else:
        assert max(seen.values(), default=1) == 1  # never twice
        assert n - len(seen) <= phases[-1][0] - 1  # the last world drops its remainder


@pytest.mark.parametrize("kind", sorted(MAKERS))
@given(n=st.integers(0, 120), world=st.integers(1, 5), fraction=st.floats(0, 1))
@settings(max_examples=40, deadline=None)
def test_same_world_resumes_exactly(kind, n, world, fraction):
    """N == M: the resumed ranks yield the rest of the uninterrupted epoch, bit for bit."""
    make = MAKERS[kind]
    for rank in range(world):
        full = make(n, world, rank, "pad", 3, 2)
        full.set_epoch(1)
        whole = list(full)
        take = int(fraction * len(whole))
        saver = make(n, world, (rank + 1) % world, "pad", 3, 2)
        saver.set_epoch(1)
        state = {**saver.state_dict(), "consumed": take}
        resumed = make(n, world, rank, "pad", 3, 2)
        resumed.load_state_dict(state)
        resumed.set_epoch(1)
        assert list(resumed) == whole[take:]


def test_distributed_pad_is_at_the_end_of_the_rest():
    """2 ranks took 3 each of 10; 3 ranks split the other 4: one pad, the rest's first."""
    first = [DistributedEpochSampler(10, rank=r, world_size=2, seed=1) for r in range(2)]
    orders = [list(s) for s in first]
    base = list(DistributedEpochSampler(10, rank=0, world_size=1, seed=1))
    assert [o for pair in zip(*orders, strict=True) for o in pair] == base  # one global order
    state = {**first[0].state_dict(), "consumed": 3}
    rest = base[6:]
    resumed = []
    for rank in range(3):
        sampler = DistributedEpochSampler(10, rank=rank, world_size=3, seed=1)
        sampler.load_state_dict(state)
        assert len(sampler) == 2 and sampler.num_padded == 2
        resumed.append(list(sampler))
    assert [r[0] for r in resumed] + [r[1] for r in resumed] == rest + rest[:2]


def test_state_stays_small_at_any_scale():
    """A state is a few integers per phase, whatever the size of the data."""
    sampler = DistributedEpochSampler(10**9, rank=0, world_size=8)
    state = {**sampler.state_dict(), "consumed": 12345}
    other = DistributedEpochSampler(10**9, rank=0, world_size=8)
    other.load_state_dict(state)
    assert len(repr(other.state_dict())) < 200
    chunked = ChunkShuffleSampler(10**9, block_size=1000, world_size=8, rank=3)
    assert len(repr(chunked.state_dict())) < 300


def test_phases_are_checked():
    sampler = DistributedEpochSampler(10, rank=0, world_size=2)
    state = sampler.state_dict()
    with pytest.raises(ValueError, match=r"phases\[0\] must be \[world_size, consumed\]"):
        sampler.load_state_dict({**state, "phases": [[2]]})
    with pytest.raises(ValueError, match="exceeds the epoch length"):
        sampler.load_state_dict({**state, "world_size": 1, "consumed": 3, "phases": [[1, 9]]})


def test_legacy_state_with_rank_loads():
    """A state written before elastic resume (with ``rank``, without ``phases``) still loads."""
    sampler = DistributedEpochSampler(10, rank=1, world_size=2, seed=4)
    whole = list(sampler)
    legacy = {"seed": 4, "epoch": 0, "consumed": 2, "data_len": 10, "rank": 1, "world_size": 2}
    resumed = DistributedEpochSampler(10, rank=1, world_size=2, seed=4)
    resumed.load_state_dict(legacy)
    assert list(resumed) == whole[2:]


def test_chunk_locality_survives_a_resume():
    """After 2 -> 3, every rank still reads runs of blocks: a window of the rest touches at most
    the leftovers of one partly trained window and one window's worth of blocks, and batches
    draw from about as many blocks as before the resume."""
    n, block, window, batch = 20000, 50, 4, 40
    first = [ChunkShuffleSampler(n, block_size=block, window_chunks=window, rank=r, world_size=2)
             for r in range(2)]  # fmt: skip
    before = _blocks_per_batch(np.array(list(first[0])), block, batch)
    for consumed in (3500, 5000, 6667):
        state = {**first[0].state_dict(), "consumed": consumed}
        for rank in range(3):
            sampler = ChunkShuffleSampler(
                n, block_size=block, window_chunks=window, rank=rank, world_size=3
            )
            sampler.load_state_dict(state)
            order = np.array(list(sampler))
            span = window * block
            for start in range(0, len(order), span):
                assert np.unique(order[start : start + span] // block).size <= 2 * window + 2
            assert _blocks_per_batch(order, block, batch) <= before + 1.5


def _blocks_per_batch(order, block, batch):
    return float(np.mean([np.unique(order[i : i + batch] // block).size
                          for i in range(0, len(order), batch)]))  # fmt: skip


@given(
    n=st.integers(0, 120),
    phases=phases_st,
    mode=st.sampled_from(["contiguous", "interleave"]),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=80, deadline=None)
def test_rank_shards_reshard_and_train_every_row_once(n, phases, mode, seed):
    """Rank-sharded data: each world trains the untrained rows of its own shards, equal steps."""
    trained, state = [], None
    for i, (world, fraction, _) in enumerate(phases):
        if n < world:  # RankMemCachedH5Dataset refuses empty shards with equal_steps="pad"
            world = max(1, n)
        last = i == len(phases) - 1
        samplers = [ShardEpochSampler(n, World(r, world), mode, seed=seed) for r in range(world)]
        orders = []
        for sampler in samplers:
            if state is not None:
                sampler.load_state_dict(dict(state))
            sampler.set_epoch(1)
            offset = sampler.state_dict()["consumed"]
            rows = shard_rows(n, sampler.shard_of, mode)
            orders.append([rows[p] for p in sampler])
        assert len({len(o) for o in orders}) == 1  # equal steps
        take = len(orders[0]) if last else int(fraction * len(orders[0]))
        for order in orders:
            trained += order[:take]
        state = {**samplers[i % world].state_dict(), "consumed": offset + take}
    assert set(trained) == set(range(n))  # every row; repeats only as pads


def test_rank_shard_state_is_small_and_rank_free():
    sampler = ShardEpochSampler(10**9, World(3, 8))
    state = sampler.state_dict()
    assert set(state) == {"seed", "epoch", "consumed", "total", "mode", "world_size", "phases"}
    assert len(repr(state)) < 200


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")  # torchdata's import, not ours
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_stateful_dataloader_resumes_on_another_world(kind):
    """torchdata's ``StatefulDataLoader``: a state of rank 0 of 2 loads on every rank of 3."""
    from torch.utils.data import TensorDataset

    # the lowest-versions CI installs only the test extra (torchdata is an integration)
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    n, batch = 53, 4
    data = TensorDataset(torch.arange(n))
    make = MAKERS[kind]

    def loader(world, rank):
        sampler = make(n, world, rank, "pad", 5, 0)
        sampler.set_epoch(1)
        return stateful.StatefulDataLoader(data, batch_size=batch, sampler=sampler)

    trained = []
    firsts = [loader(2, rank) for rank in range(2)]
    for first in firsts:
        for i, (rows,) in enumerate(first):
            trained += rows.tolist()
            if i == 2:
                break
    state = firsts[0].state_dict()
    for rank in range(3):
        second = loader(3, rank)
        second.load_state_dict(state)
        trained += [row for (rows,) in second for row in rows.tolist()]
    counts = Counter(trained)
    assert set(counts) == set(range(n))
    assert sum(counts.values()) - n <= 2  # the pad of the 3-rank rest
