"""The workload table: workloads W1–W4 × ``num_workers`` {0, 2} × limit × peers, with quality.

``python benchmarks/run.py --workloads W1,W2,W3,W4`` writes each workload's file (see
``workloads``), then times, in alternating rounds (median reported), every contender with
``num_workers=0`` and ``2``:

* ours: ``H5LazyDataset`` + ``batched_loader`` + ``ChunkShuffleSampler`` (dealt to workers),
  DataLoader worker processes, and (when available) the same batches served by threads;
* peers: every peer in the registry with a ``"workloads"`` adapter, ``(case, workers) ->``
  an iterable of ``(x, row indices)`` batches, or None when not installed (scDataset, h5torch);
* the limit, measured in the same run: the first limit in the registry whose ``"workloads"``
  adapter, ``(case) ->`` an object with ``name`` and ``measure()``, takes the workload (an
  in-RAM NumPy gather for uncompressed data, libdeflate for gzip, a process per core otherwise).

Every row carries the shuffle quality of what the loader really served (``0/labels`` holds row
indices): chunks per batch and the correlation of consecutive indices. ``RC`` measures the rank
cache's batches against an in-RAM NumPy gather while every core is busy with another process.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import numpy as np
import torch

from nn_handler._validate import usable_cores
from nn_handler.bench.contenders import X_KEY, Y_KEY
from nn_handler.bench.timing import check_names, machine_line
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)

from ..cases import Limit, WorkloadCase
from ..harness import Check, alternating, format_targets, median
from ..registry import adapters
from .workload_files import WORKLOADS, Workload, write_workload

__all__ = ["Limit", "Measured", "WorkloadCase", "WorkloadTable", "limit_for", "run_workloads"]

OURS, OURS_THREADS = "ours (batched, ChunkShuffleSampler)", "ours, worker threads"
RANK_CACHE = "RC"


@dataclass
class Measured:
    """One contender at one ``num_workers``: rates of every round and the served order."""

    name: str
    workers: int
    rates: list[float] = field(default_factory=list)
    cpu_rates: list[float] = field(default_factory=list)  # samples per CPU-second, all processes
    chunks_per_batch: float = float("nan")
    neighbour_corr: float = float("nan")

    @property
    def rate(self) -> float:
        """Median samples/s over the rounds."""
        return median(self.rates)

    @property
    def cpu_rate(self) -> float:
        """Median samples per CPU-second (this process and its DataLoader workers)."""
        return median(self.cpu_rates)


@dataclass
class WorkloadTable:
    """One workload's results: contenders and the limit."""

    workload: Workload
    n: int
    limit_name: str
    limit_rates: list[float]
    rows: list[Measured]
    limit_cpu_rates: list[float] = field(default_factory=list)

    @property
    def limit(self) -> float:
        """Median limit over the rounds."""
        return median(self.limit_rates)

    @property
    def limit_per_core(self) -> float:
        """The limit's samples per CPU-second of one core (NaN for the process limit)."""
        return median(self.limit_cpu_rates)

    def get(self, name: str, workers: int) -> Measured | None:
        """The row for ``name`` at ``workers`` (None when it was not run)."""
        return next((r for r in self.rows if r.name == name and r.workers == workers), None)


# -- contenders: (case, workers) -> an iterable of (x, row indices) batches, or None -----------


def _ours(case: WorkloadCase, workers: int) -> Iterable[Any] | None:
    ds = H5LazyDataset(case.path, X_KEY, Y_KEY)
    sampler = ChunkShuffleSampler(ds, batch_size=case.batch_size, num_workers=workers)
    return batched_loader(ds, case.batch_size, sampler=sampler, num_workers=workers)


def _ours_threads(case: WorkloadCase, workers: int) -> Iterable[Any] | None:
    if workers == 0:
        return None
    ds = H5LazyDataset(case.path, X_KEY, Y_KEY)
    sampler = ChunkShuffleSampler(ds, batch_size=case.batch_size)
    try:
        return batched_loader(
            ds, case.batch_size, sampler=sampler, num_workers=workers, worker_mode="thread"
        )
    except TypeError:  # a version of the library without worker threads
        return None


