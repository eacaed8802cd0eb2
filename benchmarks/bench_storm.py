"""Many ranks on one object at once: requests, bytes and time to the first batch per rank.

A gzip HDF5 file (``--n`` rows of 3×32×32 float32, 64-row chunks) is served by the tests' Range
server with ``--latency`` seconds per request. ``P`` processes per node on ``N`` simulated
nodes (one ``cache_dir`` per node) start together (a barrier); each builds
``H5LazyDataset(url, "x", "y", cache_dir=its node's)`` and reads one batch of 64 rows (its own
rows), checked against the local file. For each configuration: the server's requests (total,
and over one rank's), split by kind: each process's version check (``HEAD``), the file's
metadata and chunk index (every range outside the chunks of ``x``), and the chunks of its rows;
the bytes sent, each rank's time to its first batch (median, max). With ``--throttle R`` (the
server answers 503 SlowDown above R requests a second, as S3 does per prefix),
``--throttled-ranks`` ranks on nodes of 4 read at once: the answers throttled and the ranks'
time in backoff.

Run: ``python benchmarks/bench_storm.py [--n 200000] [--latency 0.02] [--throttle 200]`` or
``python benchmarks/run.py --storm [the same options]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from nn_handler.dataloaders import H5LazyDataset

ROOT = Path(__file__).resolve().parents[1]
BATCH, CHUNK, SHAPE = 64, 64, (3, 32, 32)
TIMEOUT_S = 600.0
CONFIGS = ((1, 1), (4, 1), (16, 1), (4, 4))  # (processes per node, nodes)
_BLOCK = 32 * 1024  # SourceFile's metadata block (_io/storage/remote/file_object.py)


def _write(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    base = (rng.integers(0, 256, (CHUNK * 50, *SHAPE), dtype=np.uint8) / 255).astype(np.float32)
    with h5py.File(path, "w") as f:
        x = f.create_dataset(
            "x", (n, *SHAPE), "f4", chunks=(CHUNK, *SHAPE), compression="gzip", shuffle=True
        )
        f.create_dataset("y", data=np.arange(n))
        for lo in range(0, n, len(base)):
            x[lo : lo + len(base)] = base[: n - lo]


def _rank(url: str, cache: str, rank: int, start: Any, results: Any, local: str) -> None:
    start.wait(TIMEOUT_S)
    began = time.perf_counter()
    ds = H5LazyDataset(url, "x", "y", cache_dir=cache)
    rows = list(range(rank * BATCH, (rank + 1) * BATCH))
    x, y = ds[rows]
    took = time.perf_counter() - began
    source = ds._source.byte_source()
    backoff = getattr(source.remote, "backoff_s", 0.0)  # (0: a tree from before it was counted)
    with h5py.File(local) as f:
        same = np.array_equal(x.numpy(), f["x"][rows[0] : rows[-1] + 1]) and y.tolist() == rows
    ds.close()
    results.put((rank, same, took, backoff))


def _kinds(ranges: list[tuple[str, int, int]], size: int) -> tuple[int, int, int]:
    """Range requests for the version check, for metadata and index, and for chunks.

    The version check is a one-byte range (``http.py``); h5py's metadata reads (object headers,
    heaps, B-tree nodes) come in aligned blocks of ``SourceFile``'s size (``file_object.py``);
    chunks are fetched at their own offsets.
    """
    version = sum(start == 0 and end == 1 for _, start, end in ranges)
    meta = sum(
        start % _BLOCK == 0 and ((end - start) % _BLOCK == 0 or end == size)
        for _, start, end in ranges
    )
    return version, meta, len(ranges) - meta - version


def _run(server: Any, url: str, local: Path, caches: Path, per_node: int, nodes: int) -> dict:
    ctx = mp.get_context("fork")
    ranks = per_node * nodes
    start, results = ctx.Barrier(ranks), ctx.Queue()
    before, before_ranges, before_throttled = server.requests, server.ranges, server.throttled
    procs = [
        ctx.Process(
            target=_rank,
            args=(url, str(caches / f"node{r // per_node}"), r, start, results, str(local)),
        )
        for r in range(ranks)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=TIMEOUT_S) for _ in procs]
    for p in procs:
        p.join(TIMEOUT_S)
    ranges = server.ranges[len(before_ranges) :]
    throttled = server.throttled - before_throttled
    version, meta, data = _kinds(ranges, local.stat().st_size)
    return {
        "ranks": ranks,
        "per_node": per_node,
        "nodes": nodes,
        "requests": server.requests - before,
        "meta": meta,
        "data": data,
        "heads": server.requests - before - len(ranges) - throttled + version,
        "bytes": sum(end - start for _, start, end in ranges),
        "throttled": throttled,
        "ok": all(same for _, same, _, _ in out) and all(p.exitcode == 0 for p in procs),
        "first_batch_s": sorted(took for _, _, took, _ in out),
        "backoff_s": sum(b for _, _, _, b in out),
    }


def _table(rows: list[dict], one: dict) -> list[str]:
    lines = [
        "| ranks | per node × nodes | requests (× one rank) | version checks | metadata + index "
        "(× one rank) | chunks | MB sent | first batch s (median / max) | throttled | "
        "backoff s | same bytes |",
        "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        t = r["first_batch_s"]
        lines.append(
            f"| {r['ranks']} | {r['per_node']} × {r['nodes']} | {r['requests']:,} "
            f"({r['requests'] / one['requests']:.2f}) | {r['heads']} | {r['meta']} "
            f"({r['meta'] / one['meta']:.2f}) | {r['data']} | {r['bytes'] / 1e6:.1f} | "
            f"{statistics.median(t):.2f} / {max(t):.2f} | {r['throttled']:,} | "
            f"{r['backoff_s']:.1f} | {'yes' if r['ok'] else 'NO'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=50_000, help="rows (50,000: 614 MB decoded)")
    p.add_argument("--latency", type=float, default=0.02)
    p.add_argument("--throttle", type=float, default=200.0, help="503 above this many req/s")
    p.add_argument("--throttled-ranks", type=int, default=64)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.object_servers import range_server

    with tempfile.TemporaryDirectory() as tmp:
        www = Path(tmp) / "www"
        www.mkdir()
        local = www / "s.h5"
        _write(local, args.n)
        with range_server(www, latency_s=args.latency) as server:
            url = server.url("s.h5")
            rows = []
            for k, (per_node, nodes) in enumerate(CONFIGS):
                rows.append(_run(server, url, local, Path(tmp) / f"c{k}", per_node, nodes))
            server.throttle_per_s = args.throttle
            per_node = min(4, args.throttled_ranks)
            nodes = -(-args.throttled_ranks // per_node)
            storm = _run(server, url, local, Path(tmp) / "t", per_node, nodes)
            server.throttle_per_s = 0
        size = local.stat().st_size
    one = rows[0]
    print(
        f"\n## Many ranks on one object ({args.n:,} rows, {size / 1e6:.0f} MB gzip, "
        f"{args.latency * 1e3:.0f} ms a request)\n"
    )
    print("\n".join(_table(rows, one)))
    print(f"\nwith the server throttling at {args.throttle:g} requests/s:\n")
    print("\n".join(_table([storm], one)[2:]))
    sixteen = next(r for r in rows if r["ranks"] == 16 and r["nodes"] == 1)
    print(
        f"\n- 16 ranks of one node with one cache_dir / one rank: requests "
        f"{sixteen['requests'] / one['requests']:.2f}, metadata + index "
        f"{sixteen['meta'] / one['meta']:.2f} (target <= 1.2)"
    )
    print(
        f"- {storm['ranks']} ranks against {args.throttle:g} requests/s: "
        f"{'every rank read its batch' if storm['ok'] else 'SOME RANKS FAILED'} "
        f"({storm['throttled']:,} answers throttled, {storm['backoff_s']:.0f} s of backoff)"
    )
    return 0 if all(r["ok"] for r in [*rows, storm]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
