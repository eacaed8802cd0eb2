"""bench_file: time every loader strategy on the user's own file and recommend one.

Each contender reads the file in a random order for a bounded time through the real loader
(``num_workers=0``, one process), so the rates compare the strategies on this file and this
machine. The rank cache is tried only when the data fits comfortably in free memory; its
one-off preload is reported separately, with the number of epochs after which it pays off.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import DataLoader

from .._validate import check_positive_int, format_bytes
from ..dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)
from ..dataloaders._rank_cache.memory import available_ram_bytes
from .contenders import NaiveH5Dataset
from .timing import Result, batch_len, timed_pass

__all__ = ["FileBench", "bench_file"]

NAIVE = "naive per-sample h5py (baseline)"
GETITEMS = "H5LazyDataset + DataLoader(batch_size)"
EPOCH = "H5LazyDataset + batched_loader + EpochShuffleSampler"
CHUNK = "H5LazyDataset + batched_loader + ChunkShuffleSampler"
CACHED = "RankMemCachedH5Dataset (after preload)"
_MEMORY_SHARE = 0.5  # the rank cache is tried only if it needs at most this share of free RAM


@dataclass
class FileBench:
    """What ``bench_file`` measured and what it recommends."""

    path: str
    x_key: str
    y_key: str | None
    samples: int
    sample_bytes: int
    strategy: str
    chunk_rows: int | None
    results: list[Result]
    preload_s: float | None
    skipped: list[str] = field(default_factory=list)
    recommendation: list[str] = field(default_factory=list)

    @property
    def best(self) -> Result:
        """The fastest contender."""
        return max(self.results, key=lambda r: r.rate)


def bench_file(
    path: str,
    x_key: str,
    y_key: str | None = None,
    *,
    seconds: float = 3.0,
    batch_size: int = 256,
    log_fn: Callable[[str], None] | None = None,
) -> FileBench:
    """Time the loader strategies on ``path`` for about ``seconds`` each.

    Raises:
        FileNotFoundError / OSError / KeyError / ValueError / TypeError: as ``H5LazyDataset``
            for a missing file, a missing key or data torch cannot hold.
    """
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    check_positive_int("batch_size", batch_size)
    say = log_fn or _quiet
    probe = H5LazyDataset(path, x_key, y_key)
    if len(probe) == 0:
        raise ValueError(f"x_key={x_key!r} in {probe.path!r} has no samples to time")
    report = FileBench(
        path=probe.path,
        x_key=x_key,
        y_key=y_key,
        samples=len(probe),
        sample_bytes=_sample_bytes(probe),
        strategy=probe._x.strategy,
        chunk_rows=probe.chunk_rows,
        results=[],
        preload_s=None,
    )
    for name, make in _contenders(report, batch_size):
        say(f"timing {name} ...")
        loader, close = make()
        report.results.append(_time(name, loader, report.sample_bytes, seconds))
        close()
    _try_rank_cache(report, batch_size, seconds, say)
    report.recommendation = _recommend(report)
    return report


def _time(name: str, loader: Any, sample_bytes: int, seconds: float) -> Result:
    return timed_pass(name, _epochs(loader), sample_bytes, seconds, batch_len, warmup=1)


def _epochs(loader: Any) -> Iterator[Any]:
    """Epoch after epoch (reshuffled through ``set_epoch``), so small files fill the budget."""
    for epoch in itertools.count():
        set_epoch = getattr(loader.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        yield from loader


def _sample_bytes(ds: H5LazyDataset) -> int:
    y = 0 if ds._y is None else ds._y.row_nbytes
    return int(ds._x.row_nbytes + y)


def _contenders(
    r: FileBench, batch_size: int
) -> list[tuple[str, Callable[[], tuple[Any, Callable[[], None]]]]]:
    def naive() -> tuple[Any, Callable[[], None]]:
        ds = NaiveH5Dataset(r.path, r.x_key, r.y_key)
        return DataLoader(ds, batch_size=batch_size, shuffle=True), ds.close

    def getitems() -> tuple[Any, Callable[[], None]]:
        ds = H5LazyDataset(r.path, r.x_key, r.y_key)
        return DataLoader(ds, batch_size=batch_size, shuffle=True), ds.close

    def epoch() -> tuple[Any, Callable[[], None]]:
        ds = H5LazyDataset(r.path, r.x_key, r.y_key)
        return batched_loader(ds, batch_size, sampler=EpochShuffleSampler(len(ds))), ds.close

    def chunk() -> tuple[Any, Callable[[], None]]:
        ds = H5LazyDataset(r.path, r.x_key, r.y_key)
        sampler = ChunkShuffleSampler(ds, batch_size=batch_size)
        return batched_loader(ds, batch_size, sampler=sampler), ds.close

    found = [(NAIVE, naive), (GETITEMS, getitems), (EPOCH, epoch)]
    if r.chunk_rows is not None and r.chunk_rows > 1:
        found.append((CHUNK, chunk))
    return found


def _try_rank_cache(r: FileBench, batch_size: int, seconds: float, say: Any) -> None:
    need = r.samples * r.sample_bytes
    free = available_ram_bytes()
    if free is not None and need > _MEMORY_SHARE * free:
        r.skipped.append(
            f"RankMemCachedH5Dataset: needs {format_bytes(need)}, more than half of the "
            f"{format_bytes(free)} of free memory"
        )
        return
    say(f"timing {CACHED} ...")
    start = time.perf_counter()
    ds = RankMemCachedH5Dataset(
        r.path, r.x_key, r.y_key, dtype_x=None, pin_host_memory=False, log_fn=_quiet,
        rank=0, world_size=1,
    )  # fmt: skip
    r.preload_s = time.perf_counter() - start
    loader = batched_loader(ds, batch_size, sampler=ds.make_sampler())
    r.results.append(_time(CACHED, loader, r.sample_bytes, seconds))


def _recommend(r: FileBench) -> list[str]:
    streaming = max((x for x in r.results if x.name != CACHED), key=lambda x: x.rate)
    advice = [f"stream: {_how(streaming.name, r)} ({streaming.rate:,.0f} samples/s)"]
    cached = next((x for x in r.results if x.name == CACHED), None)
    if cached is not None and r.preload_s is not None:
        advice.append(_cache_advice(r, cached, streaming))
    return advice


def _how(name: str, r: FileBench) -> str:
    keys = f"{r.path!r}, {r.x_key!r}" + (f", {r.y_key!r}" if r.y_key else "")
    if name == CHUNK:
        return (
            f"H5LazyDataset({keys}) with batched_loader(ds, batch_size, "
            "sampler=ChunkShuffleSampler(ds, batch_size=batch_size)): block shuffle, each "
            "chunk decoded once per epoch"
        )
    if name == EPOCH:
        return (
            f"H5LazyDataset({keys}) with batched_loader(ds, batch_size, "
            "sampler=EpochShuffleSampler(len(ds))): full shuffle, batches read at once"
        )
    if name == GETITEMS:
        return f"H5LazyDataset({keys}) with DataLoader(ds, batch_size=..., shuffle=True)"
    return "a per-sample h5py Dataset (no nn_handler loader was faster on this file)"


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


def _quiet(_line: str) -> None:
    """Drop a log line."""
