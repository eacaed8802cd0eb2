"""accelerate: ``accelerator.prepare(loader)`` on 2 CPU processes started by torch's launcher.

accelerate splits every prepared loader's batches across its processes. Over a dataset that holds
every row, the rows of both processes together must be the file's rows exactly once per epoch
(plus accelerate's own ``even_batches`` pad, which fills the last round of batches from the start
of the epoch), in another order each epoch; our samplers notice accelerate and hand it the whole
epoch. Over ``RankMemCachedH5Dataset`` (already one shard per process) ``prepare`` must refuse
with a message naming the fix. Resume from accelerate's ``use_stateful_dataloader=True`` state and
from a plain torchdata ``StatefulDataLoader`` must be exact.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from helpers.ddp import free_port, run_ddp
from helpers.integrations import (
    BATCH,
    ROWS,
    SHARD_CASES,
    WHOLE_CASES,
    batch_rows,
    check_exactly_once,
    make_loader,
    quiet,
    stateful_resume_is_exact,
    write_indexed,
)

pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

import torch
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    DistributedEpochSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)

WORLD = 2


def _epochs(loader: Any, epochs: int = 2) -> list[list[int]]:
    return [[row for batch in loader for row in batch_rows(batch)] for _ in range(epochs)]


def _accelerate_resume(path: Path) -> bool:
    """accelerate's own stateful loader: stop after 5 batches, resume in a fresh one."""
    from accelerate import Accelerator, DataLoaderConfiguration

    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    whole = H5LazyDataset(path, "x", "y")

    def prepared() -> Any:
        sampler = DistributedEpochSampler(len(whole), seed=1)
        return accelerator.prepare(batched_loader(whole, BATCH, sampler=sampler))

    full = _epochs(prepared(), 1)[0]
    first, head = prepared(), []
    for i, batch in enumerate(first):
        head += batch_rows(batch)
        if i == 4:
            break
    state = first.state_dict()
    second = prepared()
    second.load_state_dict(state)
    tail = [row for batch in second for row in batch_rows(batch)]
    return head + tail == full


def _run_rank(path: str) -> dict[str, Any]:
    """One process: every case through ``accelerator.prepare``, then the resume checks."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    rows: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for case in (*WHOLE_CASES, *SHARD_CASES):
            try:
                loader = accelerator.prepare(make_loader(case, Path(path)))
            except ValueError as exc:
                rows[case] = str(exc)
                continue
            rows[case] = {"epochs": _epochs(loader), "batches": len(loader)}
    whole = H5LazyDataset(path, "x", "y")
    shard = RankMemCachedH5Dataset(path, "x", "y", log_fn=quiet)
    resume = {
        "accelerate": _accelerate_resume(Path(path)),
        "dist": stateful_resume_is_exact(
            lambda: DistributedEpochSampler(len(whole), seed=1), whole, batched=True
        ),
        "chunk": stateful_resume_is_exact(
            lambda: ChunkShuffleSampler(whole, seed=2, window_chunks=4), whole, batched=True
        ),
        "rank": stateful_resume_is_exact(lambda: shard.make_sampler(), shard, batched=False),
    }
    ours = [str(w.message) for w in caught if "Sampler" in str(w.message)]
    return {"rows": rows, "resume": resume, "warnings": ours, "rank": accelerator.process_index}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_accelerate_prepare_on_two_processes(tmp_path):
    path = write_indexed(tmp_path / "rows.h5")
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=WORLD,
        run_id="nn_handler_accelerate",
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{free_port()}",
        max_restarts=0,
        monitor_interval=0.5,
    )
    results = elastic_launch(config, _run_rank)(str(path))
    ranks = [results[r] for r in range(WORLD)]
    assert [rank["rank"] for rank in ranks] == [0, 1]
    for case in WHOLE_CASES:
        batches = ranks[0]["rows"][case]["batches"]
        for epoch in range(2):
            per_rank = [rank["rows"][case]["epochs"][epoch] for rank in ranks]
            # accelerate's even_batches: every batch full, the last round filled from the start
            repeats = check_exactly_once(per_rank, ROWS, max_repeats=WORLD * BATCH - 1)
            assert repeats == batches * BATCH * WORLD - ROWS, case
            assert [len(rows) for rows in per_rank] == [batches * BATCH] * WORLD, case
        for rank in ranks:
            assert rank["rows"][case]["epochs"][0] != rank["rows"][case]["epochs"][1], case
    for case in SHARD_CASES:
        for rank in ranks:
            message = rank["rows"][case]
            assert isinstance(message, str), f"{case}: prepare() accepted a sharded dataset"
            assert "rank-sharded dataset" in message and "prepare the model" in message
    for rank in ranks:
        assert rank["resume"] == dict.fromkeys(("accelerate", "dist", "chunk", "rank"), True)
        assert rank["warnings"] == []


def _rank_cache_pattern(path: str) -> dict[str, Any]:
    """docs/integrations.md's pattern for the rank cache: prepare the model and optimizer only.

    Also tries the issue's ``accelerator.prepare(batched_loader(shard, 32,
    sampler=shard.make_sampler()))``, which must refuse with the fix in words.
    """
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    shard = RankMemCachedH5Dataset(path, "x", "y", log_fn=quiet)
    try:
        accelerator.prepare(batched_loader(shard, BATCH, sampler=shard.make_sampler()))
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    loader = batched_loader(shard, BATCH, sampler=shard.make_sampler())
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    model, optimizer = accelerator.prepare(model, optimizer)  # DDP: a step waits for every rank
    epochs = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        rows: list[int] = []
        for x, y in loader:
            x, y = x.to(accelerator.device), y.to(accelerator.device)
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y.float())
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            rows += batch_rows((x, y))
        epochs.append(rows)
    return {"rank": accelerator.process_index, "refused": refused, "epochs": epochs}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rank_cache_with_accelerate_prepares_the_model_only_and_is_exact(tmp_path):
    path = write_indexed(tmp_path / "rows.h5")
    ranks = run_ddp(_rank_cache_pattern, WORLD, tmp_path / "out", str(path), timeout=240)
    assert [rank["rank"] for rank in ranks] == [0, 1]
    for rank in ranks:
        assert "rank-sharded dataset" in rank["refused"] and "prepare the model" in rank["refused"]
        assert rank["epochs"][0] != rank["epochs"][1]  # a new order each epoch
    for epoch in range(2):
        per_rank = [rank["epochs"][epoch] for rank in ranks]
        # equal_steps="pad": the shorter shard repeats at most world_size - 1 of its rows
        check_exactly_once(per_rank, ROWS, max_repeats=WORLD - 1)
        assert len(per_rank[0]) == len(per_rank[1])  # the same number of steps on each rank
        assert not set(per_rank[0]) & set(per_rank[1])  # each rank trains only its own shard


#: accelerate settings that split a prepared loader without giving its sampler a generator
SILENT_SPLITS = ("use_seedable_sampler", "dispatch_batches")
#: our samplers that split across ranks themselves: a second, silent split is refused
SPLITTING_CASES = ("dist", "dist_plain", "chunk")


def _silent_loader(case: str, path: Path) -> Any:
    """``make_loader``'s cases, plus an ``EpochShuffleSampler`` over a dataset of every row."""
    if case == "whole_shuffle":
        ds = H5LazyDataset(path, "x", "y")
        return batched_loader(ds, BATCH, sampler=EpochShuffleSampler(len(ds), seed=3))
    return make_loader(case, path)


