"""Models, data and rank functions for the prediction tests (importable by spawned processes)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch import nn

from nn_handler import NNHandler
from nn_handler.dataloaders import H5LazyDataset

from helpers.handler import write_blobs

ROWS = 1001  # odd, and not a multiple of the chunk rows
WIDTH = 4096  # float32 outputs: 16 KiB a row, so chunks of 64 rows (1001 = 15 * 64 + 41)
CHUNK_ROWS = 64


class Wide(nn.Module):
    """A linear map to ``WIDTH`` values per sample (seeded); notes the rows it is called on.

    Args:
        count_path: Append each call's row count here (one line per call).
        kill_after: SIGKILL this process once it has seen this many rows (a crash mid-run).
    """

    def __init__(self, count_path: str | None = None, kill_after: int | None = None) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randn(9, WIDTH, generator=generator))
        self.count_path, self.kill_after, self.seen = count_path, kill_after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.count_path is not None:
            with open(self.count_path, "a") as file:
                file.write(f"{len(x)}\n")
        self.seen += len(x)
        if self.kill_after is not None and self.seen >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return x @ self.weight


class TwoHeads(nn.Module):
    """Several outputs: a tuple (``as_dict=False``) or a dict of differently shaped tensors."""

    def __init__(self, as_dict: bool = False) -> None:
        super().__init__()
        self.as_dict = as_dict

    def forward(self, x: torch.Tensor) -> Any:
        scores = x[:, 1:4] * 2
        ids = x[:, 0].long()
        return {"scores": scores, "ids": ids} if self.as_dict else (scores, ids)


def write_data(path: Path, n: int = ROWS) -> Path:
    """Inputs: ``x`` of ``n`` rows of 9 floats (column 0 the sample's index)."""
    return write_blobs(path, n)


def expected_rows(path: Path) -> np.ndarray:
    """What ``Wide`` gives for every sample of ``path``, computed directly."""
    with h5py.File(path, "r") as f:
        x = torch.from_numpy(f["x"][:])
    with torch.no_grad():
        return (x @ Wide().weight).numpy()


def count_rows(count_path: Path) -> int:
    """Rows the model was called on, from ``Wide``'s notes."""
    if not count_path.exists():
        return 0
    return sum(int(line) for line in count_path.read_text().split())


def predict_rank(data: Path, out: Path, batch_size: int, count_path: str | None = None) -> str:
    """One DDP rank's ``predict`` (for ``helpers.ddp.run_ddp``)."""
    handler = NNHandler(
        Wide, {"count_path": count_path}, use_distributed=True, progress=False, log_fn=None
    )
    path = handler.predict(H5LazyDataset(data, "x"), out, batch_size=batch_size)
    assert path.exists()  # on every rank, once predict returns
    return str(path)


def predict_alone(data: str, out: str, batch_size: int, count_path: str, kill_after: int) -> None:
    """One process's ``predict`` with a model that may kill it (run as a subprocess)."""
    handler = NNHandler(
        Wide, {"count_path": count_path, "kill_after": kill_after}, progress=False, log_fn=None
    )
    handler.predict(H5LazyDataset(data, "x"), out, batch_size=batch_size)


class WritingDataset(torch.utils.data.Dataset):
    """Each sample read writes its row into ``writer`` (from whichever worker reads it)."""

    def __init__(self, writer: Any, rows: np.ndarray) -> None:
        self.writer, self.rows = writer, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> int:
        self.writer.write([i], self.rows[i : i + 1])
        return i


class Doubler(torch.utils.data.Dataset):
    """``n`` rows of 6 float32 values (sample ``i``'s first value is ``i``)."""

    def __init__(self, n: int = ROWS) -> None:
        values = np.random.default_rng(3).normal(size=(n, 6)).astype(np.float32)
        values[:, 0] = np.arange(n)
        self.values = torch.from_numpy(values)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.values[i]
