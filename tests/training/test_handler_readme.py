"""The README's "Training with NNHandler" snippets run as written."""

import os
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers.ddp import run_ddp

README = Path(__file__).resolve().parents[2] / "README.md"


def _snippets(marker: str) -> list[str]:
    text = README.read_text()
    return re.findall(rf"<!-- {marker} -->\n```python\n(.*?)```", text, re.DOTALL)


def _write_data(folder: Path, n: int = 256) -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n)
    images = rng.normal(0, 1, (n, 16, 16)).astype(np.float32)
    images[np.arange(n), labels, labels] += 4.0  # learnable: the class lights one pixel
    (folder / "data").mkdir()
    for name in ("my_dataset.h5", "large_dataset.h5"):
        with h5py.File(folder / "data" / name, "w") as f:
            f.create_dataset("images", data=images)
            f.create_dataset("labels", data=labels)


def _run(codes: list[str]) -> dict:
    namespace: dict = {"__name__": "readme"}
    for code in codes:
        exec(compile(code, str(README), "exec"), namespace)
    return namespace


# the snippet asks for 4 workers, as users write it; torch warns on machines with fewer cores
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_single_device_snippet(tmp_path, monkeypatch, capsys):
    codes = _snippets("handler-snippet")
    assert len(codes) == 2
    _write_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    history = _run(codes)["history"]
    assert len(history) == 3
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert (tmp_path / "checkpoints" / "run.pt").is_file()
    assert capsys.readouterr().out.count("epoch ") == 3


def _ddp_snippet(codes: list[str], folder: str) -> list[dict]:
    os.chdir(folder)
    return _run(codes)["history"]


@pytest.mark.slow
def test_ddp_snippet_on_two_processes(tmp_path):
    codes = [_snippets("handler-snippet")[0], *_snippets("handler-ddp-snippet")]
    assert len(codes) == 2
    _write_data(tmp_path)
    histories = run_ddp(_ddp_snippet, 2, tmp_path / "out", codes, str(tmp_path))
    assert len(histories[0]) == 2
    ranks = [[(h["epoch"], h["train_loss"], h["steps"]) for h in history] for history in histories]
    assert ranks[0] == ranks[1]  # all-reduced: every rank reports the same epochs
    assert [steps for _, _, steps in ranks[0]] == [4, 4]  # 256 samples / 2 ranks / 32
