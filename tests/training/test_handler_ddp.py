"""NNHandler under DDP: 2 spawned CPU processes on a ``gloo`` group built from the environment."""

import atexit
import gc
import warnings
from collections import Counter

import pytest
import torch
import torch.distributed as dist
from torch import nn

from nn_handler import NNHandler
from nn_handler.dataloaders import EpochShuffleSampler, H5LazyDataset

from helpers.ddp import GLOO_SETTLE_S, gloo_threads, run_ddp
from helpers.handler import (
    Recorder,
    ShardedBlobs,
    TinyNet,
    accuracy,
    strip_index,
    write_blobs,
)

pytestmark = pytest.mark.slow


def _handler(batch_fn, **kwargs):
    handler = NNHandler(
        TinyNet, use_distributed=True, batch_fn=batch_fn, progress=False, log_fn=None, **kwargs
    )
    handler.set_optimizer(torch.optim.SGD, lr=0.1, momentum=0.9)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    handler.set_metrics({"acc": accuracy})
    return handler


def _train_rank(train_path, val_path, epochs, batch_size, accumulate):
    torch.manual_seed(0)
    recorder = Recorder()
    handler = _handler(recorder, grad_accum_steps=accumulate)
    handler.set_train_loader(H5LazyDataset(train_path, "x", "y"), batch_size=batch_size)
    seen = []
    for epoch in range(epochs):
        start = len(recorder.seen)
        handler.train(epoch + 1)
        seen.append(recorder.seen[start:])
    handler.set_val_loader(H5LazyDataset(val_path, "x", "y"), batch_size=4)
    start = len(recorder.seen)
    val = handler.evaluate()
    return {
        "world": (handler.world.rank, handler.world.world_size),
        "ddp": type(handler._model).__name__,
        "params": [p.detach().clone() for p in handler.model.parameters()],
        "seen": seen,
        "val": val,
        "val_seen": recorder.seen[start:],
        "steps": handler.global_step,
    }


@pytest.fixture
def val_path(tmp_path):
    return write_blobs(tmp_path / "val.h5", 37, seed=5)  # 37: uneven shards (19 + 18)


def test_ranks_stay_identical_and_see_each_sample_once(tmp_path, val_path):
    path = write_blobs(tmp_path / "train.h5", 96)
    results = run_ddp(_train_rank, 2, tmp_path / "out", path, val_path, 2, 8, 1)
    assert [r["world"] for r in results] == [(0, 2), (1, 2)]
    assert {r["ddp"] for r in results} == {"DistributedDataParallel"}
    for a, b in zip(results[0]["params"], results[1]["params"], strict=True):
        assert torch.equal(a, b)
    for epoch in range(2):
        per_rank = [r["seen"][epoch] for r in results]
        assert [len(s) for s in per_rank] == [48, 48]
        assert sorted(per_rank[0] + per_rank[1]) == list(range(96))
    assert results[0]["seen"][0] != results[0]["seen"][1]  # set_epoch reshuffled
    assert [r["steps"] for r in results] == [12, 12]


def test_uneven_size_pads_with_repeats_and_keeps_steps_equal(tmp_path, val_path):
    path = write_blobs(tmp_path / "train.h5", 97)
    results = run_ddp(_train_rank, 2, tmp_path / "out", path, val_path, 1, 8, 3)
    seen = [r["seen"][0] for r in results]
    assert [len(s) for s in seen] == [49, 49]  # ceil(97 / 2): one sample is seen twice
    counts = Counter(seen[0] + seen[1])
    assert set(counts) == set(range(97))
    assert sorted(counts.values())[-2:] == [1, 2]
    # 7 batches per rank (the last of 1 sample), accumulation groups of 3: 3 + 3 + 1
    assert [r["steps"] for r in results] == [3, 3]
    for a, b in zip(results[0]["params"], results[1]["params"], strict=True):
        assert torch.equal(a, b)


