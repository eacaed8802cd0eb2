"""RankMemCachedH5Dataset across real processes: gloo ranks, spawn DataLoader workers, memory."""

import os
import queue
import socket
from datetime import timedelta
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

from nn_handler.dataloaders import batched_loader
from nn_handler.dataloaders.rank_cached_h5_dataloader import RankMemCachedH5Dataset

from helpers.files import h5_rows, images, write_layout

pytestmark = pytest.mark.slow

TIMEOUT_S = 180
POLICIES = ["pad", "drop", None]
MODES = ["contiguous", "interleave"]


def quiet(_message: str) -> None:
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_rank(rank: int, worlds: dict, results) -> None:
    """One process: a DDP rank of each world it belongs to, one world after another (its rank
    detected from the process group), building every case's dataset there."""
    for world, (port, cases) in worlds.items():
        if rank >= world:
            continue
        try:
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=world,
                timeout=timedelta(seconds=60),
            )
            try:
                results.put((world, rank, {case[0]: run_case(*case[1:]) for case in cases}))
            finally:
                dist.destroy_process_group()
        except BaseException as exc:
            results.put((world, rank, f"rank {rank} of {world} failed: {exc!r}"))
            raise


def run_case(path: str, mode: str, policy) -> dict:
    try:
        ds = RankMemCachedH5Dataset(path, "x", "y", mode=mode, equal_steps=policy, log_fn=quiet)
    except ValueError as exc:
        return {"error": str(exc)}
    sampler = ds.make_sampler(seed=3)
    sampler.set_epoch(1)
    order = list(sampler)
    steps = 0
    if policy is not None:
        # what DDP does: one collective per batch; unequal counts would block here until timeout
        for _ in range(0, len(order), 2):
            dist.all_reduce(torch.ones(1))
            steps += 1
    return {
        "world": (ds.world.rank, ds.world.world_size),
        "rows": ds.y.numpy().copy(),
        "x": ds.x.numpy().copy(),
        "iterated": ds.y[order].numpy().copy(),
        "samples_per_rank": ds.samples_per_rank,
        "steps": steps,
    }


def run_worlds(cases: dict[int, list]) -> dict:
    """Each world's outcomes per rank (``None``: a rank sent none in time), and the exit codes.

    One set of spawned processes, as many as the largest world, is every world's ranks in turn:
    a rank imports torch once, not once per world.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    worlds = {world: (free_port(), world_cases) for world, world_cases in cases.items()}
    procs = [ctx.Process(target=run_rank, args=(r, worlds, results)) for r in range(max(worlds))]
    for p in procs:
        p.start()
    got: dict[int, dict] = {world: {} for world in worlds}
    try:
        for _ in range(sum(worlds)):  # one result from each rank of every world
            world, rank, outcome = results.get(timeout=TIMEOUT_S)
            got[world][rank] = outcome
    except queue.Empty:
        pass  # the worlds without all their results fail their own tests
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    outcomes: dict = {w: [ranks[r] for r in range(w)] if len(ranks) == w else None
                      for w, ranks in got.items()}  # fmt: skip
    return outcomes | {"exitcodes": [p.exitcode for p in procs]}


def world_cases(folder: Path, world: int) -> list:
    totals = [world - 1, 2 * world + 1, 7 * world + world - 1]  # none divides evenly
    paths = {}
    for t in totals:
        paths[t] = folder / f"world{world}-{t}.h5"
        with h5py.File(paths[t], "w") as f:
            write_layout(f, "x", images(t), "gzip")
            write_layout(f, "y", np.arange(t), "contiguous")
    return [
        (f"{t}-{mode}-{policy}", str(paths[t]), mode, policy)
        for t in totals
        for mode in MODES
        for policy in POLICIES
    ]


WORLDS = [2, 3, 4]


@pytest.fixture(scope="module")
def gloo_worlds(tmp_path_factory) -> tuple[dict[int, list], dict]:
    """Every world size's cases, and what its ranks gave (the ranks start once per module)."""
    folder = tmp_path_factory.mktemp("gloo_worlds")
    cases = {world: world_cases(folder, world) for world in WORLDS}
    return cases, run_worlds(cases)


@pytest.mark.parametrize("world", WORLDS)
def test_gloo_ranks_partition_the_file(gloo_worlds, world):
    cases, outcomes = gloo_worlds
    per_rank = outcomes[world]
    if per_rank is None:
        pytest.fail(f"a rank of world size {world} sent no result within {TIMEOUT_S} s")
    for r in range(world):
        assert isinstance(per_rank[r], dict), per_rank[r]
        assert outcomes["exitcodes"][r] == 0
    for name, path, _mode, policy in cases[world]:
        total = int(name.split("-")[0])
        outcomes = [results[name] for results in per_rank]
        if policy == "pad" and total < world:
            # every rank refuses the same way: none is left waiting for the others
            assert all("cannot pad an empty shard" in o["error"] for o in outcomes), outcomes
            continue
        check_partition(outcomes, path, total, world, policy)


