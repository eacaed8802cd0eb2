"""_transport/worker: "in a DataLoader worker process?" is decided in one place, and a batch
that torch's collate stacks again is not read into a ring slot."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from nn_handler.dataloaders import H5LazyDataset
from nn_handler.dataloaders._core import readers
from nn_handler.dataloaders._transport import in_worker_process, ring

from helpers.platform_marks import needs_fork

SRC = Path(__file__).resolve().parents[2] / "src" / "nn_handler"
WORKER = SRC / "dataloaders" / "_transport" / "worker.py"
#: the decode pool sizes itself by the loader's workers; it sits below torch (in ``_io``), so it
#: finds torch's worker info without importing torch instead of asking the transport
POOL = SRC / "_io" / "chunks" / "pool.py"


def test_torch_worker_info_is_asked_in_one_module():
    askers = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        if "get_worker_info" in names:
            askers.append(path)
    assert sorted(askers) == sorted([WORKER, POOL])


class _Where(Dataset[tuple[bool, int]]):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> tuple[bool, int]:
        from nn_handler._io import loader_workers

        return in_worker_process(), loader_workers()


@needs_fork  # (the dataset is defined in this test module: fork, not spawn)
def test_the_answer_in_and_outside_worker_processes():
    assert _Where()[0] == (False, 1)
    loader = DataLoader(_Where(), batch_size=None, num_workers=2, multiprocessing_context="fork")
    assert [tuple(where) for where in loader] == [(True, 2), (True, 2)]


def test_samples_torch_stacks_again_stay_out_of_the_ring(in_worker, monkeypatch, make_h5):
    monkeypatch.setattr(readers, "in_worker_process", lambda: True)
    data = np.arange(40 * 6, dtype=np.float32).reshape(40, 6)
    ds = H5LazyDataset(make_h5({"x": (data, "gzip")}), "x")
    rings = ring._worker_rings.get()
    batch = ds[[3, 1, 2]]  # the batch that leaves the worker as it is: read into a slot
    assert rings.find(batch) is not None
    samples = ds.__getitems__([3, 1, 2])  # split, then stacked again by torch's collate
    assert all(rings.find(s) is None for s in samples)
    np.testing.assert_array_equal(torch.stack(samples).numpy(), batch.numpy())
    np.testing.assert_array_equal(batch.numpy(), data[[3, 1, 2]])
