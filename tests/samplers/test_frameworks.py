"""Who splits the data across ranks: our samplers, the dataset, or a framework (one process).

What Lightning and accelerate look at is checked here directly (``isinstance`` of
``DistributedSampler``, the ``generator`` accelerate installs, ``prepare_data_loader`` with two
virtual processes); the 2-process runs are in ``test_integrations_*.py``.
"""

from __future__ import annotations

import pickle
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, SequentialSampler

from nn_handler import NNHandler, World
from nn_handler.dataloaders import (
    BatchedDataset,
    ChunkShuffleSampler,
    DistributedEpochSampler,
    EpochBatchSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    ShardSampler,
    batched_loader,
    epoch_permutation,
)
from nn_handler.dataloaders.samplers.frameworks import FrameworkSplit

from helpers.integrations import BATCH, ROWS, batch_rows, quiet, write_indexed


@pytest.fixture
def path(tmp_path):
    return write_indexed(tmp_path / "rows.h5")


@pytest.fixture
def two_ranks(monkeypatch):
    """Make ``World.detect()`` see rank 0 of 2 (as under torchrun), without a process group."""

    def as_rank(rank):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")

    as_rank(0)
    return as_rank


def _rows(loader):
    return [row for batch in loader for row in batch_rows(batch)]


# -- what Lightning checks: isinstance(loader.sampler, DistributedSampler) ------------------------


def test_our_samplers_are_distributed_samplers(path):
    ds = H5LazyDataset(path, "x", "y")
    samplers = [
        EpochShuffleSampler(10),
        DistributedEpochSampler(10, rank=1, world_size=2),
        ChunkShuffleSampler(ds, rank=1, world_size=2),
    ]
    for sampler in samplers:
        assert isinstance(sampler, DistributedSampler)
        assert (sampler.num_replicas, sampler.epoch) == (sampler.world.world_size, 0)
        assert sampler.num_samples == len(sampler)
        assert sampler.total_size == len(sampler) * sampler.num_replicas
    assert (samplers[1].rank, samplers[1].drop_last, samplers[1].total_size) == (1, False, 10)
    around = EpochBatchSampler(samplers[1], 4, False)
    assert isinstance(around, (EpochBatchSampler, DistributedSampler))
    assert (around.rank, around.num_replicas, around.shards_indices) == (1, 2, True)
    plain = EpochBatchSampler(SequentialSampler(range(5)), 2, False)
    assert isinstance(plain, EpochBatchSampler) and not isinstance(plain, DistributedSampler)
    copy = pickle.loads(pickle.dumps(around))  # DataLoader workers, checkpoints
    assert type(copy) is type(around) and list(copy) == list(around)
    assert isinstance(ShardSampler(10, World(1, 2)), DistributedSampler)


def test_batched_loader_looks_like_a_plain_loader(path):
    ds = H5LazyDataset(path, "x", "y")
    sampler = DistributedEpochSampler(len(ds), rank=0, world_size=2)
    loader = batched_loader(ds, BATCH, sampler=sampler, num_workers=0)
    assert loader.sampler is sampler and loader.batch_size == BATCH
    assert loader.batch_sampler.sampler is sampler  # where accelerate and Lightning look
    assert isinstance(loader.dataset, BatchedDataset) and loader.dataset.dataset is ds
    assert loader.dataset.x_key == "x" and len(loader.dataset) == ROWS  # forwarded


class _Rows(Dataset):
    """Records each ``__getitem__`` call; ``rows[list]`` is the stacked batch."""

    supports_batch_indexing = True

    def __init__(self) -> None:
        self.calls = []

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index):
        self.calls.append(index)
        return torch.as_tensor(index)


def test_batched_loader_reads_each_batch_in_one_call():
    rows = _Rows()
    batches = list(batched_loader(rows, 4))
    assert rows.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b.tolist() for b in batches] == rows.calls