Loader = Callable[[WorkloadCase, int], Iterable[Any] | None]
OURS_LOADERS: dict[str, Loader] = {OURS: _ours, OURS_THREADS: _ours_threads}


def contenders() -> dict[str, Loader]:
    """Ours, then every registered peer's ``"workloads"`` adapter."""
    return {**OURS_LOADERS, **adapters("workloads", kind="peer")}


def _split(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, dict):
        return batch[X_KEY], batch[Y_KEY]
    return batch[0], batch[1]


def _worker_cpu(it: Any) -> float:
    """CPU seconds used so far by a DataLoader iterator's worker processes (Linux ``/proc``)."""
    total = 0.0
    for worker in getattr(it, "_workers", []):
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{worker.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _time_loader(
    loader: Iterable[Any], budget_s: float
) -> tuple[float, float, list[np.ndarray[Any, Any]]]:
    """Samples/s, samples per CPU-second and the row ids served, over up to ``budget_s``.

    Two batches are consumed untimed first. CPU counts this process and its worker processes:
    on a busy machine it shows the work per sample, which wall-clock rates cannot.
    """
    it = iter(loader)
    served = []
    for _ in range(2):
        batch = next(it, None)
        if batch is None:
            break
        served.append(np.asarray(_split(batch)[1]))
    cpu0 = time.process_time() + _worker_cpu(it)
    samples, start = 0, time.perf_counter()
    for batch in it:
        x, ids = _split(batch)
        samples += int(x.shape[0])
        served.append(np.asarray(ids))
        if time.perf_counter() - start > budget_s:
            break
    seconds = time.perf_counter() - start
    cpu = time.process_time() + _worker_cpu(it) - cpu0
    with contextlib.suppress(Exception):
        del it  # stop workers now, not at garbage collection
    rate = samples / seconds if seconds > 0 else float("nan")
    return rate, (samples / cpu if cpu > 0 else float("nan")), served


def _quality(served: list[np.ndarray[Any, Any]], chunk_rows: int | None) -> tuple[float, float]:
    """Mean distinct chunks per batch and the correlation of consecutive served indices."""
    rows = chunk_rows or 1
    batches = [b.astype(np.int64).ravel() for b in served if b.size]
    if not batches:
        return float("nan"), float("nan")
    per_batch = float(np.mean([np.unique(b // rows).size for b in batches]))
    stream = np.concatenate(batches)
    if stream.size < 3 or np.all(stream == stream[0]):
        return per_batch, float("nan")
    return per_batch, float(np.corrcoef(stream[:-1], stream[1:])[0, 1])


# -- limits --------------------------------------------------------------------------------


def limit_for(case: WorkloadCase) -> Limit:
    """The first registered limit that takes ``case``'s workload."""
    for make in adapters("workloads", kind="limit").values():
        limit: Limit | None = make(case)
        if limit is not None:
            return limit
    raise LookupError(f"no registered limit takes workload {case.workload.name!r}")


# -- the rank cache on a busy machine --------------------------------------------------------


def _burn(stop: Any) -> None:
    """Keep one core busy until ``stop`` is set (a stand-in for other jobs on the machine)."""
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


def _rank_cache_rates(case: WorkloadCase) -> tuple[float, float]:
    """(rank cache batches/s, in-RAM NumPy gather/s) in samples/s, every core busy meanwhile."""
    ds = RankMemCachedH5Dataset(
        case.path, X_KEY, Y_KEY, dtype_x=None, log_fn=_quiet, rank=0, world_size=1
    )
    images = ds.x.numpy()
    labels = ds.y.numpy() if ds.y is not None else np.zeros(len(ds))
    order = np.random.default_rng(0).permutation(len(ds))
    batches = [order[i : i + case.batch_size] for i in range(0, len(ds), case.batch_size)]

    def rate(fn: Callable[[np.ndarray[Any, Any]], Any]) -> float:
        samples, start = 0, time.perf_counter()
        for b in batches:
            fn(b)
            samples += len(b)
            if time.perf_counter() - start > case.budget_s:
                break
        return samples / (time.perf_counter() - start)

    ctx = get_context("spawn")
    stop = ctx.Event()
    burners = [ctx.Process(target=_burn, args=(stop,), daemon=True) for _ in range(usable_cores())]
    for p in burners:
        p.start()
    try:
        time.sleep(0.5)  # let the burners start
        ours_rates, limit_rates = [], []
        for _ in range(3):  # alternate: the burners' share of the cores drifts
            ours_rates.append(rate(lambda b: ds[b]))
            limit_rates.append(  # the same work: x and y rows of the batch
                rate(lambda b: (torch.from_numpy(images[b]), torch.from_numpy(labels[b])))
            )
        ours, limit = median(ours_rates), median(limit_rates)
    finally:
        stop.set()
        for p in burners:
            p.join(timeout=10)
    return ours, limit


def _quiet(message: str) -> None:
    """A ``log_fn`` that drops the rank cache's log lines."""


# -- the run -------------------------------------------------------------------------------


def _measure_workload(
    case: WorkloadCase, workers: Sequence[int], rounds: int, out: Callable[[str], None]
) -> WorkloadTable:
    limit = limit_for(case)
    loaders = contenders()
    rows = [Measured(name, w) for name in loaders for w in workers]
    limit_rates: list[float] = []
    limit_cpu: list[float] = []
    for r, order in alternating(rows, rounds):
        wall, per_core = limit.measure()
        limit_rates.append(wall)
        limit_cpu.append(per_core)
        for row in order:
            loader = loaders[row.name](case, row.workers)
            if loader is None:
                continue
            rate, cpu_rate, served = _time_loader(loader, case.budget_s)
            del loader
            row.rates.append(rate)
            row.cpu_rates.append(cpu_rate)
            if r == 0:
                quality = _quality(served, case.workload.chunk_rows)
                row.chunks_per_batch, row.neighbour_corr = quality
        out(f"  round {r + 1}/{rounds} of {case.workload.name} done")
    measured = [r for r in rows if r.rates]
    return WorkloadTable(case.workload, case.n, limit.name, limit_rates, measured, limit_cpu)


def run_workloads(
    names: Sequence[str],
    *,
    scale: float = 1.0,
    seconds: float = 5.0,
    rounds: int = 3,
    batch_size: int = 256,
    workers: Sequence[int] = (0, 2),
    workdir: str | None = None,
    out: Callable[[str], None] = print,
) -> list[WorkloadTable]:
    """Run the workloads ``names`` (``W1``…``W4``, ``W2-blosc-lz4``, ``W2-zstd``, ``RC``).

    Raises:
        ValueError: an unknown workload name (the message lists the known ones).
    """
    known = [*WORKLOADS, RANK_CACHE]
    check_names("workloads", names, known)
    out(f"# nn_handler workloads\n\n{machine_line()}\n")
    out(
        f"batches of {batch_size}, {rounds} alternating rounds (median), up to {seconds:g}s per "
        f"contender and round, num_workers in {list(workers)}, rows × {scale:g}"
    )
    tables: list[WorkloadTable] = []
    rc: tuple[float, float] | None = None
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for name in names:
            workload = WORKLOADS["W1" if name == RANK_CACHE else name]
            if not workload.available():
                out(f"\n{name}: skipped (needs hdf5plugin)")
                continue
            n = max(workload.chunk_rows or 1, int(workload.rows * scale))
            path = os.path.join(tmp, f"{name}.h5")
            write_workload(path, workload, n)
            os.sync()
            case = WorkloadCase(path, workload, n, batch_size, seconds)
            if name == RANK_CACHE:
                rc = _rank_cache_rates(case)
            else:
                tables.append(_measure_workload(case, workers, rounds, out))
                out(format_workload(tables[-1]))
            os.remove(path)
    out(format_summary(tables, rc))
    return tables


def _fmt(x: float) -> str:
    return "—" if x != x else f"{x:,.0f}"  # NaN: not measured


def format_workload(table: WorkloadTable) -> str:
    """One workload's Markdown table: every contender and worker count, ratio to the limit."""
    w = table.workload
    lines = [
        f"\n## {w.name}: {w.describe(table.n)}\n",
        f"limit ({table.limit_name}): {_fmt(table.limit)} samples/s; one core: "
        f"{_fmt(table.limit_per_core)} samples per CPU-second\n",
        "| loader | num_workers | samples/s (median) | range | / limit | samples per CPU-s "
        "| CPU efficiency | chunks per batch | neighbour correlation |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in table.rows:
        spread = f"{_fmt(min(row.rates))}–{_fmt(max(row.rates))}"
        lines.append(
            f"| {row.name} | {row.workers} | {_fmt(row.rate)} | {spread} | "
            f"{row.rate / table.limit:.2f} | {_fmt(row.cpu_rate)} | "
            f"{row.cpu_rate / table.limit_per_core:.2f} | {row.chunks_per_batch:.1f} | "
            f"{row.neighbour_corr:.3f} |"
        )
    lines.append(
        "\nCPU efficiency = samples per CPU-second (this process and its workers) / the limit's "
        "samples per CPU-second of one core: 1.0 means no work beyond the limit's own; it does "
        "not depend on how busy the machine is."
    )
    return "\n".join(lines)


def _best_ours(table: WorkloadTable, workers: int) -> Measured | None:
    found = [r for r in (table.get(OURS, workers), table.get(OURS_THREADS, workers)) if r]
    return max(found, key=lambda r: r.rate) if found else None


def _efficiency(row: Measured | None, table: WorkloadTable) -> str:
    if row is None or table.limit_per_core != table.limit_per_core:
        return "—"
    return f"{row.cpu_rate / table.limit_per_core:.2f}"


def format_summary(tables: list[WorkloadTable], rc: tuple[float, float] | None) -> str:
    """The workload table and its targets, measured."""
    lines = [
        "\n## Summary (the targets' table)\n",
        "| workload | ours, num_workers=0 | ours, num_workers=2 (best of processes / threads) | "
        "limit in the same run | best peer | CPU efficiency, ours nw=0 / nw=2 |",
        "|---|---:|---:|---|---|---|",
    ]
    checks: list[tuple[str, float, float]] = []
    for t in tables:
        zero, two = t.get(OURS, 0), _best_ours(t, 2)
        peers = [r for r in t.rows if r.name not in (OURS, OURS_THREADS)]
        peer = max(peers, key=lambda r: r.rate) if peers else None
        z = zero.rate if zero else float("nan")
        d = two.rate if two else float("nan")
        how = "" if two is None else (" threads" if two.name == OURS_THREADS else " processes")
        peer_text = "—" if peer is None else f"{peer.name} (nw={peer.workers}) {_fmt(peer.rate)}/s"
        lines.append(
            f"| {t.workload.name} | {_fmt(z)}/s ({z / t.limit:.2f} of limit) | "
            f"{_fmt(d)}/s{how} ({d / t.limit:.2f}) | {t.limit_name}: {_fmt(t.limit)}/s | "
            f"{peer_text} | {_efficiency(zero, t)} / {_efficiency(two, t)} |"
        )
        name = t.workload.name
        if name in ("W1", "W2", "W3", "W4"):
            checks.append((f"{name}: nw=2 / nw=0 >= 1.0", d / z, 1.0))
        if name in ("W2", "W3", "W4"):
            checks.append((f"{name}: nw=2 / nw=0 >= 1.5", d / z, 1.5))
            best = max(z, d)
            checks.append((f"{name}: best / limit >= 0.8", best / t.limit, 0.8))
        if t.workload.plugin is not None:
            checks.append((f"{name}: best / two-process limit >= 0.8", max(z, d) / t.limit, 0.8))
    if rc is not None:
        ours, limit = rc
        lines.append(
            f"| rank cache, batches from RAM, machine busy | {_fmt(ours)}/s | | "
            f"in-RAM NumPy gather, busy: {_fmt(limit)}/s | |"
        )
        checks.append(("rank cache / in-RAM gather (busy) >= 0.8", ours / limit, 0.8))
    lines.append("\n### Targets\n")
    lines.extend(format_targets(Check(label, ratio, goal) for label, ratio, goal in checks))
    return "\n".join(lines)
