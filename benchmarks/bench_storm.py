"""Many ranks on one object at once: requests, bytes and time to the first batch per rank.

A gzip HDF5 file (``--n`` rows of 3×32×32 float32, 64-row chunks) is served by the tests' Range
server with ``--latency`` seconds per request. ``P`` processes per node on ``N`` simulated
nodes (one ``cache_dir`` per node; in the last configuration the ranks also join a gloo group,
whose store hands each metadata block from the rank that fetched it to the others) start
together (a barrier); each builds ``H5LazyDataset(url, "x", "y", cache_dir=its node's)`` and
reads one batch of 64 rows (its own rows; in one configuration all read the same batch),
checked against the local file. For each configuration: the server's requests (total, and over
one rank's), split by kind: each process's version check (``HEAD``), the file's
metadata and chunk index (every range not wholly within the data's bytes), and its rows' data;
the bytes sent, each rank's time to its first batch (median, max). With ``--throttle R`` (the
server answers 503 SlowDown above R requests a second, as S3 does per prefix),
``--throttled-ranks`` ranks on nodes of 4 read at once, without and with a group: the answers
throttled and the ranks' time in backoff.

Run: ``python benchmarks/bench_storm.py [--n 200000] [--latency 0.02] [--throttle 200]`` or
``python benchmarks/run.py --storm [the same options]``.
"""

from __future__ import annotations

import argparse
import bisect
import multiprocessing as mp
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch.distributed as dist

from nn_handler.dataloaders import H5LazyDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import median

ROOT = Path(__file__).resolve().parents[1]
BATCH, CHUNK, SHAPE = 64, 64, (3, 32, 32)
TIMEOUT_S = 600.0
# (processes per node, nodes, a gloo group (metadata blocks handed over through its store),
# every rank reads the same batch)
CONFIGS = (
    (1, 1, False, False),
    (4, 1, False, False),
    (16, 1, False, False),
    (16, 1, False, True),
    (4, 4, False, False),
    (4, 4, True, False),
)


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


def _rank(
    url: str,
    cache: str,
    rank: int,
    start: Any,
    results: Any,
    local: str,
    group: str | None,
    batch: int,
) -> None:
    if group is not None:  # (init_method, world size)
        init, world = group.rsplit("|", 1)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=int(world))
    start.wait(TIMEOUT_S)
    began = time.perf_counter()
    ds = H5LazyDataset(url, "x", "y", cache_dir=cache)
    rows = list(range(batch * BATCH, (batch + 1) * BATCH))
    x, y = ds[rows]
    took = time.perf_counter() - began
    source = ds._source.byte_source()
    backoff = getattr(source.remote, "backoff_s", 0.0)  # (0: a tree from before it was counted)
    with h5py.File(local) as f:
        same = np.array_equal(x.numpy(), f["x"][rows[0] : rows[-1] + 1]) and y.tolist() == rows
    ds.close()
    results.put((rank, same, took, backoff))
    if group is not None:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _data_extents(local: Path) -> list[tuple[int, int]]:
    """``[start, end)`` of the data: every chunk of ``x`` and the contiguous ``y``, merged."""
    with h5py.File(local) as f:
        x, y = f["x"].id, f["y"].id
        pieces = [x.get_chunk_info(k) for k in range(x.get_num_chunks())]
        extents = sorted([(c.byte_offset, c.byte_offset + c.size) for c in pieces])
        extents.append((y.get_offset(), y.get_offset() + y.get_storage_size()))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(extents):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _kinds(ranges: list[tuple[str, int, int]], data: list[tuple[int, int]]) -> tuple[int, int, int]:
    """Range requests for the version check, for metadata and index, and for data.

    The version check is a one-byte range (``http.py``); a request for data lies wholly within
    the data's extents (``data``: chunks, and the labels' contiguous bytes); any other asks for
    metadata (object headers, heaps, B-tree nodes: h5py's reads, in ``SourceFile``'s blocks).
    """
    starts = [start for start, _ in data]
    version = sum(start == 0 and end == 1 for _, start, end in ranges)
    meta = 0
    for _, start, end in ranges:
        k = bisect.bisect_right(starts, start) - 1
        if not (start == 0 and end == 1) and not (k >= 0 and end <= data[k][1]):
            meta += 1
    return version, meta, len(ranges) - meta - version


