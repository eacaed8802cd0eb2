"""_transport/buffers: the one call a dataset makes for the tensor it writes its batch into."""

from __future__ import annotations

import numpy as np
import torch

from nn_handler.dataloaders._transport import output_buffer, ring


def test_in_a_worker_the_buffer_is_a_ring_slot(in_worker):
    out = output_buffer((16, 3), np.dtype(np.float32))
    assert out.shape == (16, 3) and out.dtype == torch.float32
    assert ring._worker_rings.get().find(out) is not None  # sent as a slot number


def test_without_room_for_a_ring_the_buffer_is_fresh_shared_memory(in_worker, monkeypatch):
    monkeypatch.setattr(ring, "shm_space", lambda: (1 << 20, 64 << 20))
    out = output_buffer((1 << 18,), np.dtype(np.float32))  # 1 MiB: two slots do not fit
    assert out.is_shared() and out.shape == (1 << 18,)
    assert ring._worker_rings.get().find(out) is None


def test_an_empty_buffer_in_a_worker_is_shared_memory(in_worker):
    out = output_buffer((0, 5), np.dtype(np.int64))
    assert out.shape == (0, 5) and out.dtype == torch.int64 and out.is_shared()


def test_outside_workers_there_is_no_buffer():
    # nothing leaves the process: the dataset reads into private memory as it would anyway
    assert output_buffer((4, 2), np.dtype(np.uint16)) is None
