"""The epoch loop of one ``train()`` call: epochs, validation, schedulers, records, checkpoints."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from ..distributed import World
from . import ddp as _ddp
from .config import is_plateau
from .epoch import EpochProgress, open_epoch, run_train_epoch
from .handler_loaders import LoaderParts
from .step import Sums, Trainer

Record = dict[str, float]


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
        if self.val_loader is not None:
            val = evaluate(self.trainer, self.val_loader, self.show_progress)
            record.update({f"val_{k}": v for k, v in val.items() if k != "samples"})
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
        return record

    def _step_scheduler(self, record: Record) -> None:
        if self.scheduler is None or self.interval != "epoch":
            return
        if is_plateau(type(self.scheduler)):
            self.scheduler.step(record.get("val_loss", record["train_loss"]))
        else:
            self.scheduler.step()


def evaluate(trainer: Trainer, loader: DataLoader[Any], show_progress: bool) -> dict[str, float]:
    """``trainer.evaluate`` over ``loader`` with a progress bar."""
    try:
        total: int | None = len(loader)
    except TypeError:
        total = None
    with tqdm(total=total, desc="validation", leave=False, disable=not show_progress) as bar:
        return trainer.evaluate(loader, bar.update)


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
        if key.startswith(("train_", "val_")):
            parts.append(f"{key} {value:.4g}")
    parts.append(f"| {record['samples_per_s']:,.0f} samples/s")
    return " ".join(parts)
