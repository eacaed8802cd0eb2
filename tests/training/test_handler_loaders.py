"""The handler's loader building: sampler choice per dataset kind, role and world; loader parts."""

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from nn_handler import World
from nn_handler._training.handler_loaders import (
    LOADER_KEYWORDS,
    LoaderParts,
    ShardSampler,
    build_loader,
    choose_sampler,
    is_rank_sharded,
    warn_if_not_sharded,
)
from nn_handler.dataloaders import (
    BatchedDataset,
    DistributedEpochSampler,
    EpochShuffleSampler,
    H5LazyDataset,
)

from helpers.handler import ShardedBlobs, write_blobs

ONE, TWO = World(), World(1, 2, 1)


@pytest.fixture
def lazy(tmp_path):
    return H5LazyDataset(write_blobs(tmp_path / "d.h5", 21), "x", "y")


def _indices(loader):
    return [int(i) for x, _ in loader for i in x[:, 0]]


@pytest.mark.parametrize(
    ("world", "role", "kind", "length"),
    [
        (ONE, "train", DistributedEpochSampler, 21),  # its state resumes on any world
        (ONE, "val", EpochShuffleSampler, 21),
        (TWO, "train", DistributedEpochSampler, 11),  # padded: 22 = 2 * 11
        (TWO, "val", ShardSampler, 10),  # positions 1, 3, ..., 19: no padding
    ],
)
def test_sampler_choice_for_a_global_dataset(lazy, world, role, kind, length):
    sampler = choose_sampler(lazy, True, role=role, world=world, seed=4)
    assert type(sampler) is kind
    assert len(sampler) == length
    if kind is DistributedEpochSampler and world is TWO:
        assert (sampler.rank, sampler.world_size, sampler.seed, sampler.equal_steps) == (
            1,
            2,
            4,
            "pad",
        )


def test_sampler_choice_for_a_rank_sharded_dataset():
    dataset = ShardedBlobs(17, World(1, 2, 1))  # holds 8 of 17
    assert is_rank_sharded(dataset)
    assert not is_rank_sharded(TensorDataset(torch.zeros(3)))
    train = choose_sampler(dataset, True, role="train", world=TWO, seed=2)
    assert (len(train), train.num_padded, train.seed) == (9, 1, 2)  # equal steps with rank 0
    val = choose_sampler(dataset, False, role="val", world=TWO, seed=2)
    assert list(val) == list(range(8))
    with pytest.raises(
        ValueError, match="holds the shard of rank 1 of 2, but the handler runs as rank 0 of 1"
    ):
        choose_sampler(dataset, True, role="train", world=ONE, seed=0)


@given(n=st.integers(0, 200), world_size=st.integers(1, 9))
def test_shard_sampler_partitions_without_padding(n, world_size):
    parts = [list(ShardSampler(n, World(r, world_size))) for r in range(world_size)]
    assert sorted(i for part in parts for i in part) == list(range(n))
    assert [len(ShardSampler(n, World(r, world_size))) for r in range(world_size)] == [
        len(p) for p in parts
    ]
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_batch_indexing_datasets_get_one_read_per_batch(lazy):
    loader = build_loader(
        lazy, {"batch_size": 5, "shuffle": False}, role="train", world=ONE, seed=0
    )
    assert isinstance(loader.dataset, BatchedDataset) and loader.dataset.dataset is lazy
    assert loader.batch_size == 5  # a plain DataLoader over the batch view
    assert _indices(loader) == list(range(21))
    assert len(loader) == 5
    collated = build_loader(
        lazy, {"batch_size": 5, "collate_fn": torch.utils.data.default_collate, "drop_last": True},
        role="val", world=ONE, seed=0,
    )  # fmt: skip
    assert isinstance(collated.batch_sampler, BatchSampler)
    assert _indices(collated) == list(range(20))
    dropping = build_loader(
        lazy, {"batch_size": 5, "drop_last": True}, role="val", world=ONE, seed=0
    )
    assert _indices(dropping) == list(range(20))


def test_shuffle_defaults_differ_by_role_and_user_samplers_win(lazy):
    train = build_loader(lazy, {"batch_size": 4}, role="train", world=ONE, seed=0)
    assert train.sampler.shuffle
    val = build_loader(lazy, {"batch_size": 4}, role="val", world=ONE, seed=0)
    assert not val.sampler.shuffle
    mine = SequentialSampler(lazy)
    given_sampler = build_loader(
        lazy, {"sampler": mine, "batch_size": 4}, role="train", world=TWO, seed=0
    )
    assert given_sampler.sampler is mine
    batches = BatchSampler(mine, 4, False)
    given_batches = build_loader(lazy, {"batch_sampler": batches}, role="train", world=TWO, seed=0)
    assert given_batches.batch_sampler is batches


