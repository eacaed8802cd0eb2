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
consecutive indices (``nn_handler.bench.quality``). scDataset's contenders come from the
registry (its ``"sparse"`` adapter, ``(path, batch) -> list[Contender]``, empty when not
installed).

``run_vs_annbatch`` puts annbatch (scverse) beside us on one ``.h5ad`` (uncompressed by
default, as a plain ``adata.write_h5ad(path)`` writes it), batch 4,096: annbatch converts it
to its sharded Zarr store first (timed, with its peak memory), then loads with its README's
settings, as SciPy CSR batches and with ``.toarray()``; ours are ``H5SparseDataset``
``sparse_csr`` and ``dense`` batches of a fresh full shuffle, at 0 and 2 workers. Shuffle
quality there is the number of distinct 64-cell blocks of the file a batch draws from.
annbatch needs Python >= 3.12 and runs in its own environment, in a subprocess
(``benchmarks.peers.annbatch``, which makes that environment with pip); when it cannot be
installed or run, the table says why in one line and shows ours alone.

``csc_choice`` measures the two ways to serve a ``csc_matrix`` by rows (a CSR copy next to the
file, built once, against reading the column runs for every batch).

Run: ``python benchmarks/bench_sparse.py [--rows 200000] [--seconds 10] [--repeats 3]
[--tables scdataset,annbatch,csc] [--annbatch-venv build/annbatch-venv]``.
Needs the ``bench`` extra (anndata, scdataset); annbatch's environment is made on first use.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from nn_handler._io.file.source import load_plugins
from nn_handler.bench.quality import shuffle_quality
from nn_handler.bench.timing import Result, batch_len, epochs, machine_line, timed_pass
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5SparseDataset,
    batched_loader,
)
from nn_handler.dataloaders.h5_sparse_dataset import Output

from ..harness import alternating, median
from ..peers.annbatch import (
    BLOCK,
    AnnbatchEnv,
    AnnbatchRunner,
    AnnbatchUnavailableError,
    Conversion,
    Kind,
    Row,
    blocks_per_batch,
    default_venv,
    vs_annbatch_table,
)
from ..registry import adapters
from .sparse_data import write_sparse_h5ad, write_sparse_h5ad_streamed

__all__ = [
    "Contender",
    "chunks_per_batch",
    "csc_choice",
    "main",
    "run_sparse_bench",
    "run_vs_annbatch",
]

_WINDOWS = (64, 128, 256, 512, 1024)
_TABLES = {"scdataset", "annbatch", "csc"}
_COLD_BLOCK = 32  # cells a block of ours holds in the cold table: annbatch's chunk_size


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


def ours(
    path: str,
    batch: int,
    sampler: Callable[[H5SparseDataset], Any],
    name: str,
    output: Output = "dense",
    **loader_kwargs: Any,
) -> Contender:
    """``H5SparseDataset`` read through ``batched_loader`` with the sampler ``sampler`` builds.

    ``output`` is the dataset's batch type, ``loader_kwargs`` go to ``batched_loader``
    (``num_workers``, ...).
    """

    def make() -> Iterable[Any]:
        ds = H5SparseDataset(path, output=output)
        return batched_loader(ds, batch, sampler=sampler(ds), **loader_kwargs)

    def order() -> np.ndarray[Any, Any]:
        return np.fromiter(sampler(H5SparseDataset(path)), dtype=np.int64)

    return Contender(name, make, order)


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
    for _, order in alternating(contenders, repeats):  # a busy spell hurts every one alike
        for c in order:
            result = timed_pass(c.name, c.make(), n_cols * 4, seconds, batch_len)
            rates[c.name].append(result.rate)
    return _table(path, n, n_cols, chunk, batch, rates, quality)


