"""DataWaitMonitor: Lightning logs the epoch's wait for data, and says why once when it is high."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

L = pytest.importorskip("lightning")

from nn_handler.integrations.lightning import DataWaitMonitor  # noqa: E402

# Lightning's own notes (few workers, its pytree deprecations) are not what is tested here
pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning"
)


class Points(Dataset[Any]):
    """Each sample takes ``delay`` seconds to read."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay)
        return torch.full((4,), float(i)), torch.tensor(float(i % 2))


class Model(L.LightningModule):
    def __init__(self, delay: float, step_s: float) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.delay, self.step_s = delay, step_s

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(Points(96, self.delay), batch_size=16)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(Points(32, self.delay), batch_size=16)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self.step_s)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).squeeze(1), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(self.step_s)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-6)


def _fit(delay: float, step_s: float) -> Any:
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=2, callbacks=[DataWaitMonitor()],
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(Model(delay, step_s))
    return trainer.callback_metrics


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "waited for its batches" in r.getMessage()]


def test_a_slow_loader_is_logged_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="nn_handler")
    metrics = _fit(delay=0.005, step_s=0.0)  # 80 ms a batch, a step of about a millisecond
    assert metrics["data_wait_share"] > 0.6 and metrics["data_wait_s"] > 0.3
    assert metrics["val_data_wait_share"] > 0.6
    lines = said(caplog)
    assert len(lines) == 1, lines  # once per fit, not per epoch
    assert "num_workers=0" in lines[0] and "nn-handler bench" in lines[0]


def test_a_loader_that_keeps_up_is_logged_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="nn_handler")
    # an 80 ms step: a batch collated on a busy machine (6 ms seen under load, 24 % of a 20 ms
    # step) stays far under the share, so the test asserts what the monitor says, not the load
    metrics = _fit(delay=0.0, step_s=0.08)
    assert metrics["data_wait_share"] < 0.15
    assert said(caplog) == []


def test_a_threshold_outside_0_and_1_is_named() -> None:
    with pytest.raises(ValueError, match=r"threshold must be a share between 0 and 1, got -0\.1"):
        DataWaitMonitor(threshold=-0.1)
