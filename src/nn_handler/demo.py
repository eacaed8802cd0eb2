"""The demo behind ``nn-handler demo``: write a learnable HDF5 set, train on it, report.

Signals of 128 steps whose class (4 of them) is the frequency of a noisy sine wave, stored the
way real recordings are: chunked and gzip-compressed. ``write_demo_data`` writes them in two
layouts (one file with train/val groups for ``H5LazyDataset`` / ``RankMemCachedH5Dataset``,
and several per-recording files for ``CombinedHDF5Dataset``); ``run_demo`` trains a small 1-D
CNN with ``NNHandler`` on one process or several (gloo), and returns a summary.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import h5py
import numpy as np
import torch
from torch import nn

from ._validate import check_choice, check_non_negative_int, check_positive_int, usable_cores
from .dataloaders import (
    CombinedHDF5Dataset,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
    h5_worker_init_fn,
)
from .handler import NNHandler

__all__ = ["DemoData", "DemoNet", "DemoSummary", "LoaderName", "run_demo", "write_demo_data"]

LoaderName = Literal["lazy", "rank-cached", "combined"]
LOADERS: tuple[LoaderName, ...] = ("lazy", "rank-cached", "combined")
CLASSES = 4
STEPS = 128
_CHUNK_ROWS = 256
_COMBINED_FILES = 5  # the last one is the validation recording set


@dataclass(frozen=True)
class DemoData:
    """Where the demo data lives."""

    folder: str
    single: str
    combined: list[str]


@dataclass
class DemoSummary:
    """What a demo run did and reached."""

    loader: str
    world_size: int
    train_samples: int
    val_samples: int
    epochs: int
    val_accuracy: float
    val_loss: float
    train_samples_per_s: float
    loader_samples_per_s: float
    seconds: float
    #: share of the training epochs the loop spent waiting for batches (their mean)
    train_wait_share: float
    data_folder: str
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def chance(self) -> float:
        """Accuracy of guessing."""
        return 1.0 / CLASSES


class DemoNet(nn.Module):
    """A small 1-D CNN for (batch, 1, 128) signals."""

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(1, 16, 7, padding=3),
            nn.ReLU(),
            nn.MaxPool1d(4),
            nn.Conv1d(16, 32, 5, padding=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
            nn.Flatten(),
            nn.Linear(32, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class scores for a batch of signals."""
        scores: torch.Tensor = self.body(x)
        return scores