def test_validation_counts_each_sample_once_and_matches_one_process(tmp_path, val_path):
    path = write_blobs(tmp_path / "train.h5", 64)
    results = run_ddp(_train_rank, 2, tmp_path / "out", path, val_path, 1, 16, 1)
    val_seen = [r["val_seen"] for r in results]
    assert [len(s) for s in val_seen] == [19, 18]
    assert sorted(val_seen[0] + val_seen[1]) == list(range(37))
    assert results[0]["val"] == results[1]["val"]
    single = NNHandler(TinyNet, batch_fn=strip_index, progress=False, log_fn=None)
    with torch.no_grad():
        for param, value in zip(single.model.parameters(), results[0]["params"], strict=True):
            param.copy_(value)
    single.set_loss_fn(nn.CrossEntropyLoss())
    single.set_metrics({"acc": accuracy})
    single.set_val_loader(H5LazyDataset(val_path, "x", "y"), batch_size=5)
    expected = single.evaluate()
    assert expected["samples"] == results[0]["val"]["samples"] == 37
    for key in ("loss", "acc"):
        assert results[0]["val"][key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9)


def _sharded_rank(n, own_sampler):
    torch.manual_seed(0)
    recorder = Recorder()
    handler = _handler(recorder)
    dataset = ShardedBlobs(n)
    sampler = EpochShuffleSampler(len(dataset), seed=3) if own_sampler else None
    handler.set_train_loader(dataset, batch_size=4, sampler=sampler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = handler.train(2)
    return {
        "sampler": repr(handler.train_loader.sampler),
        "seen": recorder.seen,
        "steps": handler.global_step,
        "warnings": [str(w.message) for w in caught],
        "history": history,
        "params": [p.detach().clone() for p in handler.model.parameters()],
    }


def test_rank_sharded_dataset_is_sampled_locally_with_equal_steps(tmp_path):
    # 17 samples: shards of 9 and 8; make_sampler pads rank 1 to 9 -> 3 batches on each rank
    results = run_ddp(_sharded_rank, 2, tmp_path / "out", 17, False)
    assert [r["steps"] for r in results] == [6, 6]
    assert all("num_samples=9" in r["sampler"] for r in results)
    assert not any(r["warnings"] for r in results)
    first, second = results[0]["seen"], results[1]["seen"]
    assert sorted(set(first[:9])) == list(range(9))  # rank 0: its shard, each once
    assert set(second[:9]) == set(range(9, 17))  # rank 1: its shard, one repeat
    for a, b in zip(results[0]["params"], results[1]["params"], strict=True):
        assert torch.equal(a, b)
    assert results[0]["history"][-1]["train_loss"] == results[1]["history"][-1]["train_loss"]


def test_unequal_user_samplers_are_capped_to_equal_steps_with_a_warning(tmp_path):
    # shards of 9 and 8 with the user's own samplers: 3 and 2 batches of 4
    results = run_ddp(_sharded_rank, 2, tmp_path / "out", 17, True)
    assert [r["steps"] for r in results] == [4, 4]
    assert len(results[0]["seen"]) == 2 * 8  # rank 0 runs 2 of its 3 batches per epoch
    assert any("between 2 and 3 train batches" in w for w in results[0]["warnings"])


def _resume_rank(path, out, stop_at):
    def make():
        torch.manual_seed(0)
        handler = _handler(strip_index)
        handler.set_train_loader(H5LazyDataset(path, "x", "y"), batch_size=4)
        return handler

    straight = make()
    straight.train(2)
    stopped = make()
    stopped.train(2, max_steps=stop_at)
    stopped.save(out)
    resumed = make()
    resumed.load(out)
    resumed.train(2)
    return {
        "straight": [p.detach().clone() for p in straight.model.parameters()],
        "resumed": [p.detach().clone() for p in resumed.model.parameters()],
        "history": (straight.history, resumed.history),
    }


def test_mid_epoch_checkpoint_resumes_exactly_under_ddp(tmp_path):
    path = write_blobs(tmp_path / "train.h5", 40)  # 5 steps per epoch per rank
    results = run_ddp(_resume_rank, 2, tmp_path / "out", path, tmp_path / "ckpt.pt", 7)
    for result in results:
        for a, b in zip(result["straight"], result["resumed"], strict=True):
            assert torch.equal(a, b)
        straight, resumed = result["history"]
        assert [r["train_loss"] for r in straight] == [r["train_loss"] for r in resumed]


def _trained(train_path):
    handler = _handler(Recorder())
    handler.set_train_loader(H5LazyDataset(train_path, "x", "y"), batch_size=8)
    handler.train(1)  # the optimizer, made after the group, imported torch._dynamo
    return handler


def _threads_left_by(end):
    """gloo's threads before and right after ``end()``, with collection off: what ``end`` leaves,
    not what a chance collection would take."""
    running = gloo_threads()
    gc.disable()
    try:
        end()
        return running, gloo_threads(GLOO_SETTLE_S)
    finally:
        gc.enable()


def _close_rank(train_path):
    handler = _trained(train_path)
    running, left = _threads_left_by(handler.close)
    with pytest.raises(RuntimeError) as refused:
        handler.train(2)
    return {
        "running": running,
        "left": left,
        "group": dist.is_initialized(),
        "refused": str(refused.value),
    }


def test_close_ends_the_group_and_its_threads(tmp_path):
    # a gloo thread alive when Python shuts down can abort the process (docs/training.md,
    # "Ending a distributed script"): close() leaves none, though the DDP wrapper held the group
    # from a reference cycle and torch.distributed.nn.functional binds the world group late
    path = write_blobs(tmp_path / "train.h5", 32)
    for rank in run_ddp(_close_rank, 2, tmp_path / "out", path):
        assert "pt_gloo_runloop" in rank["running"]
        assert rank["left"] == []
        assert not rank["group"]
        assert "this NNHandler was closed" in rank["refused"]


def _exit_rank(train_path):
    handler = _trained(train_path)  # never closed
    running, left = _threads_left_by(atexit._run_exitfuncs)  # what Python runs at exit
    del handler
    return {"running": running, "left": left, "group": dist.is_initialized()}


def test_a_handler_never_closed_is_closed_at_exit(tmp_path):
    path = write_blobs(tmp_path / "train.h5", 32)
    for rank in run_ddp(_exit_rank, 2, tmp_path / "out", path):
        assert "pt_gloo_runloop" in rank["running"]
        assert rank["left"] == []
        assert not rank["group"]


def _destroyed_first_rank(train_path):
    handler = _trained(train_path)
    dist.destroy_process_group()  # before close(): the wrapper still holds the group
    running, left = _threads_left_by(handler.close)
    return {"running": running, "left": left}


def _dropped_unclosed_rank(train_path):
    handler = _trained(train_path)
    dist.destroy_process_group()
    del handler  # never closed: the wrapper goes, and must not free the group itself
    gc.collect()
    running, left = _threads_left_by(atexit._run_exitfuncs)
    return {"running": running, "left": left}


@pytest.mark.parametrize("rank_fn", [_destroyed_first_rank, _dropped_unclosed_rank])
def test_a_group_destroyed_before_the_handler_ends_without_a_hang(tmp_path, rank_fn):
    # freed by the DDP wrapper, the group would be freed holding the GIL while gloo's threads
    # stop, which hung a rank of this test in 1 .ci/run of 2; the handler holds the group until
    # the wrapper is gone (or until exit), so it ends through its Python handle
    path = write_blobs(tmp_path / "train.h5", 32)
    for rank in run_ddp(rank_fn, 2, tmp_path / "out", path):
        assert "pt_gloo_runloop" in rank["running"]
        assert rank["left"] == []
