import pickle
from collections import Counter

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler.dataloaders import H5LazyDataset, batched_loader, h5_worker_init_fn

from helpers.files import LAYOUTS, h5_rows, images

N = 37


def negate(t: torch.Tensor) -> torch.Tensor:
    return -t


def plus_ten(t: torch.Tensor) -> torch.Tensor:
    return t + 10


@pytest.fixture(params=list(LAYOUTS))
def layout_path(request, make_h5):
    return make_h5({"x": (images(N), request.param), "y": np.arange(N) * 3})


@pytest.fixture
def path(make_h5):
    return make_h5({"x": (images(N), "gzip"), "y": np.arange(N) * 3, "grp/sub/z": images(N, 1)})


def test_samples_equal_h5py(layout_path):
    ds = H5LazyDataset(layout_path, "x", "y")
    assert len(ds) == N
    xs, ys = h5_rows(layout_path, "x"), h5_rows(layout_path, "y")
    for i in (0, 5, N - 1, -1, -N):
        x, y = ds[i]
        assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        assert x.numpy().tobytes() == xs[i].tobytes()
        assert y.item() == ys[i]


def test_getitems_any_order_and_duplicates(layout_path):
    ds = H5LazyDataset(layout_path, "x", "y")
    idx = [36, 0, 0, 17, 5, -1, 16, 36]
    samples = ds.__getitems__(idx)
    xs, ys = h5_rows(layout_path, "x", [i % N for i in idx]), h5_rows(layout_path, "y", idx)
    assert len(samples) == len(idx)
    for (x, y), xe, ye in zip(samples, xs, ys, strict=True):
        assert x.numpy().tobytes() == xe.tobytes() and y.item() == ye


def test_batch_indexing(path):
    ds = H5LazyDataset(path, "x", "y")
    idx = [3, 1, 3, 30]
    x, y = ds[idx]
    np.testing.assert_array_equal(x.numpy(), h5_rows(path, "x", idx))
    np.testing.assert_array_equal(y.numpy(), h5_rows(path, "y", idx))
    for key in (np.array(idx), torch.tensor(idx)):
        np.testing.assert_array_equal(ds[key][0].numpy(), x.numpy())
    _, ys = ds[2:9:3]
    np.testing.assert_array_equal(ys.numpy(), [6, 15, 24])
    assert ds[np.int64(4)][1].item() == 12  # numpy scalar → one sample
    assert ds[torch.tensor(4)][1].item() == 12


def test_x_only(path):
    ds = H5LazyDataset(path, "x")
    x = ds[2]
    assert isinstance(x, torch.Tensor)
    np.testing.assert_array_equal(x.numpy(), images(N)[2])
    assert [s.shape for s in ds.__getitems__([1, 2])] == [(3, 4), (3, 4)]
    assert ds[[1, 2]].shape == (2, 3, 4)


def test_dtype_casts(path):
    ds = H5LazyDataset(path, "x", "y", x_dtype=np.float64, y_dtype="int32")
    x, y = ds[5]
    assert x.dtype == torch.float64 and y.dtype == torch.int32
    np.testing.assert_array_equal(x.numpy(), images(N)[5].astype(np.float64))
    xb, yb = ds[[5, 6]]
    assert xb.dtype == torch.float64 and yb.dtype == torch.int32
    (xs, ys), *_ = ds.__getitems__([5])
    assert xs.dtype == torch.float64 and ys.dtype == torch.int32


def test_big_endian_becomes_native(make_h5):
    path = make_h5({"x": images(5).astype(">f4")})
    x = H5LazyDataset(path, "x")[[4, 1]]
    assert x.dtype == torch.float32
    np.testing.assert_array_equal(x.numpy(), images(5)[[4, 1]])


def test_transforms_run_after_the_cast(path):
    ds = H5LazyDataset(
        path, "x", "y", y_dtype=np.float32, transform=negate, target_transform=plus_ten
    )
    x, y = ds[7]
    np.testing.assert_array_equal(x.numpy(), -images(N)[7])
    assert y.dtype == torch.float32 and y.item() == 31
    xb, yb = ds[[7, 8]]
    np.testing.assert_array_equal(xb.numpy(), -images(N)[[7, 8]])
    np.testing.assert_array_equal(yb.numpy(), [31, 34])
    (x1, y1), (x2, y2) = ds.__getitems__([7, 8])
    np.testing.assert_array_equal(x1.numpy(), -images(N)[7])
    np.testing.assert_array_equal(x2.numpy(), -images(N)[8])
    assert (y1.item(), y2.item()) == (31, 34)


def test_nested_keys(path):
    ds = H5LazyDataset(path, "grp/sub/z", "y")
    np.testing.assert_array_equal(ds[3][0].numpy(), images(N, 1)[3])


def test_index_errors(path):
    ds = H5LazyDataset(path, "x", "y")
    with pytest.raises(IndexError, match=f"index {N} is out of range for a dataset of length {N}"):
        ds[N]
    with pytest.raises(IndexError, match=f"index {-N - 1} is out of range"):
        ds[-N - 1]
    with pytest.raises(IndexError, match="index 99 is out of range"):
        ds.__getitems__([0, 99])
    with pytest.raises(TypeError, match="index must be an integer"):
        ds[1.5]


