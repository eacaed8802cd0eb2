"""accelerate: ``accelerator.prepare(loader)`` on 2 CPU processes started by torch's launcher.

accelerate splits every prepared loader's batches across its processes. Over a dataset that holds
every row, the rows of both processes together must be the file's rows exactly once per epoch
(plus accelerate's own ``even_batches`` pad, which fills the last round of batches from the start
of the epoch), in another order each epoch; our samplers notice accelerate and hand it the whole
epoch. Over ``RankMemCachedH5Dataset`` (already one shard per process) ``prepare`` must refuse
with a message naming the fix. Resume from accelerate's ``use_stateful_dataloader=True`` state and
from a plain torchdata ``StatefulDataLoader`` must be exact. accelerate's ``even_batches``
(docs/integrations.md): its default repeats exactly the pad it implies, from the start of the
epoch, in every loader (a plain ``DataLoader`` too); ``even_batches=False`` gives every row once.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
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
LAUNCH_S = 400  # one launch runs the cases of three tests (the ``launched`` fixture)


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

    Also tries the call ``accelerator.prepare(batched_loader(shard, 32,
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
@pytest.mark.timeout(LAUNCH_S + 60)
def test_rank_cache_with_accelerate_prepares_the_model_only_and_is_exact(launched):
    ranks = [rank["rank_cache"] for rank in launched[0]]
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
@pytest.mark.timeout(LAUNCH_S + 60)
def test_settings_that_split_silently_are_exact_or_refused(launched):
    """``use_seedable_sampler=True`` / ``dispatch_batches=True`` tell our samplers nothing.

    The samplers notice at the first ``set_epoch`` / pass (every process, so none waits in a
    broadcast for another): over a shard, or when they split across ranks themselves, they
    refuse with the fix; otherwise accelerate's split is the only one and the epoch is exact.
    """
    ranks = [rank["silent"] for rank in launched[0]]
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


# --- even_batches: accelerate's pad, and the exact epoch without it -------------------------------

#: 1,003 rows: 32 batches, 16 on each process, the last one short; 971 rows: 31 batches, so the
#: processes get 16 and 15 (the expected counts below are derived, not written out)
EVEN_SIZES = (ROWS, ROWS - BATCH)
#: a plain DataLoader(shuffle=True), batched_loader(shuffle=True), our DistributedEpochSampler
EVEN_CASES = ("lazy_plain", "lazy_batched", "dist")
GLOBAL_BATCH = WORLD * BATCH


def _write_values(path: Path, rows: int) -> Path:
    """``write_indexed`` with columns 1..3 of ``x`` random, so a batch's values say something."""
    write_indexed(path, rows=rows)
    with h5py.File(path, "r+") as f:
        f["x"][:, 1:] = np.random.default_rng(rows).standard_normal((rows, 3), dtype=np.float32)
    return path


def _even_batches_rank(paths: dict[int, str]) -> dict[str, Any]:
    """Two epochs of every case over every file, with ``even_batches`` True (default) and False."""
    from accelerate import Accelerator, DataLoaderConfiguration

    runs: dict[tuple[bool, int, str], Any] = {}
    for even in (True, False):
        accelerator = Accelerator(
            cpu=True, dataloader_config=DataLoaderConfiguration(even_batches=even)
        )
        for rows, path in paths.items():
            for case in EVEN_CASES:
                loader = accelerator.prepare(make_loader(case, Path(path)))
                epochs, gathered = [], []
                for _ in range(2):
                    batches, metrics = [], []
                    for x, y in loader:
                        batches.append((batch_rows((x, y)), x.numpy()))
                        if even:  # a gather needs the same batch shape on every process
                            metrics += accelerator.gather_for_metrics(y).tolist()
                    epochs.append(batches)
                    gathered.append(metrics)
                run = {"epochs": epochs, "gathered": gathered, "len": len(loader)}
                runs[even, rows, case] = run
    return {"runs": runs, "rank": accelerator.process_index}


def _launched_rank(path: str, even_paths: dict[int, str]) -> dict[str, Any]:
    """The cases of the tests below on one process; the rank cache's DDP model comes last."""
    return {
        "silent": _silent_split_rank(path),
        "even": _even_batches_rank(even_paths),
        "rank_cache": _rank_cache_pattern(path),
    }


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], Path]:
    """What every process returned, from one launch for the tests below (a launch of two
    processes that import torch and accelerate costs seconds; the cases need no fresh one),
    and the folder of the files they read."""
    folder = tmp_path_factory.mktemp("launched")
    path = write_indexed(folder / "rows.h5")
    even = {rows: str(_write_values(folder / f"rows{rows}.h5", rows)) for rows in EVEN_SIZES}
    ranks = run_ddp(_launched_rank, WORLD, folder / "out", str(path), even, timeout=LAUNCH_S)
    return ranks, folder