def _run(
    server: Any,
    url: str,
    local: Path,
    caches: Path,
    config: tuple[int, int, bool, bool],
) -> dict:
    per_node, nodes, group, same = config
    ctx = mp.get_context("fork")
    ranks = per_node * nodes
    start, results = ctx.Barrier(ranks), ctx.Queue()
    init = f"tcp://127.0.0.1:{_free_port()}|{ranks}" if group else None
    before, before_ranges, before_throttled = server.requests, server.ranges, server.throttled
    procs = [
        ctx.Process(
            target=_rank,
            args=(
                *(url, str(caches / f"node{r // per_node}"), r, start, results, str(local)),
                *(init, 0 if same else r),
            ),
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
    version, meta, data = _kinds(ranges, _data_extents(local))
    return {
        "ranks": ranks,
        "per_node": per_node,
        "nodes": nodes,
        "group": group,
        "same": same,
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
            f"| {r['ranks']} | {r['per_node']} × {r['nodes']}{' + group' if r['group'] else ''}"
            f"{', same batch' if r['same'] else ''} "
            f"| {r['requests']:,} "
            f"({r['requests'] / one['requests']:.2f}) | {r['heads']} | {r['meta']} "
            f"({r['meta'] / one['meta']:.2f}) | {r['data']} | {r['bytes'] / 1e6:.1f} | "
            f"{median(t):.2f} / {max(t):.2f} | {r['throttled']:,} | "
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
            for k, config in enumerate(CONFIGS):
                caches = Path(tmp) / f"c{k}"
                rows.append(_run(server, url, local, caches, config))
            server.throttle_per_s = args.throttle
            per_node = min(4, args.throttled_ranks)
            nodes = -(-args.throttled_ranks // per_node)
            storms = [
                _run(server, url, local, Path(tmp) / f"t{group}", (per_node, nodes, group, False))
                for group in (False, True)
            ]
            server.throttle_per_s = 0
        size = local.stat().st_size
    one = rows[0]
    print(
        f"\n## Many ranks on one object ({args.n:,} rows, {size / 1e6:.0f} MB gzip, "
        f"{args.latency * 1e3:.0f} ms a request)\n"
    )
    print("\n".join(_table(rows, one)))
    print(f"\nwith the server throttling at {args.throttle:g} requests/s:\n")
    print("\n".join(_table(storms, one)[2:]))
    for same in (False, True):
        sixteen = next(r for r in rows if (r["ranks"], r["nodes"], r["same"]) == (16, 1, same))
        print(
            f"- 16 ranks of one node with one cache_dir / one rank "
            f"({'all reading the same batch' if same else 'each its own batch'}): requests "
            f"{sixteen['requests'] / one['requests']:.2f}, metadata + index "
            f"{sixteen['meta'] / one['meta']:.2f} (target <= 1.2)"
        )
    grouped = next(r for r in rows if r["group"])
    print(
        f"- {grouped['nodes']} nodes × {grouped['per_node']} ranks with a gloo group / one rank: "
        f"metadata + index {grouped['meta'] / one['meta']:.2f} (target <= 1.5)"
    )
    print(
        f"- {storms[0]['ranks']} ranks against {args.throttle:g} requests/s: "
        + "; with a group: ".join(
            f"{'every rank read its batch' if s['ok'] else 'SOME RANKS FAILED'} "
            f"({s['throttled']:,} answers throttled, {s['backoff_s']:.0f} s of backoff)"
            for s in storms
        )
    )
    return 0 if all(r["ok"] for r in [*rows, *storms]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