def test_bad_input(make_h5, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.h5"):
        H5LazyDataset(tmp_path / "missing.h5", "x")
    text = tmp_path / "text.h5"
    text.write_text("hello")
    with pytest.raises(OSError, match="not an HDF5 file"):
        H5LazyDataset(text, "x")
    path = make_h5(
        {"x": images(5), "y": np.arange(6), "s": np.float32(1), "names": np.array([b"a"] * 5)}
    )
    with pytest.raises(
        KeyError, match=r"x_key='images' not found .* datasets: 'names', 's', 'x', 'y'"
    ):
        H5LazyDataset(path, "images")
    with pytest.raises(KeyError, match="y_key='labels' not found"):
        H5LazyDataset(path, "x", "labels")
    with pytest.raises(ValueError, match="x_key='x' has 5 samples but y_key='y' has 6"):
        H5LazyDataset(path, "x", "y")
    with pytest.raises(ValueError, match=r"x_key='s' .* scalar \(0-d\) dataset"):
        H5LazyDataset(path, "s")
    # strings are samples: str, never cast to numbers
    assert H5LazyDataset(path, "names")[0] == "a"
    with pytest.raises(TypeError, match=r"x_key='names' \(dtype \|S1\) holds strings"):
        H5LazyDataset(path, "names", x_dtype=np.float32)
    with pytest.raises(TypeError, match="x_key must be a non-empty string"):
        H5LazyDataset(path, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="transform must be callable or None"):
        H5LazyDataset(path, "x", transform="flip")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="x_dtype must be a NumPy dtype"):
        H5LazyDataset(path, "x", x_dtype="floaty")
    with pytest.raises(ValueError, match="rdcc_w0 must be in"):
        H5LazyDataset(path, "x", rdcc_w0=1.5)


def test_repr_close_and_context_manager(path):
    with H5LazyDataset(path, "x", "y", x_dtype=np.float16) as ds:
        assert not ds.is_open  # construction leaves no handle behind
        ds[0]
        text = repr(ds)
        assert "x_key='x' (37, 3, 4) float32->float16 [decode]" in text
        assert "y_key='y' (37,) int64 [memmap]" in text
        assert f"path={str(path)!r}" in text and "len=37" in text and text.endswith("open)")
    assert not ds.is_open
    assert repr(ds).endswith("closed)")
    assert ds[1][1].item() == 3  # reopens after close


def test_pickles_after_use_in_parent(path):
    ds = H5LazyDataset(path, "x", "y", transform=negate)
    ds[[1, 2]]
    clone = pickle.loads(pickle.dumps(ds))
    assert not clone.is_open
    np.testing.assert_array_equal(clone[4][0].numpy(), -images(N)[4])


def test_plain_h5py_open_in_the_same_process_after_construction(path):
    ds = H5LazyDataset(path, "x", "y")
    with h5py.File(path, "r") as f:  # no SWMR clash: the dataset holds no handle yet
        assert f["x"].shape == (N, 3, 4)
    assert ds[0][1].item() == 0


LOADER_CASES = [
    pytest.param(0, None, id="workers0"),
    pytest.param(2, "fork", id="fork"),
    pytest.param(2, "spawn", id="spawn"),
    pytest.param(2, "forkserver", id="forkserver"),
]


def _collect(loader, epochs: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    passes = []
    for _ in range(epochs):
        xs, ys = [], []
        for x, y in loader:
            xs.append(x.numpy())
            ys.append(y.numpy())
        passes.append((np.concatenate(xs), np.concatenate(ys)))
    return passes


def _check_passes(passes, path) -> None:
    file_x, file_y = h5_rows(path, "x"), h5_rows(path, "y")
    orders = []
    for xs, ys in passes:
        assert Counter(ys.tolist()) == Counter(file_y.tolist())  # every sample once
        rows = ys // 3
        np.testing.assert_array_equal(xs, file_x[rows])  # x travels with its own y
        orders.append(rows.tolist())
    assert orders[0] != orders[1]  # shuffled anew each epoch


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "context"), LOADER_CASES)
@pytest.mark.parametrize("init_fn", [None, h5_worker_init_fn], ids=["no-init", "init-fn"])
def test_dataloader_workers_and_start_methods(path, workers, context, init_fn):
    ds = H5LazyDataset(path, "x", "y")
    ds[0], ds[[1, 2]]  # the parent reads first: forked workers inherit an open handle
    assert ds.is_open
    loader = DataLoader(
        ds,
        batch_size=5,
        shuffle=True,
        num_workers=workers,
        multiprocessing_context=context,
        worker_init_fn=init_fn,
        generator=torch.Generator().manual_seed(0),
        timeout=120 if workers else 0,
    )
    _check_passes(_collect(loader), path)


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "context"), LOADER_CASES)
def test_batched_loader_workers(path, workers, context):
    ds = H5LazyDataset(path, "x", "y")
    ds[3]
    loader = batched_loader(
        ds,
        6,
        shuffle=True,
        num_workers=workers,
        multiprocessing_context=context,
        persistent_workers=bool(workers),
        generator=torch.Generator().manual_seed(1),
        timeout=120 if workers else 0,
    )
    _check_passes(_collect(loader), path)


def test_per_sample_loader_without_getitems(path):
    ds = H5LazyDataset(path, "x", "y")
    ds.__getitems__ = None  # DataLoader then calls __getitem__ once per sample
    loader = DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(2))
    _check_passes(_collect(loader), path)
