"""bench_file: time every loader strategy on the user's own file and recommend one.

Each contender reads the file in a random order for a bounded time through the real loader
(``num_workers=0``, one process), so the rates compare the strategies on this file and this
machine. The rank cache is tried only when the data fits comfortably in free memory; its
one-off preload is reported separately, with the number of epochs after which it pays off.

On a URL every strategy reads over the network (no cache: each pass fetches again); the
baseline is h5py on an fsspec file object, blocks of adjacent chunks are tried too (one request
per block instead of per chunk), and with a ``cache_dir`` the fastest batched strategy is timed
filling a cache and then reading from it (``remote_file.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from torch.utils.data import DataLoader

from .._host import available_ram_bytes
from .._io import is_url
from .._validate import check_positive_int, format_bytes
from ..dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)
from .contenders import NaiveH5Dataset
from .file_advice import recommend
from .file_report import (
    BLOCK_CHUNKS,
    BLOCKS,
    CACHED,
    CHUNK,
    EPOCH,
    GETITEMS,
    NAIVE,
    FileBench,
)
from .remote_file import (
    CACHE_COLD,
    CACHE_WARM,
    NAIVE_FSSPEC,
    time_cache_passes,
    time_fsspec_naive,
)
from .step_wait import time_step_waits
from .timing import Result, batch_len, epochs, timed_pass

__all__ = ["FileBench", "bench_file"]

_MEMORY_SHARE = 0.5  # the rank cache is tried only if it needs at most this share of free RAM
# URLs: the rank cache's preload is tried only if an epoch at the streaming rate (an upper
# bound of the preload, which reads in long merged requests) fits in this many budgets
_PRELOAD_BUDGETS = 10


def bench_file(
    path: str,
    x_key: str,
    y_key: str | None = None,
    *,
    seconds: float = 3.0,
    batch_size: int = 256,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | None = None,
    step_ms: float | None = None,
    log_fn: Callable[[str], None] | None = None,
) -> FileBench:
    """Time the loader strategies on ``path`` for about ``seconds`` each.

    Args:
        path: The HDF5 file, or a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, any
            fsspec URL).
        x_key: Dataset of the inputs.
        y_key: Dataset of the targets (optional).
        seconds: Budget per strategy.
        batch_size: Samples per batch.
        storage_options: For a URL: the fsspec filesystem's options (credentials, endpoint).
        cache_dir: For a URL: a node-local directory; the fastest batched strategy is also
            timed filling a cache there and reading from it (in a scratch folder, removed).
        step_ms: A training step's length in milliseconds: the fastest batched strategy is
            also timed under a simulated step of that length at each ``num_workers`` up to
            the usable cores, for the share of time the step waits (``step_wait.py``).
        log_fn: Called with a line before each strategy is timed.

    Raises:
        FileNotFoundError / OSError / KeyError / ValueError / TypeError: as ``H5LazyDataset``
            for a missing file, a missing key or data torch cannot hold.
        RemoteAccessError / RemoteReadError / ImportError: as ``H5LazyDataset`` for a URL.
        ValueError: ``storage_options`` or ``cache_dir`` given for a local path; ``seconds``
            or ``step_ms`` not above 0.
    """
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    if step_ms is not None and not (isinstance(step_ms, int | float) and 0 < step_ms < 1e6):
        raise ValueError(f"step_ms must be a step's length in milliseconds (> 0), got {step_ms!r}")
    check_positive_int("batch_size", batch_size)
    _check_remote_options(path, storage_options, cache_dir)
    say = log_fn or _quiet
    options = dict(storage_options) if storage_options is not None else None
    probe = H5LazyDataset(path, x_key, y_key, storage_options=options)
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
        remote=is_url(path),
        cache_dir=cache_dir,
        storage_options=options,
        x_row_bytes=int(probe._x.row_nbytes),
    )
    probe.close()
    if report.remote:
        say(f"timing {NAIVE_FSSPEC} ...")
        keys = (x_key, y_key)
        naive = time_fsspec_naive(report.path, keys, options, report.sample_bytes, seconds)
        report.results.append(naive)
    for name, make in _contenders(report, batch_size):
        say(f"timing {name} ...")
        loader, close = make()
        report.results.append(_time(name, loader, report.sample_bytes, seconds))
        close()
    if cache_dir is not None:
        _time_cache(report, batch_size, seconds, say)
    _try_rank_cache(report, batch_size, seconds, say)
    if step_ms is not None:
        _time_step(report, batch_size, float(step_ms), seconds, say)
    report.recommendation = recommend(report)
    return report


def _time_step(r: FileBench, batch_size: int, step_ms: float, seconds: float, say: Any) -> None:
    """The wait of a ``step_ms`` step fed by the fastest batched strategy (``step_wait.py``)."""
    samplers = _samplers(r, batch_size)
    best = max((x for x in r.results if x.name in samplers), key=lambda x: x.rate)
    r.step_ms, r.step_strategy = step_ms, best.name
    r.step_waits = time_step_waits(
        lambda: _open(r), samplers[best.name], batch_size, step_ms, seconds, say
    )


def _check_remote_options(
    path: str, storage_options: Mapping[str, Any] | None, cache_dir: str | None
) -> None:
    if is_url(path):
        return
    given = {  # the options' values may hold secrets: their keys only
        "storage_options": None if storage_options is None else f"keys {sorted(storage_options)}",
        "cache_dir": None if cache_dir is None else repr(cache_dir),
    }
    for name, shown in given.items():
        if shown is not None:
            raise ValueError(
                f"{name} ({shown}) applies to URLs only (s3://, gs://, az://, http(s)://, …), "
                f"but path={path!r} is a local file; leave {name} out"
            )


def _time(name: str, loader: Any, sample_bytes: int, seconds: float) -> Result:
    return timed_pass(name, epochs(loader), sample_bytes, seconds, batch_len, warmup=1)


def _sample_bytes(ds: H5LazyDataset) -> int:
    y = 0 if ds._y is None else ds._y.row_nbytes
    return int(ds._x.row_nbytes + y)


def _open(r: FileBench, **cache: Any) -> H5LazyDataset:
    return H5LazyDataset(r.path, r.x_key, r.y_key, storage_options=r.storage_options, **cache)


def _samplers(r: FileBench, batch_size: int) -> dict[str, Callable[[H5LazyDataset], Any]]:
    """The ``batched_loader`` strategies that make sense on this file, by name."""
    found: dict[str, Callable[[H5LazyDataset], Any]] = {
        EPOCH: lambda ds: EpochShuffleSampler(len(ds))
    }
    if r.chunk_rows is not None and r.chunk_rows > 1:
        found[CHUNK] = lambda ds: ChunkShuffleSampler(ds, batch_size=batch_size)
        if r.remote:
            rows = BLOCK_CHUNKS * r.chunk_rows
            found[BLOCKS] = lambda ds: ChunkShuffleSampler(
                ds, batch_size=batch_size, block_size=rows
            )
    return found


def _contenders(
    r: FileBench, batch_size: int
) -> list[tuple[str, Callable[[], tuple[Any, Callable[[], None]]]]]:
    def naive() -> tuple[Any, Callable[[], None]]:
        ds = NaiveH5Dataset(r.path, r.x_key, r.y_key)
        return DataLoader(ds, batch_size=batch_size, shuffle=True), ds.close

    def getitems() -> tuple[Any, Callable[[], None]]:
        ds = _open(r)
        return DataLoader(ds, batch_size=batch_size, shuffle=True), ds.close

    def batched(sampler_for: Callable[[H5LazyDataset], Any]) -> Any:
        def make() -> tuple[Any, Callable[[], None]]:
            ds = _open(r)
            return batched_loader(ds, batch_size, sampler=sampler_for(ds)), ds.close

        return make

    found = [] if r.remote else [(NAIVE, naive)]  # (a URL's baseline is timed apart)
    found.append((GETITEMS, getitems))
    found.extend((name, batched(make)) for name, make in _samplers(r, batch_size).items())
    return found


def _time_cache(r: FileBench, batch_size: int, seconds: float, say: Any) -> None:
    """Time the fastest batched strategy filling a cache in ``r.cache_dir``, then from it."""
    assert r.cache_dir is not None
    samplers = _samplers(r, batch_size)
    fastest = max((x for x in r.results if x.name in samplers), key=lambda x: x.rate)
    say(f"timing {fastest.name} with cache_dir={r.cache_dir!r} ...")
    cold, warm = time_cache_passes(
        lambda folder: _open(r, cache_dir=folder),
        samplers[fastest.name],
        r.cache_dir,
        batch_size,
        r.sample_bytes,
        seconds,
    )
    r.cache_strategy = fastest.name
    r.results.extend([cold, warm])


def _try_rank_cache(r: FileBench, batch_size: int, seconds: float, say: Any) -> None:
    need = r.samples * r.sample_bytes
    free = available_ram_bytes()
    if free is not None and need > _MEMORY_SHARE * free:
        r.skipped.append(
            f"RankMemCachedH5Dataset: needs {format_bytes(need)}, more than half of the "
            f"{format_bytes(free)} of free memory"
        )
        return
    if r.remote and _slow_preload(r, seconds):
        return
    say(f"timing {CACHED} ...")
    start = time.perf_counter()
    ds = RankMemCachedH5Dataset(
        r.path, r.x_key, r.y_key, dtype_x=None, pin_host_memory=False, log_fn=_quiet,
        rank=0, world_size=1, storage_options=r.storage_options,
    )  # fmt: skip
    r.preload_s = time.perf_counter() - start
    loader = batched_loader(ds, batch_size, sampler=ds.make_sampler())
    r.results.append(_time(CACHED, loader, r.sample_bytes, seconds))


def _slow_preload(r: FileBench, seconds: float) -> bool:
    """True (and the reason noted) when a URL's preload would take far beyond the budget."""
    streaming = max(x.rate for x in r.results if x.name not in (CACHE_COLD, CACHE_WARM))
    epoch_s = r.samples / streaming if streaming > 0 else math.inf
    if epoch_s <= _PRELOAD_BUDGETS * seconds:
        return False
    data = format_bytes(r.samples * r.sample_bytes)
    r.skipped.append(
        f"RankMemCachedH5Dataset: its preload downloads all {data}; one epoch at the best "
        f"streaming rate takes ~{epoch_s:,.0f} s, more than "
        f"{_PRELOAD_BUDGETS}x the budget (raise --seconds to time it)"
    )
    return True


def _quiet(_line: str) -> None:
    """Drop a log line."""
