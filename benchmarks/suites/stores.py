"""The sparse suite's stores table: ours against every peer that converts the file first.

A store peer (``cases.StorePeer``, registered with a ``"sparse-store"`` adapter: annbatch today)
converts the ``.h5ad`` into a store of its own once (timed, with its peak memory), then loads
sparse and dense batches in its own environment, in a subprocess whose start is not timed. Ours
are ``H5SparseDataset`` ``sparse_csr`` and ``dense`` batches of a fresh full shuffle (a chunk
shuffle on a compressed file) at each worker count. Every loader starts fresh in each
interleaved round; the table (``stores_table``) divides each row by the first store peer's of
the same batch kind. A peer that cannot be installed or run leaves one line saying why.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from nn_handler._io.file.source import load_plugins
from nn_handler.bench.timing import batch_len, epochs, machine_line, timed_pass
from nn_handler.dataloaders import ChunkShuffleSampler, EpochShuffleSampler, H5SparseDataset
from nn_handler.dataloaders.h5_sparse_dataset import Output

from ..cases import Contender, Conversion, Kind, PeerUnavailableError, StorePeer, StoreRunner
from ..registry import adapters
from .sparse_ours import ours
from .stores_table import BLOCK, Row, blocks_per_batch, stores_table

__all__ = ["default_envs", "prepare_stores", "run_vs_stores"]

_COLD_BLOCK = 32  # cells a block of ours holds in the cold table: a store peer's chunk
_KINDS: tuple[Kind, ...] = ("csr", "dense")


def prepare_stores(
    envs: str, python: str | None = None, install: bool = True, say: Callable[[str], None] = print
) -> dict[str, StorePeer | PeerUnavailableError]:
    """Every registered store peer's environment (``"sparse-store"``), or why it cannot run.

    ``envs``: the folder of their own environments; ``python``: the interpreter to make one from
    (None: any that fits); ``install``: whether one may be made (else it is only looked for).
    """
    found: dict[str, StorePeer | PeerUnavailableError] = {}
    for name, prepare in adapters("sparse-store").items():
        say(f"{name}: finding (or making) its environment in {envs} …")
        try:
            found[name] = prepare(envs, python, install)
        except PeerUnavailableError as err:
            say(f"{name}: skipped ({err})")
            found[name] = err
    return found


def default_envs() -> str:
    """``build`` under the working directory (git-ignored): where store peers' environments go."""
    return os.path.join(os.getcwd(), "build")


@dataclass
class _Store:
    """One store peer in a run: its runner and rows, its conversion, or why it is skipped."""

    name: str
    runner: StoreRunner | None = None
    rows: list[Row] = field(default_factory=list)
    conversion: Conversion | None = None
    skip: str | None = None


def run_vs_stores(
    path: str,
    peers: Mapping[str, StorePeer | PeerUnavailableError],
    seconds: float = 10.0,
    repeats: int = 3,
    batch: int = 4096,
    workers: Sequence[int] = (0, 2),
    *,
    order_batches: int = 64,
    evict: Callable[[str], None] | None = None,
    dataset_size: str | None = None,
    source_h5ad: str | None = None,
) -> str:
    """Ours and the store peers on ``path``, sparse and dense batches; return one Markdown table.

    Ours: ``H5SparseDataset`` (``output="sparse_csr"`` and ``"dense"``) with an
    ``EpochShuffleSampler`` (a fresh full shuffle each epoch, no conversion) at each worker
    count of ``workers``. Each store peer (``peers``: its environment, or why it cannot run, as
    ``prepare_stores`` gives them) converts the ``.h5ad`` once, next to it, then loads sparse and
    dense batches. Every loader starts fresh in each of ``repeats`` interleaved rounds (a store
    peer in a subprocess whose start is not timed). The mixing column counts distinct 64-cell
    blocks of the file in the first ``order_batches`` full batches.
    ``evict``: cold passes, and ours also with a ``ChunkShuffleSampler`` of 32-cell blocks
    (a store peer's reads: a full shuffle of a raw file is bound by the disk's random-read rate,
    two reads per cell). ``evict(path)`` drops a file's (or a folder's) pages from the page
    cache (and checks they are gone): it runs on the ``.h5ad`` before each of our passes and
    on a peer's store before its run, whose worker drops the store's pages again before each
    of its passes. ``dataset_size``: what a peer's conversion holds in memory at once (None:
    its default). ``source_h5ad``: the ``.h5ad`` the peers convert (None: ``path``), when ours
    reads another file of the same cells (our own conversion of it).
    """
    cold = evict is not None
    load_plugins()  # (our conversion may be zstd / lz4: hdf5plugin's filters for h5py here)
    with h5py.File(path, "r") as f:
        n, n_cols = (int(v) for v in f["X"].attrs["shape"])
        nnz = int(f["X/indptr"][-1])
        compression = f["X/data"].compression or "uncompressed"
    chunked = compression != "uncompressed"
    ours_rows = _our_rows(path, batch, workers, order_batches, chunked=chunked)
    if evict is not None and not chunked:  # cold: a store's reads, 32 adjacent cells each
        ours_rows += _our_rows(path, batch, workers, order_batches, block=_COLD_BLOCK)
    stores = [
        _store(name, peer, source_h5ad or path, batch, dataset_size) for name, peer in peers.items()
    ]
    stem = os.path.splitext(path)[0]
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
        for store in stores:
            _time_store(store, round_, seconds, evict, f"{stem}.{store.name}-order.npy")
    rows = [r for s in stores for r in s.rows] + [r for r, _ in ours_rows]
    shape = (n, n_cols, nnz, compression)
    return _vs_stores_text(path, shape, batch, rows, stores, peers, cold)


