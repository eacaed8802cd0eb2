"""Samplers built from a dataset that grows: each epoch takes the length at its start.

A ``Grows`` stands in for a dataset over a file a SWMR writer appends to: ``refresh()``
returns its length now; ``append`` is the writer. Rows appended mid-epoch must wait for the
next epoch; a state records the epoch's length and resumes it exactly.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.dataloaders import ChunkShuffleSampler
from nn_handler.dataloaders._contracts.protocols import Refreshes
from nn_handler.dataloaders.samplers import DistributedEpochSampler


class Grows:
    """A growing dataset's length: what the samplers ask of one."""

    chunk_rows = 8
    chunk_cache_nbytes = 1 << 20

    def __init__(self, length: int) -> None:
        self.length = length
        self.refreshes = 0

    def __len__(self) -> int:
        return self.length

    def refresh(self) -> int:
        self.refreshes += 1
        return self.length

    def window_cache_nbytes(self, block_rows: int | None, blocks: int) -> int:
        return 0

    def set_chunk_cache(self, nbytes: int, nslots: int | None = None, w0: float | None = None):
        raise AssertionError("the samplers never resize a cache")


def make(kind: str, ds: Grows, **kwargs):
    if kind == "chunks":
        return ChunkShuffleSampler(ds, rank=0, world_size=1, **kwargs)
    return DistributedEpochSampler(ds, rank=0, world_size=1, **kwargs)


KINDS = ["epoch", "chunks"]


def test_a_growing_dataset_is_followed_and_an_int_is_not():
    assert isinstance(Grows(3), Refreshes)
    assert make("epoch", Grows(3)).followed is not None
    assert DistributedEpochSampler(3, rank=0, world_size=1).followed is None
    assert ChunkShuffleSampler(Grows(3), block_starts=[0, 2], rank=0, world_size=1).followed is None


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(KINDS),
    st.integers(0, 60),
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=4),
    st.booleans(),
)
def test_every_epoch_serves_the_rows_present_at_its_start_exactly_once(kind, first, grows, setep):
    ds = Grows(first)
    sampler = make(kind, ds, seed=3, shuffle=setep)  # without set_epoch: a pass starts an epoch
    for epoch, (before, during) in enumerate(grows):
        ds.length += before  # appended between epochs: this epoch serves them
        if setep:
            sampler.set_epoch(epoch)
        at_start, seen = None, []
        for position, index in enumerate(sampler):
            if position == 0:
                at_start = ds.length
                ds.length += during  # appended mid-epoch: the next epoch's
            seen.append(index)
        if at_start is None:  # an empty epoch
            assert ds.length == 0
            ds.length += during
            continue
        assert sorted(seen) == list(range(at_start))
        assert len(sampler) == at_start


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(KINDS), st.integers(1, 80), st.integers(1, 40), st.integers(0, 100))
def test_a_mid_epoch_state_resumes_exactly_on_a_grown_file(kind, length, grown, cut):
    ds = Grows(length)
    whole = make(kind, ds, seed=5)
    whole.set_epoch(2)
    order = list(whole)
    cut = cut % (len(order) + 1)
    sampler = make(kind, ds, seed=5)
    sampler.set_epoch(2)
    it = iter(sampler)
    head = [next(it) for _ in range(cut)]
    state = sampler.state_dict()
    assert state["data_len"] == length
    ds.length += grown  # the writer appends before the run resumes
    resumed = make(kind, ds, seed=0)
    resumed.load_state_dict(state)
    assert head + list(resumed) == order
    resumed.set_epoch(3)  # the next epoch takes the grown length
    assert sorted(resumed) == list(range(length + grown))
    assert ds.refreshes > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_longer_than_the_dataset_now_is_refused(kind):
    ds = Grows(50)
    state = make(kind, ds).state_dict()
    ds.length = 40
    sampler = make(kind, Grows(40))
    with pytest.raises(ValueError, match=r"data_len=50 but the dataset holds 40 samples now"):
        sampler.load_state_dict(state)
    assert sampler.data_len == 40


@pytest.mark.parametrize("kind", KINDS)
def test_a_dataset_that_shrinks_between_epochs_is_refused(kind):
    ds = Grows(50)
    sampler = make(kind, ds)
    assert len(list(sampler)) == 50
    ds.length = 30
    with pytest.raises(ValueError, match=r"30 samples now, fewer than the 50 of the last epoch"):
        sampler.set_epoch(1)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", KINDS)
def test_ranks_that_saw_the_file_either_side_of_an_append_agree_on_the_epoch(kind, tmp_path):
    # an epoch refreshes at set_epoch and at its pass. Epoch 0: rank 0 refreshed before an
    # append (96 rows), rank 1 after it (128); epoch 1: both see 128. Each epoch takes the
    # length every rank saw, and the ranks' parts split it.
    from helpers.ddp import run_ddp
    from helpers.follow_ranks import epochs_seen_rank

    lengths = [[96, 96, 96, 128, 128], [96, 128, 128, 128, 128]]
    seen = run_ddp(epochs_seen_rank, 2, tmp_path / "out", kind, lengths, timeout=200)
    for epoch, expected in ((0, 96), (1, 128)):
        assert [s[epoch][0] for s in seen] == [expected, expected]
        served = sorted(i for s in seen for i in s[epoch][1:])
        assert served == list(range(expected))
