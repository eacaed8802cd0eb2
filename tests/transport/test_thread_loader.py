"""batched_loader(worker_mode="thread"): DataLoader semantics, batches read by threads."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    batched_loader,
)
from nn_handler.dataloaders._transport.threads import ThreadedDataLoader

from helpers.files import h5_rows, images


@pytest.fixture
def gzip_ds(make_h5):
    path = make_h5({"x": (images(203), "gzip-shuffle"), "y": np.arange(203)})
    return path, H5LazyDataset(path, "x", "y")


def ys_of(loader):
    return [y.tolist() for _, y in loader]


def test_same_batches_in_the_same_order_as_one_process(gzip_ds):
    path, ds = gzip_ds
    sampler = ChunkShuffleSampler(ds, seed=1, window_chunks=4)
    threaded = batched_loader(ds, 16, sampler=sampler, num_workers=3, worker_mode="thread")
    assert isinstance(threaded, ThreadedDataLoader) and isinstance(threaded, DataLoader)
    assert len(threaded) == 13 and threaded.worker_mode == "thread"
    sampler.set_epoch(2)
    batches = [(x, y) for x, y in threaded]
    same = ChunkShuffleSampler(ds, seed=1, window_chunks=4)
    same.set_epoch(2)
    plain = ys_of(batched_loader(ds, 16, sampler=same))
    assert [y.tolist() for _, y in batches] == plain  # order kept, every batch exactly once
    for x, y in batches:
        np.testing.assert_array_equal(x.numpy(), h5_rows(path, "x", y.numpy()))
    threaded.sampler.set_epoch(3)  # reaches the wrapped sampler, as with processes
    assert ys_of(threaded) != plain


def test_resume_mid_epoch_with_threads_and_readahead(gzip_ds):
    _, ds = gzip_ds
    full = ys_of(batched_loader(ds, 10, sampler=EpochShuffleSampler(len(ds), seed=0)))
    sampler = EpochShuffleSampler(len(ds), seed=0)
    loader = batched_loader(ds, 10, sampler=sampler, num_workers=2, worker_mode="thread")
    it = iter(loader)
    seen = [next(it)[1].tolist() for _ in range(4)]
    state = loader.sampler.state_dict()
    assert state["consumed"] >= 40  # handed out to the threads: may run ahead of training
    del it
    again = EpochShuffleSampler(len(ds), seed=0)
    again.load_state_dict({**state, "consumed": 40})  # what was trained on, as documented
    rest = ys_of(batched_loader(ds, 10, sampler=again))
    assert seen + rest == full


def test_readahead_keeps_consumed_exact_in_one_process(make_h5):
    path = make_h5({"x": (images(320), "gzip"), "y": np.arange(320)})
    ds = H5LazyDataset(path, "x", "y")
    sampler = ChunkShuffleSampler(ds, window_chunks=4)
    loader = batched_loader(ds, 8, sampler=sampler)
    assert loader.sampler.ahead == 4  # a window of 4 chunks of 8 rows, in batches of 8
    assert loader.sampler.sampler is sampler  # a ReadaheadSampler around it
    it = iter(loader)
    for _ in range(3):
        next(it)
    assert loader.sampler.state_dict()["consumed"] == 24  # not the rows drawn ahead


def test_reader_errors_surface_at_their_batch():
    class Broken:
        supports_batch_indexing = True

        def __len__(self):
            return 40

        def __getitem__(self, idx):
            if 25 in list(idx):
                raise ValueError("bad row 25")
            return torch.as_tensor(list(idx))

    loader = batched_loader(Broken(), 10, num_workers=2, worker_mode="thread")
    it = iter(loader)
    assert next(it).tolist() == list(range(10)) and next(it).tolist() == list(range(10, 20))
    with pytest.raises(ValueError, match="bad row 25"):
        next(it)


def test_worker_mode_choices_and_process_only_keywords(gzip_ds, make_h5):
    _, ds = gzip_ds
    with pytest.raises(ValueError, match="worker_mode must be one of 'process', 'thread'"):
        batched_loader(ds, 8, num_workers=2, worker_mode="fibers")
    with pytest.raises(TypeError, match="worker_init_fn only apply to worker processes"):
        batched_loader(ds, 8, num_workers=2, worker_mode="thread", worker_init_fn=print)
    assert ds.reads_release_gil  # gzip + shuffle decoded here, y memory-mapped
    assert isinstance(batched_loader(ds, 8, num_workers=2, worker_mode="auto"), ThreadedDataLoader)
    auto_proc = batched_loader(ds, 8, num_workers=2, worker_mode="auto", worker_init_fn=print)
    assert not isinstance(auto_proc, ThreadedDataLoader)
    lzf = H5LazyDataset(make_h5({"x": (images(20), "lzf-fletcher")}), "x")
    assert not lzf.reads_release_gil  # h5py decodes lzf under its lock: processes
    assert not isinstance(
        batched_loader(lzf, 8, num_workers=2, worker_mode="auto"), ThreadedDataLoader
    )
    assert not isinstance(
        batched_loader(ds, 8, num_workers=0, worker_mode="thread"), ThreadedDataLoader
    )


def test_memmap_dataset_in_threads(make_h5):
    data = images(100)
    path = make_h5({"x": data, "y": np.arange(100)})
    ds = H5LazyDataset(path, "x", "y")
    loader = batched_loader(
        ds,
        7,
        shuffle=True,
        num_workers=2,
        worker_mode="thread",
        generator=torch.Generator().manual_seed(0),
    )
    xs, ys = zip(*list(loader), strict=True)
    y = torch.cat(ys).numpy()
    assert sorted(y.tolist()) == list(range(100))
    np.testing.assert_array_equal(torch.cat(xs).numpy(), data[y])
