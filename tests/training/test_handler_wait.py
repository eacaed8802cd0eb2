"""NNHandler reports how long each epoch waited for its batches, and says why when it is long."""

from __future__ import annotations

import re
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from nn_handler import NNHandler

from helpers.handler import FEATURES, TinyNet


class Blobs(Dataset[Any]):
    """Separable points; each sample takes ``delay`` seconds to read."""

    def __init__(self, n: int, delay: float = 0.0) -> None:
        self.n, self.delay = n, delay
        self.x = torch.randn(n, FEATURES, generator=torch.Generator().manual_seed(0))
        self.y = (self.x[:, 0] > 0).long()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        return self.x[i], self.y[i]


class SlowStep(TinyNet):
    """TinyNet whose forward pass takes ``delay`` seconds (the model is the bottleneck)."""

    delay = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay)
        return super().forward(x)


def _train(train: Blobs, val: Blobs, step_s: float, epochs: int = 2) -> tuple[Any, list[str]]:
    SlowStep.delay = step_s
    lines: list[str] = []
    handler = NNHandler(SlowStep, progress=False, log_fn=lines.append)
    handler.set_train_loader(train, batch_size=16)
    handler.set_val_loader(val, batch_size=16)
    handler.set_optimizer(torch.optim.SGD, lr=0.1)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    return handler.train(epochs), lines


def test_a_slow_loader_shows_a_high_wait_and_one_line_of_advice() -> None:
    history, lines = _train(Blobs(160, delay=0.01), Blobs(32, delay=0.01), step_s=0.0)
    assert all(r["train_wait_share"] > 0.5 for r in history)  # 160 ms a batch; a step: ~10
    assert all(r["val_wait_share"] > 0.5 for r in history)
    assert all(0 < r["train_wait_s"] <= r["time_s"] for r in history)
    advice = [line for line in lines if "waited for its batches" in line]
    assert len(advice) == 1  # once per run, not per epoch
    assert "num_workers=0" in advice[0] and "nn-handler bench" in advice[0]
    epoch = [line for line in lines if line.startswith("epoch ")]
    assert re.search(r"\| waited for data \d+% \(validation \d+%\)$", epoch[0])


def test_a_loader_that_keeps_up_shows_a_low_wait_and_no_advice() -> None:
    history, lines = _train(Blobs(160), Blobs(32), step_s=0.01)
    assert all(r["train_wait_share"] < 0.1 for r in history)
    assert not [line for line in lines if "waited for its batches" in line]
    assert all(re.search(r"\| waited for data \d+%", line) for line in lines)
