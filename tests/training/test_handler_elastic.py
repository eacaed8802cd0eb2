"""Elastic resume through NNHandler: a mid-epoch checkpoint of 2 processes goes on on 3, then 1."""

from collections import Counter

import pytest
import torch
from torch import nn

from nn_handler import NNHandler
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)

from helpers.ddp import run_ddp
from helpers.handler import Recorder, TinyNet, accuracy, write_blobs

pytestmark = pytest.mark.slow

N = 91  # uneven for 2 and 3 processes
BATCH = 4


def _dataset(kind, path):
    if kind == "cached":  # built for this run's world: its shards are re-cut for it
        return RankMemCachedH5Dataset(path, "x", "y", log_fn=lambda line: None)
    return H5LazyDataset(path, "x", "y")


def _chunk_loader(path, workers):
    """``batched_loader`` + ``ChunkShuffleSampler`` (the sampler detects the world)."""
    dataset = H5LazyDataset(path, "x", "y")
    sampler = ChunkShuffleSampler(
        dataset, seed=7, window_chunks=2, batch_size=BATCH, num_workers=workers
    )
    return batched_loader(dataset, BATCH, sampler=sampler, num_workers=workers)


def _phase(path, checkpoint, epochs, max_steps, kind="lazy", workers=0):
    """One run of the job: load the checkpoint if there is one, train, save."""
    torch.manual_seed(0)
    recorder = Recorder()
    handler = NNHandler(
        TinyNet, use_distributed=True, batch_fn=recorder, progress=False, log_fn=None
    )
    handler.set_optimizer(torch.optim.SGD, lr=0.05)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    handler.set_metrics({"acc": accuracy})
    if kind == "chunk":
        handler.set_train_loader(_chunk_loader(path, workers))
    else:
        handler.set_train_loader(_dataset(kind, path), batch_size=BATCH, pin_memory=False)
    if checkpoint.exists():
        handler.load(checkpoint)
    seen = []
    for epoch in range(handler.epoch, epochs):
        start = len(recorder.seen)
        handler.train(epoch + 1, max_steps=max_steps)
        seen.append((epoch, recorder.seen[start:]))
    handler.save(checkpoint)
    return {
        "seen": seen,
        "steps": handler.global_step,
        "history": handler.history,
        "params": [p.detach().clone() for p in handler.model.parameters()],
    }


def test_mid_epoch_checkpoint_resumes_on_three_then_one_process(tmp_path):
    path = write_blobs(tmp_path / "train.h5", N)
    checkpoint = tmp_path / "ck.pt"
    # 2 processes: 3 steps of 2 x 4 samples; 3 processes: 2 more steps of 3 x 4; 1: the rest
    first = run_ddp(_phase, 2, tmp_path / "a", path, checkpoint, 1, 3)
    second = run_ddp(_phase, 3, tmp_path / "b", path, checkpoint, 1, 5)
    third = run_ddp(_phase, 1, tmp_path / "c", path, checkpoint, 2, None)
    for results in (first, second):  # DDP kept every rank's model the same
        for other in results[1:]:
            pairs = zip(results[0]["params"], other["params"], strict=True)
            assert all(torch.equal(a, b) for a, b in pairs)
    trained = [i for r in first + second for _, s in r["seen"] for i in s]
    epoch0 = trained + dict(third[0]["seen"])[0]
    assert [len(s) for r in first for _, s in r["seen"]] == [12, 12]
    assert [len(s) for r in second for _, s in r["seen"]] == [8, 8, 8]
    assert set(epoch0) == set(range(N)) and len(epoch0) == N  # every sample exactly once
    assert sorted(dict(third[0]["seen"])[1]) == list(range(N))  # the next epoch is whole
    assert third[0]["steps"] == 5 + -(-(N - 48) // BATCH) + -(-N // BATCH)
    # the epoch's record counts every sample trained, on whichever world
    assert [int(h["epoch"]) for h in third[0]["history"]] == [0, 1]


def test_three_to_two_pads_at_most_world_minus_one(tmp_path):
    """91 = 3 x 30 + 1: after 2 steps on 3, 67 are left for 2 processes: one pad."""
    path = write_blobs(tmp_path / "train.h5", N)
    checkpoint = tmp_path / "ck.pt"
    first = run_ddp(_phase, 3, tmp_path / "a", path, checkpoint, 1, 2)
    second = run_ddp(_phase, 2, tmp_path / "b", path, checkpoint, 1, None)
    counts = Counter(i for r in first + second for _, s in r["seen"] for i in s)
    assert set(counts) == set(range(N))
    assert sum(counts.values()) - N == 1  # 67 left: 34 per rank, one repeat
    assert [len(s) for r in second for _, s in r["seen"]] == [34, 34]


def test_rank_cached_shards_reshard_on_three_then_one_process(tmp_path):
    """Each world caches its own shards and trains their untrained rows, equal steps."""
    path = write_blobs(tmp_path / "train.h5", N)
    checkpoint = tmp_path / "ck.pt"
    first = run_ddp(_phase, 2, tmp_path / "a", path, checkpoint, 1, 3, "cached")
    second = run_ddp(_phase, 3, tmp_path / "b", path, checkpoint, 1, 5, "cached")
    third = run_ddp(_phase, 1, tmp_path / "c", path, checkpoint, 2, None, "cached")
    assert [len(s) for r in first for _, s in r["seen"]] == [12, 12]
    assert [len(s) for r in second for _, s in r["seen"]] == [8, 8, 8]
    epoch0 = [i for r in first + second for _, s in r["seen"] for i in s]
    epoch0 += dict(third[0]["seen"])[0]
    counts = Counter(epoch0)
    assert set(counts) == set(range(N))  # every row of the file
    # repeats only as pads of the 3-process phase (ranks' rests differ by a few rows)
    assert sum(counts.values()) - N <= 6
    assert sorted(dict(third[0]["seen"])[1]) == list(range(N))  # the next epoch is whole


def test_chunk_sampler_over_gzip_resumes_on_three_then_one_with_other_workers(tmp_path):
    """``batched_loader`` + ``ChunkShuffleSampler``; DataLoader workers 2 -> 0 -> 2."""
    path = write_blobs(tmp_path / "train.h5", N, chunks=(8, 9), compression="gzip")
    checkpoint = tmp_path / "ck.pt"
    first = run_ddp(_phase, 2, tmp_path / "a", path, checkpoint, 1, 3, "chunk", 2)
    second = run_ddp(_phase, 3, tmp_path / "b", path, checkpoint, 1, 5, "chunk", 0)
    third = run_ddp(_phase, 1, tmp_path / "c", path, checkpoint, 2, None, "chunk", 2)
    assert [len(s) for r in first for _, s in r["seen"]] == [12, 12]
    assert [len(s) for r in second for _, s in r["seen"]] == [8, 8, 8]
    epoch0 = [i for r in first + second for _, s in r["seen"] for i in s]
    epoch0 += dict(third[0]["seen"])[0]
    assert sorted(epoch0) == list(range(N))  # every sample exactly once (no pad on 1 process)
    assert sorted(dict(third[0]["seen"])[1]) == list(range(N))
