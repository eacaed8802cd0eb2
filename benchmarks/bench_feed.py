"""DataLoader workers that add: do worker processes / threads feed faster than none?

``python benchmarks/run.py --feed`` (CPU; the 2-core targets) writes, in a temporary
directory, W1 (``--n`` rows of 3×32×32 float32, contiguous, int64 labels), W2 (the same rows in
64-row chunks, gzip-1 + byte-shuffle) and W2s (20,000 such rows), then times, in ``--rounds``
alternating rounds of up to ``--seconds`` per contender (medians of per-round ratios reported):

* W1: ``batched_loader(H5LazyDataset(path, x, y), 1024, shuffle=True, num_workers=2)`` / ``=0``;
* W2: ``ChunkShuffleSampler`` + ``batched_loader(ds, 256, sampler=s, num_workers=2)`` / ``=0``;
* W2s: ``batched_loader(ds, 256, shuffle=True, num_workers=2)`` / ``=0`` after one untimed
  epoch (with ``num_workers=0`` the whole file then stays decoded in the chunk cache);
* main-process CPU per batch while W1 is fed by 2 workers (``time.process_time``: every thread
  of this process, a pin thread included) / the CPU of one ``dataset[indices]`` read in-process
  (``time.thread_time``);
* a CPU-bound training loop (one torch thread of matmuls, calibrated to last as long as one
  in-process batch read) fed by 2 workers / the same loop on one pre-made batch.

``python benchmarks/run.py --gpu`` (default ``--n 200000``, ``--seconds 3``) measures on a CUDA
machine: the host-to-device copy of a 12.6 MB batch (pinned, pageable); W1 through
``DevicePrefetcher(batched_loader(...), "cuda", depth=4)`` with ``--gpu-workers`` processes and
threads / the pinned copy; W2 on the host with the same workers / the decode limit (libdeflate
or zlib inflating the raw chunks in one thread × the usable cores); a small CNN's training steps
(bf16 autocast) fed by the best W1 loader / on a batch already on the device; and
``RankMemCachedH5Dataset(cache_device="cuda")`` serving ``ds[indices]`` / a bare
``torch.index_select`` on the device. Without CUDA it runs the host parts and says so.

By default every worker loader is the user's call with ``persistent_workers=True`` (what
docs/performance.md tells users to write); one information row restarts them every epoch
(``persistent_workers=False``, torch's default), and ``--restart`` makes that the setting of
every loader. Worker
processes use torch.multiprocessing's default start method unless ``--start-method`` is given.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from nn_handler.bench.contenders import X_KEY, Y_KEY
from nn_handler.bench.timing import epochs, machine_line
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    DevicePrefetcher,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.cases import WorkloadCase
from benchmarks.harness import alternating, median, ratios
from benchmarks.suites.workload_files import WORKLOADS, write_workload
from benchmarks.suites.workloads import limit_for

ROW_BYTES = 3 * 32 * 32 * 4 + 8  # one decoded W1/W2 row and its int64 label
BIG, SMALL = 1024, 256  # W1 batches, W2 batches
# "model only" steps through this many ready W1 batches (120 MB), about what two workers'
# rings hold (2 x 5 slots): a loop fed by a loader touches each batch fresh from memory, and
# one batch summed again and again would stay in the cache (0.5 ms a sum against 1.1 ms)
FRESH_BATCHES = 10
W2S_ROWS = 20_000
PERSISTENT = "W1 nw=2, persistent_workers=False (information)"
Metrics = dict[str, float]


# -- pure helpers (tests/benchmarks/test_bench_feed.py) ------------------------------------


def non_decreasing(values: Sequence[float]) -> bool:
    """True when every value is at least the one before it."""
    return all(b >= a for a, b in itertools.pairwise(values))


def compute_iters(target_s: float, touch_s: float, iter_s: float) -> int:
    """Matmul iterations so that touching the batch plus the iterations last ``target_s``."""
    if iter_s <= 0:
        return 1
    return max(1, round((target_s - touch_s) / iter_s))


def parse_workers(text: str) -> list[int]:
    """``"4,8,14"`` -> ``[4, 8, 14]`` (positive counts)."""
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be positive integers: {text!r}")
    return counts


@dataclass
class Check:
    """One figure of the issue: a median ratio and its target (``>=`` or ``<=``)."""

    label: str
    values: list[float]  # per-round ratios
    target: float
    at_least: bool = True
    note: str = ""  # why the figure is missing, or how it was taken

    @property
    def ratio(self) -> float:
        """Median of the per-round ratios."""
        return median(self.values)

    @property
    def verdict(self) -> str:
        """PASS / FAIL, or n/a when the ratio was not measured."""
        r = self.ratio
        if r != r:
            return "n/a"
        return "PASS" if (r >= self.target if self.at_least else r <= self.target) else "FAIL"

    def row(self) -> str:
        """The check as a Markdown table row."""
        op = ">=" if self.at_least else "<="
        shown = "—" if self.ratio != self.ratio else f"{self.ratio:.2f}×"
        spread = ", ".join(f"{v:.2f}" for v in self.values if v == v)
        extra = f" {self.note}" if self.note else ""
        return (
            f"| {self.label} | {shown} | {op} {self.target:g}× | {self.verdict} | {spread}{extra} |"
        )


def format_checks(title: str, checks: Sequence[Check]) -> str:
    """Checks as a Markdown table."""
    lines = [
        f"\n### {title}\n",
        "| measure | ratio (median) | target | verdict | per round |",
        "|---|---:|---:|---|---|",
    ]
    lines.extend(c.row() for c in checks)
    return "\n".join(lines)


def _fmt(x: float, digits: int = 0) -> str:
    return "—" if x != x else f"{x:,.{digits}f}"


def format_rates(title: str, results: dict[str, dict[str, list[float]]], unit: str) -> str:
    """Every contender's median rate and range as a Markdown table."""
    lines = [f"\n## {title}\n", f"| contender | {unit} (median) | range |", "|---|---:|---|"]
    for name, metrics in results.items():
        rates = metrics.get("rate", [])
        spread = f"{_fmt(min(rates))}–{_fmt(max(rates))}" if rates else "—"
        lines.append(f"| {name} | {_fmt(median(rates))} | {spread} |")
    return "\n".join(lines)


