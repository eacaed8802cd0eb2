"""NNHandler.predict on one process: the file, the tensor, several outputs, a killed run resumed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from nn_handler import NNHandler
from nn_handler.dataloaders import H5LazyDataset

from helpers.handler import TinyNet
from helpers.predict import (
    CHUNK_ROWS,
    ROWS,
    WIDTH,
    TwoHeads,
    Wide,
    count_rows,
    expected_rows,
    write_data,
)

TESTS = Path(__file__).resolve().parents[1]


def _close(actual, expected):
    """Rows equal to the model applied directly, up to GEMM rounding (one call vs batches)."""
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-4)


def _handler(model=Wide, kwargs=None, **options):
    return NNHandler(model, kwargs, progress=False, log_fn=None, **options)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_data(tmp_path_factory.mktemp("predict") / "x.h5")


def test_the_file_holds_each_samples_output_in_order(tmp_path, data):
    model = _handler()
    model.model.train()
    path = model.predict(H5LazyDataset(data, "x"), tmp_path / "p.h5", batch_size=48)
    assert path == tmp_path / "p.h5" and model.model.training  # its mode is given back
    with h5py.File(path, "r") as f:
        rows = f["predictions"]
        assert rows.shape == (ROWS, WIDTH) and rows.dtype == np.float32
        assert rows.chunks == (CHUNK_ROWS, WIDTH)
        assert (rows.compression, rows.compression_opts, rows.shuffle) == ("gzip", 1, True)
        _close(rows[:], expected_rows(data))
        assert dict(f.attrs) == {
            "nn_handler.dataset": "H5LazyDataset",
            "nn_handler.model": "Wide",
            "nn_handler.source_files": [str(data)],
            "nn_handler.source_keys": ["x"],
        }
    assert not (tmp_path / "p.h5.parts").exists()
    tensor = _handler().predict(H5LazyDataset(data, "x"), batch_size=100)
    _close(tensor.numpy(), expected_rows(data))


def test_inputs_are_split_as_training_splits_them_and_eval_mode_is_used(tmp_path, data):
    torch.manual_seed(0)
    handler = _handler(TinyNet, {"features": 9})
    # (x, y) batches: the inputs are x; TinyNet's dropout is off in eval mode
    first = handler.predict(H5LazyDataset(data, "x", "y"), batch_size=64)
    second = handler.predict(H5LazyDataset(data, "x"), batch_size=7)
    with torch.no_grad():
        handler.model.eval()
        direct = handler.model(H5LazyDataset(data, "x")[list(range(ROWS))])
    torch.testing.assert_close(first, direct, rtol=0, atol=1e-6)
    torch.testing.assert_close(second, direct)  # other batches: GEMM may round otherwise


@pytest.mark.parametrize("as_dict", [False, True])
def test_several_outputs_write_one_dataset_each(tmp_path, data, as_dict):
    handler = _handler(TwoHeads, {"as_dict": as_dict})
    path = handler.predict(H5LazyDataset(data, "x"), tmp_path / "p.h5", key="out")
    names = ("out/scores", "out/ids") if as_dict else ("out/0", "out/1")
    with h5py.File(data, "r") as f:
        x = f["x"][:]
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f[names[0]][:], x[:, 1:4] * 2)
        np.testing.assert_array_equal(f[names[1]][:], np.arange(ROWS))
        assert f[names[1]].dtype == np.int64
    tensors = handler.predict(H5LazyDataset(data, "x"))
    scores = tensors["scores"] if as_dict else tensors[0]
    np.testing.assert_array_equal(scores.numpy(), x[:, 1:4] * 2)


def test_bad_arguments_are_named(tmp_path, data):
    handler, dataset = _handler(), H5LazyDataset(data, "x")
    with pytest.raises(TypeError, match=r"unknown or reserved DataLoader keyword\(s\) 'shuffle'"):
        handler.predict(dataset, tmp_path / "p.h5", shuffle=True)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        handler.predict(dataset, tmp_path / "p.h5", batch_size=0)
    with pytest.raises(TypeError, match="key must be a non-empty string"):
        handler.predict(dataset, tmp_path / "p.h5", key="")
    with pytest.raises(TypeError, match="out must be a path"):
        handler.predict(dataset, 3)
    with pytest.raises(ValueError, match="dataset is empty"):
        handler.predict(torch.utils.data.TensorDataset(torch.zeros(0, 9)), tmp_path / "p.h5")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _predict_in_subprocess(data: Path, out: Path, counts: Path, kill_after: int) -> int:
    code = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "from helpers.predict import predict_alone\n"
        "predict_alone(sys.argv[2], sys.argv[3], 48, sys.argv[4], int(sys.argv[5]))\n"
    )
    args = [sys.executable, "-c", code, str(TESTS), str(data), str(out), str(counts)]
    done = subprocess.run([*args, str(kill_after)], timeout=120, capture_output=True, text=True)
    return done.returncode


class _Watcher(threading.Thread):
    """Looks at ``path`` until stopped: it must be absent, or the whole file with every row."""

    def __init__(self, path: Path, rows: np.ndarray) -> None:
        super().__init__(daemon=True)
        self.path, self.rows, self.looks, self.seen_whole = path, rows, 0, 0
        self.stop, self.failure = threading.Event(), None

    def run(self) -> None:
        while not self.stop.is_set():
            self.looks += 1
            try:
                with h5py.File(self.path, "r") as f:
                    _close(f["predictions"][:], self.rows)
                self.seen_whole += 1
            except FileNotFoundError:
                pass
            except Exception as exc:  # a half file, or other rows
                self.failure = exc
                return
            self.stop.wait(0.01)


@pytest.mark.slow
def test_a_killed_run_is_resumed_computing_only_the_missing_rows(tmp_path, data):
    out, counts = tmp_path / "p.h5", tmp_path / "counts.txt"
    watcher = _Watcher(out, expected_rows(data))
    watcher.start()
    try:
        assert _predict_in_subprocess(data, out, counts, kill_after=500) == -9  # SIGKILL
        assert not out.exists() and (tmp_path / "p.h5.parts").is_dir()
        first = count_rows(counts)
        assert _predict_in_subprocess(data, out, counts, kill_after=10**9) == 0
        rerun = count_rows(counts) - first
    finally:
        watcher.stop.set()
        watcher.join(30)
    assert watcher.failure is None, watcher.failure
    assert watcher.looks > 10 and watcher.seen_whole >= 1
    # 500 rows seen before the kill: 7 whole chunks of 64 were stored (448 rows)
    assert rerun == ROWS - 7 * CHUNK_ROWS
    assert not (tmp_path / "p.h5.parts").exists()
    whole = _handler().predict(H5LazyDataset(data, "x"), tmp_path / "whole.h5", batch_size=48)
    assert _digest(out) == _digest(whole)  # the same bytes as a run never killed


@pytest.mark.slow
def test_dataloader_workers_feed_predict(tmp_path, data):
    alone = _handler().predict(H5LazyDataset(data, "x"), tmp_path / "a.h5", batch_size=48)
    fed = _handler().predict(
        H5LazyDataset(data, "x"),
        tmp_path / "b.h5",
        batch_size=48,
        num_workers=2,
        multiprocessing_context="spawn",
        timeout=120,
    )
    assert _digest(alone) == _digest(fed)
