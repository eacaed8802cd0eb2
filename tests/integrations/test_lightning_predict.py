"""H5PredictionWriter: trainer.predict into one file in dataset order, on 1 and 2 CPU devices."""

from __future__ import annotations

import hashlib
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from helpers.predict import ROWS, Doubler

L = pytest.importorskip("lightning")

from nn_handler.integrations.lightning import H5PredictionWriter  # noqa: E402

# Lightning's own notes (few workers, its pytree deprecations) are not what is tested here
pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning"
)


class TwoOutputs(L.LightningModule):
    """Elementwise outputs (no GEMM: any batching gives the same bits), a tuple of two."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    def predict_step(self, batch: torch.Tensor, batch_idx: int) -> Any:
        return batch * self.scale + 1, batch[:, 0].long()

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(Doubler(), batch_size=40)


def _trainer(tmp_path, path, **kwargs):
    return L.Trainer(
        accelerator="cpu",
        callbacks=[H5PredictionWriter(path, key="out")],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **kwargs,
    )


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_rows(path) -> None:
    values = Doubler().values.numpy()
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["out/0"][:], values * np.float32(2) + 1)
        np.testing.assert_array_equal(f["out/1"][:], np.arange(ROWS))
        assert f.attrs["nn_handler.model"] == "TwoOutputs"


def test_one_device_writes_the_rows_in_dataset_order(tmp_path):
    path = tmp_path / "preds.h5"
    trainer = _trainer(tmp_path, path, devices=1)
    assert trainer.predict(TwoOutputs(), return_predictions=False) is None
    _check_rows(path)
    assert not (tmp_path / "preds.h5.parts").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_ddp_devices_write_the_one_device_file(tmp_path):
    alone, path = tmp_path / "alone.h5", tmp_path / "preds.h5"
    _trainer(tmp_path, alone, devices=1).predict(TwoOutputs(), return_predictions=False)
    # Lightning deals rows out one by one (strided: no chunk is whole on one rank), no repeats
    trainer = _trainer(tmp_path, path, devices=2, strategy="ddp_spawn")
    trainer.predict(TwoOutputs(), return_predictions=False)
    _check_rows(path)
    assert _digest(path) == _digest(alone)


_DDP_SCRIPT = """
import sys
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from nn_handler.integrations.lightning import H5PredictionWriter

warnings.filterwarnings("ignore")


class Rows(Dataset):
    def __len__(self):
        return 301

    def __getitem__(self, i):
        return torch.full((3,), float(i))


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    def predict_step(self, batch, batch_idx):
        return batch * self.scale + 1


trainer = L.Trainer(
    accelerator="cpu", devices=int(sys.argv[2]), strategy=sys.argv[3], logger=False,
    enable_progress_bar=False, enable_model_summary=False, default_root_dir=sys.argv[4],
    callbacks=[H5PredictionWriter(sys.argv[1])],
)
trainer.predict(Model(), DataLoader(Rows(), batch_size=32), return_predictions=False)
if torch.distributed.is_initialized():  # (left to exit, gloo's threads may abort the process)
    torch.distributed.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_strategy_ddp_in_a_script_writes_the_one_device_file(tmp_path):
    # strategy="ddp" starts the other rank by running the script again: it cannot run inside
    # pytest, so it runs as users run it, a script of its own
    import subprocess
    import sys

    script = tmp_path / "predict_ddp.py"
    script.write_text(_DDP_SCRIPT)
    files = {}
    for devices, strategy in ((1, "auto"), (2, "ddp")):
        files[devices] = tmp_path / f"preds{devices}.h5"
        subprocess.run(
            [
                sys.executable,
                str(script),
                str(files[devices]),
                str(devices),
                strategy,
                str(tmp_path),
            ],
            check=True,
            timeout=240,
            cwd=tmp_path,
        )
    with h5py.File(files[2], "r") as f:
        expected = np.repeat(np.arange(301, dtype=np.float32)[:, None], 3, axis=1) * 2 + 1
        np.testing.assert_array_equal(f["predictions"][:], expected)
    assert _digest(files[2]) == _digest(files[1])
    assert not (tmp_path / "preds2.h5.parts").exists()
