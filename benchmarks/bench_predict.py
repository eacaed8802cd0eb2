"""NNHandler.predict's write rate on 2 gloo ranks against h5py writing the same rows alone.

An identity model over in-RAM rows (float32, ``--width`` values a row, ``--gb`` of output), so
what is timed is the writing: each rank compresses its chunks, rank 0 assembles the file
(encoded chunks copied with ``write_direct_chunk``), fsyncs it and moves it into place. The limit
(``peers/write_limit.py``) is the same array written by h5py in one process with the same chunks
and compression (gzip 1 + shuffle), without and with the same fsync, measured in the same run
and processes: rounds alternate limit and predict; medians of per-round ratios. Both files are
checked to hold the same rows.

Target: predict on 2 ranks >= 0.8 of the limit's rate.

Run: ``python benchmarks/bench_predict.py [--gb 1] [--rounds 3] [--ranks 2]`` or
``python benchmarks/run.py --predict [the same options]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import Check, alternating, format_targets, median, ratios
from benchmarks.registry import adapters

TARGET = 0.8


class Rows(torch.utils.data.Dataset[torch.Tensor]):
    """The inputs: a memory map of the rows (one copy in the page cache for every rank)."""

    supports_batch_indexing = True

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows = np.load(path, mmap_mode="r")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: Any) -> torch.Tensor:
        if isinstance(index, list):  # predict's batches are runs of rows: one slab
            return torch.from_numpy(np.array(self.rows[index[0] : index[-1] + 1]))
        return torch.from_numpy(np.array(self.rows[index]))


class Identity(torch.nn.Module):
    """``x * 1``: the identity (exact), with the parameter DDP insists on."""

    def __init__(self) -> None:
        super().__init__()
        self.one = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.one


def _rank(rank: int, world: int, port: int, folder: str, rounds: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from nn_handler import NNHandler

    handler = NNHandler(Identity, use_distributed=True, progress=False, log_fn=None)
    dataset = Rows(os.path.join(folder, "rows.npy"))
    (write_limit,) = adapters("predict", kind="limit").values()  # the one write limit
    times: dict[str, list[float]] = {"limit": [], "limit + fsync": [], "predict": []}
    chunk_rows = (1 << 20) // (dataset.rows.shape[1] * 4)
    for _, order in alternating(list(times), rounds):
        for name in order:
            dist.barrier(timeout=datetime.timedelta(seconds=600))
            target = os.path.join(folder, f"{name.replace(' ', '')}.h5")
            if name == "predict":
                start = time.perf_counter()
                handler.predict(dataset, target, batch_size=chunk_rows * 4)
                times[name].append(time.perf_counter() - start)
            elif rank == 0:
                fsync = name == "limit + fsync"
                times[name].append(write_limit(target, dataset.rows, chunk_rows, fsync=fsync))
    if rank == 0:
        Path(folder, "times.json").write_text(json.dumps(times))
    handler.close()


def _check_same_rows(folder: str) -> None:
    import h5py

    with (
        h5py.File(os.path.join(folder, "predict.h5")) as a,
        h5py.File(os.path.join(folder, "limit.h5")) as b,
    ):
        first, second = a["predictions"], b["predictions"]
        assert (first.shape, first.chunks) == (second.shape, second.chunks)
        for lo in range(0, len(first), 8192):
            assert np.array_equal(first[lo : lo + 8192], second[lo : lo + 8192])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=1.0)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--folder", default=None, help="where the files go (default: a temp folder)")
    args = p.parse_args(argv)
    n = int(args.gb * (1 << 30)) // (args.width * 4)
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        rng = np.random.default_rng(0)
        rows = np.lib.format.open_memmap(
            os.path.join(folder, "rows.npy"), "w+", np.float32, (n, args.width)
        )
        for lo in range(0, n, 8192):  # numbers with a float's usual spread of exponents
            rows[lo : lo + 8192] = rng.normal(size=(min(8192, n - lo), args.width))
        rows.flush()
        del rows
        times = _run_ranks(args.ranks, folder, args.rounds)
        _check_same_rows(folder)
    _report(times, n * args.width * 4, args)
    return 0


def _run_ranks(ranks: int, folder: str, rounds: int) -> dict[str, list[float]]:
    """Start the ranks, wait for them (a bound on every wait), return rank 0's times."""
    ctx = mp.get_context("spawn")
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=_rank, args=(r, ranks, port, folder, rounds)) for r in range(ranks)]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + 3600
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        if any(p.exitcode not in (None, 0) for p in procs):
            break
        time.sleep(0.5)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
        proc.join(30)
    codes = [proc.exitcode for proc in procs]
    if codes != [0] * ranks:
        raise SystemExit(f"ranks ended with exit codes {codes}")
    times: dict[str, list[float]] = json.loads(Path(folder, "times.json").read_text())
    return times


def _report(times: dict[str, list[float]], size: int, args: Any) -> None:
    rates = {name: [size / t / 1e6 for t in values] for name, values in times.items()}
    print(
        f"\n## predict's write rate ({args.gb:g} GB of float32 rows of {args.width}, gzip 1 + "
        f"shuffle, {args.ranks} gloo ranks, {args.rounds} rounds, medians)\n"
    )
    print("| writer | MB/s | seconds |")
    print("|---|---:|---:|")
    for name, values in rates.items():
        print(f"| {name} | {median(values):.0f} | {median(times[name]):.2f} |")
    vs_limit = median(ratios(rates["predict"], rates["limit"]))
    vs_fsync = median(ratios(rates["predict"], rates["limit + fsync"]))
    print()
    for line in format_targets(
        [Check(f"predict on {args.ranks} ranks / h5py write, one process", vs_limit, TARGET)]
    ):
        print(line)
    print(f"- predict / h5py write + fsync (the same durability): {vs_fsync:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
