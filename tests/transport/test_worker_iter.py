"""The worker-process iterator of our loaders: torch's batches, less main-process work per batch."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from nn_handler.dataloaders import H5LazyDataset, batched_loader
from nn_handler.dataloaders._transport import worker_iter
from nn_handler.dataloaders._transport.worker_queues import DirectQueue

from helpers.platform_marks import needs_pipe_room

ROWS = 40_000  # above torch's 32,768-element grain: randperm fills its range in parallel


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    file = tmp_path_factory.mktemp("worker_iter") / "rows.h5"
    with h5py.File(file, "w") as f:
        f["x"] = np.arange(ROWS * 4, dtype=np.float32).reshape(ROWS, 4)
        f["y"] = np.arange(ROWS, dtype=np.int64)
    return file


def _loader(path, **kwargs):
    ds = H5LazyDataset(str(path), "x", "y")
    return batched_loader(ds, 4096, num_workers=2, timeout=60, **kwargs)


def test_the_shuffled_order_is_torchs_random_sampler(path):
    # the order is drawn on one intra-op thread: it must be the one RandomSampler draws
    seed = 1234
    loader = _loader(path, shuffle=True, generator=torch.Generator().manual_seed(seed))
    threads = torch.get_num_threads()
    plain = DataLoader(
        range(ROWS), 4096, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )
    expected = [batch.tolist() for batch in plain]  # torch's own order, drawn in this process
    it = iter(loader)
    assert isinstance(it, worker_iter._WorkerIter)
    got = [batch[1].tolist() for batch in it]
    assert got == expected
    assert torch.get_num_threads() == threads


@needs_pipe_room
def test_persistent_workers_serve_every_row_each_epoch_over_direct_queues(path):
    loader = _loader(path, shuffle=True, persistent_workers=True)
    it = iter(loader)
    assert isinstance(it._worker_result_queue, DirectQueue)
    for _ in range(3):
        xs, ys = zip(*((x.clone(), y.clone()) for x, y in loader), strict=True)
        y = torch.cat(ys)
        assert sorted(y.tolist()) == list(range(ROWS))
        np.testing.assert_array_equal(
            torch.cat(xs).numpy(), (y[:, None] * 4 + torch.arange(4)).numpy()
        )


def test_a_profiler_still_sees_each_batch(path):
    loader = _loader(path)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in loader:
            pass
    names = [event.name for event in prof.events()]
    # one range per batch, and one for the call that ends the epoch
    assert sum(name.startswith("enumerate(DataLoader)") for name in names) == len(loader) + 1


class _Failing(RandomSampler):
    def __iter__(self):
        raise RuntimeError("this sampler fails")


def test_a_failing_sampler_leaves_the_thread_count_alone(path):
    ds = H5LazyDataset(str(path), "x", "y")
    threads = torch.get_num_threads()
    loader = batched_loader(ds, 4096, sampler=_Failing(range(ROWS)), num_workers=2, timeout=60)
    with pytest.raises(RuntimeError, match="this sampler fails"):
        next(iter(loader))
    assert torch.get_num_threads() == threads


def test_the_loader_keeps_the_start_method_it_was_given(path):
    loader = _loader(path, multiprocessing_context="spawn")
    context = loader.multiprocessing_context
    first = next(iter(loader))
    assert loader.multiprocessing_context is context
    assert first[1].tolist() == list(range(4096))
