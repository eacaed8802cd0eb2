"""Rank-cache batch gathers: NumPy take in the calling thread, the same rows index_select gives."""

import numpy as np
import pytest
import torch

import nn_handler.dataloaders.rank_cached_h5_dataloader as rc
from nn_handler.dataloaders import RankMemCachedH5Dataset

from helpers.files import images


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.uint8, torch.bool, torch.int64, torch.bfloat16]
)
def test_select_equals_index_select(dtype):
    cache = (torch.arange(60) % 7).reshape(20, 3).to(dtype)
    idx = torch.tensor([5, 0, 19, 5, 3])
    expected = torch.index_select(cache, 0, idx)
    got = rc._select(cache, idx)
    assert got.dtype == dtype and torch.equal(got, expected)
    out = torch.empty_like(expected)
    assert rc._select(cache, idx, out) is out and torch.equal(out, expected)


def test_cpu_batches_do_not_use_index_select(make_h5, monkeypatch):
    data = images(40)
    path = make_h5({"x": data, "y": np.arange(40)})
    ds = RankMemCachedH5Dataset(path, "x", "y", rank=0, world_size=1, log_fn=lambda m: None)

    def forbidden(*args, **kwargs):
        raise AssertionError("index_select spawns intra-op threads on a busy machine")

    monkeypatch.setattr(rc.torch, "index_select", forbidden)
    x, y = ds[[3, 1, 39]]
    np.testing.assert_array_equal(x.numpy(), data[[3, 1, 39]].astype(x.numpy().dtype))
    assert y.tolist() == [3, 1, 39]
    samples = ds.__getitems__([7, 8])
    assert [int(s[1]) for s in samples] == [7, 8]
