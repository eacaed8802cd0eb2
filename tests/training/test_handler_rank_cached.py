"""NNHandler with RankMemCachedH5Dataset: learning on one process, local sampling under DDP."""

from collections import Counter

import pytest
import torch
from torch import nn

from nn_handler import NNHandler
from nn_handler.dataloaders import EpochShuffleSampler, H5LazyDataset, RankMemCachedH5Dataset

from helpers.ddp import run_ddp
from helpers.handler import Recorder, TinyNet, accuracy, strip_index, write_blobs


@pytest.mark.slow
def test_learns_through_rank_cached_dataset(tmp_path):
    path = write_blobs(tmp_path / "train.h5", 1200, chunks=(64, 9), compression="gzip")
    val = write_blobs(tmp_path / "val.h5", 300, seed=1)
    lines = []
    dataset = RankMemCachedH5Dataset(path, "x", "y", log_fn=lines.append)
    torch.manual_seed(0)
    handler = NNHandler(TinyNet, batch_fn=strip_index, progress=False, log_fn=None)
    loader = handler.set_train_loader(dataset, batch_size=32, num_workers=2)
    assert loader.sampler.num_samples == 1200  # the dataset's own make_sampler()
    handler.set_val_loader(H5LazyDataset(val, "x", "y"), batch_size=100)
    handler.set_optimizer(torch.optim.Adam, lr=1e-2)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    handler.set_metrics({"acc": accuracy})
    before = handler.evaluate()
    history = handler.train(3)
    assert history[-1]["val_loss"] < 0.5 * before["loss"]
    assert history[-1]["val_acc"] > 0.8  # chance is 1/3


def _rank_cached_rank(path, mode, own_sampler):
    lines = []
    # the dataset before the handler, as users write it: rank and world come from torchrun's
    # environment, the handler then initializes the process group
    dataset = RankMemCachedH5Dataset(path, "x", "y", mode=mode, log_fn=lines.append)
    torch.manual_seed(0)
    recorder = Recorder()
    handler = NNHandler(
        TinyNet, use_distributed=True, batch_fn=recorder, progress=False, log_fn=None
    )
    sampler = EpochShuffleSampler(len(dataset), seed=42) if own_sampler else None
    handler.set_train_loader(dataset, batch_size=4, sampler=sampler, pin_memory=False)
    handler.set_optimizer(torch.optim.SGD, lr=0.1)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    seen = []
    for epoch in range(2):
        start = len(recorder.seen)
        handler.train(epoch + 1)
        seen.append(recorder.seen[start:])
    return {
        "shard": dataset.shard_indices.tolist(),
        "padded": dataset.num_padded,
        "seen": seen,
        "steps": handler.global_step,
        "params": [p.detach().clone() for p in handler.model.parameters()],
    }


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["contiguous", "interleave"])
def test_rank_cached_dataset_under_ddp_samples_locally_with_equal_steps(tmp_path, mode):
    path = write_blobs(tmp_path / "train.h5", 17)  # shards of 9 and 8
    results = run_ddp(_rank_cached_rank, 2, tmp_path / "out", path, mode, False)
    assert [r["padded"] for r in results] == [0, 1]
    assert [r["steps"] for r in results] == [6, 6]  # 9 samples per rank: 3 batches per epoch
    shards = [set(r["shard"]) for r in results]
    assert shards[0] | shards[1] == set(range(17))
    assert not shards[0] & shards[1]
    for epoch in range(2):
        seen = [r["seen"][epoch] for r in results]
        assert [len(s) for s in seen] == [9, 9]
        for rank in range(2):
            assert set(seen[rank]) == shards[rank]  # local: only its own shard, all of it
        assert sorted(Counter(seen[0] + seen[1]).values()) == [1] * 16 + [2]  # one repeat
    assert results[0]["seen"][0] != results[0]["seen"][1]  # reshuffled per epoch
    for a, b in zip(results[0]["params"], results[1]["params"], strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_seed_snippet_sampler_on_even_shards(tmp_path):
    path = write_blobs(tmp_path / "train.h5", 16)
    results = run_ddp(_rank_cached_rank, 2, tmp_path / "out", path, "contiguous", True)
    assert [r["steps"] for r in results] == [4, 4]
    for epoch in range(2):
        assert sorted(results[0]["seen"][epoch] + results[1]["seen"][epoch]) == list(range(16))
    for a, b in zip(results[0]["params"], results[1]["params"], strict=True):
        assert torch.equal(a, b)
