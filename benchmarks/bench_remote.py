"""Training from a file on an HTTP server 20 ms away: cold, warm cache, local, h5py on fsspec.

Writes ``--n`` rows × 64 float32 in gzip chunks of 64 rows (the target file is 1M rows, 256 MB;
the default here is smaller so the run fits a shared 2-core machine), serves it from an aiohttp
Range server in its own process with ``--latency`` seconds added to every request, and times
one epoch of ``ChunkShuffleSampler`` + ``batched_loader`` (``num_workers=0``, batches of 256):

* local: ``H5LazyDataset`` on the file on disk (the reference);
* remote cold: ``H5LazyDataset(url, cache_dir=<empty>)``, timed from construction, with the
  sampler's default (on a URL: runs of 8 adjacent chunks, each fetched by one request);
* remote warm: a second epoch on the same node cache (a new dataset, timed from construction:
  its chunk index comes from the cache entry);
* remote cold, one chunk per block: no cache, ``ChunkShuffleSampler(block_size=64)`` (the
  default before runs of adjacent chunks);
* h5py on fsspec: the baseline a user writes first (``h5py.File(fsspec.open(url))``, one
  ``__getitem__`` per sample in shuffled order), for ``--seconds`` at most;
* bytes: how much of the file 1,000 random rows fetch cold (``ds[rows]``, no cache).

Every round measures all of these in turn; the report gives the medians of ``--rounds`` rounds
(ratios taken within each round) and checks the targets: cold >= 0.2x local,
>= 50x h5py on fsspec, warm >= 0.5x local, 1,000 random rows fetch <= 25 % of the file.

Run: ``python benchmarks/bench_remote.py [--n 250000] [--latency 0.02] [--seconds 20]
[--rounds 3]``, or ``python benchmarks/run.py --remote [the same options]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from nn_handler.dataloaders import ChunkShuffleSampler, H5LazyDataset, batched_loader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import median

ROOT = Path(__file__).resolve().parents[1]
WIDTH, CHUNK, BATCH = 64, 64, 256


def _write(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", (n, WIDTH), np.float32, chunks=(CHUNK, WIDTH), compression="gzip")
        step = 65536
        for lo in range(0, n, step):  # rounded normals: compressible, like real features
            x[lo : lo + step] = np.round(rng.standard_normal((min(step, n - lo), WIDTH)), 2)
        f.create_dataset("y", data=rng.integers(0, 10, n))


def _epoch(make, block_size: int | None = None) -> tuple[float, int]:
    """One epoch timed from construction; ``block_size`` None: the sampler's default."""
    began = time.perf_counter()
    ds = make()
    given = {} if block_size is None else {"block_size": block_size}
    sampler = ChunkShuffleSampler(ds, seed=1, **given)
    loader = batched_loader(ds, BATCH, sampler=sampler)
    rows = sum(len(y) for _, y in loader)
    return time.perf_counter() - began, rows


def _h5py_fsspec(url: str, n: int, seconds: float) -> float:
    import fsspec

    order = np.random.default_rng(2).permutation(n)
    began, done = time.perf_counter(), 0
    with fsspec.open(url, "rb") as fobj, h5py.File(fobj, "r") as f:
        x, y = f["x"], f["y"]
        for i in order:
            x[i], y[i]
            done += 1
            if time.perf_counter() - began > seconds:
                break
    return done / (time.perf_counter() - began)


def _round(path: Path, url: str, cache: Path, n: int, seconds: float) -> dict[str, float]:
    """One round of every measurement, on a fresh cache; rows/s, and bytes for 1,000 rows."""
    local_s, rows = _epoch(lambda: H5LazyDataset(path, "x", "y"))
    shutil.rmtree(cache, ignore_errors=True)
    cold_s, _ = _epoch(lambda: H5LazyDataset(url, "x", "y", cache_dir=cache))
    warm_s, _ = _epoch(lambda: H5LazyDataset(url, "x", "y", cache_dir=cache))
    single_s, _ = _epoch(lambda: H5LazyDataset(url, "x", "y"), block_size=CHUNK)
    picks = np.sort(np.random.default_rng(3).choice(n, 1000, replace=False))
    ds = H5LazyDataset(url, "x", "y")
    ds[picks.tolist()]
    fetched = ds._source.byte_source().fetched_bytes  # type: ignore[union-attr]
    return {
        "local": rows / local_s,
        "cold": rows / cold_s,
        "warm": rows / warm_s,
        "single": rows / single_s,
        "naive": _h5py_fsspec(url, n, seconds),
        "fetched": fetched,
    }


def _report(rounds: list[dict[str, float]], size: int) -> list[str]:
    """Median figures and ratios over the rounds (each ratio taken within its round)."""

    def med(key: str, over: str | None = None) -> float:
        return median(r[key] / (r[over] if over else 1) for r in rounds)

    lines = [
        f"  {name:<44} {med(key):10.0f} rows/s   {med(key, 'local'):6.2f}x local"
        for name, key in (
            ("local file", "local"),
            ("remote cold (from construction, cache_dir)", "cold"),
            ("remote warm cache (a new dataset)", "warm"),
            ("remote cold, no cache, one chunk per block", "single"),
        )
    ]
    lines.append(
        f"  {'h5py on an fsspec file object':<44} {med('naive'):10.1f} rows/s   "
        f"(ours cold: {med('cold', 'naive'):.0f}x)"
    )
    share = med("fetched") / size
    lines.append(f"  1,000 random rows cold fetch {med('fetched') / 1e6:.1f} MB = {share:.1%}")
    targets = (
        ("cold >= 0.2x local", med("cold", "local"), 0.2, True),
        ("cold >= 50x h5py on fsspec", med("cold", "naive"), 50, True),
        ("warm >= 0.5x local", med("warm", "local"), 0.5, True),
        ("1,000 random rows fetch <= 25% of the file", share, 0.25, False),
    )
    lines.append("targets (medians of the per-round ratios):")
    for label, value, goal, above in targets:
        met = value >= goal if above else value <= goal
        lines.append(f"- {label}: {value:.3g} ({'met' if met else 'NOT met'})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=250_000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1, help="rounds; medians are reported")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.object_servers import range_server

    with tempfile.TemporaryDirectory() as tmp:
        www = Path(tmp) / "www"
        www.mkdir()
        path = www / "f.h5"
        _write(path, args.n)
        size = path.stat().st_size
        with range_server(www, latency_s=args.latency) as server:
            url = server.url("f.h5")
            cache = Path(tmp) / "cache"
            rounds = [_round(path, url, cache, args.n, args.seconds) for _ in range(args.rounds)]
    print(
        f"{args.n} rows x {WIDTH} float32, gzip chunks of {CHUNK} rows, {size / 1e6:.0f} MB; "
        f"{args.latency * 1000:.0f} ms per request; one ChunkShuffleSampler epoch, batches of "
        f"{BATCH}, num_workers=0; medians of {args.rounds} round(s)"
    )
    print("\n".join(_report(rounds, size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