def test_lightning_sets_the_epoch_through_the_loader(path):
    pytest.importorskip("lightning")
    from lightning.fabric.utilities.data import _set_sampler_epoch

    ds = H5LazyDataset(path, "x", "y")
    sampler = DistributedEpochSampler(len(ds), rank=0, world_size=2)
    _set_sampler_epoch(batched_loader(ds, BATCH, sampler=sampler), 3)
    assert sampler.epoch == 3


# -- what accelerate does: a synchronized generator, then BatchSamplerShard ------------------------


def _prepared_rows(make, processes=2, epochs=2):
    """Rows per (virtual) process and epoch after accelerate's ``prepare_data_loader``."""
    from accelerate.data_loader import prepare_data_loader

    out = []
    for rank in range(processes):
        loader = prepare_data_loader(make(), num_processes=processes, process_index=rank)
        out.append([_rows(loader) for _ in range(epochs)])
    return out


@pytest.mark.parametrize("kind", ["dist", "dist_plain", "chunk", "chunk_workers", "epoch_batches"])
def test_accelerate_split_is_exactly_once(path, kind):
    pytest.importorskip("accelerate")
    ds = H5LazyDataset(path, "x", "y")

    def make():
        if kind == "dist":
            return batched_loader(ds, BATCH, sampler=DistributedEpochSampler(len(ds), seed=4))
        if kind == "dist_plain":
            return DataLoader(ds, batch_size=BATCH, sampler=DistributedEpochSampler(len(ds)))
        if kind == "chunk":
            return batched_loader(ds, BATCH, sampler=ChunkShuffleSampler(ds, window_chunks=4))
        if kind == "chunk_workers":
            chunks = ChunkShuffleSampler(ds, window_chunks=4, batch_size=BATCH, num_workers=2)
            return batched_loader(ds, BATCH, sampler=chunks)
        # batch_size=None + EpochBatchSampler: accelerate never calls set_epoch here
        sampler = EpochBatchSampler(DistributedEpochSampler(len(ds)), BATCH, False)
        return DataLoader(BatchedDataset(ds), batch_size=None, sampler=sampler)

    per = _prepared_rows(make)
    for epoch in range(2):
        seen = Counter(per[0][epoch] + per[1][epoch])
        assert set(seen) == set(range(ROWS))
        assert sum(seen.values()) == 2 * BATCH * 16  # accelerate's even_batches: 1024
        assert len(per[0][epoch]) == len(per[1][epoch])
    assert per[0][0] != per[0][1] and per[1][0] != per[1][1]  # a new order each epoch


def test_accelerate_switches_the_sampler_to_the_whole_epoch():
    sampler = DistributedEpochSampler(10, rank=1, world_size=2, seed=3)
    assert len(sampler) == 5 and sampler.shards_indices and sampler.split_by is None
    sampler.generator = torch.Generator()  # what accelerate's prepare() does
    assert sampler.split_by == "accelerate" and not sampler.shards_indices
    assert list(sampler) == epoch_permutation(10, 3, 0).tolist()  # every rank: the same
    assert list(sampler) == epoch_permutation(10, 3, 1).tolist()  # next pass: next epoch
    sampler.set_epoch(7)
    assert list(sampler) == epoch_permutation(10, 3, 7).tolist()  # an explicit epoch wins
    assert (sampler.rank, sampler.world_size) == (1, 2)  # the state still names the world


class _Sampler:
    """A ``Splittable`` of fixed answers: all a ``FrameworkSplit`` may ask of its sampler."""

    def __init__(self, *, shards_indices: bool, serves_rank_shard: bool) -> None:
        self.shards_indices, self.serves_rank_shard = shards_indices, serves_rank_shard
        self.num_replicas = 2


