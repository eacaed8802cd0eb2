"""_transport/shared_memory: batches leave a worker process already in shared memory, and a full
/dev/shm is a MemoryError in words (once, the batch was dropped and the loader hung)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nn_handler.dataloaders._transport import shared_memory
from nn_handler.dataloaders._transport.shared_memory import SHM_PATH, new_shared, share_batch

FULL = "unable to allocate shared memory(shm) for file </torch_1_2_3>: No space left on device (28)"


@pytest.fixture
def in_worker(monkeypatch):
    monkeypatch.setattr(shared_memory, "in_worker_process", lambda: True)


def test_share_batch_leaves_the_main_process_alone():
    batch = (torch.arange(4), {"y": torch.ones(2)})
    assert share_batch(batch) is batch
    assert not batch[0].is_shared() and not batch[1]["y"].is_shared()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state:UserWarning")
def test_share_batch_moves_every_tensor_of_a_worker_batch(in_worker):
    rows, cols = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
    csr = torch.sparse_csr_tensor(rows, cols, torch.ones(2), check_invariants=True)
    already = torch.zeros(3).share_memory_()
    dense = torch.arange(6).reshape(2, 3)[:, 1:]  # a view: its whole storage moves
    batch = share_batch([dense, {"csr": csr, "n": 3}, (already, "name")])
    assert dense.is_shared() and dense.tolist() == [[1, 2], [4, 5]]
    assert all(t.is_shared() for t in (csr.crow_indices(), csr.col_indices(), csr.values()))
    assert batch[2][0] is already and batch[1]["n"] == 3


def test_new_shared_is_shared_with_the_shape_and_dtype_asked(in_worker):
    tensor = new_shared((3, 2), np.dtype(np.int16))
    assert tensor.is_shared() and tensor.shape == (3, 2) and tensor.dtype == torch.int16


def _refuse(message):
    def refuse(*args, **kwargs):
        raise RuntimeError(message)

    return refuse


def test_a_full_dev_shm_is_a_memory_error_in_words(in_worker, monkeypatch):
    monkeypatch.setattr(torch.TypedStorage, "_new_shared", _refuse(FULL))
    monkeypatch.setattr(shared_memory, "shm_space", lambda path=SHM_PATH: (180 * 1024, 9 << 20))
    with pytest.raises(MemoryError) as info:
        new_shared((512, 64), np.dtype(np.float32))
    text = str(info.value)
    assert "batch of 128.0 KiB" in text and "No space left on device" in text
    assert "/dev/shm has 180.0 KiB free of 9.0 MiB" in text
    for advice in ("--shm-size", "prefetch_factor", "worker_mode='thread'", "share_memory=False"):
        assert advice in text
    monkeypatch.setattr(torch.Tensor, "share_memory_", _refuse(FULL))
    with pytest.raises(MemoryError, match=r"batch of 24 B in shared memory"):
        share_batch((torch.zeros(3, dtype=torch.float64),))


def test_other_sharing_errors_are_raised_unchanged(in_worker, monkeypatch):
    monkeypatch.setattr(torch.Tensor, "share_memory_", _refuse("Too many open files"))
    with pytest.raises(RuntimeError, match=r"^Too many open files$"):
        share_batch(torch.zeros(3))
