"""Fixtures of the transport's tests."""

from __future__ import annotations

import pytest

from nn_handler.dataloaders._transport import buffers, pack, ring, shared_memory


@pytest.fixture
def in_worker(monkeypatch):
    """This process plays a worker (its rings) and the main process (what it receives)."""
    for module in (ring, shared_memory, pack, buffers):
        monkeypatch.setattr(module, "in_worker_process", lambda: True)
    monkeypatch.setattr(ring, "_worker_rings", ring.PerProcess(ring._WorkerRings))
    monkeypatch.setattr(ring, "_received", ring.PerProcess(dict))
