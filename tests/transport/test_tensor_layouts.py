"""_transport/layouts (dense, csr): which tensors travel in ring slots, taken apart and rebuilt.

A registered layout (sparse CSR) crosses in slots and is rebuilt by us, without torch's
"invariant checks are implicitly disabled" warning (pytest makes warnings errors); a layout
not registered (COO, CSC) goes torch's own way and still arrives equal, in one process and from
a real worker process.
"""

from __future__ import annotations

import gc
import pickle
import warnings
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from nn_handler.dataloaders import batched_loader
from nn_handler.dataloaders._transport import csr, dense, layouts, pack_batch, ring
from nn_handler.dataloaders._transport.receive import SlotBatch

# torch's own warning when it rebuilds a sparse tensor of a layout not registered
_TORCHS_WAY = "ignore:Sparse invariant checks are implicitly disabled:UserWarning"


def _states() -> list[int]:
    return [int(s) for r in ring._worker_rings.get().rings for s in r.states]


def _csr(rows: int, cols: int, seed: int) -> torch.Tensor:
    dense_ = torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed))
    with warnings.catch_warnings():  # torch's "beta" notice, once per process
        warnings.simplefilter("ignore", UserWarning)
        return (dense_ * (dense_ > 0.7)).to_sparse_csr()


def test_each_torch_layout_is_registered_or_none():
    assert layouts.layout_of(torch.zeros(2)) is layouts.LAYOUTS[torch.strided]
    assert layouts.layout_of(torch.zeros(2)).pack is dense.pack  # type: ignore[union-attr]
    assert layouts.layout_of(_csr(3, 4, seed=0)).pack is csr.pack  # type: ignore[union-attr]
    assert layouts.layout_of(torch.eye(3).to_sparse()) is None  # COO: torch's own way
    assert layouts.layout_of(torch.eye(3).to_sparse_csc()) is None
    assert set(layouts.REF_TYPES) == {ring.SlotRef, csr.CsrRef}  # one reference type a layout


def test_a_csr_batch_travels_in_slots_without_torchs_warning(in_worker):
    for i in range(8):  # every batch holds a few more entries than the one before
        sent = _csr(16 + i, 2000, seed=i)
        packed = pack_batch((sent, torch.arange(3)))
        assert isinstance(packed, SlotBatch)
        got, labels = pickle.loads(ForkingPickler.dumps(packed))
        assert got.layout == torch.sparse_csr and got.shape == sent.shape
        assert torch.equal(got.to_dense(), sent.to_dense()) and labels.tolist() == [0, 1, 2]
        del packed, got, labels
        gc.collect()
        assert _states().count(ring._BUSY) == 0  # all four parts freed
    # crow and labels, cols, values; a bigger batch than the first makes a ring with room
    assert len(ring._worker_rings.get().rings) <= 5


def test_a_csr_batch_without_slots_for_every_part_goes_the_old_way(in_worker, monkeypatch):
    # without torch's warning either (pytest makes it an error): we rebuild it, not torch
    monkeypatch.setattr(ring, "_MAX_RINGS", 1)  # crow gets a ring; cols, values none
    sent = _csr(64, 400, seed=7)
    packed = pack_batch((sent,))
    assert not isinstance(packed, SlotBatch)  # nothing went in a slot
    got = pickle.loads(ForkingPickler.dumps(packed))[0]
    assert got.layout == torch.sparse_csr and got.shape == sent.shape
    assert torch.equal(got.to_dense(), sent.to_dense())
    gc.collect()
    assert _states().count(ring._BUSY) == 0  # the parts placed were never sent: freed


@pytest.mark.filterwarnings(_TORCHS_WAY)
def test_unregistered_layouts_go_torchs_way_in_one_process(in_worker):
    coo, csc = torch.eye(3).to_sparse(), _csr(5, 7, seed=2).to_sparse_csc()
    packed = pack_batch({"coo": coo, "csc": csc})
    assert not isinstance(packed, SlotBatch) and packed["coo"] is coo  # left to torch
    got = pickle.loads(ForkingPickler.dumps(packed))
    for name, sent in (("coo", coo), ("csc", csc)):
        assert got[name].layout == sent.layout
        assert torch.equal(got[name].to_dense(), sent.to_dense())


class _Sparse(Dataset[Any]):
    """A batch-indexing dataset whose batches hold CSR (and, with ``others``, COO and CSC)."""

    supports_batch_indexing = True

    def __init__(self, n: int, others: bool) -> None:
        self.n = n
        self.others = others

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        rows = torch.as_tensor(index)
        batch = {"csr": _batch_csr(rows), "idx": rows}
        if self.others:
            batch["coo"] = batch["csr"].to_sparse_coo()
            batch["csc"] = batch["csr"].to_sparse_csc()
        return batch


def _batch_csr(rows: torch.Tensor) -> torch.Tensor:
    """Row i of the batch holds entries i..i+2 of value i (cut at 20 columns)."""
    dense_ = torch.zeros(len(rows), 20)
    for k, r in enumerate(rows.tolist()):
        dense_[k, r % 18 : r % 18 + 3] = float(r)
    return _csr_of(dense_)


def _csr_of(dense_: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # torch's "beta" notice, once per process
        warnings.simplefilter("ignore", UserWarning)
        return dense_.to_sparse_csr()


def _check(batch: dict[str, Any]) -> None:
    want = _batch_csr(batch["idx"]).to_dense()
    assert batch["csr"].layout == torch.sparse_csr
    assert torch.equal(batch["csr"].to_dense(), want)
    if "coo" in batch:
        assert batch["coo"].layout == torch.sparse_coo
        assert batch["csc"].layout == torch.sparse_csc
        assert torch.equal(batch["coo"].to_dense(), want)
        assert torch.equal(batch["csc"].to_dense(), want)


def _in_a_ring(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` views a ring this (the main) process received."""
    ptr = tensor.data_ptr()
    return any(
        r.tensor.data_ptr() <= ptr < r.tensor.data_ptr() + r.tensor.numel()
        for r in ring._received.get().values()
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_csr_batch_from_a_worker_process_arrives_through_rings():
    loader = batched_loader(_Sparse(40, others=False), 8, num_workers=1, timeout=60)
    seen, in_slots = [], 0
    for batch in loader:  # each dropped before the next: its slots come back
        _check(batch)
        parts = (batch["csr"].crow_indices(), batch["csr"].col_indices(), batch["csr"].values())
        in_slots += all(_in_a_ring(part) for part in parts)  # views of slots, rebuilt by its layout
        seen += batch["idx"].tolist()
    assert seen == list(range(40))
    # at least the first: a batch in flight while every slot is out goes in fresh segments
    assert in_slots >= 1


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.filterwarnings(_TORCHS_WAY)
def test_unregistered_layouts_arrive_from_a_worker_process():
    loader = batched_loader(_Sparse(24, others=True), 6, num_workers=1, timeout=60)
    got = list(loader)
    assert torch.cat([b["idx"] for b in got]).tolist() == list(range(24))
    for batch in got:
        _check(batch)