def test_framework_split_asks_its_sampler_through_splittable_only():
    split = FrameworkSplit()
    shard = _Sampler(shards_indices=False, serves_rank_shard=True)
    with pytest.raises(ValueError, match=r"^accelerate splits .* rank-sharded dataset"):
        split.install(shard, torch.Generator())
    assert split.by is None and split.generator is None  # a refused generator is not kept
    split.notice(_Sampler(shards_indices=True, serves_rank_shard=False))  # accelerate not running
    assert split.by is None
    generator = torch.Generator()
    split.install(_Sampler(shards_indices=True, serves_rank_shard=False), generator)
    assert split.by == "accelerate" and split.generator is generator
    split.install(shard, None)  # no generator: nothing to refuse, and the split stays
    assert split.by == "accelerate" and split.generator is None


def test_accelerate_refuses_a_rank_sharded_dataset(path):
    pytest.importorskip("accelerate")
    from accelerate.data_loader import prepare_data_loader

    shard = RankMemCachedH5Dataset(path, "x", "y", rank=0, world_size=2, log_fn=quiet)
    for loader in (
        batched_loader(shard, BATCH),
        DataLoader(shard, batch_size=BATCH, sampler=shard.make_sampler()),
        DataLoader(shard, batch_size=BATCH, sampler=EpochShuffleSampler(len(shard))),
    ):
        with pytest.raises(ValueError, match=r"rank-sharded dataset .* prepare the model"):
            prepare_data_loader(loader, num_processes=2, process_index=0)


