"""One training epoch: where it starts (fresh or resumed), its batches, and when it stops.

Exact resume rests on two records kept for the current epoch:

* the sampler's position: this library's samplers take ``load_state_dict`` with the number of
  samples actually trained (``consumed``); any other sampler is fast-forwarded by reading and
  dropping the batches already trained, which reproduces the order when it depends only on the
  epoch and the global RNGs (``RandomSampler``, ``DistributedSampler``, ``SequentialSampler``);
* the RNG states at the epoch's start: the loader's iterator is created under them (it draws
  the workers' base seed, and ``RandomSampler`` its seed), then the current states come back,
  so a resumed run draws the same random numbers as an uninterrupted one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import DataLoader

from .checkpoint import capture_rng, restore_rng
from .handler_loaders import LoaderParts
from .step import Sums, Trainer, accumulation_groups

_END = object()


@dataclass
class EpochProgress:
    """How far the current epoch has come.

    Attributes:
        epoch: The epoch (0-based).
        epoch_rng: RNG states taken just before the epoch's loader iterator was created.
        batches: Batches trained so far in this epoch.
        steps: Optimizer steps taken so far in this epoch.
        elapsed: Seconds spent training in this epoch so far.
        wait: Seconds of ``elapsed`` the loop spent waiting for the next batch.
        first_wait: Seconds of ``wait`` the epoch's first batch took (workers starting, a
            dataset decoded whole before it).
        sums: Running loss/metric sums (live ``Sums``, or their state from a checkpoint).
        sampler_state: The sampler's position from a checkpoint (None: derive it, or
            fast-forward).
    """

    epoch: int
    epoch_rng: dict[str, Any] = field(default_factory=capture_rng)
    batches: int = 0
    steps: int = 0
    elapsed: float = 0.0
    wait: float = 0.0
    first_wait: float = 0.0
    sums: Sums | dict[str, Any] | None = None
    sampler_state: dict[str, Any] | None = None

    def state_dict(self, parts: LoaderParts | None) -> dict[str, Any]:
        """A checkpointable copy (plain types and tensors)."""
        sums = self.sums.state() if isinstance(self.sums, Sums) else self.sums
        sampler = self.sampler_state
        if sampler is None and parts is not None:
            sampler = parts.position_state(self.batches)
        return {
            "epoch": self.epoch,
            "epoch_rng": self.epoch_rng,
            "batches": self.batches,
            "steps": self.steps,
            "elapsed": self.elapsed,
            "wait": self.wait,
            "first_wait": self.first_wait,
            "sums": sums,
            "sampler_state": sampler,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EpochProgress:
        """Rebuild from ``state_dict()``."""
        return cls(**state)


def open_epoch(
    loader: DataLoader[Any],
    parts: LoaderParts,
    progress: EpochProgress,
    log_fn: Callable[[str], None],
) -> Iterator[Any]:
    """Set the epoch, restore the position, and return the loader's iterator at that position."""
    parts.set_epoch(progress.epoch)
    if not progress.batches and progress.sampler_state is None:
        return iter(loader)
    skip = 0
    state = progress.sampler_state or parts.position_state(progress.batches)
    progress.sampler_state = None  # the sampler holds the position from here on
    if state is None:
        skip = progress.batches
        log_fn(
            f"nn_handler: {type(parts.index_sampler).__name__} keeps no position; resuming "
            f"epoch {progress.epoch} by reading and skipping its first {skip} batches"
        )
    else:
        parts.load_position(state)
        parts.set_epoch(progress.epoch)
    # Replay the epoch's start: the iterator draws the workers' base seed (and RandomSampler
    # its seed) from the RNGs as they were then; afterwards the RNGs continue from now.
    now = capture_rng()
    restore_rng(progress.epoch_rng)
    iterator = iter(loader)
    for _ in range(skip):
        if next(iterator, _END) is _END:
            break
    restore_rng(now)
    return iterator


def run_train_epoch(
    trainer: Trainer,
    iterator: Iterator[Any],
    progress: EpochProgress,
    *,
    n_batches: int | None,
    accumulate: int,
    on_step: Callable[[bool], bool],
    bar: Any,
) -> bool:
    """Train the rest of ``progress.epoch`` from ``iterator`` (``open_epoch``'s); True when done.

    ``on_step(epoch_done)`` runs after every optimizer step; returning False mid-epoch stops
    the epoch there (the position stays in ``progress`` for ``save()`` or the next
    ``train()`` call). The time each ``next(iterator)`` blocked adds to ``progress.wait``
    (the bar shows its share of the epoch so far).
    """
    sums = progress.sums if isinstance(progress.sums, Sums) else trainer.new_sums(progress.sums)
    progress.sums = sums
    trainer.model.train()
    clock = time.perf_counter
    started = clock() - progress.elapsed

    def step(done: bool) -> bool:
        trainer.optimizer_step()
        progress.steps += 1
        progress.elapsed = time.perf_counter() - started
        return on_step(done) or done

    pending = False
    asked = clock()
    for (scale, last), batch in zip(
        accumulation_groups(n_batches, accumulate, progress.batches), iterator, strict=False
    ):
        got = clock()
        progress.wait += got - asked
        if not progress.batches:
            progress.first_wait = got - asked
        trainer.train_batch(batch, sums, scale=scale, sync=last)
        progress.batches += 1
        bar.set_postfix_str(f"wait {progress.wait / max(got - started, 1e-9):.0%}", refresh=False)
        bar.update()
        pending = not last
        if last and not step(progress.batches == n_batches):
            return False
        asked = clock()
    if pending:  # the loader ended inside a group (its length was unknown)
        step(True)
    progress.elapsed = time.perf_counter() - started
    return True