def make_signals(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` noisy sine signals (n, 128) float32 and their classes (n,) int64."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=n)
    t = np.linspace(0.0, 1.0, STEPS)
    freq = (labels + 1) * 3.0 + rng.normal(0.0, 0.4, size=n)
    phase = rng.uniform(0.0, 2 * np.pi, size=n)
    clean = np.sin(2 * np.pi * freq[:, None] * t[None, :] + phase[:, None])
    noisy = clean + rng.normal(0.0, 1.2, size=clean.shape)
    return noisy.astype(np.float32), labels.astype(np.int64)


def write_demo_data(
    folder: str | os.PathLike[str], samples: int = 8000, *, val_fraction: float = 0.2, seed: int = 0
) -> DemoData:
    """Write the demo set under ``folder`` in both layouts and return the paths."""
    check_positive_int("samples", samples)
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    os.makedirs(folder, exist_ok=True)
    signals, labels = make_signals(samples, seed)
    n_val = max(1, int(samples * val_fraction))
    single = os.path.join(os.fspath(folder), "demo.h5")
    _write_single(single, signals, labels, samples - n_val)
    combined = _write_combined(os.fspath(folder), signals, labels, n_val, seed)
    return DemoData(os.fspath(folder), single, combined)


def _write_single(path: str, signals: np.ndarray, labels: np.ndarray, n_train: int) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["description"] = "nn-handler demo: 4-class noisy sine signals"
        for split, rows in (("train", slice(0, n_train)), ("val", slice(n_train, None))):
            x = signals[rows, None, :]
            f.create_dataset(
                f"{split}/signals",
                data=x,
                chunks=(min(_CHUNK_ROWS, len(x)), 1, STEPS),
                compression="gzip",
                shuffle=True,
            )
            f.create_dataset(f"{split}/labels", data=labels[rows])


def _write_combined(
    folder: str, signals: np.ndarray, labels: np.ndarray, n_val: int, seed: int
) -> list[str]:
    rng = np.random.default_rng(seed + 1)
    n_train = len(signals) - n_val
    # _COMBINED_FILES - 1 training recordings, then the validation one
    bounds = [*np.linspace(0, n_train, _COMBINED_FILES, dtype=np.int64).tolist(), len(signals)]
    paths = []
    for k in range(_COMBINED_FILES):
        lo, hi = bounds[k], bounds[k + 1]
        path = os.path.join(folder, f"recording-{k}.h5")
        _write_recording(path, signals[lo:hi], labels[lo:hi], k, rng)
        paths.append(path)
    return paths


def _write_recording(
    path: str, x: np.ndarray, y: np.ndarray, k: int, rng: np.random.Generator
) -> None:
    n = len(x)
    background = rng.random(n) < 0.1  # noise-only windows, dropped by the bg_label filter
    x = np.where(background[:, None], rng.normal(0.0, 1.2, x.shape).astype(np.float32), x)
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "fhr_st", data=x, chunks=(min(_CHUNK_ROWS, n), STEPS), compression="gzip", shuffle=True
        )
        f["target"] = np.eye(CLASSES, dtype=np.uint8)[y]
        f["guid"] = np.array([f"rec-{k}-{i // 100:03d}".encode() for i in range(n)])
        f["bg_label"] = background
        f["cs_label"] = rng.random(n) < 0.3
        f["epoch"] = np.arange(n, dtype=np.float32) % 100
        f["weight"] = np.ones(n, dtype=np.float32)


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Fraction of correct class predictions in a batch."""
    return (outputs.argmax(1) == targets).float().mean()


def combined_batch(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn a CombinedHDF5Dataset batch into (signals (B, 1, 128), class indices)."""
    return batch["fhr_st"].unsqueeze(1), batch["target"].argmax(-1)


@dataclass(frozen=True)
class _Config:
    """Everything a training process needs (picklable: it travels to spawned ranks)."""

    data: DemoData
    loader: LoaderName
    epochs: int
    batch_size: int
    workers: int
    world_size: int
    seed: int
    progress: bool | None


def run_demo(
    data: DemoData,
    *,
    loader: LoaderName = "lazy",
    epochs: int = 3,
    batch_size: int = 128,
    workers: int | None = None,
    distributed: int = 1,
    seed: int = 0,
    progress: bool | None = None,
    log_fn: Callable[[str], None] = print,
) -> DemoSummary:
    """Train ``DemoNet`` on ``data`` with ``NNHandler`` and return what it reached.

    Args:
        data: From ``write_demo_data``.
        loader: ``"lazy"`` (H5LazyDataset + workers), ``"rank-cached"``
            (RankMemCachedH5Dataset) or ``"combined"`` (CombinedHDF5Dataset over the
            recording files, background windows filtered out).
        epochs: Training epochs.
        batch_size: Samples per batch (per process).
        workers: DataLoader workers per process (None: 2 on one process, fewer per rank).
        distributed: Number of local processes; more than 1 trains with DDP over gloo,
            started through ``torch.distributed.launcher``.
        seed: Seeds the model and the sampling order.
        progress: Progress bars (None: when stderr is a terminal).
        log_fn: Receives the per-epoch lines (rank 0 only).
    """
    cfg = _Config(
        data=data,
        loader=check_choice("loader", loader, LOADERS),
        epochs=check_positive_int("epochs", epochs),
        batch_size=check_positive_int("batch_size", batch_size),
        workers=_default_workers(workers, check_positive_int("distributed", distributed)),
        world_size=distributed,
        seed=seed,
        progress=progress,
    )
    if cfg.world_size == 1:
        return _train(cfg, log_fn)
    return _launch(cfg)


def _default_workers(workers: int | None, processes: int) -> int:
    if workers is not None:
        return check_non_negative_int("workers", workers)
    return 2 if processes == 1 else min(2, max(0, usable_cores() // processes - 1))


def _launch(cfg: _Config) -> DemoSummary:
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=cfg.world_size,
        run_id=f"nn-handler-demo-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
    )
    results = elastic_launch(config, _distributed_entry)(cfg)
    summary: DemoSummary = results[0]
    return summary


def _distributed_entry(cfg: _Config) -> DemoSummary:
    """One rank of a ``--distributed`` demo (top level: spawned processes import it)."""
    cores = os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // cfg.world_size))
    return _train(cfg, print)


def _train(cfg: _Config, log_fn: Callable[[str], None]) -> DemoSummary:
    torch.manual_seed(cfg.seed)
    start = time.perf_counter()
    use_ddp = cfg.world_size > 1
    handler = NNHandler(
        DemoNet,
        device="cpu",
        use_distributed=use_ddp,
        seed=cfg.seed,
        progress=cfg.progress,
        log_fn=log_fn,
        batch_fn=combined_batch if cfg.loader == "combined" else None,
    )
    with handler:
        train, val = _datasets(cfg, log_fn if handler.world.is_main else None)
        if handler.world.is_main:
            log_fn(f"data: {train!r}")
        loader_rate = _loader_rate(train, cfg.batch_size)
        kwargs = _loader_kwargs(cfg)
        handler.set_train_loader(train, batch_size=cfg.batch_size, **kwargs)
        handler.set_val_loader(val, batch_size=4 * cfg.batch_size, **kwargs)
        handler.set_optimizer(torch.optim.Adam, lr=3e-3)
        handler.set_loss_fn(nn.CrossEntropyLoss())
        handler.set_metrics({"accuracy": accuracy})
        history = handler.train(cfg.epochs)
        final = handler.evaluate()
    return DemoSummary(
        loader=cfg.loader,
        world_size=cfg.world_size,
        train_samples=len(train),
        val_samples=int(final["samples"]),
        epochs=cfg.epochs,
        val_accuracy=float(final["accuracy"]),
        val_loss=float(final["loss"]),
        train_samples_per_s=float(np.mean([r["samples_per_s"] for r in history])),
        loader_samples_per_s=loader_rate,
        seconds=time.perf_counter() - start,
        train_wait_share=float(np.mean([r["train_wait_share"] for r in history])),
        data_folder=cfg.data.folder,
        history=[dict(r) for r in history],
    )


def _datasets(cfg: _Config, log_fn: Callable[[str], None] | None) -> tuple[Any, Any]:
    single = cfg.data.single
    if cfg.loader == "lazy":
        return (
            H5LazyDataset(single, "train/signals", "train/labels"),
            H5LazyDataset(single, "val/signals", "val/labels"),
        )
    if cfg.loader == "rank-cached":
        train = RankMemCachedH5Dataset(
            single, "train/signals", "train/labels", log_fn=log_fn or _quiet
        )
        return train, H5LazyDataset(single, "val/signals", "val/labels")
    *train_files, val_file = cfg.data.combined
    options: dict[str, Any] = {"load_fields": ["fhr_st", "target"], "bg_label": False}
    return (
        CombinedHDF5Dataset(train_files, pin_memory=False, **options),
        CombinedHDF5Dataset([val_file], pin_memory=False, **options),
    )


def _loader_kwargs(cfg: _Config) -> dict[str, Any]:
    if cfg.workers == 0:
        return {"num_workers": 0}
    kwargs: dict[str, Any] = {"num_workers": cfg.workers, "persistent_workers": True}
    if cfg.loader != "rank-cached":
        kwargs["worker_init_fn"] = h5_worker_init_fn
    return kwargs


def _loader_rate(dataset: Any, batch_size: int, budget_s: float = 1.0) -> float:
    """Samples/s of one shuffled pass through the loader alone (no model), in this process."""
    loader = batched_loader(
        dataset, batch_size, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    seen, start = 0, time.perf_counter()
    for batch in loader:
        first = batch[0] if isinstance(batch, (tuple, list)) else next(iter(batch.values()))
        seen += len(first)
        if time.perf_counter() - start > budget_s:
            break
    return seen / max(time.perf_counter() - start, 1e-9)


def _quiet(_line: str) -> None:
    """Drop a log line."""