def _contenders(path: str, batch: int, n: int) -> list[Contender]:
    found = [
        ours(path, batch, lambda ds: ChunkShuffleSampler(ds, seed=0), _ours_name(None)),
    ]
    for peer in adapters("sparse").values():
        found.extend(peer(path, batch))
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
    medians = {name: median(r) for name, r in rates.items()}
    sc = next((name for name in medians if name.startswith("scDataset")), None)
    lines = [
        f"\n## Sparse rows: {n} x {n_cols} .h5ad (CSR, gzip, chunks of {chunk} entries, "
        f"{os.path.getsize(path) / 1e6:.0f} MB), batch {batch}, one process\n",
        machine_line(),
        "",
        "| loader | rows/s (median) | runs | x scDataset | chunks/batch | neighbour corr |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, rate in medians.items():
        runs = ", ".join(f"{r:,.0f}" for r in rates[name])
        ratio = f"{rate / medians[sc]:.2f}" if sc else "-"
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


def run_vs_annbatch(
    path: str,
    annbatch: AnnbatchEnv | AnnbatchUnavailableError,
    seconds: float = 10.0,
    repeats: int = 3,
    batch: int = 4096,
    workers: Sequence[int] = (0, 2),
    *,
    store: str | None = None,
    order_batches: int = 64,
    evict: Callable[[str], None] | None = None,
    dataset_size: str | None = None,
    annbatch_h5ad: str | None = None,
) -> str:
    """Ours and annbatch on ``path``, sparse and dense batches; return one Markdown table.

    Ours: ``H5SparseDataset`` (``output="sparse_csr"`` and ``"dense"``) with an
    ``EpochShuffleSampler`` (a fresh full shuffle each epoch, no conversion) at each worker
    count of ``workers``. annbatch (``annbatch`` is its environment, or why it cannot run):
    converted once into ``store`` (default: next to ``path``), then its README's loader with
    SciPy CSR batches and with ``.toarray()``. Every loader starts fresh in each of ``repeats``
    interleaved rounds (annbatch in a subprocess whose start is not timed). The mixing column
    counts distinct 64-cell blocks of the file in the first ``order_batches`` full batches.
    ``evict``: cold passes, and ours also with a ``ChunkShuffleSampler`` of 32-cell blocks
    (annbatch's reads: a full shuffle of a raw file is bound by the disk's random-read rate,
    two reads per cell). ``evict(path)`` drops a file's (or a folder's) pages from the page
    cache (and checks they are gone): it runs on the ``.h5ad`` before each of our passes and
    on annbatch's store before its run, whose worker drops the store's pages again before each
    of its passes. ``dataset_size``: annbatch's ``add_adatas(dataset_size=)`` for its
    conversion (None: its default). ``annbatch_h5ad``: the ``.h5ad`` annbatch converts (None:
    ``path``), when ours reads another file of the same cells (our own conversion of it).
    """
    cold = evict is not None
    load_plugins()  # (our conversion may be zstd / lz4: hdf5plugin's filters for h5py here)
    with h5py.File(path, "r") as f:
        n, n_cols = (int(v) for v in f["X"].attrs["shape"])
        nnz = int(f["X/indptr"][-1])
        compression = f["X/data"].compression or "uncompressed"
    chunked = compression != "uncompressed"
    ours_rows = _our_rows(path, batch, workers, order_batches, chunked=chunked)
    if evict is not None and not chunked:  # cold: annbatch's reads, 32 adjacent cells each
        ours_rows += _our_rows(path, batch, workers, order_batches, block=_COLD_BLOCK)
    runner, theirs, conversion, skip = _annbatch_rows(
        annbatch_h5ad or path, annbatch, batch, store, dataset_size
    )
    order_out = f"{os.path.splitext(path)[0]}.annbatch-order.npy"
    for round_ in range(repeats):  # interleaved: a busy spell hurts every loader alike
        for row, c in ours_rows:
            if evict is not None:
                gc.collect()  # (the last pass's maps: pages a live map holds stay resident)
                evict(path)
            loader = epochs(c.make())  # a 50,000-cell epoch is a second: fill the budget
            warmup = 0 if cold else 2  # (cold: the first batches are the cold ones)
            timed = timed_pass(row.loader, loader, n_cols * 4, seconds, batch_len, warmup)
            row.rates.append(timed.rate)
            loader.close()  # its loader, dataset and maps go now, not at the next assignment
            del loader
        if runner is None:
            continue
        first = round_ == 0
        try:
            order = order_out if first else None
            if evict is not None:
                evict(runner.store)
            rates = runner.load(seconds, seed=round_, order_out=order, cold=cold)
        except AnnbatchUnavailableError as err:  # its rows go; the reason is printed instead
            runner, skip, theirs = None, str(err), []
            continue
        for row in theirs:
            row.rates.append(rates[row.kind])
            if first:
                row.blocks = blocks_per_batch(np.load(order_out, allow_pickle=False))
    rows = theirs + [r for r, _ in ours_rows]
    return _vs_annbatch_text(
        path, (n, n_cols, nnz, compression), batch, rows, conversion, skip, annbatch, cold
    )


def _our_rows(
    path: str,
    batch: int,
    workers: Sequence[int],
    order_batches: int,
    *,
    chunked: bool = False,
    block: int | None = None,
) -> list[tuple[Row, Contender]]:
    """Our rows (sparse_csr, then dense, at each worker count) with their mixing filled in.

    ``chunked``: a compressed file, read with a ``ChunkShuffleSampler`` (each chunk decoded
    once an epoch) rather than a full shuffle (every batch decoding hundreds of chunks).
    ``block``: a ``ChunkShuffleSampler`` of blocks of that many adjacent cells instead (each
    block one read of the file: fewer, larger requests, less mixing).
    """
    found: list[tuple[Row, Contender]] = []
    outputs: tuple[tuple[Output, Kind], ...] = (("sparse_csr", "csr"), ("dense", "dense"))
    for output, kind in outputs:
        for w in workers:
            sampler = _chunk_shuffle(batch, w, block) if chunked or block else _full_shuffle
            kind_name = "ChunkShuffleSampler" if chunked else "EpochShuffleSampler"
            if block:
                kind_name = f"ChunkShuffleSampler(block_size={block})"
            name = f"H5SparseDataset + {kind_name}, num_workers={w}"
            contender = ours(
                path, batch, sampler, name, output, num_workers=w, persistent_workers=w > 0
            )
            found.append((Row(name, output, kind), contender))
    # one sampler for all: the same order whatever the output or the worker count
    mixing = blocks_per_batch(_full_batches(found[0][1].order(), batch, order_batches))
    for row, _ in found:
        row.blocks = mixing
    return found


def _annbatch_rows(
    path: str,
    annbatch: AnnbatchEnv | AnnbatchUnavailableError,
    batch: int,
    store: str | None,
    dataset_size: str | None = None,
) -> tuple[AnnbatchRunner | None, list[Row], Conversion | None, str | None]:
    """The annbatch runner (after its conversion), its two rows and the conversion; or a skip."""
    if isinstance(annbatch, AnnbatchUnavailableError):
        return None, [], None, str(annbatch)
    stem = os.path.splitext(path)[0]
    runner = AnnbatchRunner(
        annbatch, path, store or f"{stem}.annbatch.zarr", batch, dataset_size=dataset_size
    )
    try:
        conversion = runner.convert()
    except AnnbatchUnavailableError as err:
        return None, [], None, str(err)
    # its store's gigabytes are still being written back: a cold pass that began then read
    # the disk at a twentieth of its rate
    os.sync()
    name = (
        f"annbatch {annbatch.version} (chunk_size={runner.chunk_size}, "
        f"preload_nchunks={runner.preload_nchunks})"
    )
    rows = [Row(name, "SciPy CSR", "csr"), Row(name, "SciPy CSR + .toarray()", "dense")]
    return runner, rows, conversion, None


def _full_shuffle(ds: H5SparseDataset) -> EpochShuffleSampler:
    return EpochShuffleSampler(len(ds), seed=0)


def _chunk_shuffle(
    batch: int, workers: int, block: int | None = None
) -> Callable[[H5SparseDataset], ChunkShuffleSampler]:
    return lambda ds: ChunkShuffleSampler(
        ds, seed=0, batch_size=batch, num_workers=workers, block_size=block
    )


def _full_batches(order: np.ndarray[Any, Any], batch: int, most: int) -> np.ndarray[Any, Any]:
    """The first ``most`` full batches of ``order`` as a ``(batches, batch)`` array."""
    k = min(most, order.size // batch)
    return order[: k * batch].reshape(k, batch)


def _random_blocks(n: int, batch: int) -> float:
    """Expected distinct 64-cell blocks in a batch of ``batch`` random cells out of ``n``."""
    blocks = -(-n // 64)
    return float(blocks * (1 - (1 - 1 / blocks) ** min(batch, n)))


def _vs_annbatch_text(
    path: str,
    shape: tuple[int, int, int, str],
    batch: int,
    rows: list[Row],
    conversion: Conversion | None,
    skip: str | None,
    annbatch: AnnbatchEnv | AnnbatchUnavailableError,
    cold: bool = False,
) -> str:
    n, n_cols, nnz, compression = shape
    title = (
        f"\n## Against annbatch{', cold' if cold else ''}: {n} x {n_cols} .h5ad (CSR, "
        f"{compression}, {nnz / max(n, 1):,.0f} stored values per cell, "
        f"{os.path.getsize(path) / 1e6:,.0f} MB), batch {batch}\n\n" + machine_line()
    )
    notes = [
        f"{BLOCK}-cell blocks/batch: distinct blocks of {BLOCK} file rows per full batch "
        f"(fully random: {_random_blocks(n, batch):,.0f}). annbatch's batches are drawn from "
        "32-cell store chunks whose cells its conversion fixed; ours are drawn afresh each "
        "epoch by the sampler named (a full shuffle, or chunk blocks in shuffled windows), "
        "read from the file as it is.",
    ]
    if cold:
        notes.append(
            "Cold: before every timed pass the files it reads leave the page cache (ours: the "
            ".h5ad; annbatch: every file of its store), and every batch is timed, the first "
            "ones included."
        )
    if isinstance(annbatch, AnnbatchEnv):
        notes.append(
            f"annbatch: `Loader(batch_size={batch}, chunk_size=32, preload_nchunks=256, "
            "shuffle=True).use_collection(collection, load_adata=X only)`, zarrs codec pipeline, "
            f"in its own environment ({annbatch.python}), a subprocess whose start is not timed."
        )
    return vs_annbatch_table(title, rows, conversion=conversion, skip=skip, notes=notes)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of ``benchmarks/bench_sparse.py``."""
    args = _parser().parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="nnh-sparse-")
    os.makedirs(workdir, exist_ok=True)
    tables = {t.strip() for t in args.tables.split(",") if t.strip()}
    if not tables <= _TABLES:
        _parser().error(f"--tables: unknown {sorted(tables - _TABLES)}; choose from {_TABLES}")
    if "scdataset" in tables:
        path = os.path.join(workdir, f"cells-{args.rows}x{args.genes}.h5ad")
        _write_once(path, args.rows, args.genes, args.density, "gzip")
        print(run_sparse_bench(path, args.seconds, args.repeats, args.batch_size), flush=True)
    if "annbatch" in tables:
        print(_annbatch_section(args, workdir), flush=True)
    if "csc" in tables and args.csc_rows:
        print(csc_choice(workdir, args.csc_rows, args.genes, args.seconds), flush=True)
    return 0


def _annbatch_section(args: argparse.Namespace, workdir: str) -> str:
    comp = None if args.annbatch_compression == "none" else args.annbatch_compression
    name = f"cells-{args.rows}x{args.genes}-{args.density:g}-{args.annbatch_compression}.h5ad"
    path = os.path.join(workdir, name)
    if args.stream_write and comp is None:
        if not os.path.exists(path):
            print(f"writing {path} block by block …", flush=True)
            write_sparse_h5ad_streamed(path, args.rows, args.genes, args.density)
    else:
        _write_once(path, args.rows, args.genes, args.density, comp)
    env: AnnbatchEnv | AnnbatchUnavailableError
    try:
        print(
            f"annbatch: finding (or making) its environment at {args.annbatch_venv} …", flush=True
        )
        prepare = adapters("sparse-annbatch")["annbatch"]
        env = prepare(args.annbatch_venv, args.annbatch_python, not args.no_annbatch_install)
    except AnnbatchUnavailableError as err:
        print(f"annbatch: skipped ({err})", flush=True)
        env = err
    workers = [int(w) for w in args.annbatch_workers.split(",") if w.strip()]
    return run_vs_annbatch(path, env, args.seconds, args.repeats, args.annbatch_batch_size, workers)


def _write_once(path: str, rows: int, genes: int, density: float, comp: str | None) -> None:
    if not os.path.exists(path):
        print(f"writing {path} with anndata …", flush=True)
        write_sparse_h5ad(path, rows, genes, density, compression=comp)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="H5SparseDataset against scDataset and annbatch")
    parser.add_argument("--rows", type=int, default=200_000, help="cells in the test file")
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=10.0, help="budget per timed pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256, help="of the scDataset table")
    parser.add_argument("--csc-rows", type=int, default=20_000, help="0 skips the CSC table")
    parser.add_argument("--workdir", default=None, help="keeps the generated files")
    parser.add_argument(
        "--tables",
        default="scdataset,annbatch,csc",
        help="comma-separated tables to run: scdataset, annbatch, csc",
    )
    group = parser.add_argument_group("annbatch table")
    group.add_argument(
        "--annbatch-venv",
        default=default_venv(),
        help="annbatch's own environment (Python >= 3.12); made there when missing",
    )
    group.add_argument(
        "--annbatch-python", default=None, help="Python >= 3.12 to make that environment from"
    )
    group.add_argument(
        "--no-annbatch-install",
        action="store_true",
        help="skip annbatch rather than make its environment / pip install it",
    )
    group.add_argument("--annbatch-batch-size", type=int, default=4096)
    group.add_argument("--annbatch-workers", default="0,2", help="our worker counts, e.g. 0,2")
    group.add_argument(
        "--annbatch-compression",
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
