"""_transport/ring (with pack and receive): worker batches cross to the main process as slot
numbers.

The same bytes as a direct h5py read with 0 or N worker processes under every start method; a
batch the user keeps is never overwritten; slots come back when the batch is freed; a ring that
does not fit /dev/shm falls back to fresh segments; dicts, named tuples, views, bfloat16 and
sparse tensors survive the trip.
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
from collections import namedtuple
from multiprocessing.reduction import ForkingPickler
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from nn_handler.dataloaders import H5LazyDataset, batched_loader
from nn_handler.dataloaders._transport import pack_batch, ring
from nn_handler.dataloaders._transport.receive import _unpack
from nn_handler.dataloaders._transport.ring import ring_buffer

from helpers.files import images

N = 300
Pair = namedtuple("Pair", "a b")


@pytest.fixture
def path(make_h5):
    return make_h5({"x": images(N), "y": np.arange(N) * 7})


def _send(batch: Any) -> Any:
    """What the main process gets from a worker's queue for ``batch`` (same pickler)."""
    return pickle.loads(ForkingPickler.dumps(pack_batch(batch)))


def _states() -> list[int]:
    return [int(s) for r in ring._worker_rings.get().rings for s in r.states]


def _rings_received() -> int:
    """How many workers' batch rings this process keeps mapped."""
    return len(ring._received.get())


def _order(n: int, seed: int = 3) -> list[int]:
    return np.random.default_rng(seed).permutation(n).tolist()


class _Fixed(torch.utils.data.Sampler[int]):
    def __init__(self, order: list[int]) -> None:
        self.order = order

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


