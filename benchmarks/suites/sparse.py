"""Sparse rows benchmark: ``H5SparseDataset`` against its registered peers and a random order.

The rows table (``run_sparse_bench``): one ``.h5ad`` written by anndata (CSR, gzip, anndata's own
chunks), read as dense float32 batches of ``(batch, n_genes)`` in one process by:

* ``H5SparseDataset`` + ``ChunkShuffleSampler`` (``batched_loader``), at the default window and
  at the smallest window whose batches touch at least as many chunks as the first peer's;
* every peer in the registry with a ``"sparse"`` adapter, ``(path, batch) ->
  list[cases.Contender]`` (empty when not installed): scDataset today;
* ``H5SparseDataset`` with a full shuffle (the fully random baseline) and in file order (the
  limit).

Every contender starts fresh (cold decoded-chunk cache) in each of ``repeats`` interleaved
rounds; the table gives medians and ratios to the first peer from the same run. Shuffle quality
comes from one whole epoch's order of each contender: ``chunks/batch`` (distinct chunks of
``X/data`` a batch touches: more means better mixing and more decoding) and the neighbour
correlation of consecutive indices (``nn_handler.bench.quality``).

The stores table (``stores.run_vs_stores``) puts every peer with a ``"sparse-store"`` adapter
(``cases.StorePeer``: annbatch today) beside us on one ``.h5ad`` (uncompressed by default, as a
plain ``adata.write_h5ad(path)`` writes it), batch 4,096: the peer converts it to a store of its
own first (timed, with its peak memory), then loads sparse and dense batches; ours are
``H5SparseDataset`` ``sparse_csr`` and ``dense`` batches of a fresh full shuffle, at 0 and 2
workers. Shuffle quality there is the number of distinct 64-cell blocks of the file a batch
draws from. A store peer runs in an environment of its own (made in ``--envs`` on first use);
when it cannot be installed or run, the table says why in one line and shows the others.

``csc_choice`` measures the two ways to serve a ``csc_matrix`` by rows (a CSR copy next to the
file, built once, against reading the column runs for every batch).

Run: ``python benchmarks/bench_sparse.py [--rows 200000] [--seconds 10] [--repeats 3]
[--tables rows,stores,csc] [--envs build]``.
Needs the ``bench`` extra (anndata, scdataset); store peers' environments are made on first use.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import h5py
import numpy as np

from nn_handler.bench.quality import shuffle_quality
from nn_handler.bench.timing import Result, batch_len, machine_line, timed_pass
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5SparseDataset,
    batched_loader,
)

from ..cases import Contender
from ..harness import alternating, median
from ..registry import adapters
from .sparse_data import write_sparse_h5ad, write_sparse_h5ad_streamed
from .sparse_ours import ours
from .stores import default_envs, prepare_stores, run_vs_stores

__all__ = ["chunks_per_batch", "csc_choice", "main", "run_sparse_bench"]

_WINDOWS = (64, 128, 256, 512, 1024)
_TABLES = {"rows", "stores", "csc"}
_TABLE_ALIASES = {"scdataset": "rows", "annbatch": "stores"}  # their names before the registry


def chunks_per_batch(order: np.ndarray[Any, Any], indptr: Any, chunk: int, batch: int) -> float:
    """Mean number of distinct ``data`` chunks (of ``chunk`` entries) the batches touch."""
    starts = indptr[order].astype(np.int64)
    first = starts // chunk
    last = np.maximum(indptr[order + 1].astype(np.int64) - 1, starts) // chunk
    spans = last - first + 1
    row = np.repeat(np.arange(order.size), spans)
    touched = (
        np.repeat(first, spans) + np.arange(row.size) - np.repeat(np.cumsum(spans) - spans, spans)
    )
    keys = np.unique((row // batch) * (int(last.max(initial=0)) + 1) + touched)
    return float(keys.size / -(-order.size // batch))


def run_sparse_bench(path: str, seconds: float = 10.0, repeats: int = 3, batch: int = 256) -> str:
    """Time every contender on ``path``; return the Markdown table (medians, ratios, quality).

    The ratio column divides by the first peer contender (the registry's first ``"sparse"``
    adapter that gave one); our matched window is matched against it.
    """
    with h5py.File(path, "r") as f:
        indptr, chunk = f["X/indptr"][()], int(f["X/data"].chunks[0])
        n, n_cols = int(f["X"].attrs["shape"][0]), int(f["X"].attrs["shape"][1])
    contenders, peer = _contenders(path, batch)
    quality = {c.name: _quality(c.order(), indptr, chunk, batch) for c in contenders}
    matched = _matched_window(path, batch, indptr, chunk, quality[peer][0]) if peer else None
    if matched is not None:
        contenders.insert(1, matched)
        quality[matched.name] = _quality(matched.order(), indptr, chunk, batch)
    rates: dict[str, list[float]] = {c.name: [] for c in contenders}
    for _, order in alternating(contenders, repeats):  # a busy spell hurts every one alike
        for c in order:
            result = timed_pass(c.name, c.make(), n_cols * 4, seconds, batch_len)
            rates[c.name].append(result.rate)
    return _table(path, (n, n_cols, chunk, batch), rates, quality, peer)


def _contenders(path: str, batch: int) -> tuple[list[Contender], str | None]:
    """Ours, every registered peer's contenders, the baseline and the limit; the first peer's."""
    found = [
        ours(path, batch, lambda ds: ChunkShuffleSampler(ds, seed=0), _ours_name(None)),
    ]
    for peer in adapters("sparse").values():
        found.extend(peer(path, batch))
    first = found[1].name if len(found) > 1 else None
    found.append(ours(path, batch, lambda ds: EpochShuffleSampler(len(ds)), "full shuffle"))
    found.append(ours(path, batch, lambda ds: ChunkShuffleSampler(ds, shuffle=False), "file order"))
    return found, first


def _ours_name(window: int | None) -> str:
    return "ChunkShuffleSampler" + ("" if window is None else f", window_chunks={window}")


def _matched_window(
    path: str, batch: int, indptr: Any, chunk: int, target: float
) -> Contender | None:
    """Ours at the smallest window whose batches touch ``target`` chunks (the first peer's)."""
    contender = None
    for window in _WINDOWS:
        contender = ours(path, batch, _windowed(window), _ours_name(window))
        if _quality(contender.order(), indptr, chunk, batch)[0] >= target:
            return contender
    return contender


def _windowed(window: int) -> Callable[[H5SparseDataset], ChunkShuffleSampler]:
    return lambda ds: ChunkShuffleSampler(ds, seed=0, window_chunks=window)


def _quality(
    order: np.ndarray[Any, Any], indptr: Any, chunk: int, batch: int
) -> tuple[float, float]:
    corr = shuffle_quality(order, 1, batch, 1).neighbour_correlation
    return chunks_per_batch(order, indptr, chunk, batch), corr


def _table(
    path: str,
    shape: tuple[int, int, int, int],
    rates: dict[str, list[float]],
    quality: dict[str, tuple[float, float]],
    peer: str | None,
) -> str:
    n, n_cols, chunk, batch = shape
    medians = {name: median(r) for name, r in rates.items()}
    base = "the first peer" if peer is None else peer.split(" ", 1)[0]
    lines = [
        f"\n## Sparse rows: {n} x {n_cols} .h5ad (CSR, gzip, chunks of {chunk} entries, "
        f"{os.path.getsize(path) / 1e6:.0f} MB), batch {batch}, one process\n",
        machine_line(),
        "",
        f"| loader | rows/s (median) | runs | x {base} | chunks/batch | neighbour corr |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, rate in medians.items():
        runs = ", ".join(f"{r:,.0f}" for r in rates[name])
        ratio = f"{rate / medians[peer]:.2f}" if peer else "-"
        chunks, corr = quality[name]
        lines.append(f"| {name} | {rate:,.0f} | {runs} | {ratio} | {chunks:.1f} | {corr:.3f} |")
    return "\n".join(lines)


def csc_choice(
    workdir: str, n_rows: int = 20_000, n_cols: int = 20_000, seconds: float = 10.0
) -> str:
    """Serve a gzip ``csc_matrix`` by rows: build a CSR copy once, or read columns per batch."""
    path = os.path.join(workdir, f"csc-{n_rows}.h5ad")
    if not os.path.exists(path):
        write_sparse_h5ad(path, n_rows, n_cols, fmt="csc")
    for entry in os.listdir(workdir):
        if entry.startswith(os.path.basename(path) + ".nnh-csr"):
            os.remove(os.path.join(workdir, entry))
    start = time.perf_counter()
    ds = H5SparseDataset(path)
    build = time.perf_counter() - start
    copy = _rows_per_s(ds, seconds)
    direct = _rows_per_s(H5SparseDataset(path, csc="direct"), seconds)
    lines = [
        f"\n## CSC served by rows: {n_rows} x {n_cols} .h5ad (csc_matrix, gzip), batch 256\n",
        "| approach | one-time cost (s) | rows/s | one epoch (s) |",
        "|---|---:|---:|---:|",
        f"| CSR copy next to the file (csc='sidecar') | {build:.1f} | {copy:,.0f} | "
        f"{build + n_rows / copy:.1f} (first) / {n_rows / copy:.1f} |",
        f"| read column runs per batch (csc='direct') | 0 | {direct:,.2f} | "
        f"{n_rows / direct:,.0f} |",
    ]
    return "\n".join(lines)


def _rows_per_s(ds: H5SparseDataset, seconds: float) -> float:
    loader = batched_loader(ds, 256, sampler=ChunkShuffleSampler(ds, seed=0))
    result: Result = timed_pass("csc", loader, 0, seconds, batch_len, warmup=1)
    return result.rate


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of ``benchmarks/bench_sparse.py``."""
    args = _parser().parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="nnh-sparse-")
    os.makedirs(workdir, exist_ok=True)
    asked = {t.strip() for t in args.tables.split(",") if t.strip()}
    tables = {_TABLE_ALIASES.get(t, t) for t in asked}
    if not tables <= _TABLES:
        _parser().error(f"--tables: unknown {sorted(tables - _TABLES)}; choose from {_TABLES}")
    if "rows" in tables:
        path = os.path.join(workdir, f"cells-{args.rows}x{args.genes}.h5ad")
        _write_once(path, args.rows, args.genes, args.density, "gzip")
        print(run_sparse_bench(path, args.seconds, args.repeats, args.batch_size), flush=True)
    if "stores" in tables:
        print(_stores_section(args, workdir), flush=True)
    if "csc" in tables and args.csc_rows:
        print(csc_choice(workdir, args.csc_rows, args.genes, args.seconds), flush=True)
    return 0


def _stores_section(args: argparse.Namespace, workdir: str) -> str:
    comp = None if args.store_compression == "none" else args.store_compression
    name = f"cells-{args.rows}x{args.genes}-{args.density:g}-{args.store_compression}.h5ad"
    path = os.path.join(workdir, name)
    if args.stream_write and comp is None:
        if not os.path.exists(path):
            print(f"writing {path} block by block …", flush=True)
            write_sparse_h5ad_streamed(path, args.rows, args.genes, args.density)
    else:
        _write_once(path, args.rows, args.genes, args.density, comp)
    say = functools.partial(print, flush=True)
    peers = prepare_stores(args.envs, args.peer_python, not args.no_install, say)
    workers = [int(w) for w in args.store_workers.split(",") if w.strip()]
    return run_vs_stores(path, peers, args.seconds, args.repeats, args.store_batch_size, workers)


def _write_once(path: str, rows: int, genes: int, density: float, comp: str | None) -> None:
    if not os.path.exists(path):
        print(f"writing {path} with anndata …", flush=True)
        write_sparse_h5ad(path, rows, genes, density, compression=comp)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="H5SparseDataset against its registered peers")
    parser.add_argument("--rows", type=int, default=200_000, help="cells in the test file")
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=10.0, help="budget per timed pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256, help="of the rows table")
    parser.add_argument("--csc-rows", type=int, default=20_000, help="0 skips the CSC table")
    parser.add_argument("--workdir", default=None, help="keeps the generated files")
    parser.add_argument(
        "--tables",
        default="rows,stores,csc",
        help="comma-separated tables to run: rows (peers in one process; also 'scdataset'), "
        "stores (peers that convert the file first; also 'annbatch'), csc",
    )
    group = parser.add_argument_group("stores table")
    group.add_argument(
        "--envs",
        default=default_envs(),
        help="folder of the store peers' own environments; made there when missing",
    )
    group.add_argument(
        "--peer-python", default=None, help="the Python to make a peer's environment from"
    )
    group.add_argument(
        "--no-install",
        action="store_true",
        help="skip a store peer rather than make its environment / pip install it",
    )
    group.add_argument("--store-batch-size", type=int, default=4096)
    group.add_argument("--store-workers", default="0,2", help="our worker counts, e.g. 0,2")
    group.add_argument(
        "--store-compression",
        choices=["none", "gzip", "lzf"],
        default="none",
        help="the .h5ad of this table (a plain adata.write_h5ad is uncompressed)",
    )
    group.add_argument(
        "--stream-write",
        action="store_true",
        help="write the uncompressed .h5ad block by block (matrices larger than memory)",
    )
    return parser
