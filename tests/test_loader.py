import typing

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, Sampler, SequentialSampler

from nn_handler.dataloaders import (
    BatchedDataset,
    EpochBatchSampler,
    H5LazyDataset,
    SafeStartDataLoader,
    batched_loader,
    create_optimized_dataloader,
)

from helpers.files import images


class RecordingSampler(Sampler[int]):
    def __init__(self, n: int) -> None:
        self.n, self.epoch, self.loaded = n, 0, None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(np.random.default_rng(self.epoch).permutation(self.n).tolist())

    def __len__(self) -> int:
        return self.n

    def state_dict(self):
        return {"epoch": self.epoch}

    def load_state_dict(self, state):
        self.loaded = state


@pytest.fixture
def ds(make_h5):
    return H5LazyDataset(make_h5({"x": images(23), "y": np.arange(23)}), "x", "y")


def test_batches_are_stacked_by_the_dataset(ds):
    loader = batched_loader(ds, 5)
    batches = list(loader)
    assert [b[0].shape[0] for b in batches] == [5, 5, 5, 5, 3]
    np.testing.assert_array_equal(torch.cat([b[1] for b in batches]).numpy(), np.arange(23))
    np.testing.assert_array_equal(batches[1][0].numpy(), images(23)[5:10])
    assert len(loader) == 5
    assert len(batched_loader(ds, 5, drop_last=True)) == 4


def test_the_loader_type_is_generic_like_dataloader(ds, make_h5):
    def first(loader: SafeStartDataLoader[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        return next(iter(loader))[0]

    alias = SafeStartDataLoader[torch.Tensor]
    assert typing.get_origin(alias) is SafeStartDataLoader
    assert typing.get_args(alias) == (torch.Tensor,)
    loader = batched_loader(ds, 4)
    assert isinstance(loader, SafeStartDataLoader)
    assert first(loader).shape == (4, 3, 4)
    combined = create_optimized_dataloader(make_h5({"fhr_st": images(8)}), 4, num_workers=0)
    assert isinstance(combined, SafeStartDataLoader)


def test_sampler_order_and_set_epoch_are_forwarded(ds):
    sampler = RecordingSampler(len(ds))
    loader = batched_loader(ds, 7, sampler=sampler)
    assert loader.sampler is sampler and loader.batch_size == 7  # a plain DataLoader's layout
    assert isinstance(loader.dataset, BatchedDataset) and loader.dataset.dataset is ds
    loader.sampler.set_epoch(3)
    assert sampler.epoch == 3
    order = torch.cat([y for _, y in loader]).tolist()
    assert order == np.random.default_rng(3).permutation(23).tolist()
    assert loader.sampler.state_dict() == {"epoch": 3}
    loader.sampler.load_state_dict({"epoch": 5})
    assert sampler.loaded == {"epoch": 5}


def test_epoch_batch_sampler_without_hooks():
    batches = EpochBatchSampler(SequentialSampler(range(4)), 3, False)
    batches.set_epoch(1)  # no-op: the inner sampler has no set_epoch
    assert batches.state_dict() == {}
    batches.load_state_dict({})
    with pytest.raises(ValueError, match="SequentialSampler keeps no state"):
        batches.load_state_dict({"epoch": 1})
    assert list(batches) == [[0, 1, 2], [3]]


def test_shuffle_uses_the_generator(ds):
    def order(seed):
        loader = batched_loader(ds, 4, shuffle=True, generator=torch.Generator().manual_seed(seed))
        return torch.cat([y for _, y in loader]).tolist()

    assert order(0) == order(0) != order(1)
    assert sorted(order(1)) == list(range(23))


def test_errors(ds):
    class Plain(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return i

    with pytest.raises(TypeError, match="Plain does not index whole batches"):
        batched_loader(Plain(), 2)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        batched_loader(ds, 0)
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        batched_loader(ds, 2.5)
    with pytest.raises(TypeError, match="sets collate_fn itself"):
        batched_loader(ds, 2, collate_fn=list)
    with pytest.raises(ValueError, match="shuffle=True and a sampler are exclusive"):
        batched_loader(ds, 2, shuffle=True, sampler=SequentialSampler(ds))


def test_num_workers_auto_is_one_process_per_core_and_batch(ds, monkeypatch, caplog):
    from nn_handler.dataloaders import loader as loader_module

    monkeypatch.setattr(loader_module, "usable_cores", lambda: 2)
    with caplog.at_level("INFO", logger="nn_handler.dataloaders.loader"):
        loader = batched_loader(ds, 5, num_workers="auto")  # 23 rows: 5 batches
    assert loader.num_workers == 2 and "num_workers='auto' starts 2 worker processes" in caplog.text
    assert batched_loader(ds, 12, num_workers="auto").num_workers == 2  # 2 batches
    monkeypatch.setattr(loader_module, "usable_cores", lambda: 1)
    assert batched_loader(ds, 5, num_workers="auto").num_workers == 1
    assert batched_loader(ds, 23, num_workers="auto").num_workers == 0  # one batch: no workers
    with pytest.raises(TypeError, match="num_workers"):
        batched_loader(ds, 5, num_workers="many")