# -- timing --------------------------------------------------------------------------------


@dataclass
class Opts:
    seconds: float
    rounds: int
    start_method: str | None
    persistent: bool  # persistent_workers of every worker loader (False: --restart)
    out: Callable[[str], None] = print
    device: str | None = None  # the GPU tables' device; None: CUDA absent, host parts only


def run_rounds(
    title: str, contenders: dict[str, Callable[[], Metrics]], opts: Opts
) -> dict[str, dict[str, list[float]]]:
    """Run every contender once per round, in alternating order; metrics per contender."""
    results: dict[str, dict[str, list[float]]] = {name: {} for name in contenders}
    for r, order in alternating(list(contenders), opts.rounds):
        for name in order:
            for key, value in contenders[name]().items():
                results[name].setdefault(key, []).append(value)
            gc.collect()  # stop the last loader's workers before the next contender starts
        opts.out(f"  {title}: round {r + 1}/{opts.rounds} done")
    return results


def timed_stream(
    loader: Iterable[Any],
    seconds: float,
    *,
    sampler: Any = None,
    warm_batches: int = 2,
    warm_epochs: int = 0,
    step: Callable[[Any], Any] | None = None,
    finish: Callable[[], Any] | None = None,
) -> Metrics:
    """Samples/s of ``loader`` over epochs for ``seconds``, after an untimed warm-up.

    The warm-up is ``warm_batches`` batches, or ``warm_epochs`` whole epochs (the next epoch
    then starts inside the timed part). ``step`` runs on every batch (a training step);
    ``finish`` before the clock is read (``torch.cuda.synchronize``). Also returns the batches
    and the CPU seconds of this process (all its threads) in the timed part.
    """
    stream = epochs(loader, sampler)
    warm = warm_epochs * len(loader) if warm_epochs else warm_batches  # type: ignore[arg-type]
    for _ in range(warm):
        batch = next(stream, None)
        if batch is not None and step is not None:
            step(batch)
    if finish is not None:
        finish()
    samples = batches = 0
    cpu, start = time.process_time(), time.perf_counter()
    for batch in stream:
        if step is not None:
            step(batch)
        samples += int(batch[0].shape[0])
        batches += 1
        if time.perf_counter() - start > seconds:
            break
    if finish is not None:
        finish()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    stream.close()  # drops the DataLoader iterator: its workers stop now
    return {"rate": samples / wall if wall > 0 else float("nan"), "batches": batches, "cpu": cpu}


