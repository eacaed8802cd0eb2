"""annbatch's side of the sparse benchmark, run by the Python of annbatch's own environment.

annbatch (scverse) needs Python >= 3.12 and no torch, so ``benchmarks.peers.annbatch``
runs this file as a script with that environment's interpreter. It therefore imports only the
standard library and numpy at import time, and annbatch / anndata / zarr inside the commands,
never ``nn_handler`` (whose torch that environment lacks).

Commands (each prints one ``NNH-ANNBATCH {json}`` line last on stdout):

* ``convert H5AD STORE [--seed S]``: ``DatasetCollection(STORE).add_adatas([H5AD], rng=...)``
  (annbatch's conversion to its shuffled, sharded Zarr store, with its defaults), timed; the
  result holds ``seconds``, ``peak_rss_bytes`` (this process's peak, so the conversion's
  peak plus the interpreter) and ``store_bytes``.
* ``load H5AD STORE --seconds T --batch-size B [--chunk-size 32] [--preload-nchunks 256]
  [--seed S] [--order-out O.npy] [--order-batches K]``: times
  ``Loader(batch_size=B, chunk_size=32, preload_nchunks=256, shuffle=True)`` over the store
  (X only, as annbatch's README loads it with a custom ``load_adata``), once yielding SciPy CSR
  batches and once with ``.toarray()`` on each, like ``nn_handler.bench.timing.timed_pass``
  over ``timing.epochs`` (two untimed batches, then epoch after epoch until ``T`` seconds have
  passed; ``_epochs`` here is that function again, as this file cannot import it). With
  ``--order-out`` it first saves the ``.h5ad`` rows of up to ``K`` full batches (a ``(K, B)``
  int64 array), from ``return_index=True`` and the store's ``obs_names``, for the
  shuffle-quality measure.

Run: ``<python>=3.12> annbatch_worker.py convert cells.h5ad cells.zarr``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["MARKER", "convert", "dir_bytes", "load", "main", "rows_of"]

MARKER = "NNH-ANNBATCH "  # the result line starts with this; annbatch's own prints are ignored


def _zarr_with_zarrs() -> Any:
    """Import zarr with zarrs' codec pipeline: annbatch's README needs it for local files."""
    zarr = importlib.import_module("zarr")
    zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    return zarr


def dir_bytes(path: str) -> int:
    """Bytes of all files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, name)) for name in files)
    return total


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux; children too, in case a step runs in a subprocess
    usage = (
        resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return max(usage) * 1024


def convert(
    h5ad: str, store: str, seed: int = 0, dataset_size: str | None = None
) -> dict[str, Any]:
    """Convert ``h5ad`` to annbatch's collection at ``store`` (replacing one already there).

    ``dataset_size``: annbatch's ``add_adatas(dataset_size=)``, the rows it holds in memory at
    once (its default, 20GB, is more than a 24 GB machine can convert); None: its default.
    """
    _zarr_with_zarrs()
    annbatch = importlib.import_module("annbatch")
    if os.path.exists(store):
        shutil.rmtree(store)
    start = time.perf_counter()
    sizes = {} if dataset_size is None else {"dataset_size": dataset_size}
    annbatch.DatasetCollection(store).add_adatas([h5ad], rng=np.random.default_rng(seed), **sizes)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "peak_rss_bytes": _peak_rss_bytes(),
        "store_bytes": dir_bytes(store),
    }


def rows_of(
    store_index: np.ndarray[Any, Any], store_names: Any, h5ad_names: Any
) -> np.ndarray[Any, Any]:
    """Map store row numbers to the ``.h5ad`` rows they came from, through the obs names.

    Raises:
        ValueError: a store name is not in the ``.h5ad`` (annbatch made it unique).
    """
    pd = importlib.import_module("pandas")
    where = pd.Index(h5ad_names).get_indexer(np.asarray(store_names)[store_index])
    if (where < 0).any():
        raise ValueError("store obs names not found in the .h5ad")
    return np.asarray(where, dtype=np.int64)


