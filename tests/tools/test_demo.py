import h5py
import numpy as np
import pytest

from nn_handler.demo import CLASSES, DemoNet, make_signals, run_demo, write_demo_data

pytestmark = pytest.mark.slow  # trains a model end to end


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_demo_data(tmp_path_factory.mktemp("demo"), 2000)


def test_demo_data_layouts(data):
    with h5py.File(data.single) as f:
        x, y = f["train/signals"], f["train/labels"]
        assert x.shape == (1600, 1, 128)
        assert x.compression == "gzip"
        assert x.shuffle
        assert x.chunks == (256, 1, 128)
        assert f["val/signals"].shape == (400, 1, 128)
        assert set(np.unique(y[:]).tolist()) <= set(range(CLASSES))
    assert len(data.combined) == 5
    total = 0
    for path in data.combined:
        with h5py.File(path) as f:
            n = len(f["fhr_st"])
            total += n
            assert f["target"].shape == (n, CLASSES)
            assert (f["target"][:].sum(1) == 1).all()
            assert f["bg_label"].dtype == bool
            assert f["guid"][0].decode().startswith("rec-")
    assert total == 2000


def test_signals_are_deterministic_and_learnable_shape():
    a, la = make_signals(50, seed=3)
    b, lb = make_signals(50, seed=3)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(la, lb)
    assert DemoNet()(__import__("torch").from_numpy(a[:, None, :])).shape == (50, CLASSES)


@pytest.mark.parametrize("loader", ["lazy", "rank-cached", "combined"])
def test_run_demo_learns(data, loader):
    lines = []
    summary = run_demo(
        data, loader=loader, epochs=3, workers=0, progress=False, log_fn=lines.append
    )
    assert summary.val_accuracy > 0.6  # chance is 0.25
    assert summary.loader == loader
    assert summary.epochs == 3
    assert len(summary.history) == 3
    assert summary.history[-1]["train_loss"] < summary.history[0]["train_loss"]
    assert summary.loader_samples_per_s > 0
    assert any(line.startswith("epoch 3/3:") for line in lines)


def test_run_demo_bad_arguments(data):
    with pytest.raises(ValueError, match="loader must be one of 'lazy', 'rank-cached', 'combined'"):
        run_demo(data, loader="fast")
    with pytest.raises(ValueError, match="epochs must be >= 1, got 0"):
        run_demo(data, epochs=0)
    with pytest.raises(ValueError, match="samples must be >= 1"):
        write_demo_data(data.folder, 0)
