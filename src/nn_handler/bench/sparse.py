"""Sparse rows benchmark: ``H5SparseDataset`` against scDataset and a fully random order.

One ``.h5ad`` written by anndata (CSR, gzip, anndata's own chunks), read as dense float32
batches of ``(batch, n_genes)`` in one process by:

* ``H5SparseDataset`` + ``ChunkShuffleSampler`` (``batched_loader``), at the default window and
  at the smallest window whose batches touch at least as many chunks as scDataset's;
* scDataset (``BlockShuffling`` + ``fetch_factor``) on the same file opened by anndata in
  backed mode, with the fetch callback of its documentation (``adata[idx].X.toarray()``);
* ``H5SparseDataset`` with a full shuffle (the fully random baseline) and in file order (the
  limit).

Every contender starts fresh (cold decoded-chunk cache) in each of ``repeats`` interleaved
rounds; the table gives medians and ratios from the same run. Shuffle quality comes from one
whole epoch's order of each contender: ``chunks/batch`` (distinct chunks of ``X/data`` a batch
touches: more means better mixing and more decoding) and the neighbour correlation of
consecutive indices (``nn_handler.bench.quality``).

``csc_choice`` measures the two ways to serve a ``csc_matrix`` by rows (a CSR copy next to the
file, built once, against reading the column runs for every batch).

Run: ``python benchmarks/bench_sparse.py [--rows 200000] [--seconds 10] [--repeats 3]``.
Needs the ``bench`` extra (anndata, scdataset).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ..dataloaders import ChunkShuffleSampler, EpochShuffleSampler, H5SparseDataset, batched_loader
from .quality import shuffle_quality
from .sparse_data import write_sparse_h5ad
from .timing import Result, batch_len, machine_line, timed_pass

__all__ = ["Contender", "chunks_per_batch", "csc_choice", "main", "run_sparse_bench"]

_WINDOWS = (64, 128, 256, 512, 1024)
_SCDATASET = ((16, 16), (64, 16))  # (block_size, fetch_factor); the first is its docs' example


@dataclass(frozen=True)
class Contender:
    """A loader to time (``make`` builds it fresh) and the index order of one of its epochs."""

    name: str
    make: Callable[[], Iterable[Any]]
    order: Callable[[], np.ndarray[Any, Any]]


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


def ours(path: str, batch: int, sampler: Callable[[H5SparseDataset], Any], name: str) -> Contender:
    """``H5SparseDataset`` read through ``batched_loader`` with the sampler ``sampler`` builds."""

    def make() -> Iterable[Any]:
        ds = H5SparseDataset(path)
        return batched_loader(ds, batch, sampler=sampler(ds))

    def order() -> np.ndarray[Any, Any]:
        return np.fromiter(sampler(H5SparseDataset(path)), dtype=np.int64)

    return Contender(name, make, order)


def scdataset(path: str, batch: int, block: int, fetch: int) -> Contender | None:
    """The scDataset contender: ``BlockShuffling(block)``, ``fetch_factor=fetch`` (or None)."""
    try:
        sc = importlib.import_module("scdataset")
        ad = importlib.import_module("anndata")
    except ImportError:
        return None

    def build(callback: Callable[[Any, Any], Any]) -> Any:
        adata = ad.read_h5ad(path, backed="r")
        return sc.scDataset(
            adata,
            sc.BlockShuffling(block_size=block),
            batch_size=batch,
            fetch_factor=fetch,
            fetch_callback=callback,
            seed=0,
        )

    def fetch_rows(adata: Any, idx: Any) -> Any:  # the callback of scDataset's AnnData example
        return adata[idx].X.toarray().astype(np.float32)

    def order() -> np.ndarray[Any, Any]:  # the same strategy, fetching indices instead of rows
        return np.concatenate(list(build(lambda _adata, idx: np.asarray(idx))))

    name = f"scDataset BlockShuffling({block}), fetch_factor={fetch}"
    return Contender(name, lambda: build(fetch_rows), order)


def run_sparse_bench(path: str, seconds: float = 10.0, repeats: int = 3, batch: int = 256) -> str:
    """Time every contender on ``path``; return the Markdown table (medians, ratios, quality)."""
    with h5py.File(path, "r") as f:
        indptr, chunk = f["X/indptr"][()], int(f["X/data"].chunks[0])
        n, n_cols = int(f["X"].attrs["shape"][0]), int(f["X"].attrs["shape"][1])
    contenders = _contenders(path, batch, n)
    quality = {c.name: _quality(c.order(), indptr, chunk, batch) for c in contenders}
    matched = _matched_window(path, batch, indptr, chunk, quality)
    if matched is not None:
        contenders.insert(1, matched)
        quality[matched.name] = _quality(matched.order(), indptr, chunk, batch)
    rates: dict[str, list[float]] = {c.name: [] for c in contenders}
    for _ in range(repeats):  # interleaved: a busy spell hurts every contender alike
        for c in contenders:
            result = timed_pass(c.name, c.make(), n_cols * 4, seconds, batch_len)
            rates[c.name].append(result.rate)
    return _table(path, n, n_cols, chunk, batch, rates, quality)


def _contenders(path: str, batch: int, n: int) -> list[Contender]:
    found = [
        ours(path, batch, lambda ds: ChunkShuffleSampler(ds, seed=0), _ours_name(None)),
    ]
    for block, fetch in _SCDATASET:
        sc = scdataset(path, batch, block, fetch)
        if sc is not None:
            found.append(sc)
    found.append(ours(path, batch, lambda ds: EpochShuffleSampler(len(ds)), "full shuffle"))
    found.append(ours(path, batch, lambda ds: ChunkShuffleSampler(ds, shuffle=False), "file order"))
    return found


def _ours_name(window: int | None) -> str:
    return "ChunkShuffleSampler" + ("" if window is None else f", window_chunks={window}")


def _matched_window(
    path: str, batch: int, indptr: Any, chunk: int, quality: dict[str, tuple[float, float]]
) -> Contender | None:
    """Ours at the smallest window whose batches touch as many chunks as scDataset's first."""
    target = next((q[0] for name, q in quality.items() if name.startswith("scDataset")), None)
    if target is None:
        return None
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
    n: int,
    n_cols: int,
    chunk: int,
    batch: int,
    rates: dict[str, list[float]],
    quality: dict[str, tuple[float, float]],
) -> str:
    median = {name: statistics.median(r) for name, r in rates.items()}
    sc = next((name for name in median if name.startswith("scDataset")), None)
    lines = [
        f"\n## Sparse rows: {n} x {n_cols} .h5ad (CSR, gzip, chunks of {chunk} entries, "
        f"{os.path.getsize(path) / 1e6:.0f} MB), batch {batch}, one process\n",
        machine_line(),
        "",
        "| loader | rows/s (median) | runs | x scDataset | chunks/batch | neighbour corr |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, rate in median.items():
        runs = ", ".join(f"{r:,.0f}" for r in rates[name])
        ratio = f"{rate / median[sc]:.2f}" if sc else "-"
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
    parser = argparse.ArgumentParser(description="H5SparseDataset against scDataset")
    parser.add_argument("--rows", type=int, default=200_000, help="cells in the test file")
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=10.0, help="budget per timed pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--csc-rows", type=int, default=20_000, help="0 skips the CSC table")
    parser.add_argument("--workdir", default=None, help="keeps the generated files")
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="nnh-sparse-")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, f"cells-{args.rows}x{args.genes}.h5ad")
    if not os.path.exists(path):
        print(f"writing {path} with anndata …", flush=True)
        write_sparse_h5ad(path, args.rows, args.genes, args.density)
    print(run_sparse_bench(path, args.seconds, args.repeats, args.batch_size), flush=True)
    if args.csc_rows:
        print(csc_choice(workdir, args.csc_rows, args.genes, args.seconds), flush=True)
    return 0
