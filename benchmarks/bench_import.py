"""What importing nn_handler costs a fresh process beyond torch, h5py and numpy, tree against tree.

Every spawn or forkserver DataLoader worker is such a process: it imports what unpickling its
dataset needs before its first batch. Each round starts one fresh process per tree and way of
loading code (the trees' order swapped every round); the process imports torch, h5py and numpy,
then times, one after the other:

* ``package``: ``import nn_handler.dataloaders``;
* ``worker``: then ``nn_handler.dataloaders.h5_dataloader`` (what a spawn worker adds to unpickle
  an ``H5LazyDataset``; 0 where the package already imported it);
* ``surface``: then every name of ``nn_handler.dataloaders.__all__``;
* ``first batch``: ``batched_loader`` over a gzip file with 2 spawn workers, from ``iter`` to
  the first batch (the workers start, import, open the file and decode; ``--no-batch`` skips it).

Two ways of loading code: ``bytecode`` (each tree's bytecode written once, in a private cache
folder, and read back, as in an installed package) and ``compiled`` (the tree compiled at each
import, as in a checkout with ``PYTHONDONTWRITEBYTECODE=1``; torch & co. keep their bytecode).
The process collects garbage once after importing torch & co.: the full collection their objects
are due would otherwise fall into whichever step allocates past the threshold (~0.05-0.1 s on
this machine), whatever that step costs itself. It also lists which heavy optional modules the
``package`` and ``worker`` steps loaded.

Run: ``python benchmarks/bench_import.py [--src /path/to/other/src ...] [--rounds 7]``
(``--src`` names another tree, e.g. a checkout of an older commit; this tree is always timed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import alternating, median

HERE = str(Path(__file__).resolve().parents[1] / "src")
#: modules a worker should not pay for unless its data needs them
HEAVY = (
    "imagecodecs", "hdf5plugin", "blosc2", "numcodecs", "fsspec", "aiohttp", "tqdm.auto",
    "scipy", "pandas", "anndata", "lightning", "pytorch_lightning",
)  # fmt: skip
STEPS = ("package", "worker", "surface", "first batch")
MODES = ("bytecode", "compiled")

PROBE = r"""
import gc, importlib, json, sys, time
heavy = sys.argv[1].split(",")
def loaded():
    return sorted(m for m in heavy if m in sys.modules)
t = [time.perf_counter()]
import torch, h5py, numpy
t.append(time.perf_counter())
gc.collect()  # the full collection torch's objects are due: theirs, whichever import trips it
t[1] = time.perf_counter()
import nn_handler.dataloaders as d
t.append(time.perf_counter())
after_package = loaded()
importlib.import_module("nn_handler.dataloaders.h5_dataloader")
t.append(time.perf_counter())
after_worker = loaded()
for name in d.__all__:
    getattr(d, name)
t.append(time.perf_counter())
out = {"base": t[1] - t[0], "package": t[2] - t[1], "worker": t[3] - t[2],
       "surface": t[4] - t[3], "heavy_package": after_package, "heavy_worker": after_worker}
if len(sys.argv) > 2:
    ds = d.H5LazyDataset(sys.argv[2], "x", "y")
    loader = d.batched_loader(ds, 256, num_workers=2, multiprocessing_context="spawn")
    began = time.perf_counter()
    next(iter(loader))
    out["first batch"] = time.perf_counter() - began
print(json.dumps(out))
"""


def _env(src: str, mode: str, cache: str) -> dict[str, str]:
    """The child's environment: ``src`` first on the path, bytecode cached or not."""
    env = dict(os.environ, PYTHONPATH=src)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if mode == "bytecode":
        env["PYTHONPYCACHEPREFIX"] = cache  # (never writes into the trees themselves)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _probe(src: str, mode: str, cache: str, data: str | None) -> dict[str, Any] | None:
    """One fresh process's timings (None when it failed: its stderr is printed)."""
    argv = [sys.executable, "-c", PROBE, ",".join(HEAVY), *([data] if data else [])]
    done = subprocess.run(
        argv, env=_env(src, mode, cache), capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode:
        print(f"{src} ({mode}) failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def write_data(path: str, rows: int = 20_000) -> None:
    """A gzip-1 file of ``rows`` rows of 256 float32 in chunks of 256 rows, and int64 labels."""
    import h5py
    import numpy as np

    x = np.random.default_rng(0).standard_normal((rows, 256)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(256, 256), compression="gzip", compression_opts=1)
        f.create_dataset("y", data=np.arange(rows, dtype=np.int64))


def summarize(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median seconds of each step over ``runs`` (NaN for a step never timed)."""
    return {step: median(r.get(step, float("nan")) for r in runs) for step in STEPS}


def format_table(results: dict[tuple[str, str], list[dict[str, Any]]], labels: list[str]) -> str:
    """A Markdown table: one row per (tree, mode), median ms per step."""
    lines = [
        "| tree | code | package (ms) | + worker (ms) | package + worker (ms) | + surface (ms) "
        "| first batch, 2 spawn workers (ms) | rounds |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label in labels:
        for mode in MODES:
            runs = results.get((label, mode), [])
            m = {k: v * 1000 for k, v in summarize(runs).items()}
            lines.append(
                f"| {label} | {mode} | {m['package']:.0f} | {m['worker']:.0f} "
                f"| {m['package'] + m['worker']:.0f} | {m['surface']:.0f} "
                f"| {m['first batch']:.0f} | {len(runs)} |"
            )
    return "\n".join(lines)


def format_ratios(results: dict[tuple[str, str], list[dict[str, Any]]], labels: list[str]) -> str:
    """Each other tree's ``package + worker`` time over this tree's, per mode (medians)."""
    lines = []
    for mode in MODES:
        mine = summarize(results.get((labels[0], mode), []))
        for label in labels[1:]:
            other = summarize(results.get((label, mode), []))
            ratio = (other["package"] + other["worker"]) / (mine["package"] + mine["worker"])
            lines.append(f"- {mode}: {label} / this tree, package + worker: {ratio:.2f}")
    return "\n".join(lines)


def _heavy(results: dict[tuple[str, str], list[dict[str, Any]]], labels: list[str]) -> str:
    lines = []
    for label in labels:
        runs = results.get((label, "bytecode"), [])
        if runs:
            package, worker = runs[-1]["heavy_package"], runs[-1]["heavy_worker"]
            lines.append(
                f"- {label}: after package: {', '.join(package) or 'none'}; "
                f"after worker: {', '.join(worker) or 'none'}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", action="append", default=[], help="another tree's src (repeatable)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--no-batch", action="store_true", help="skip the first-batch step")
    args = p.parse_args(argv)
    trees = {"this tree": HERE, **{src: src for src in args.src}}
    labels = list(trees)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = None if args.no_batch else os.path.join(tmp, "gzip.h5")
        if data:
            write_data(data)
        cache = os.path.join(tmp, "bytecode")
        for src in trees.values():  # writes each tree's bytecode once, untimed
            _probe(src, "bytecode", cache, None)
        for _, order in alternating(labels, args.rounds):
            for label in order:
                for mode in MODES:
                    got = _probe(trees[label], mode, cache, data)
                    if got:
                        results.setdefault((label, mode), []).append(got)
    print(f"\n## Import cost beyond torch + h5py + numpy ({args.rounds} rounds, medians)\n")
    print(format_table(results, labels))
    print()
    print(format_ratios(results, labels))
    print("\nHeavy optional modules loaded (bytecode, last round):")
    print(_heavy(results, labels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