def check_partition(outcomes: list[dict], path: str, total: int, world: int, policy) -> None:
    assert [o["world"] for o in outcomes] == [(r, world) for r in range(world)]
    rows = np.concatenate([o["rows"] for o in outcomes])
    assert sorted(rows.tolist()) == list(range(total))  # union is the file, no row twice
    file_x = h5_rows(path, "x")
    for o in outcomes:
        assert o["x"].tobytes() == file_x[o["rows"]].tobytes()
        assert len(o["iterated"]) == o["samples_per_rank"]
    counts = {len(o["iterated"]) for o in outcomes}
    if policy is None:
        return
    assert len(counts) == 1  # equal steps on every rank
    assert len({o["steps"] for o in outcomes}) == 1
    iterated = np.concatenate([o["iterated"] for o in outcomes]).tolist()
    if policy == "pad":
        assert set(iterated) == set(range(total)) and counts == {-(-total // world)}
    else:
        assert len(set(iterated)) == len(iterated) == total // world * world


def epoch_ys(loader, file_x: np.ndarray, epochs: int = 2) -> list[list[int]]:
    passes = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        ys = []
        for x, y in loader:
            np.testing.assert_array_equal(x.numpy(), file_x[y.numpy()])  # x travels with y
            ys.extend(y.tolist())
        passes.append(ys)
    return passes


@pytest.mark.parametrize("kind", ["DataLoader", "batched_loader"])
def test_spawn_workers_serve_the_shard(make_h5, kind):
    path = make_h5({"x": (images(50), "chunked"), "y": np.arange(50)})
    ds = RankMemCachedH5Dataset(
        path, "x", "y", mode="interleave", rank=2, world_size=3, log_fn=quiet, share_memory=True
    )
    sampler = ds.make_sampler(seed=1)
    common = {
        "num_workers": 2,
        "multiprocessing_context": "spawn",
        "persistent_workers": True,
        "timeout": TIMEOUT_S,
    }
    if kind == "DataLoader":
        loader = DataLoader(ds, batch_size=4, sampler=sampler, **common)
    else:
        loader = batched_loader(ds, 4, sampler=sampler, **common)
    passes = epoch_ys(loader, images(50))
    shard = np.arange(2, 50, 3).tolist()  # 16 rows; the other ranks hold 17
    for ys in passes:
        assert len(ys) == ds.samples_per_rank == 17
        assert set(ys) == set(shard)
    assert passes[0] != passes[1]


def memory_kb() -> dict[str, int]:
    with open("/proc/self/smaps_rollup") as f:
        fields = (line.split() for line in f if line.rstrip().endswith("kB"))
        return {parts[0].rstrip(":"): int(parts[1]) for parts in fields}


class TouchCache(Dataset):
    """Reads every byte of the cache in the worker and reports how the worker's memory grew."""

    def __init__(self, ds: RankMemCachedH5Dataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> torch.Tensor:
        before = memory_kb()
        checksum = float(self.ds.x.sum())
        after = memory_kb()
        uss = ("Private_Clean", "Private_Dirty")
        return torch.tensor(
            [
                os.getpid(),
                (after["Rss"] - before["Rss"]) * 1024,
                sum(after[k] - before[k] for k in uss) * 1024,
                checksum,
            ],
            dtype=torch.float64,
        )


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux smaps")
@pytest.mark.parametrize("share_memory", [True, False])
def test_spawn_workers_do_not_copy_the_cache(make_h5, share_memory):
    rows, width = 4096, 4096  # 64 MiB of float32 in the file, 32 MiB per rank
    data = np.broadcast_to(np.arange(rows, dtype=np.float32)[:, None], (rows, width))
    path = make_h5({"x": np.ascontiguousarray(data)})
    ds = RankMemCachedH5Dataset(
        path, "x", rank=0, world_size=2, log_fn=quiet, share_memory=share_memory
    )
    shard = ds.x.nbytes
    assert ds.x.is_shared() is share_memory
    loader = DataLoader(
        TouchCache(ds), batch_size=1, num_workers=2, multiprocessing_context="spawn"
    )
    reports = torch.cat(list(loader)).tolist()
    assert len({r[0] for r in reports}) == 2  # two workers measured
    for _pid, rss_growth, uss_growth, checksum in reports:
        # reading the cache mapped all its pages into the worker (so nothing was copied in
        # before), and none of them became the worker's private memory
        assert rss_growth >= 0.9 * shard, (rss_growth, shard)
        assert uss_growth < 0.15 * shard, (uss_growth, shard)
        assert checksum == pytest.approx(float(ds.x.sum()), rel=1e-5)
    # a private cache is moved into shared memory by torch when the workers start
    assert ds.x.is_shared()
