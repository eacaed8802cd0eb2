"""The seed's own DDP loop ("Basic Distributed Training Setup" of rank_cached_h5_dataloader.md).

``RankMemCachedH5Dataset`` + ``EpochShuffleSampler(len(dataset))`` + ``DataLoader`` + DDP on
2 ranks (gloo) over 1025 rows: shards of 513 and 512. Before ``len(dataset)`` became the same on
every rank, rank 0 ran 17 steps and rank 1 16, and the job hung in the next collective. In the
same processes: a sampler that splits nothing over a whole dataset warns, and ``NNHandler``
refuses torch's ``DistributedSampler`` over a rank-sharded dataset.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817  (the seed's name)
from torch.utils.data import DataLoader, DistributedSampler

from nn_handler import NNHandler
from nn_handler.dataloaders import H5LazyDataset
from nn_handler.dataloaders.rank_cached_h5_dataloader import (
    EpochShuffleSampler,
    RankMemCachedH5Dataset,
)

from helpers.ddp import run_ddp
from helpers.integrations import batch_rows, quiet, write_indexed

ROWS = 1025


def _seed_snippet(path: str) -> dict[str, Any]:
    dist.init_process_group(backend="gloo")
    dataset = RankMemCachedH5Dataset(
        path=path, x_key="x", y_key="y", mode="contiguous", pin_host_memory=True, log_fn=quiet
    )
    sampler = EpochShuffleSampler(data_len=len(dataset), seed=42, shuffle=True)
    dataloader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=0)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    epochs, steps = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(2):
            sampler.set_epoch(epoch)
            rows = []
            for batch in dataloader:
                inputs, _ = batch
                loss = model(inputs).sum() * 0.0  # a collective per step: unequal steps hang
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                rows += batch_rows(batch)
            epochs.append(rows)
            steps.append(len(rows))
    return {
        "epochs": epochs,
        "len": len(dataset),
        "padded": dataset.num_padded,
        "warnings": [str(w.message) for w in caught],
        "misuse": _misuse(path, dataset),
    }


def _misuse(path: str, dataset: RankMemCachedH5Dataset) -> dict[str, str]:
    whole = H5LazyDataset(path, "x", "y")
    loader = DataLoader(whole, batch_size=256, sampler=EpochShuffleSampler(len(whole)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = [row for batch in loader for row in batch_rows(batch)]
    handler = NNHandler(torch.nn.Linear(4, 1), use_distributed=True, log_fn=None)
    try:
        handler.set_train_loader(dataset, sampler=DistributedSampler(dataset), batch_size=32)
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    return {
        "warning": " | ".join(str(w.message) for w in caught),
        "rows": str(len(rows)),
        "refused": refused,
    }


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_seed_snippet_runs_equal_steps_exactly_once(tmp_path):
    path = write_indexed(tmp_path / "rows.h5", ROWS)
    results = run_ddp(_seed_snippet, 2, tmp_path / "out", str(path), timeout=240)
    assert [r["len"] for r in results] == [513, 513]
    assert [r["padded"] for r in results] == [0, 1]
    for epoch in range(2):
        per_rank = [r["epochs"][epoch] for r in results]
        assert [len(rows) for rows in per_rank] == [513, 513]  # 17 steps each
        seen = Counter(per_rank[0] + per_rank[1])
        assert set(seen) == set(range(ROWS))
        assert seen - Counter(range(ROWS)) == Counter([513])  # rank 1 repeats its first row
    for r in results:
        assert r["epochs"][0] != r["epochs"][1]
        assert r["warnings"] == []
        misuse = r["misuse"]
        assert misuse["rows"] == str(ROWS)  # every rank reads the whole file ...
        assert "DistributedEpochSampler(1025)" in misuse["warning"]  # ... and is told so
        assert "already holds only this rank's shard" in misuse["refused"]