def _loader(store: str, args: argparse.Namespace, seed: int, return_index: bool = False) -> Any:
    annbatch = importlib.import_module("annbatch")
    ad = importlib.import_module("anndata")

    def x_only(group: Any) -> Any:  # the README's custom load_adata, without obs columns
        return ad.AnnData(X=ad.io.sparse_dataset(group["X"]))

    loader = annbatch.Loader(
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        preload_nchunks=args.preload_nchunks,
        shuffle=True,
        rng=np.random.default_rng(seed),
        return_index=return_index,
    )
    return loader.use_collection(annbatch.DatasetCollection(store, mode="r"), load_adata=x_only)


def _epochs(loader: Any) -> Iterator[Any]:
    """Epoch after epoch of one loader (each a fresh draw: ``shuffle=True``), to fill the budget.

    Stops after an epoch that yields nothing.
    """
    while True:
        served = False
        for batch in loader:
            served = True
            yield batch
        if not served:
            return


def _timed(
    batches: Iterator[Any], budget_s: float, transform: Callable[[Any], Any], warmup: int = 2
) -> dict[str, float]:
    for _ in range(warmup):  # untimed, as timed_pass's warmup
        first = next(batches, None)
        if first is not None:
            transform(first["X"])
    cells = 0
    start = time.perf_counter()
    for batch in batches:
        cells += int(transform(batch["X"]).shape[0])
        if time.perf_counter() - start > budget_s:
            break
    return {"cells": cells, "seconds": time.perf_counter() - start}


def _save_order(h5ad: str, store: str, args: argparse.Namespace) -> None:
    ad = importlib.import_module("anndata")
    h5py = importlib.import_module("h5py")
    annbatch = importlib.import_module("annbatch")
    full: list[np.ndarray[Any, Any]] = []
    for batch in _loader(store, args, args.seed + 1, return_index=True):
        if batch["index"].size == args.batch_size:
            full.append(np.asarray(batch["index"], dtype=np.int64))
        if len(full) >= args.order_batches:
            break
    store_names = annbatch.DatasetCollection(store, mode="r").obs(columns=["src_path"]).index
    with h5py.File(h5ad, "r") as f:
        h5ad_names = ad.io.read_elem(f["obs"]).index
    order = rows_of(
        np.concatenate(full) if full else np.zeros(0, np.int64), store_names, h5ad_names
    )
    np.save(args.order_out, order.reshape(len(full), args.batch_size))


def load(h5ad: str, store: str, args: argparse.Namespace) -> dict[str, Any]:
    """Time CSR and ``.toarray()`` batches; save the order first when asked."""
    _zarr_with_zarrs()
    if args.order_out:
        _save_order(h5ad, store, args)
    result: dict[str, Any] = {}
    for kind, transform in (("csr", lambda x: x), ("dense", lambda x: x.toarray())):
        if args.cold:
            _evict(store)
        batches = _epochs(_loader(store, args, args.seed))
        result[kind] = _timed(batches, args.seconds, transform, 0 if args.cold else 2)
    return result


def _evict(store: str) -> None:
    """Drop the store's pages from the page cache (each pass then reads it from the disk)."""
    for folder, _dirs, names in os.walk(store):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="annbatch's side of bench_sparse")
    parser.add_argument("command", choices=["convert", "load"])
    parser.add_argument("h5ad")
    parser.add_argument("store")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--chunk-size", type=int, default=32)
    parser.add_argument("--preload-nchunks", type=int, default=256)
    parser.add_argument("--order-out", default=None)
    parser.add_argument("--order-batches", type=int, default=64)
    parser.add_argument(
        "--cold", action="store_true", help="evict the store before each pass; time every batch"
    )
    parser.add_argument("--dataset-size", default=None, help="add_adatas(dataset_size=)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; print its result as the last stdout line."""
    args = _parser().parse_args(argv)
    if args.command == "convert":
        result = convert(args.h5ad, args.store, args.seed, args.dataset_size)
    else:
        result = load(args.h5ad, args.store, args)
    version = importlib.import_module("importlib.metadata").version("annbatch")
    print(MARKER + json.dumps({**result, "annbatch": version}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