def _silent_split_rank(path: str) -> dict[str, Any]:
    """Every case through ``prepare()`` under each of ``SILENT_SPLITS``; rows or the error."""
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.utils import set_seed

    rows: dict[str, Any] = {}
    for setting in SILENT_SPLITS:
        set_seed(0)  # accelerate's RandomSampler stand-in draws from torch's seed
        config = DataLoaderConfiguration(**{setting: True})
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        for case in (*WHOLE_CASES, "whole_shuffle", *SHARD_CASES):
            loader = accelerator.prepare(_silent_loader(case, Path(path)))
            try:
                rows[f"{setting}/{case}"] = _epochs(loader)
            except ValueError as exc:
                rows[f"{setting}/{case}"] = str(exc)
    return {"rows": rows, "rank": accelerator.process_index}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_settings_that_split_silently_are_exact_or_refused(tmp_path):
    """``use_seedable_sampler=True`` / ``dispatch_batches=True`` tell our samplers nothing.

    The samplers notice at the first ``set_epoch`` / pass (every process, so none waits in a
    broadcast for another): over a shard, or when they split across ranks themselves, they
    refuse with the fix; otherwise accelerate's split is the only one and the epoch is exact.
    """
    path = write_indexed(tmp_path / "rows.h5")
    ranks = run_ddp(_silent_split_rank, WORLD, tmp_path / "out", str(path), timeout=240)
    assert [rank["rank"] for rank in ranks] == [0, 1]
    for setting in SILENT_SPLITS:
        for case in SHARD_CASES:
            for rank in ranks:
                message = rank["rows"][f"{setting}/{case}"]
                assert isinstance(message, str), f"{setting}/{case}: a shard was split again"
                assert "rank-sharded dataset" in message and "accelerator.prepare(model" in message
                assert "x.to(accelerator.device)" in message
        for case in SPLITTING_CASES:
            for rank in ranks:
                message = rank["rows"][f"{setting}/{case}"]
                assert isinstance(message, str), f"{setting}/{case}: split twice, silently"
                assert "use_seedable_sampler=False and dispatch_batches=False" in message
        for case in ("lazy_plain", "lazy_batched", "whole_shuffle"):
            for epoch in range(2):
                per_rank = [rank["rows"][f"{setting}/{case}"][epoch] for rank in ranks]
                assert isinstance(per_rank[0], list), f"{setting}/{case}: {per_rank[0]}"
                check_exactly_once(per_rank, ROWS, max_repeats=WORLD * BATCH - 1)