def _loader_kwargs(workers: int, mode: str, opts: Opts) -> dict[str, Any]:
    """``batched_loader`` keywords for ``workers`` processes or threads."""
    kwargs: dict[str, Any] = {"num_workers": workers}
    if workers and mode == "thread":
        kwargs["worker_mode"] = "thread"
    elif workers:
        if opts.start_method:
            kwargs["multiprocessing_context"] = opts.start_method
        kwargs["persistent_workers"] = opts.persistent
    return kwargs


def shuffled_stream(path: str, batch: int, workers: int, mode: str, opts: Opts) -> Any:
    """The W1 / W2s call: ``batched_loader(H5LazyDataset(...), batch, shuffle=True)``."""
    ds = H5LazyDataset(path, X_KEY, Y_KEY)
    return batched_loader(ds, batch, shuffle=True, **_loader_kwargs(workers, mode, opts))


def chunk_stream(path: str, workers: int, mode: str, opts: Opts) -> tuple[Any, Any]:
    """W2's call: ``ChunkShuffleSampler`` + ``batched_loader(ds, 256, sampler=s)``."""
    ds = H5LazyDataset(path, X_KEY, Y_KEY)
    dealt = workers if mode == "process" else 0  # threads share one window: nothing to deal
    sampler = ChunkShuffleSampler(ds, batch_size=SMALL, num_workers=dealt)
    kwargs = _loader_kwargs(workers, mode, opts)
    return batched_loader(ds, SMALL, sampler=sampler, **kwargs), sampler


def sampler_cpu(n: int, seconds: float) -> Metrics:
    """CPU per batch of the index order alone: ``BatchSampler(RandomSampler(n), 1024)``.

    ``batched_loader(shuffle=True)`` runs exactly this in the main process with any number of
    workers (torch's samplers, which Lightning and accelerate recognise); what the main process
    spends beyond it is the cost of receiving batches from the workers.
    """
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(range(n)), BIG, False)
    done, wall, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall < seconds or done == 0:
        for _ in sampler:
            done += 1
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return {"rate": done * BIG / wall, "cpu_per_batch": cpu / done, "wall_per_batch": wall / done}


def read_cpu(path: str, seconds: float) -> Metrics:
    """``dataset[indices]`` of random 1024-row batches in this thread: CPU and wall per batch."""
    ds = H5LazyDataset(path, X_KEY, Y_KEY)
    order = np.random.default_rng(0).permutation(len(ds))
    batches = [order[i : i + BIG].tolist() for i in range(0, len(order) - BIG + 1, BIG)]
    for b in batches[:2]:
        ds[b]
    done, wall, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall < seconds or done == 0:
        ds[batches[done % len(batches)]]
        done += 1
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    ds.close()
    return {"rate": done * BIG / wall, "cpu_per_batch": cpu / done, "wall_per_batch": wall / done}


# -- the 2-core table ----------------------------------------------------------------------


class Model:
    """A CPU 'training step': touch the batch, then ``iters`` 256×256 matmuls in one thread."""

    def __init__(self, iters: int = 1) -> None:
        self.iters = iters
        gen = torch.Generator().manual_seed(0)
        self.a = torch.randn(256, 256, generator=gen)
        self.b = torch.randn(256, 256, generator=gen)

    def step(self, batch: Any) -> float:
        total = float(batch[0].sum())
        for _ in range(self.iters):
            torch.mm(self.a, self.b)
        return total


def calibrate(model: Model, batches: Sequence[Any], read_s: float) -> int:
    """Set ``model.iters`` so one step lasts about ``read_s`` (this thread, one torch thread).

    The batch is touched as the loop touches it: one of ``batches`` after another, so it comes
    from memory, not from a cache that a single batch summed again and again would stay in.
    """

    def per_call(fn: Callable[[], Any], calls: int) -> float:
        fn()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter() - start) / calls)
        return median(times)

    turn = itertools.cycle(batches)
    touch = per_call(lambda: float(next(turn)[0].sum()), len(batches))
    one = per_call(lambda: torch.mm(model.a, model.b), 20)
    model.iters = compute_iters(read_s, touch, one)
    return model.iters


def two_against_zero(name: str, title: str, measure: Callable[[int], Metrics], opts: Opts) -> Check:
    """``measure(2)`` against ``measure(0)`` (worker processes), rounds alternated: >= 0.9."""
    rates = run_rounds(
        name, {f"{name} nw=0": lambda: measure(0), f"{name} nw=2": lambda: measure(2)}, opts
    )
    opts.out(format_rates(title, rates, "samples/s"))
    two, zero = rates[f"{name} nw=2"]["rate"], rates[f"{name} nw=0"]["rate"]
    return Check(f"{name}: nw=2 / nw=0", ratios(two, zero), 0.9)


