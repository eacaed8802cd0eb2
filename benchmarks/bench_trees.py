"""Two source trees of nn_handler against each other on the W workloads, alternating.

Run: ``python benchmarks/bench_trees.py --before /path/to/old/src [--after src]
[--workloads W1,W2,W3,W4] [--scale 0.5] [--rounds 5] [--seconds 3] [--workers 0]
[--loaders batched,dataloader]``

Each round times ``H5LazyDataset`` + ``ChunkShuffleSampler`` + ``batched_loader`` (samples/s
over ``--seconds`` after the first batch; ``--loaders dataloader``: a plain
``DataLoader(ds, batch_size=256, sampler=...)``, whose batches go through ``__getitems__`` and
torch's collate) in a fresh process per tree, the order of the two
trees swapped every round, on the same files (written once with
``benchmarks.suites.workload_files``). For gzip workloads the same round also measures the
decode limit: libdeflate (imagecodecs) inflating the file's chunks in one thread, × the usable
cores (the targets' limit), and the same inflate run in one thread per usable core at once (what
the cores deliver together: on a shared VM below the first). Medians are printed, with after /
before and each tree's fraction of both. The old tree is e.g. a
``git worktree add /tmp/before <commit>``; its ``src`` goes to ``--before``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import alternating, median

CHILD = r"""
import json, sys, time
from nn_handler.dataloaders import ChunkShuffleSampler, H5LazyDataset, batched_loader
from torch.utils.data import DataLoader
path, seconds, workers, kind = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ds = H5LazyDataset(path, "central", "0/labels")
sampler = ChunkShuffleSampler(ds, batch_size=256, num_workers=workers)
if kind == "batched":
    loader = batched_loader(ds, 256, sampler=sampler, num_workers=workers)
else:  # a plain DataLoader: __getitems__, then torch's collate
    loader = DataLoader(ds, batch_size=256, sampler=sampler, num_workers=workers)
n, start, epoch = 0, None, 0
while start is None or time.perf_counter() - start < seconds:
    sampler.set_epoch(epoch)
    epoch += 1
    for _, yb in loader:
        if start is None:
            start = time.perf_counter()  # the first batch pays for workers and the window
            continue
        n += len(yb)
        if time.perf_counter() - start > seconds:
            break
print(json.dumps({"rate": n / (time.perf_counter() - start)}))
"""

LIMIT = r"""
import json, os, sys, threading, time
import h5py, imagecodecs, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    d = f["central"]
    if d.chunks is None or d.compression != "gzip":
        print(json.dumps({"limit": None}))
        sys.exit()
    rows = d.chunks[0]
    out = np.empty(rows * int(np.prod(d.shape[1:])) * d.dtype.itemsize, np.uint8)
    raws = []
    for i in range(0, d.shape[0], rows):
        if len(raws) * out.nbytes > 256 * 2**20:
            break
        raws.append(d.id.read_direct_chunk((i,) + (0,) * (d.ndim - 1))[1])
def inflate_all(dest):
    for raw in raws:
        imagecodecs.deflate_decode(raw, out=dest)
cores = len(os.sched_getaffinity(0))
best = together = 0.0
for _ in range(3):
    start = time.perf_counter()
    inflate_all(out)
    best = max(best, len(raws) * rows / (time.perf_counter() - start))
    dests = [np.empty_like(out) for _ in range(cores)]
    threads = [threading.Thread(target=inflate_all, args=(dest,)) for dest in dests]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = max(together, cores * len(raws) * rows / (time.perf_counter() - start))
print(json.dumps({"limit": best * cores, "together": together}))
"""


def _run(src: str, code: str, *args: object) -> dict[str, float] | None:
    env = dict(os.environ, PYTHONPATH=src)
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _compare(
    name: str, path: str, trees: dict[str, str], args: argparse.Namespace, kind: str
) -> str:
    rates: dict[str, list[float]] = {label: [] for label in trees}
    limits: list[float] = []
    together: list[float] = []
    for _, order in alternating(list(trees), args.rounds):
        for label in order:
            got = _run(trees[label], CHILD, path, args.seconds, args.workers, kind)
            if got:
                rates[label].append(got["rate"])
        limit = _run(trees["after"], LIMIT, path)
        if limit and limit["limit"]:
            limits.append(limit["limit"])
            together.append(limit["together"])
    before, after = median(rates["before"]), median(rates["after"])
    line = f"| {name} | {kind} | {args.workers} | {before:,.0f} | {after:,.0f}"
    line += f" | {after / before:.2f} |"
    if limits:
        limit = median(limits)
        line += f" {limit:,.0f} | {before / limit:.2f} | {after / limit:.2f} |"
        line += f" {median(together):,.0f} | {after / median(together):.2f} |"
    else:
        line += " — | — | — | — | — |"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the old tree's src directory")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parents[1] / "src"))
    parser.add_argument("--workloads", default="W1,W2,W3,W4")
    parser.add_argument("--scale", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--loaders", default="batched", help="comma-separated: batched, dataloader (__getitems__)"
    )
    args = parser.parse_args()
    from benchmarks.suites.workload_files import WORKLOADS, write_workload

    trees = {"before": args.before, "after": args.after}
    print(
        "| workload | loader | workers | before | after | after / before | limit | before / limit "
        "| after / limit | all cores at once | after / all cores |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for name in args.workloads.split(","):
            workload = WORKLOADS[name]
            n = max(1, int(workload.rows * args.scale))
            path = os.path.join(tmp, f"{name}.h5")
            write_workload(path, workload, n)
            for kind in args.loaders.split(","):
                print(_compare(name, path, trees, args, kind), flush=True)
            os.remove(path)


if __name__ == "__main__":
    main()
