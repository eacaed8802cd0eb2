"""The advice ``bench_file`` prints: which strategy to stream with, and what caching buys."""

from __future__ import annotations

import math

from .._io import FileOptions, decoded_budget, random_order_advice
from .._validate import format_bytes
from .file_report import BLOCK_CHUNKS, BLOCKS, CACHED, CHUNK, EPOCH, GETITEMS, FileBench
from .remote_file import CACHE_COLD, CACHE_WARM, NAIVE_FSSPEC
from .timing import Result

__all__ = ["recommend"]


def recommend(r: FileBench) -> list[str]:
    """One line per piece of advice: the streaming setup, then a cache's (URL, rank cache)."""
    apart = (CACHED, CACHE_COLD, CACHE_WARM)
    streaming = max((x for x in r.results if x.name not in apart), key=lambda x: x.rate)
    advice = [f"stream: {_how(streaming.name, r)} ({streaming.rate:,.0f} samples/s)"]
    if r.strategy in ("decode", "chunks") and (r.chunk_rows or 1) > 1 and not r.remote:
        decoded, budget = r.samples * r.x_row_bytes, decoded_budget(None)
        rows, window = r.chunk_rows or 1, FileOptions().rdcc_nbytes  # (bench opens with defaults)
        order = random_order_advice(r.path, decoded, budget, rows, r.x_row_bytes, window=window)
        advice.append(f"order: {order}")
    if r.remote:
        advice.append(_cache_dir_advice(r))
    cached = next((x for x in r.results if x.name == CACHED), None)
    if cached is not None and r.preload_s is not None:
        advice.append(_cache_advice(r, cached, streaming))
    return advice


def _how(name: str, r: FileBench) -> str:
    keys = f"{r.path!r}, {r.x_key!r}" + (f", {r.y_key!r}" if r.y_key else "")
    if r.remote:  # the options' values may hold secrets: name them only
        keys += ", storage_options=..." if r.storage_options else ""
        keys += f", cache_dir={r.cache_dir or '<node-local dir>'!r}"
    loader = f"H5LazyDataset({keys}) with batched_loader(ds, batch_size, sampler="
    if name == CHUNK:
        return (
            loader + "ChunkShuffleSampler(ds, batch_size=batch_size)): block shuffle, each "
            "chunk decoded once per epoch"
        )
    if name == BLOCKS:
        return (
            loader + f"ChunkShuffleSampler(ds, batch_size=batch_size, block_size="
            f"{BLOCK_CHUNKS} * ds.chunk_rows)): runs of {BLOCK_CHUNKS} adjacent chunks "
            "shuffled together, each run fetched by one request"
        )
    if name == EPOCH:
        return loader + "EpochShuffleSampler(len(ds))): full shuffle, batches read at once"
    if name == GETITEMS:
        return f"H5LazyDataset({keys}) with DataLoader(ds, batch_size=..., shuffle=True)"
    if name == NAIVE_FSSPEC:
        return (
            "h5py on an fsspec file object (no nn_handler loader was faster: fsspec reads "
            "ahead in large blocks, which fetches a small file whole)"
        )
    return "a per-sample h5py Dataset (no nn_handler loader was faster on this file)"


def _cache_dir_advice(r: FileBench) -> str:
    cold = next((x for x in r.results if x.name == CACHE_COLD), None)
    warm = next((x for x in r.results if x.name == CACHE_WARM), None)
    if cold is None or warm is None:
        return (
            "cache_dir: pass cache_dir=<a node-local directory, e.g. NVMe scratch> so that "
            "every epoch after the first, and every other rank and worker of the node, reads "
            "from the node's disk instead of the network; measure it with --cache-dir DIR"
        )
    return (
        f"cache_dir: {r.cache_strategy} fetched {cold.rate:,.0f} samples/s while filling a "
        f"cache in {r.cache_dir!r}, and read the same batches back from it at "
        f"{warm.rate:,.0f} samples/s ({warm.rate / cold.rate:.1f}x): with cache_dir, every "
        "epoch after the first, and every other rank and worker of the node, reads from disk"
    )


def _cache_advice(r: FileBench, cached: Result, streaming: Result) -> str:
    assert r.preload_s is not None
    epoch_stream = r.samples / streaming.rate
    epoch_cached = r.samples / cached.rate
    gain = epoch_stream - epoch_cached
    text = (
        f"cache: RankMemCachedH5Dataset preloads {format_bytes(r.samples * r.sample_bytes)} "
        f"in {r.preload_s:.1f} s, then serves {cached.rate:,.0f} samples/s"
    )
    if gain <= 0:
        return text + "; not faster than streaming here"
    epochs = max(1, math.ceil(r.preload_s / gain))
    return text + f"; it pays off from epoch {epochs} on (use it for multi-epoch training)"