@pytest.fixture(scope="module")
def even_batches_runs(launched: tuple[list[Any], Path]) -> tuple[list[Any], dict[int, Any]]:
    """Every process's batches and each file's ``x``, read by h5py."""
    ranks = [rank["even"] for rank in launched[0]]
    assert [rank["rank"] for rank in ranks] == list(range(WORLD))
    values = {}
    for rows in EVEN_SIZES:
        with h5py.File(launched[1] / f"rows{rows}.h5", "r") as f:
            values[rows] = f["x"][:]
    return ranks, values


def _per_rank(ranks: list[Any], even: bool, rows: int, case: str, epoch: int) -> list[Any]:
    return [rank["runs"][even, rows, case]["epochs"][epoch] for rank in ranks]


def _check_values(per_rank: list[Any], x: np.ndarray) -> None:
    """Every batch holds the file's values of its rows (a direct h5py read), padded rows too."""
    for batches in per_rank:
        for rows, values in batches:
            np.testing.assert_array_equal(values, x[rows])


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_S + 60)
def test_even_batches_default_repeats_the_start_of_each_epoch(even_batches_runs):
    """accelerate's default fills the last round of batches from the start of the epoch."""
    ranks, values = even_batches_runs
    for rows in EVEN_SIZES:
        pad = -rows % GLOBAL_BATCH  # up to the next whole round: one full batch per process
        assert 0 < pad <= GLOBAL_BATCH - 1
        rounds = (rows + pad) // GLOBAL_BATCH
        for case in EVEN_CASES:
            runs = [rank["runs"][True, rows, case] for rank in ranks]
            assert [run["len"] for run in runs] == [rounds] * WORLD, (rows, case)
            for epoch in range(2):
                per_rank = _per_rank(ranks, True, rows, case, epoch)
                sizes = [[len(batch) for batch, _ in batches] for batches in per_rank]
                assert sizes == [[BATCH] * rounds] * WORLD, (rows, case)
                _check_values(per_rank, values[rows])
                flat = [[row for batch, _ in batches for row in batch] for batches in per_rank]
                repeats = check_exactly_once(flat, rows, max_repeats=GLOBAL_BATCH - 1)
                assert repeats == pad, (rows, case, repeats)
                # the pad is the head of this epoch's order: the first round, in process order
                first = [row for batches in per_rank for row in batches[0][0]]
                last = [row for batches in per_rank for row in batches[-1][0]]
                assert last[-pad:] == first[:pad], (rows, case)
                # gather_for_metrics drops the pad: evaluation sees every row once
                for run in runs:
                    assert sorted(run["gathered"][epoch]) == list(range(rows)), (rows, case)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_S + 60)
def test_even_batches_false_gives_every_row_exactly_once(even_batches_runs):
    """``even_batches=False``: no pad; the last batch is short and a process may get one fewer."""
    ranks, values = even_batches_runs
    counts_seen = set()
    for rows in EVEN_SIZES:
        batches = -(-rows // BATCH)  # the loader's own batches; accelerate deals them round-robin
        counts = [len(range(rank, batches, WORLD)) for rank in range(WORLD)]
        counts_seen.add(tuple(counts))
        short = rows - (batches - 1) * BATCH  # the last batch, on process (batches - 1) % WORLD
        for case in EVEN_CASES:
            runs = [rank["runs"][False, rows, case] for rank in ranks]
            assert [run["len"] for run in runs] == counts, (rows, case)
            for epoch in range(2):
                per_rank = _per_rank(ranks, False, rows, case, epoch)
                assert [len(batches) for batches in per_rank] == counts, (rows, case)
                assert len(per_rank[(batches - 1) % WORLD][-1][0]) == short, (rows, case)
                sizes = sorted(len(batch) for batches in per_rank for batch, _ in batches)
                assert sizes == [short] + [BATCH] * (batches - 1), (rows, case)
                _check_values(per_rank, values[rows])
                flat = [[row for batch, _ in batches for row in batch] for batches in per_rank]
                assert check_exactly_once(flat, rows, max_repeats=0) == 0
    # both situations were run: equal batch counts, and one process a batch short
    assert {len(set(counts)) for counts in counts_seen} == {1, 2}
