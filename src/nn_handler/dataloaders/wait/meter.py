"""WaitMeter: how much of a loop's time goes to waiting for the next batch.

``for batch in WaitMeter(loader)`` yields the loader's batches unchanged, in the same order, and
records for each batch the time ``next()`` blocked (the wait) and the time the caller spent
before asking for the next one (the step). The two tile the pass exactly, so
``summary().wait_share`` is the part of the elapsed time the loop spent waiting for data: near 0
when the loader keeps up, near 1 when the step waits for every batch. The first batch's wait
includes starting the loader's workers (reported apart as ``first_wait_s``; ``warmup=`` leaves
the first batches out of the share).

Times are host wall-clock times (``time.perf_counter``). On CUDA a step returns once its work is
queued; the host blocks later, where it reads a result back (``loss.item()``) or when the queue
is full, and that time is counted in the step where it happens. The meter synchronises the
device once, when a pass ends (and in ``summary()`` during a pass), so work still queued counts
in the elapsed time; it records no CUDA event and never synchronises per batch. Its own cost is
about a microsecond per batch (``benchmarks/bench_wait.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sized
from dataclasses import asdict, dataclass, field
from typing import Generic, TypeVar

import numpy as np
import torch

from ..._validate import check_non_negative_int
from .advice import wait_advice

__all__ = ["WaitMeter", "WaitSummary"]

T = TypeVar("T")


@dataclass(frozen=True)
class WaitSummary:
    """How long a pass over a loader waited for its batches.

    Attributes:
        batches: Batches counted (after the warm-up).
        samples: Samples in them (the first dimension of each batch's first tensor); None when
            batches hold no tensor or array.
        elapsed_s: Seconds from the first counted ``next()`` call to the end of the last step.
        wait_s: Seconds blocked in ``next()``.
        first_wait_s: Seconds the pass's first batch took (starting workers included).
        wait_p50_ms / wait_p90_ms / wait_p99_ms / wait_max_ms: Percentiles of the wait per
            batch, in milliseconds.
        step_p50_ms: Median time between receiving a batch and asking for the next one.
        advice: Likely causes and what to change (``wait_advice``), when the wait share is above
            the meter's threshold; empty otherwise.
    """

    batches: int
    samples: int | None
    elapsed_s: float
    wait_s: float
    first_wait_s: float
    wait_p50_ms: float
    wait_p90_ms: float
    wait_p99_ms: float
    wait_max_ms: float
    step_p50_ms: float
    advice: tuple[str, ...] = field(default=())

    @property
    def wait_share(self) -> float:
        """Part of the elapsed time spent waiting for batches (0 to 1)."""
        return self.wait_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def batches_per_s(self) -> float:
        """Batches per second over the pass."""
        return self.batches / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def samples_per_s(self) -> float | None:
        """Samples per second over the pass (None when samples were not counted)."""
        if self.samples is None:
            return None
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        """The numbers, for a logger (``wait_share``, rates and percentiles included)."""
        values = {k: float(v) for k, v in asdict(self).items() if isinstance(v, int | float)}
        values.update(wait_share=self.wait_share, batches_per_s=self.batches_per_s)
        if self.samples_per_s is not None:
            values["samples_per_s"] = self.samples_per_s
        return values

    def __str__(self) -> str:
        rate = f"{self.batches_per_s:,.1f} batches/s"
        if self.samples_per_s is not None:
            rate += f", {self.samples_per_s:,.0f} samples/s"
        line = (
            f"{self.batches} batches in {self.elapsed_s:.2f} s: waited {self.wait_s:.2f} s for "
            f"data ({self.wait_share:.0%} of the time; first batch {self.first_wait_s:.2f} s); "
            f"{rate}; wait per batch p50 {self.wait_p50_ms:.2f} ms, p90 "
            f"{self.wait_p90_ms:.2f} ms, p99 {self.wait_p99_ms:.2f} ms, max "
            f"{self.wait_max_ms:.2f} ms; step p50 {self.step_p50_ms:.2f} ms"
        )
        return "\n  - ".join([line, *self.advice])


class WaitMeter(Generic[T]):
    """Iterate ``batches`` unchanged and measure how long each ``next()`` blocked.

    Each ``iter()`` starts a new pass (an epoch); ``summary()`` describes the latest one.

    Args:
        batches: Any iterable of batches: a ``DataLoader`` (ours or not), a
            ``DevicePrefetcher``, a generator.
        threshold: Wait share above which ``summary()`` adds the likely causes and fixes.
        warmup: Batches at the start of each pass left out of the summary (start-up).
        device: Where the step runs, for the advice (a CUDA device adds the copy advice).

    Raises:
        ValueError: ``threshold`` is not between 0 and 1, or ``warmup`` is negative.

    Example:
        >>> meter = WaitMeter(batched_loader(ds, 256, shuffle=True, num_workers=4))
        >>> for x, y in meter:
        ...     train_step(x, y)
        >>> print(meter.summary())  # 312 batches in 4.10 s: waited 0.05 s for data (1% ...
    """

    def __init__(
        self,
        batches: Iterable[T],
        *,
        threshold: float = 0.2,
        warmup: int = 0,
        device: str | torch.device | None = None,
    ) -> None:
        if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be a share between 0 and 1, got {threshold!r}")
        self.batches = batches
        self.threshold = float(threshold)
        self.warmup = check_non_negative_int("warmup", warmup)
        self.device = device
        self._pass: _Pass | None = None

    def __len__(self) -> int:
        if not isinstance(self.batches, Sized):
            raise TypeError(f"{type(self.batches).__name__} has no length")
        return len(self.batches)

    def __iter__(self) -> Iterator[T]:
        record = self._pass = _Pass()
        return _timed(self.batches, record)

    def summary(self) -> WaitSummary:
        """The latest pass so far (the whole pass once it ended).

        Raises:
            RuntimeError: no pass has started.
        """
        if self._pass is None:
            raise RuntimeError("WaitMeter.summary(): iterate the meter first")
        summary = self._pass.summary(self.warmup)
        if summary.wait_share > self.threshold:
            advice = tuple(wait_advice(self.batches, self.device))
            summary = WaitSummary(**{**summary.__dict__, "advice": advice})
        return summary


class _Pass:
    """The times of one pass: ``waits[k]`` and ``steps[k]`` tile it, batch after batch."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.steps: list[float] = []
        self.samples: list[int] = []
        self.counted = True  # every batch so far had a size
        self.began = time.perf_counter()
        self.ended: float | None = None

    def end(self) -> None:
        _synchronize()
        self.ended = time.perf_counter()

    def summary(self, warmup: int) -> WaitSummary:
        if self.ended is None:
            _synchronize()
        now = time.perf_counter() if self.ended is None else self.ended
        waits = np.asarray(self.waits[warmup:], dtype=np.float64)
        skipped = sum(self.waits[:warmup]) + sum(self.steps[:warmup])
        elapsed = max(0.0, now - self.began - skipped)
        ms = np.percentile(waits, [50, 90, 99, 100]) * 1e3 if waits.size else np.zeros(4)
        steps = self.steps[warmup:]
        return WaitSummary(
            batches=int(waits.size),
            samples=sum(self.samples[warmup:]) if self.counted else None,
            elapsed_s=elapsed,
            wait_s=float(waits.sum()),
            first_wait_s=self.waits[0] if self.waits else 0.0,
            wait_p50_ms=float(ms[0]),
            wait_p90_ms=float(ms[1]),
            wait_p99_ms=float(ms[2]),
            wait_max_ms=float(ms[3]),
            step_p50_ms=float(np.median(steps)) * 1e3 if steps else 0.0,
        )


def _timed(batches: Iterable[T], record: _Pass) -> Iterator[T]:
    clock, waits, steps, sizes = time.perf_counter, record.waits, record.steps, record.samples
    asked = record.began
    try:
        iterator = iter(batches)  # (workers start here: part of the first batch's wait)
        for batch in iterator:
            got = clock()
            waits.append(got - asked)
            size = _samples_in(batch)
            if size is None:
                record.counted = False
            else:
                sizes.append(size)
            yield batch
            asked = clock()
            steps.append(asked - got)
    finally:  # (also when the loop breaks early: the generator is closed)
        record.end()


def _samples_in(batch: object) -> int | None:
    """The first dimension of the batch's first tensor or array, or None."""
    if isinstance(batch, torch.Tensor | np.ndarray):
        return int(batch.shape[0]) if batch.ndim else None
    if isinstance(batch, list | tuple) and batch:
        return _samples_in(batch[0])
    if isinstance(batch, Mapping) and batch:
        return _samples_in(next(iter(batch.values())))
    return None


def _synchronize() -> None:
    """Wait for work queued on the current CUDA device (only where CUDA was used)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()