def feed_table(w1: str, w2: str, w2s: str, n: int, opts: Opts) -> list[Check]:
    """The 2-core measures (W1, W2, W2s, main-process CPU, training loop)."""
    s, out = opts.seconds, opts.out
    checks: list[Check] = []

    def restarted() -> Any:  # information only: what a start of workers each epoch costs
        ds = H5LazyDataset(w1, X_KEY, Y_KEY)
        kwargs = _loader_kwargs(2, "process", opts)
        kwargs["persistent_workers"] = False
        return batched_loader(ds, BIG, shuffle=True, **kwargs)

    w1_rates = run_rounds(
        "W1",
        {
            "W1 nw=0": lambda: timed_stream(shuffled_stream(w1, BIG, 0, "process", opts), s),
            "W1 nw=2": lambda: timed_stream(shuffled_stream(w1, BIG, 2, "process", opts), s),
            "read one batch in-process (nw=0)": lambda: read_cpu(w1, s),
            "index order alone (sampler)": lambda: sampler_cpu(n, s),
            **({PERSISTENT: lambda: timed_stream(restarted(), s)} if opts.persistent else {}),
        },
        opts,
    )
    out(
        format_rates(
            f"W1: {n:,} × 3×32×32 float32, contiguous, batches of {BIG}", w1_rates, "samples/s"
        )
    )
    two, zero = w1_rates["W1 nw=2"], w1_rates["W1 nw=0"]
    checks.append(Check("W1: nw=2 / nw=0", ratios(two["rate"], zero["rate"]), 1.3))
    if PERSISTENT in w1_rates:
        kept = median(ratios(w1_rates[PERSISTENT]["rate"], zero["rate"]))
        out(f"\n(information) W1 nw=2 with persistent_workers=False / nw=0: {kept:.2f}×")
    per_batch = [
        c / b if b else float("nan") for c, b in zip(two["cpu"], two["batches"], strict=True)
    ]
    read = w1_rates["read one batch in-process (nw=0)"]["cpu_per_batch"]
    order = w1_rates["index order alone (sampler)"]["cpu_per_batch"]
    receiving = [c - o for c, o in zip(per_batch, order, strict=True)]
    out(
        f"\nmain-process CPU per batch with 2 workers: {median(per_batch) * 1e3:.2f} ms, of which "
        f"the index order (torch's RandomSampler + BatchSampler, as with nw=0) "
        f"{median(order) * 1e3:.2f} ms; one in-process batch read: {median(read) * 1e3:.2f} ms CPU"
    )
    checks.append(
        Check(
            "main-process CPU per batch beyond the sampler's, nw=2 / one batch read",
            ratios(receiving, read),
            0.2,
            at_least=False,
        )
    )
    out(
        "(information) main-process CPU per batch with the sampler's, nw=2 / one batch read: "
        f"{median(ratios(per_batch, read)):.2f}×"
    )

    def chunked(workers: int) -> Metrics:
        loader, sampler = chunk_stream(w2, workers, "process", opts)
        return timed_stream(loader, s, sampler=sampler)

    checks.append(
        two_against_zero(
            "W2",
            f"W2: {n:,} rows, 64-row chunks, gzip-1 + shuffle, ChunkShuffleSampler",
            chunked,
            opts,
        )
    )

    def small(workers: int) -> Metrics:
        loader = shuffled_stream(w2s, SMALL, workers, "process", opts)
        return timed_stream(loader, s, warm_epochs=1)

    checks.append(
        two_against_zero(
            "W2s",
            f"W2s: {W2S_ROWS:,} rows, gzip-1 + shuffle, shuffle=True, after one warm epoch",
            small,
            opts,
        )
    )

    checks.append(training_loop(w1, opts))
    return checks