def _expected(path, order: list[int], batch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    with h5py.File(path, "r") as f:
        x, y = f["x"][()], f["y"][()]
    cuts = [order[i : i + batch] for i in range(0, len(order), batch)]
    return [(x[c], y[c]) for c in cuts]


# ---- in one process: the protocol --------------------------------------------------------


def test_a_slot_batch_arrives_as_the_same_tensors_and_frees_its_slot(in_worker):
    x = ring_buffer((1024, 3), torch.float32)
    assert x is not None
    x.copy_(torch.arange(3072.0).reshape(1024, 3))
    y = torch.tensor([5, 6, 7, 8])  # not in a ring: copied into one
    got = _send((x, y))
    assert _rings_received() == 2  # one ring per batch size, each announced with its batch
    assert torch.equal(got[0], torch.arange(3072.0).reshape(1024, 3))
    assert got[1].tolist() == [5, 6, 7, 8]
    assert _states().count(ring._BUSY) == 2
    del x, y
    gc.collect()
    assert _states().count(ring._BUSY) == 2  # the main process still holds them
    view = got[0][1:]  # a view keeps its slot
    del got
    gc.collect()
    assert _states().count(ring._BUSY) == 1
    del view
    gc.collect()
    assert _states().count(ring._BUSY) == 0


# torch's own warning when it rebuilds any sparse tensor received from another process
@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning")
def test_structures_views_and_dtypes_survive(in_worker):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    batch = {
        "t": base.t(),  # not contiguous: sent contiguous, same values
        "cl": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        "bf": torch.arange(8, dtype=torch.bfloat16),
        "pair": Pair(torch.tensor([True, False]), "name"),
        "list": [torch.zeros(0), 3],
        "sparse": torch.eye(3).to_sparse(),
    }
    got = _send(batch)
    assert torch.equal(got["t"], base.t())
    assert torch.equal(got["cl"], batch["cl"])
    assert got["cl"].is_contiguous(memory_format=torch.channels_last)
    assert got["bf"].dtype == torch.bfloat16 and torch.equal(got["bf"], batch["bf"])
    assert isinstance(got["pair"], Pair) and got["pair"].a.tolist() == [True, False]
    assert got["pair"].b == "name" and got["list"][1] == 3 and got["list"][0].numel() == 0
    assert torch.equal(got["sparse"].to_dense(), torch.eye(3))


def test_a_slot_read_but_not_sent_comes_back(in_worker):
    x = ring_buffer((8,), torch.int64)
    assert x is not None and _states().count(ring._BUSY) == 1
    del x
    gc.collect()
    assert _states().count(ring._BUSY) == 0


def test_when_every_slot_is_held_the_batch_goes_the_old_way(in_worker):
    kept = [_send((torch.full((64,), float(i)),)) for i in range(ring.RING_SLOTS + 3)]
    assert [float(b[0][0]) for b in kept] == [float(i) for i in range(ring.RING_SLOTS + 3)]
    assert all(int(s) == ring._BUSY for s in _states())
    assert len(_states()) == ring.RING_SLOTS  # no second ring of the same size


def test_no_ring_where_dev_shm_has_no_room(in_worker, monkeypatch):
    monkeypatch.setattr(ring, "shm_space", lambda: (1 << 20, 64 << 20))
    assert ring_buffer((1 << 20,), torch.uint8) is None  # two 1 MiB slots need > half of 1 MiB
    assert ring_buffer((16,), torch.uint8) is not None  # small batches still get a ring


def test_outside_workers_nothing_is_packed():
    batch = (torch.arange(3),)
    assert pack_batch(batch) is batch and ring_buffer((3,), torch.int64) is None


def test_an_unknown_ring_is_an_error_in_words(in_worker):
    ref = ring.SlotRef("nope", 0, 0, torch.float32, (2,), (1,))
    with pytest.raises(RuntimeError, match="ring 'nope'"):
        _unpack([], (ref,))


# ---- across processes --------------------------------------------------------------------

CONTEXTS = ["fork", "spawn", "forkserver"]


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("context", CONTEXTS)
def test_workers_give_the_same_bytes_as_h5py_and_nw0(path, context):
    ds = H5LazyDataset(path, "x", "y")
    order = _order(N)
    want = _expected(path, order, 32)
    ctx = multiprocessing.get_context(context)
    loader = batched_loader(
        ds, 32, sampler=_Fixed(order), num_workers=2, multiprocessing_context=ctx, timeout=60
    )
    for epoch in range(2):
        got = [(x.numpy().copy(), y.numpy().copy()) for x, y in loader]
        assert len(got) == len(want), epoch
        for (gx, gy), (wx, wy) in zip(got, want, strict=True):
            np.testing.assert_array_equal(gx, wx)
            np.testing.assert_array_equal(gy, wy)
    assert _rings_received() >= 2  # the batches came through rings, not fresh segments
    zero = [(x.numpy(), y.numpy()) for x, y in batched_loader(ds, 32, sampler=_Fixed(order))]
    for (gx, gy), (wx, wy) in zip(zero, want, strict=True):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_batches_the_user_keeps_are_never_overwritten(path):
    ds = H5LazyDataset(path, "x", "y")
    order = _order(N, seed=5)
    loader = batched_loader(ds, 8, sampler=_Fixed(order), num_workers=2, timeout=60)
    kept = list(loader)  # 38 batches held at once: far more than the rings' slots
    for (x, y), (wx, wy) in zip(kept, _expected(path, order, 8), strict=True):
        np.testing.assert_array_equal(x.numpy(), wx)
        np.testing.assert_array_equal(y.numpy(), wy)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_slots_are_reused_when_batches_are_dropped(path):
    ds = H5LazyDataset(path, "x", "y")
    loader = batched_loader(ds, 8, num_workers=2, persistent_workers=True, timeout=60)
    seen = set()
    for _ in range(2):
        for x, _y in loader:
            seen.add(x.data_ptr())
    # 2 workers x (prefetch_factor 2 + 3) slots for x, whatever the number of batches (76)
    assert len(seen) <= 2 * 5


class _Dicts(Dataset[Any]):
    """A batch-indexing dataset whose batches are dicts made by a transform (no ring read)."""

    supports_batch_indexing = True

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        idx = torch.as_tensor(index)
        return {"x": idx.double()[:, None] * torch.ones(1, 5), "name": "d", "idx": idx}


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_dict_batches_from_any_dataset_travel_through_rings(context):
    loader = batched_loader(
        _Dicts(50), 7, num_workers=2, multiprocessing_context=context, timeout=60
    )
    got = list(loader)
    assert torch.cat([b["idx"] for b in got]).tolist() == list(range(50))
    for b in got:
        assert b["name"] == "d" and torch.equal(b["x"][:, 0], b["idx"].double())


def test_a_slot_the_worker_still_views_is_not_reused(in_worker):
    kept = ring_buffer((64,), torch.float32)  # a tensor the worker's dataset keeps
    assert kept is not None
    kept.fill_(7.0)
    got = _send((kept,))
    del got
    gc.collect()  # the main process is done with it: free there, but the worker still views it
    for i in range(ring.RING_SLOTS * 2):
        other = _send((torch.full((64,), float(i)),))
        assert float(other[0][0]) == float(i)
        assert torch.equal(kept, torch.full((64,), 7.0))  # never written under the worker
        del other
        gc.collect()