def test_every_dataloader_keyword_is_accepted_and_others_rejected(lazy):
    expected = {"batch_size", "shuffle", "sampler", "num_workers", "pin_memory", "worker_init_fn"}
    expected |= {"persistent_workers", "prefetch_factor", "generator", "timeout", "drop_last"}
    assert expected <= LOADER_KEYWORDS
    loader = build_loader(
        lazy, {"batch_size": 4, "pin_memory": False, "timeout": 0, "generator": torch.Generator()},
        role="train", world=ONE, seed=0,
    )  # fmt: skip
    assert loader.generator is not None
    with pytest.raises(TypeError, match="unknown DataLoader keyword"):
        build_loader(lazy, {"workers": 2}, role="train", world=ONE, seed=0)


def test_loader_parts_find_the_hooks_in_every_loader_shape(lazy):
    sampler = EpochShuffleSampler(21, seed=1)
    shapes = {
        "batched": build_loader(
            lazy, {"batch_size": 4, "sampler": sampler}, role="train", world=ONE, seed=0
        ),
        "collate": DataLoader(lazy, batch_size=4, sampler=sampler),
    }
    for loader in shapes.values():
        parts = LoaderParts.of(loader)
        assert parts.index_sampler is sampler
        assert parts.per_batch == 4
        parts.set_epoch(3)
        assert sampler.epoch == 3
        state = parts.position_state(2)
        assert state == {"seed": 1, "epoch": 3, "consumed": 8, "data_len": 21, "num_samples": 21}
        assert parts.position_state(100)["consumed"] == 21
    plain = LoaderParts.of(
        DataLoader(lazy, batch_size=None, sampler=BatchSampler(range(21), 4, False))
    )
    assert (plain.per_batch, plain.inner) == (4, range(21))
    assert plain.position_state(1) is None  # a range keeps no state
    per_item = LoaderParts.of(DataLoader(lazy, batch_size=None, sampler=[[0, 1, 2], [3, 4]]))
    assert (per_item.per_batch, per_item.inner, per_item.index_sampler) == (
        1,
        None,
        [[0, 1, 2], [3, 4]],
    )
    assert LoaderParts.of(DataLoader(lazy, shuffle=True)).position_state(1) is None


def test_set_epoch_reaches_the_dataset_and_only_one_sampler():
    calls = []

    class Epochs(TensorDataset):
        def set_epoch(self, epoch):
            calls.append(("dataset", epoch))

    class Outer(BatchSampler):
        def set_epoch(self, epoch):
            calls.append(("batch sampler", epoch))

    inner = EpochShuffleSampler(6)
    parts = LoaderParts.of(
        DataLoader(Epochs(torch.arange(6)), batch_sampler=Outer(inner, 2, False))
    )
    parts.set_epoch(5)
    assert calls == [("batch sampler", 5), ("dataset", 5)]
    assert inner.epoch == 0  # the outer sampler owns forwarding


def test_loaders_that_give_every_rank_everything_warn(lazy):
    message = "uses a {}, so each of the 2 ranks trains on the whole dataset"
    with pytest.warns(UserWarning, match=message.format("RandomSampler")):
        warn_if_not_sharded(DataLoader(lazy, shuffle=True), TWO)
    epoch_shuffle = DataLoader(lazy, sampler=EpochShuffleSampler(21))
    # the sampler says it itself (once), naming the fix
    whole = r"EpochShuffleSampler\(data_len=21\) runs as rank 1 of 2 .* DistributedEpochSampler"
    with pytest.warns(UserWarning, match=whole):
        warn_if_not_sharded(epoch_shuffle, TWO)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_not_sharded(epoch_shuffle, TWO)  # once per sampler
        warn_if_not_sharded(DataLoader(lazy, shuffle=True), ONE)
        sharded = DistributedEpochSampler(21, rank=1, world_size=2)
        warn_if_not_sharded(DataLoader(lazy, sampler=sharded), TWO)
        warn_if_not_sharded(build_loader(lazy, {}, role="train", world=TWO, seed=0), TWO)
        rank_sharded = ShardedBlobs(9, TWO)
        warn_if_not_sharded(DataLoader(rank_sharded, sampler=RandomSampler(range(4))), TWO)