def _time_store(
    store: _Store,
    round_: int,
    seconds: float,
    evict: Callable[[str], None] | None,
    order_out: str,
) -> None:
    """One round of a store peer's passes; on failure its rows go and the reason stays."""
    if store.runner is None:
        return
    first = round_ == 0
    try:
        order = order_out if first else None
        if evict is not None:
            evict(store.runner.store)
        rates = store.runner.load(seconds, seed=round_, order_out=order, cold=evict is not None)
    except PeerUnavailableError as err:  # its rows go; the reason is printed instead
        store.runner, store.skip, store.rows = None, str(err), []
        return
    for row in store.rows:
        row.rates.append(rates[row.kind])
        if first:
            row.blocks = blocks_per_batch(np.load(order_out, allow_pickle=False))


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


def _store(
    name: str,
    peer: StorePeer | PeerUnavailableError,
    h5ad: str,
    batch: int,
    dataset_size: str | None = None,
) -> _Store:
    """A store peer's runner (after its conversion) and its two rows; or why it is skipped."""
    if isinstance(peer, PeerUnavailableError):
        return _Store(name, skip=str(peer))
    runner = peer.runner(h5ad, batch, dataset_size)
    try:
        conversion = runner.convert()
    except PeerUnavailableError as err:
        return _Store(name, skip=str(err))
    # its store's gigabytes are still being written back: a cold pass that began then read
    # the disk at a twentieth of its rate
    os.sync()
    batches = runner.batches
    rows = [Row(runner.label, batches[kind], kind, base=True) for kind in _KINDS]
    return _Store(name, runner, rows, conversion)


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


def _vs_stores_text(
    path: str,
    shape: tuple[int, int, int, str],
    batch: int,
    rows: list[Row],
    stores: list[_Store],
    peers: Mapping[str, StorePeer | PeerUnavailableError],
    cold: bool = False,
) -> str:
    n, n_cols, nnz, compression = shape
    title = (
        f"\n## Against {' and '.join(peers) or 'no store peer'}{', cold' if cold else ''}: "
        f"{n} x {n_cols} .h5ad (CSR, {compression}, {nnz / max(n, 1):,.0f} stored values per "
        f"cell, {os.path.getsize(path) / 1e6:,.0f} MB), batch {batch}\n\n" + machine_line()
    )
    notes = [
        f"{BLOCK}-cell blocks/batch: distinct blocks of {BLOCK} file rows per full batch "
        f"(fully random: {_random_blocks(n, batch):,.0f}). Ours are drawn afresh each "
        "epoch by the sampler named (a full shuffle, or chunk blocks in shuffled windows), "
        "read from the file as it is.",
    ]
    if cold:
        notes.append(
            "Cold: before every timed pass the files it reads leave the page cache (ours: the "
            ".h5ad; a store peer: every file of its store), and every batch is timed, the "
            "first ones included."
        )
    for peer in peers.values():
        if not isinstance(peer, PeerUnavailableError):
            notes.extend(peer.notes(batch))
    return stores_table(
        title,
        rows,
        base=next(iter(peers), "store peer"),
        conversions=[(s.name, s.conversion) for s in stores if s.conversion is not None],
        skips=[(s.name, s.skip) for s in stores if s.skip is not None],
        notes=notes,
    )
