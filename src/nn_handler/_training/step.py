"""One training batch, one optimizer step, one evaluation pass: the arithmetic of training.

Loss and metric values stay on the device as running sums (``Sums``); nothing here calls
``.item()`` per batch, so the host never waits for the GPU inside an epoch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..distributed import World
from .batches import BatchSplitter, call_model, count_samples, to_device
from .ddp import all_reduce_sum
from .device import Precision

Metric = Callable[[Any, Any], Any]
LossFn = Callable[[Any, Any], torch.Tensor]


class Sums:
    """Sample-weighted running sums ``[samples, loss * n, metric * n, …]`` in float64.

    A loss or metric returns the mean over its batch; weighting by the batch size makes the
    epoch value the mean over samples however the data was split into batches or ranks.
    """

    def __init__(
        self, names: Iterable[str], device: torch.device, state: Mapping[str, Any] | None = None
    ) -> None:
        self.names = tuple(names)
        values = [0.0] * (2 + len(self.names))
        if state is not None:
            if tuple(state["names"]) != self.names:
                raise ValueError(
                    f"the checkpoint's epoch in progress tracked metrics {list(state['names'])}, "
                    f"but the handler has {list(self.names)}; set_metrics() as when it was saved"
                )
            values = list(state["values"])
        self.values = torch.tensor(values, dtype=torch.float64, device=device)

    def add(self, samples: int, loss: torch.Tensor, metrics: Mapping[str, Any]) -> None:
        """Add one batch of ``samples`` samples with batch-mean ``loss`` and ``metrics``."""
        device = self.values.device
        means = [loss, *(metrics[name] for name in self.names)]
        stacked = torch.stack(
            [torch.as_tensor(m, device=device).detach().double().reshape(()) for m in means]
        )
        self.values[0] += samples
        self.values[1:] += stacked * samples

    def state(self) -> dict[str, Any]:
        """The metric names and raw sums (for checkpoints)."""
        return {"names": list(self.names), "values": [float(v) for v in self.values.tolist()]}

    def reduced(self, world: World) -> dict[str, float]:
        """``{"samples", "loss", <metric>…}``: sums over all ranks, means per sample."""
        total = all_reduce_sum(self.values.clone(), world).tolist()
        samples = total[0]
        means = [value / samples if samples else float("nan") for value in total[1:]]
        return {"samples": samples, **dict(zip(("loss", *self.names), means, strict=True))}


@dataclass
class Trainer:
    """Everything one training step needs; built by ``NNHandler`` for each ``train()`` call."""

    model: nn.Module  # what the forward pass runs through (the DDP wrapper under DDP)
    module: nn.Module  # the user's model itself
    optimizer: torch.optim.Optimizer | None  # None: evaluation only
    loss_fn: LossFn
    metrics: Mapping[str, Metric]
    splitter: BatchSplitter
    device: torch.device
    precision: Precision
    scaler: torch.amp.GradScaler | None
    grad_clip_norm: float | None
    world: World

    def new_sums(self, state: Any = None) -> Sums:
        """Running sums for this trainer's loss and metrics."""
        return Sums(self.metrics, self.device, state)

    def train_batch(self, batch: Any, sums: Sums, *, scale: float, sync: bool) -> None:
        """Forward and backward one batch; gradients are multiplied by ``scale``.

        ``sync=False`` (a non-final batch of an accumulation group) skips DDP's gradient
        all-reduce: only the group's last backward pass synchronizes.
        """
        inputs, targets = self._split(batch)
        with self._maybe_no_sync(sync):
            with self.precision.autocast():
                outputs = call_model(self.model, inputs)
                loss = _check_loss(self.loss_fn(outputs, targets))
            scaled: torch.Tensor = loss * scale
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()  # type: ignore[no-untyped-call]
        sums.add(count_samples(inputs, targets), loss, self._metric_values(outputs, targets))

    def optimizer_step(self) -> None:
        """Clip (optionally), step, update the loss scale, and clear the gradients."""
        assert self.optimizer is not None, "evaluation-only Trainer"
        if self.scaler is not None and self.grad_clip_norm is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not scaled ones
        if self.grad_clip_norm is not None:
            nn.utils.clip_grad_norm_(self.module.parameters(), self.grad_clip_norm)
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def evaluate(self, batches: Iterable[Any], on_batch: Callable[[], None]) -> dict[str, float]:
        """Loss and metrics over ``batches``, reduced over all ranks.

        Runs the unwrapped module: a DDP forward would synchronize buffers on every call,
        and ranks may hold different numbers of validation batches.
        """
        sums = self.new_sums()
        self.module.eval()
        with torch.no_grad():
            for batch in batches:
                inputs, targets = self._split(batch)
                with self.precision.autocast():
                    outputs = call_model(self.module, inputs)
                    loss = _check_loss(self.loss_fn(outputs, targets))
                sums.add(
                    count_samples(inputs, targets), loss, self._metric_values(outputs, targets)
                )
                on_batch()
        return sums.reduced(self.world)

    def _split(self, batch: Any) -> tuple[Any, Any]:
        inputs, targets = self.splitter(batch)
        return to_device(inputs, self.device), to_device(targets, self.device)

    def _maybe_no_sync(self, sync: bool) -> contextlib.AbstractContextManager[Any]:
        no_sync = getattr(self.model, "no_sync", None)
        return contextlib.nullcontext() if sync or no_sync is None else no_sync()

    def _metric_values(self, outputs: Any, targets: Any) -> dict[str, Any]:
        with torch.no_grad():
            return {name: fn(_detach(outputs), targets) for name, fn in self.metrics.items()}


def _check_loss(loss: Any) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise TypeError(
            f"loss_fn must return a one-element tensor (the batch mean), got {shape}; use a "
            "loss with reduction='mean'"
        )
    return loss.reshape(())


def _detach(outputs: Any) -> Any:
    if isinstance(outputs, torch.Tensor):
        return outputs.detach()
    return outputs


def accumulation_groups(n_batches: int | None, accumulate: int, start: int) -> Iterator[Any]:
    """``(scale, last_of_group)`` for batches ``start, start + 1, …`` of an epoch.

    A group of ``accumulate`` batches makes one optimizer step; each batch's loss is divided
    by its group's size, so a group's gradient is the mean over its batches, also for the
    shorter last group of an epoch (when the epoch length is known).
    """
    index = start
    while n_batches is None or index < n_batches:
        first = index - index % accumulate
        size = accumulate if n_batches is None else min(accumulate, n_batches - first)
        yield 1.0 / size, index - first == size - 1
        index += 1