def training_loop(w1: str, opts: Opts) -> Check:
    """A one-thread CPU training loop fed by 2 workers / fed by the bare reads (its limit).

    The limit is the same loop whose batches cost only their reads: another process gathers
    the rows (NumPy from the file's memory map into a reused buffer, as a worker gathers them
    into its ring) one read per step, up to 4 ahead, and sends nothing. On a machine whose
    memory bandwidth the loop's own touch of each batch and the reads share, that limit is
    well below the loop on ready batches ("model only", shown for information).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        read_s = read_cpu(w1, min(opts.seconds, 2.0))["wall_per_batch"]
        ds = H5LazyDataset(w1, X_KEY, Y_KEY)
        fresh = max(1, min(FRESH_BATCHES, len(ds) // BIG))
        batches = [ds[list(range(k * BIG, (k + 1) * BIG))] for k in range(fresh)]
        ds.close()
        model = Model()
        iters = calibrate(model, batches, read_s)
        opts.out(
            f"\ntraining loop: {iters} matmuls of 256×256 per step ≈ one batch read "
            f"({read_s * 1e3:.1f} ms)"
        )

        def model_only() -> Metrics:
            return timed_stream(_Repeat(*batches), opts.seconds, step=model.step)

        def beside_reads() -> Metrics:
            with _BareReads(w1) as reads:
                return timed_stream(_Repeat(*batches), opts.seconds, step=reads.paced(model.step))

        def fed() -> Metrics:
            loader = shuffled_stream(w1, BIG, 2, "process", opts)
            return timed_stream(loader, opts.seconds, step=model.step)

        rates = run_rounds(
            "training loop",
            {"model only": model_only, READS_ONLY: beside_reads, "fed by nw=2": fed},
            opts,
        )
    finally:
        torch.set_num_threads(threads)
    opts.out(
        format_rates("CPU training loop (1 torch thread), batches of 1024", rates, "samples/s")
    )
    alone = median(ratios(rates["fed by nw=2"]["rate"], rates["model only"]["rate"]))
    limit = median(ratios(rates[READS_ONLY]["rate"], rates["model only"]["rate"]))
    opts.out(
        f"\n(information) fed by nw=2 / model only on ready batches: {alone:.2f}×; the bare "
        f"reads alone leave the loop {limit:.2f}× of it"
    )
    return Check(
        "training loop fed by nw=2 / fed by its bare reads",
        ratios(rates["fed by nw=2"]["rate"], rates[READS_ONLY]["rate"]),
        0.9,
    )


READS_ONLY = "fed by the bare reads (limit)"
_AHEAD = 4  # reads the bare reader may run ahead: 2 workers x prefetch_factor 2


def _read_on_cue(path: str, cues: Any, done: Any, stop: Any) -> None:
    """Gather one random W1 batch per cue into a reused buffer; count each in ``done``."""
    torch.set_num_threads(1)
    with h5py.File(path, "r") as f:
        data = f[X_KEY]
        offset, shape, dtype = data.id.get_offset(), data.shape, data.dtype
    rows = np.memmap(path, dtype, "r", offset, shape)
    out = np.empty((BIG, *shape[1:]), dtype)
    order = np.random.default_rng(1).permutation(shape[0])
    turns = [np.sort(order[i : i + BIG]) for i in range(0, shape[0] - BIG + 1, BIG)]
    done.release()  # ready
    k = 0
    while not stop.is_set():
        if cues.acquire(timeout=0.1):
            np.take(rows, turns[k % len(turns)], axis=0, out=out)
            k += 1
            done.release()


class _BareReads:
    """A process that does a loader's reads, one per training step, and sends nothing."""

    def __init__(self, path: str) -> None:
        ctx = multiprocessing.get_context()
        self.cues, self.done, self.stop = ctx.Semaphore(_AHEAD), ctx.Semaphore(0), ctx.Event()
        self.process = ctx.Process(
            target=_read_on_cue, args=(path, self.cues, self.done, self.stop), daemon=True
        )

    def __enter__(self) -> _BareReads:
        self.process.start()
        if not self.done.acquire(timeout=60):
            raise RuntimeError("the bare reader did not start within 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)

    def paced(self, step: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``step`` that first waits for a read to finish and asks for the next one."""

        def paced_step(batch: Any) -> Any:
            if not self.done.acquire(timeout=60):
                raise RuntimeError("the bare reader gave no read within 60 s")
            self.cues.release()
            return step(batch)

        return paced_step


class _Repeat:
    """Ready batches served in turn, forever (an 'epoch' of 1,000 batches)."""

    def __init__(self, *batches: Any) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return 1000

    def __iter__(self) -> Iterator[Any]:
        turn = itertools.cycle(self.batches)
        return (next(turn) for _ in range(1000))


# -- the GPU tables ------------------------------------------------------------------------


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def copy_rate(src: torch.Tensor, dst: torch.Tensor, seconds: float) -> Metrics:
    """Host-to-device copies of ``src`` into ``dst``: GB/s (1e9 bytes)."""
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    _sync()
    copies, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or copies == 0:
        for _ in range(10):
            dst.copy_(src, non_blocking=True)
        copies += 10
        _sync()
    wall = time.perf_counter() - start
    return {"rate": copies * src.numel() * src.element_size() / wall / 1e9}


def gpu_copy(opts: Opts) -> dict[str, dict[str, list[float]]]:
    """The copy limit of one 12.6 MB batch (1024 × 3×32×32 float32), pinned and pageable."""
    shape = (BIG, 3, 32, 32)
    pinned = torch.ones(shape, pin_memory=torch.cuda.is_available())
    pageable = torch.ones(shape)
    dst = torch.empty(shape, device=opts.device)
    rates = run_rounds(
        "copy",
        {
            "pinned copy": lambda: copy_rate(pinned, dst, opts.seconds),
            "pageable copy": lambda: copy_rate(pageable, dst, opts.seconds),
        },
        opts,
    )
    opts.out(format_rates("host -> device copy of a 12.6 MB batch", rates, "GB/s"))
    return rates


def _configs(workers: Sequence[int]) -> list[tuple[str, int, str]]:
    """(name, workers, mode): 0, then every count as processes and as threads."""
    rows = [("nw=0", 0, "process")]
    rows += [(f"{w} processes", w, "process") for w in workers]
    rows += [(f"{w} threads", w, "thread") for w in workers]
    return rows


def gpu_w1(
    w1: str, workers: Sequence[int], copy: Any, opts: Opts
) -> tuple[list[Check], tuple[int, str]]:
    """W1 fed to the GPU through ``DevicePrefetcher`` (to the host without CUDA)."""

    def feed(count: int, mode: str) -> Metrics:
        loader = shuffled_stream(w1, BIG, count, mode, opts)
        if opts.device is None:
            return timed_stream(loader, opts.seconds)
        feed = DevicePrefetcher(loader, opts.device, depth=4)
        return timed_stream(feed, opts.seconds, finish=_sync)

    configs = _configs(workers)
    contenders = {name: (lambda c=count, m=mode: feed(c, m)) for name, count, mode in configs}
    rates = run_rounds("W1 feed", contenders, opts)
    where = (
        f"to {opts.device} (DevicePrefetcher, depth 4)"
        if opts.device
        else "to the host (CUDA absent)"
    )
    lines = [
        f"\n## W1 {where}, batches of {BIG}\n",
        "| loader | samples/s (median) | GB/s | / pinned copy | / nw=0 |",
        "|---|---:|---:|---:|---:|",
    ]
    zero = rates["nw=0"]["rate"]
    pinned = copy["pinned copy"]["rate"] if copy else []
    for name, _, _ in configs:
        r = rates[name]["rate"]
        gbs = [x * ROW_BYTES / 1e9 for x in r]
        lines.append(
            f"| {name} | {_fmt(median(r))} | {_fmt(median(gbs), 2)} | "
            f"{_fmt(median(ratios(gbs, pinned)), 2)} | {_fmt(median(ratios(r, zero)), 2)} |"
        )
    opts.out("\n".join(lines))
    best_name, best_count, best_mode = max(configs, key=lambda c: median(rates[c[0]]["rate"]))
    best_gbs = [x * ROW_BYTES / 1e9 for x in rates[best_name]["rate"]]
    absent = "" if opts.device else "(CUDA absent)"
    checks = [
        Check(f"W1 best ({best_name}) / pinned copy", ratios(best_gbs, pinned), 0.4, note=absent)
    ]
    for count in (8, 14):
        if count in workers:
            name = f"{count} processes"
            checks.append(Check(f"W1 {name} / nw=0", ratios(rates[name]["rate"], zero), 1.5))
    return checks, (best_count, best_mode)


def gpu_w2(w2: str, workers: Sequence[int], opts: Opts) -> list[Check]:
    """W2 on the host with every worker count / the decode limit on every core."""
    with h5py.File(w2, "r") as f:
        n = len(f[X_KEY])
    limit = limit_for(WorkloadCase(w2, WORKLOADS["W2"], n, 256, opts.seconds))  # gzip: decode
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def chunked(count: int, mode: str) -> Metrics:
        loader, sampler = chunk_stream(w2, count, mode, opts)
        return timed_stream(loader, opts.seconds, sampler=sampler)

    configs = _configs(workers)
    contenders: dict[str, Callable[[], Metrics]] = {
        "decode limit": lambda: {"rate": limit.measure()[0]}
    }
    contenders.update(
        {name: (lambda c=count, m=mode: chunked(c, m)) for name, count, mode in configs}
    )
    rates = run_rounds("W2 decode", contenders, opts)
    opts.out(
        format_rates(
            f"W2 on the host (batches of {SMALL}); limit: inflate, 1 thread × {cores} cores",
            rates,
            "samples/s",
        )
    )
    limit = rates["decode limit"]["rate"]
    best = max((c[0] for c in configs), key=lambda name: median(rates[name]["rate"]))
    checks = [Check(f"W2 best ({best}) / decode limit", ratios(rates[best]["rate"], limit), 0.75)]
    for mode in ("processes", "threads"):
        series = [median(rates[f"{w} {mode}"]["rate"]) for w in workers]
        steps = [b / a for a, b in itertools.pairwise(series)]
        label = f"W2 {mode} {'->'.join(str(w) for w in workers)}: each step / the one before"
        checks.append(Check(label, [min(steps)] if steps else [], 1.0, note="(min step)"))
    return checks


def small_cnn(device: str, channels_last: bool) -> Callable[[Any], Any]:
    """A 3-conv CNN's training step (SGD, bf16 autocast) on a batch already on the GPU."""
    from torch import nn
    from torch.nn import functional

    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(batch: Any) -> None:
        x, y = batch[0], batch[1] % 10
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def gpu_cnn(w1: str, best: tuple[int, str], channels_last: bool, opts: Opts) -> Check:
    """The CNN fed by W1's best loader / the CNN on synthetic data already on the GPU."""
    device = opts.device or "cuda"
    step = small_cnn(device, channels_last)
    synthetic = (
        torch.randn(BIG, 3, 32, 32, device=device),
        torch.randint(0, 10, (BIG,), device=device),
    )
    count, mode = best

    def compute_only() -> Metrics:
        return timed_stream(_Repeat(synthetic), opts.seconds, step=step, finish=_sync)

    def fed() -> Metrics:
        loader = DevicePrefetcher(shuffled_stream(w1, BIG, count, mode, opts), device, depth=4)
        return timed_stream(loader, opts.seconds, step=step, finish=_sync)

    fed_name = f"fed by W1, {count} {mode} workers"
    rates = run_rounds("CNN", {"compute only": compute_only, fed_name: fed}, opts)
    opts.out(
        format_rates(
            f"small CNN training steps (bf16 autocast, channels_last={channels_last})",
            rates,
            "samples/s",
        )
    )
    return Check(
        "CNN fed by W1 / compute only",
        ratios(rates[fed_name]["rate"], rates["compute only"]["rate"]),
        0.95,
    )


def gpu_rank_cache(w1: str, opts: Opts) -> Check:
    """``RankMemCachedH5Dataset(cache_device="cuda")[indices]`` / a bare ``index_select``."""
    ds = RankMemCachedH5Dataset(
        w1,
        X_KEY,
        Y_KEY,
        dtype_x=None,
        log_fn=_quiet,
        rank=0,
        world_size=1,
        cache_device=opts.device,
    )
    order = np.random.default_rng(0).permutation(len(ds))
    host = [order[i : i + BIG] for i in range(0, len(order) - BIG + 1, BIG)]
    device = [torch.from_numpy(b).to(opts.device) for b in host]
    assert ds.y is not None

    def loop(fn: Callable[[Any], Any], batches: list[Any]) -> Metrics:
        for b in batches[:3]:
            fn(b)
        _sync()
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < opts.seconds or done == 0:
            fn(batches[done % len(batches)])
            done += 1
        _sync()
        return {"rate": done * BIG / (time.perf_counter() - start)}

    def bare(idx: torch.Tensor) -> Any:
        return torch.index_select(ds.x, 0, idx), torch.index_select(ds.y, 0, idx)  # type: ignore[arg-type]

    rates = run_rounds(
        "rank cache",
        {
            "ds[indices]": lambda: loop(ds.__getitem__, host),
            "bare index_select": lambda: loop(bare, device),
        },
        opts,
    )
    opts.out(
        format_rates(
            f"RankMemCachedH5Dataset on {opts.device}, random batches of 1024", rates, "samples/s"
        )
    )
    return Check(
        "rank cache ds[indices] / bare index_select",
        ratios(rates["ds[indices]"]["rate"], rates["bare index_select"]["rate"]),
        0.8,
    )


def _quiet(message: str) -> None:
    """A ``log_fn`` that drops the rank cache's log lines."""


def gpu_tables(
    w1: str, w2: str, workers: Sequence[int], channels_last: bool, opts: Opts
) -> list[Check]:
    """The GPU measures; without CUDA only the host parts (W1 to the host, W2 vs its limit)."""
    checks: list[Check] = []
    copy = gpu_copy(opts) if opts.device else None
    w1_checks, best = gpu_w1(w1, workers, copy, opts)
    checks += w1_checks
    checks += gpu_w2(w2, workers, opts)
    if opts.device:
        checks.append(gpu_cnn(w1, best, channels_last, opts))
        checks.append(gpu_rank_cache(w1, opts))
    else:
        checks.append(Check("CNN fed by W1 / compute only", [], 0.95, note="(CUDA absent)"))
        checks.append(
            Check("rank cache ds[indices] / bare index_select", [], 0.8, note="(CUDA absent)")
        )
    return checks


# -- the run -------------------------------------------------------------------------------


def write_files(files: Sequence[tuple[str, str, int]], out: Callable[[str], None]) -> None:
    """Write ``(path, workload name, rows)`` files, one process each (before CUDA starts)."""
    start = time.perf_counter()
    spawn = multiprocessing.get_context("spawn")  # a clean child: no CUDA, no inherited state
    with ProcessPoolExecutor(max_workers=len(files), mp_context=spawn) as pool:
        jobs = [pool.submit(write_workload, p, WORKLOADS[w], rows) for p, w, rows in files]
        for job in jobs:
            job.result()
    os.sync()
    for path, name, rows in files:
        out(f"{os.path.basename(path)}: {WORKLOADS[name].describe(rows)}")
    out(f"written in {time.perf_counter() - start:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--feed", action="store_true", help="the 2-core CPU table (default)")
    parser.add_argument("--gpu", action="store_true", help="the GPU tables")
    parser.add_argument("--n", type=int, default=None, help="W1/W2 rows (50,000; --gpu 200,000)")
    parser.add_argument("--seconds", type=float, default=None, help="per measurement (5; --gpu 3)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument("--start-method", choices=("fork", "spawn", "forkserver"), default=None)
    parser.add_argument(
        "--restart", action="store_true", help="persistent_workers=False on every loader"
    )
    parser.add_argument("--gpu-workers", type=parse_workers, default=[4, 8, 14])
    parser.add_argument("--channels-last", action="store_true", help="the CNN in channels_last")
    parser.add_argument(
        "--device",
        default=None,
        help="--gpu: the device (default cuda when available; 'cpu' runs the GPU code paths on "
        "the host, to test them)",
    )
    parser.add_argument("--workdir", default=None, help="directory for the temporary files")
    args = parser.parse_args(argv)
    n = args.n or (200_000 if args.gpu else 50_000)
    seconds = args.seconds or (3.0 if args.gpu else 5.0)
    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    opts = Opts(
        seconds,
        max(1, args.rounds),
        args.start_method,
        not args.restart,
        device=device,
    )
    began = time.perf_counter()
    print(f"# nn_handler feed benchmark: {'--gpu' if args.gpu else '--feed'}\n")
    print(machine_line())
    method = args.start_method or f"default ({torch.multiprocessing.get_start_method()})"
    print(
        f"{opts.rounds} alternating rounds (median of per-round ratios), up to {seconds:g} s per "
        f"measurement, start method {method}, "
        f"persistent_workers={opts.persistent}"
    )
    if args.gpu:
        name = torch.cuda.get_device_name() if device == "cuda" else device
        print(f"device: {name or 'CUDA absent: host parts only'}")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        w1, w2, w2s = (os.path.join(tmp, f"{name}.h5") for name in ("W1", "W2", "W2s"))
        files = [(w1, "W1", n), (w2, "W2", n)]
        if not args.gpu:
            files.append((w2s, "W2", W2S_ROWS))
        write_files(files, print)
        if args.gpu:
            checks = gpu_tables(w1, w2, args.gpu_workers, args.channels_last, opts)
        else:
            checks = feed_table(w1, w2, w2s, n, opts)
    print(format_checks("Targets", checks))
    print(f"\ntotal {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
