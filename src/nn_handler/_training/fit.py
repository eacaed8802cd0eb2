"""The epoch loop of one ``train()`` call: epochs, validation, schedulers, records, checkpoints."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from ..dataloaders import WaitMeter, WaitSummary, wait_advice
from ..distributed import World
from . import ddp as _ddp
from .config import is_plateau
from .epoch import EpochProgress, open_epoch, run_train_epoch
from .handler_loaders import LoaderParts
from .step import Sums, Trainer

Record = dict[str, float]

#: above this share of an epoch spent waiting for batches, the run says why, once
WAIT_ADVICE_SHARE = 0.2


@dataclass
class RunState:
    """Where a run is; everything here goes into checkpoints.

    Attributes:
        epoch: Completed epochs.
        global_step: Optimizer steps over the whole run.
        history: One record per completed epoch.
        progress: The epoch in progress (None between epochs).
    """

    epoch: int = 0
    global_step: int = 0
    history: list[Record] = field(default_factory=list)
    progress: EpochProgress | None = None


@dataclass
class Fit:
    """The settings of one ``train()`` call."""

    trainer: Trainer
    train_loader: DataLoader[Any]
    val_loader: DataLoader[Any] | None
    scheduler: Any
    interval: str
    accumulate: int
    epochs: int
    max_steps: int | None
    save: Callable[[], None] | None
    save_every: int | None
    show_progress: bool
    log: Callable[[str], None]
    advised: bool = False

    def run(self, state: RunState) -> list[Record]:
        """Train until ``epochs`` are complete or ``max_steps`` is reached."""
        world, device = self.trainer.world, self.trainer.device
        agreed_batches(self.train_loader, world, device)  # warns early about unequal ranks
        records: list[Record] = []
        while state.epoch < self.epochs and not self._reached(state):
            if state.progress is None:
                state.progress = EpochProgress(state.epoch)
            if not self._run_epoch(state, state.progress):
                break
            records.append(self._end_epoch(state, state.progress))
            if self.save is not None:
                self.save()
        return records

    def _reached(self, state: RunState) -> bool:
        return self.max_steps is not None and state.global_step >= self.max_steps

    def _run_epoch(self, state: RunState, progress: EpochProgress) -> bool:
        parts = LoaderParts.of(self.train_loader)
        iterator = open_epoch(self.train_loader, parts, progress, self.log)
        # counted once the position is restored: the rest of an epoch resumed on another
        # world (an elastic resume) has another length than a whole epoch
        trainer = self.trainer
        n_batches = agreed_batches(self.train_loader, trainer.world, trainer.device, warn=False)

        def on_step(epoch_done: bool) -> bool:
            state.global_step += 1
            if self.scheduler is not None and self.interval == "step":
                self.scheduler.step()
            every = self.save_every
            if self.save and every and state.global_step % every == 0 and not epoch_done:
                self.save()
            return not self._reached(state)

        with tqdm(
            total=n_batches, initial=progress.batches, desc=f"epoch {progress.epoch + 1}",
            leave=False, disable=not self.show_progress, dynamic_ncols=True,
        ) as bar:  # fmt: skip
            return run_train_epoch(
                trainer, iterator, progress, n_batches=n_batches,
                accumulate=self.accumulate, on_step=on_step, bar=bar,
            )  # fmt: skip

    def _end_epoch(self, state: RunState, progress: EpochProgress) -> Record:
        assert isinstance(progress.sums, Sums)
        train = progress.sums.reduced(self.trainer.world)
        record: Record = {"epoch": float(progress.epoch)}
        record.update({f"train_{k}": v for k, v in train.items() if k != "samples"})
        record.update(train_wait_s=progress.wait, train_wait_share=_share(progress))
        if self.val_loader is not None:
            val, waited = timed_evaluate(self.trainer, self.val_loader, self.show_progress)
            record.update({f"val_{k}": v for k, v in val.items() if k != "samples"})
            record.update(val_wait_s=waited.wait_s, val_wait_share=waited.wait_share)
        assert self.trainer.optimizer is not None
        record.update(
            lr=float(self.trainer.optimizer.param_groups[0]["lr"]),
            steps=float(progress.steps),
            samples_per_s=train["samples"] / max(progress.elapsed, 1e-9),
            time_s=progress.elapsed,
        )
        self._step_scheduler(record)
        state.history.append(record)
        state.progress, state.epoch = None, state.epoch + 1
        self.log(describe(record, self.epochs))
        self._advise(progress)
        return record

    def _advise(self, progress: EpochProgress) -> None:
        """Once per ``train()`` call: why the training loop waits, when it waited much.

        Judged without the epoch's first batch, whose wait is start-up (workers starting, a
        dataset decoded whole) that later epochs do not pay.
        """
        after_first = progress.elapsed - progress.first_wait
        share = (progress.wait - progress.first_wait) / after_first if after_first > 0 else 0.0
        if self.advised or share <= WAIT_ADVICE_SHARE or not self.trainer.world.is_main:
            return
        self.advised = True
        causes = wait_advice(self.train_loader, self.trainer.device)
        self.log(
            f"nn_handler: the training loop waited for its batches {share:.0%} of epoch "
            f"{progress.epoch + 1} (after its first batch); likely: " + "; ".join(causes)
        )

    def _step_scheduler(self, record: Record) -> None:
        if self.scheduler is None or self.interval != "epoch":
            return
        if is_plateau(type(self.scheduler)):
            self.scheduler.step(record.get("val_loss", record["train_loss"]))
        else:
            self.scheduler.step()


def evaluate(trainer: Trainer, loader: DataLoader[Any], show_progress: bool) -> dict[str, float]:
    """``trainer.evaluate`` over ``loader`` with a progress bar."""
    return timed_evaluate(trainer, loader, show_progress)[0]


def timed_evaluate(
    trainer: Trainer, loader: DataLoader[Any], show_progress: bool
) -> tuple[dict[str, float], WaitSummary]:
    """``evaluate``, and how long this rank's loop waited for its batches."""
    try:
        total: int | None = len(loader)
    except TypeError:
        total = None
    meter = WaitMeter(loader)
    with tqdm(total=total, desc="validation", leave=False, disable=not show_progress) as bar:
        values = trainer.evaluate(meter, bar.update)
    return values, meter.summary()