def test_accelerate_one_process_keeps_batched_loader(path):
    pytest.importorskip("accelerate")
    from accelerate.data_loader import prepare_data_loader

    ds = H5LazyDataset(path, "x", "y")
    sampler = DistributedEpochSampler(len(ds), world_size=1, rank=0, seed=2)
    loader = prepare_data_loader(batched_loader(ds, BATCH, sampler=sampler), num_processes=1)
    assert _rows(loader) == epoch_permutation(ROWS, 2, 0).tolist()
    assert len(loader) == -(-ROWS // BATCH)


# -- rank-sharded data: one splitter only ---------------------------------------------------------


def test_rank_sharded_len_is_equal_on_every_rank(path):
    # the seed's snippet: EpochShuffleSampler(len(dataset)); 1003 rows: shards of 502 and 501
    per_rank, steps = [], []
    for rank in range(2):
        shard = RankMemCachedH5Dataset(path, "x", "y", rank=rank, world_size=2, log_fn=quiet)
        assert len(shard) == 502 and shard.shard_size == 502 - rank
        loader = DataLoader(shard, batch_size=BATCH, sampler=EpochShuffleSampler(len(shard), 42))
        rows = _rows(loader)
        per_rank.append(rows)
        steps.append(len(loader))
    assert steps == [16, 16]  # the same number of steps: no DDP hang
    seen = Counter(per_rank[0] + per_rank[1])
    assert set(seen) == set(range(ROWS)) and sum(seen.values()) == ROWS + 1
    assert seen - Counter(range(ROWS)) == Counter([502])  # rank 1's pad: its first row


def test_batched_loader_gives_a_rank_sharded_dataset_its_own_sampler(path):
    shard = RankMemCachedH5Dataset(path, "x", "y", rank=1, world_size=2, log_fn=quiet)
    loader = batched_loader(shard, BATCH, shuffle=True, generator=torch.Generator().manual_seed(0))
    sampler = loader.sampler
    assert isinstance(sampler, EpochShuffleSampler) and sampler.shard_of == World(1, 2, 1)
    assert (sampler.data_len, len(sampler)) == (501, 502)
    rows = _rows(loader)
    assert set(rows) == set(range(502, ROWS)) and len(rows) == 502
    assert _rows(batched_loader(shard, BATCH)) == [*range(502, ROWS), 502]  # shuffle=False


@pytest.mark.parametrize("make", ["dist", "chunk", "torch"])
def test_splitting_a_rank_sharded_dataset_again_is_refused(path, make):
    shard = RankMemCachedH5Dataset(path, "x", "y", rank=0, world_size=2, log_fn=quiet)
    sampler = {
        "dist": lambda: DistributedEpochSampler(len(shard), rank=0, world_size=2),
        "chunk": lambda: ChunkShuffleSampler(shard, rank=0, world_size=2, block_size=16),
        "torch": lambda: DistributedSampler(shard, num_replicas=2, rank=0),
    }[make]()
    with pytest.raises(ValueError, match="already holds only this rank's shard"):
        batched_loader(shard, BATCH, sampler=sampler)
    handler = NNHandler(torch.nn.Linear(4, 1), device="cpu", log_fn=None)
    with pytest.raises(ValueError, match=r"NNHandler: RankMemCachedH5Dataset already holds"):
        handler.set_train_loader(shard, sampler=sampler, batch_size=BATCH)
    with pytest.raises(ValueError, match="make_sampler"):
        handler.set_val_loader(DataLoader(shard, batch_size=BATCH, sampler=sampler))


# -- EpochShuffleSampler under DDP -----------------------------------------------------------------


def test_epoch_shuffle_over_a_whole_dataset_warns_once_under_ddp(path, two_ranks):
    ds = H5LazyDataset(path, "x", "y")
    sampler = EpochShuffleSampler(len(ds))
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler)
    with pytest.warns(UserWarning, match=r"every rank trains on the whole dataset.*"
                      r"DistributedEpochSampler\(1003\)"):  # fmt: skip
        assert sorted(_rows(loader)) == list(range(ROWS))
    sampler.set_epoch(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _rows(loader)  # once per sampler


def test_epoch_shuffle_over_a_shard_is_quiet_under_ddp(path, two_ranks):
    shard = RankMemCachedH5Dataset(path, "x", "y", log_fn=quiet)  # detects rank 0 of 2
    assert shard.world == World(0, 2, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        seed_style = DataLoader(shard, batch_size=BATCH, sampler=EpochShuffleSampler(len(shard)))
        assert sorted(_rows(seed_style)) == list(range(502))  # known by its length
        assert sorted(_rows(batched_loader(shard, BATCH))) == list(range(502))
        ds = H5LazyDataset(path, "x", "y")
        mine = EpochShuffleSampler(len(ds), shard_of=World.detect())  # a shard of the user's
        assert len(_rows(DataLoader(ds, batch_size=BATCH, sampler=mine))) == ROWS


def test_epoch_shuffle_in_another_world_than_its_shard_raises(path, two_ranks):
    two_ranks(1)
    shard = RankMemCachedH5Dataset(path, "x", "y", rank=0, world_size=2, log_fn=quiet)
    with pytest.raises(ValueError, match="shard of rank 0 of 2, but runs as rank 1 of 2"):
        list(shard.make_sampler())


def test_sampler_made_before_the_world_uses_the_world_it_runs_in(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    sampler = DistributedEpochSampler(11, seed=5)  # e.g. in the parent of Lightning's ddp_spawn
    assert (sampler.rank, sampler.world_size, len(sampler)) == (0, 1, 11)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (sampler.rank, sampler.world_size, len(sampler)) == (1, 2, 6)
    whole = np.resize(epoch_permutation(11, 5, 0), 12)
    assert list(sampler) == whole[1::2].tolist()


def test_iter_without_a_pass_neither_warns_nor_loses_the_resume_point():
    # torchdata and torch's multi-worker iterator call iter() more than once per epoch
    sampler = DistributedEpochSampler(20, rank=0, world_size=2)
    full = list(sampler)
    sampler.load_state_dict({**sampler.state_dict(), "consumed": 4})
    iter(sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(sampler) == full[4:]
        iter(sampler)
        iter(sampler)
    with pytest.warns(UserWarning, match="starts another pass over epoch 0"):
        list(sampler)


TORCHDATA_VITAL = "ignore:'set_vital' is deprecated:UserWarning"  # torchdata 0.11 on torch 2.13


@pytest.mark.filterwarnings(TORCHDATA_VITAL)
@pytest.mark.parametrize("workers", [0, 2])
def test_torchdata_resume_is_exact(path, workers):
    pytest.importorskip("torchdata")
    from torchdata.stateful_dataloader import StatefulDataLoader

    ds = H5LazyDataset(path, "x", "y")
    shard = RankMemCachedH5Dataset(path, "x", "y", rank=1, world_size=2, log_fn=quiet)
    cases = [
        (ds, lambda: DistributedEpochSampler(len(ds), rank=1, world_size=2, seed=3)),
        (ds, lambda: ChunkShuffleSampler(ds, rank=0, world_size=2, window_chunks=4)),
        (shard, lambda: shard.make_sampler(seed=3)),
    ]
    for data, make in cases:
        for batched in (False, True):
            view = BatchedDataset(data) if batched else data
            collate = BatchedDataset.collate if batched else None

            def loader(sampler, view=view, collate=collate):
                sampler.set_epoch(1)
                return StatefulDataLoader(
                    view, BATCH, sampler=sampler, num_workers=workers, collate_fn=collate
                )

            full = _rows(loader(make()))
            first, head = loader(make()), []
            for i, batch in enumerate(first):
                head += batch_rows(batch)
                if i == 6:
                    break
            state = first.state_dict()
            second = loader(make())
            second.load_state_dict(state)
            assert head + _rows(second) == full


# -- readahead (a dataset that decodes ahead) keeps all of the above -------------------------------


class _Announced(Dataset):
    """A ``ReadsAhead`` dataset that records announcements and reads (rows are their values)."""

    supports_batch_indexing = True
    readahead_rows = 8  # two batches of 4 ahead
    reads_release_gil = False

    def __init__(self, n: int) -> None:
        self.n, self.events = n, []

    def __len__(self) -> int:
        return self.n

    def plan_window(self, block_rows, blocks) -> None:
        pass

    def read_ahead(self, indices) -> None:
        self.events.append(("prefetch", list(indices)))

    def __getitem__(self, index):
        self.events.append(("read", list(index)))
        rows = torch.as_tensor(index)
        return rows[:, None].float(), rows  # x[:, 0] == y, as batch_rows checks


def test_readahead_announces_batches_and_stays_recognisable():
    data = _Announced(22)
    sampler = DistributedEpochSampler(22, rank=0, world_size=1, seed=1)
    loader = batched_loader(data, 4, sampler=sampler)
    assert isinstance(loader.sampler, DistributedSampler) and loader.sampler.sampler is sampler
    loader.sampler.set_epoch(2)
    assert sampler.epoch == 2
    it = iter(loader)
    for _ in range(3):
        next(it)
    assert loader.sampler.state_dict()["consumed"] == 12  # not the rows announced ahead
    rest = list(it)
    reads = [e[1] for e in data.events if e[0] == "read"]
    announced = [e[1] for e in data.events if e[0] == "prefetch"]
    assert announced == reads and len(reads) == 6 == 3 + len(rest)
    assert [row for batch in reads for row in batch] == epoch_permutation(22, 1, 2).tolist()
    for k, batch in enumerate(reads):  # batch k is read after batches up to k + 2 were announced
        position = data.events.index(("read", batch))
        ahead = [e for e in data.events[:position] if e[0] == "prefetch"]
        assert len(ahead) == min(k + 3, len(reads))


def test_accelerate_splits_a_readahead_loader_exactly_once():
    pytest.importorskip("accelerate")

    def make():
        return batched_loader(_Announced(50), 4, sampler=DistributedEpochSampler(50, seed=3))

    per = _prepared_rows(make)
    for epoch in range(2):
        seen = Counter(per[0][epoch] + per[1][epoch])
        assert set(seen) == set(range(50)) and sum(seen.values()) == 2 * 4 * 7
    assert per[0][0] != per[0][1]
