import logging
from collections import namedtuple

import numpy as np
import pytest
import torch

import nn_handler.dataloaders.prefetch as prefetch_module
from nn_handler.dataloaders import (
    DevicePrefetcher,
    EpochShuffleSampler,
    H5LazyDataset,
    batched_loader,
)
from nn_handler.dataloaders.prefetch import move

from helpers.files import h5_rows, images

Pair = namedtuple("Pair", ["x", "y"])
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def batches():
    return [
        (torch.arange(6.0).reshape(2, 3), torch.tensor([1, 2])),
        {"x": torch.ones(2, 2), "meta": "kept", "nested": [torch.zeros(1), 5]},
        Pair(torch.tensor([3]), np.array([4])),
        torch.tensor([7, 8]),
    ]


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def test_cpu_passes_batches_through():
    got = list(DevicePrefetcher(batches(), "cpu"))
    assert len(got) == 4
    assert all(same(a, b) for a, b in zip(batches(), got, strict=True))
    assert isinstance(got[2], Pair) and isinstance(got[1]["nested"], list)


def test_default_device_without_cuda_logs_once(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(prefetch_module._NO_CUDA_LOGGED, "done", False)
    with caplog.at_level(logging.INFO, logger="nn_handler.dataloaders.prefetch"):
        first = DevicePrefetcher(batches())
        DevicePrefetcher(batches())
    assert first.device == torch.device("cpu")
    assert caplog.text.count("CUDA is not available") == 1
    assert all(same(a, b) for a, b in zip(batches(), first, strict=True))


def test_cuda_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="device='cuda' but CUDA is not available"):
        DevicePrefetcher(batches(), "cuda")


def test_bad_arguments():
    with pytest.raises(ValueError, match="device='gpu0' is not a device name"):
        DevicePrefetcher([], "gpu0")
    with pytest.raises(ValueError, match="depth must be >= 1, got 0"):
        DevicePrefetcher([], "cpu", depth=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'pin'"):
        DevicePrefetcher([], "cpu", pin=True)
    with pytest.raises(TypeError, match="generator has no len"):
        len(DevicePrefetcher((b for b in batches()), "cpu"))


def test_wraps_a_loader_len_and_set_epoch(make_h5):
    path = make_h5({"x": (images(40), "gzip"), "y": np.arange(40)})
    ds = H5LazyDataset(path, "x", "y")
    sampler = EpochShuffleSampler(len(ds), seed=1)
    prefetcher = DevicePrefetcher(batched_loader(ds, 16, sampler=sampler), "cpu")
    assert len(prefetcher) == 3
    for epoch in (4, 5):  # iterable again, like the loader
        prefetcher.set_epoch(epoch)
        assert sampler.epoch == epoch
        ys = []
        for x, y in prefetcher:
            np.testing.assert_array_equal(x.numpy(), h5_rows(path, "x", y.numpy()))
            ys.extend(y.tolist())
        assert sorted(ys) == list(range(40))
    assert "device='cpu', depth=2" in repr(prefetcher)


def test_move_maps_every_tensor():
    doubled = move(batches()[1], lambda t: t * 2)
    assert torch.equal(doubled["x"], torch.full((2, 2), 2.0))
    assert doubled["meta"] == "kept" and doubled["nested"][1] == 5


@pytest.mark.cuda
@needs_cuda
def test_cuda_batches_arrive_on_the_device_and_equal_the_host():
    host = [(torch.randn(64, 3, 8, 8), torch.arange(64) + i) for i in range(10)]
    pinned = [(x.pin_memory(), y) for x, y in host]
    for source in (host, pinned):
        got = list(DevicePrefetcher(source, "cuda", depth=3))
        torch.cuda.synchronize()
        assert all(x.is_cuda and y.is_cuda for x, y in got)
        for (hx, hy), (gx, gy) in zip(host, got, strict=True):
            assert torch.equal(hx, gx.cpu()) and torch.equal(hy, gy.cpu())


@pytest.mark.cuda
@needs_cuda
def test_cuda_staging_buffers_are_reused():
    pool = prefetch_module._PinnedPool()
    stream = torch.cuda.Stream()
    device = torch.device("cuda")
    with torch.cuda.stream(stream):
        first = prefetch_module._to_device(torch.ones(1000), device, stream, pool)
    stream.synchronize()
    ((buffer, _),) = pool._free[(torch.float32, 1000)]
    with torch.cuda.stream(stream):
        second = prefetch_module._to_device(torch.full((1000,), 2.0), device, stream, pool)
    stream.synchronize()
    ((again, _),) = pool._free[(torch.float32, 1000)]
    assert again.data_ptr() == buffer.data_ptr()
    assert float(first.sum()) == 1000 and float(second.sum()) == 2000