def _share(progress: EpochProgress) -> float:
    return progress.wait / progress.elapsed if progress.elapsed > 0 else 0.0


def agreed_batches(
    loader: DataLoader[Any], world: World, device: torch.device, *, warn: bool = True
) -> int | None:
    """Batches per epoch, the same on every rank (DDP hangs when ranks step unequally).

    Ranks with more batches than the smallest count run only that many (with a warning).
    None when the loader has no length (an iterable dataset).
    """
    try:
        n = len(loader)
    except TypeError:
        return None
    low, high = _ddp.min_max(n, world, device)
    if warn and low != high and world.is_main:
        warnings.warn(
            f"ranks have between {low} and {high} train batches per epoch; every rank runs "
            f"{low} (DDP needs equal steps), so up to {high - low} batch(es) per rank are "
            "skipped each epoch. Pass no sampler (the handler then picks one with equal "
            "shares), or use dataset.make_sampler() / DistributedEpochSampler",
            UserWarning,
            stacklevel=4,
        )
    return low


def describe(record: Record, epochs: int) -> str:
    """One log line for an epoch record."""
    parts = [f"epoch {int(record['epoch']) + 1}/{epochs}:"]
    for key, value in record.items():
        if key.startswith(("train_", "val_")) and "_wait_" not in key:
            parts.append(f"{key} {value:.4g}")
    parts.append(f"| {record['samples_per_s']:,.0f} samples/s")
    wait = f"| waited for data {record['train_wait_share']:.0%}"
    if "val_wait_share" in record:
        wait += f" (validation {record['val_wait_share']:.0%})"
    parts.append(wait)
    return " ".join(parts)
