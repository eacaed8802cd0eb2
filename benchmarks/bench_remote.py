"""Training from a file on an HTTP server 20 ms away: cold, warm cache, local, h5py on fsspec.

Writes ``--n`` rows × 64 float32 in gzip chunks of 64 rows (the issue's file is 1M rows, 256 MB;
the default here is smaller so the run fits a shared 2-core machine), serves it from an aiohttp
Range server in its own process with ``--latency`` seconds added to every request, and times
one epoch of ``ChunkShuffleSampler`` + ``batched_loader`` (``num_workers=0``, batches of 256):

* local: ``H5LazyDataset`` on the file on disk (the reference);
* remote cold: ``H5LazyDataset(url, cache_dir=<empty>)``, timed from construction;
* remote warm: a second epoch on the same node cache (a new dataset: timed from construction);
* remote cold, blocks of 8 chunks: no cache, ``ChunkShuffleSampler(block_size=8 * 64)``:
  the sampler shuffles runs of 8 adjacent chunks, so neighbours are fetched by one request;
* h5py on fsspec: the baseline a user writes first (``h5py.File(fsspec.open(url))``, one
  ``__getitem__`` per sample in shuffled order), for ``--seconds`` at most;
* bytes: how much of the file 1,000 random rows fetch cold (``ds[rows]``, no cache).

Run: ``python benchmarks/bench_remote.py [--n 250000] [--latency 0.02] [--seconds 20]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from nn_handler.dataloaders import ChunkShuffleSampler, H5LazyDataset, batched_loader

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


def _epoch(make, block_chunks: int = 1) -> tuple[float, int]:
    began = time.perf_counter()
    ds = make()
    sampler = ChunkShuffleSampler(ds, seed=1, block_size=block_chunks * CHUNK)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=250_000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.object_servers import free_port

    with tempfile.TemporaryDirectory() as tmp:
        www = Path(tmp) / "www"
        www.mkdir()
        path = www / "f.h5"
        _write(path, args.n)
        size = path.stat().st_size
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests/helpers/object_servers.py"),
                str(www),
                str(port),
                str(args.latency),
            ],
            stdout=subprocess.PIPE,
        )
        try:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == b"ready"
            url = f"http://127.0.0.1:{port}/f.h5"
            cache = Path(tmp) / "cache"
            local_s, rows = _epoch(lambda: H5LazyDataset(path, "x", "y"))
            cold_s, _ = _epoch(lambda: H5LazyDataset(url, "x", "y", cache_dir=cache))
            warm_s, _ = _epoch(lambda: H5LazyDataset(url, "x", "y", cache_dir=cache))
            cold8_s, _ = _epoch(lambda: H5LazyDataset(url, "x", "y"), block_chunks=8)
            picks = np.sort(np.random.default_rng(3).choice(args.n, 1000, replace=False))
            ds = H5LazyDataset(url, "x", "y")
            ds[picks.tolist()]
            fetched = ds._source.byte_source().fetched_bytes  # type: ignore[union-attr]
            naive = _h5py_fsspec(url, args.n, args.seconds)
        finally:
            server.kill()
            server.wait()
    print(
        f"{args.n} rows x {WIDTH} float32, gzip chunks of {CHUNK} rows, {size / 1e6:.0f} MB; "
        f"{args.latency * 1000:.0f} ms per request; one ChunkShuffleSampler epoch, batches of "
        f"{BATCH}, num_workers=0"
    )
    for name, seconds in (
        ("local file", local_s),
        ("remote cold (from construction)", cold_s),
        ("remote warm cache", warm_s),
        ("remote cold, blocks of 8 chunks", cold8_s),
    ):
        rate = rows / seconds
        print(f"  {name:<34} {rate:10.0f} rows/s   {rate * local_s / rows:6.2f}x local")
    print(
        f"  {'h5py on an fsspec file object':<34} {naive:10.0f} rows/s   "
        f"(ours cold: {rows / cold_s / naive:.0f}x)"
    )
    print(
        f"  1,000 random rows cold fetch {fetched / 1e6:.1f} MB = {100 * fetched / size:.1f}% "
        "of the file"
    )


if __name__ == "__main__":
    main()
