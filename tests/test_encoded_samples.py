"""Encoded samples (vlen uint8 rows: JPEG / PNG bytes) and decode_image, against Pillow."""

import functools
import io

import h5py
import numpy as np
import pytest
import torch

from nn_handler.dataloaders import H5LazyDataset, pad_collate
from nn_handler.dataloaders.transforms import decode_image

from helpers.real_files import image_bytes, write_encoded

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def path(tmp_path):
    return write_encoded(tmp_path)


def stored(path, key="images"):
    with h5py.File(path) as f:
        return list(f[key][()])


def pillow(blob, mode=None):
    img = Image.open(io.BytesIO(bytes(blob)))
    return np.asarray(img if mode is None else img.convert(mode))


def test_rows_are_1d_uint8_tensors(path):
    blobs = stored(path)
    ds = H5LazyDataset(path, "images")
    one = ds[3]
    assert one.dtype == torch.uint8 and one.dim() == 1
    assert one.numpy().tobytes() == blobs[3].tobytes()
    batch = ds[[4, 0, 4]]
    assert isinstance(batch, list)  # lengths differ: a list, not a stacked tensor
    assert [b.numpy().tobytes() for b in batch] == [blobs[i].tobytes() for i in (4, 0, 4)]
    items = ds.__getitems__([1, 2])
    assert [b.numpy().tobytes() for b in items] == [blobs[1].tobytes(), blobs[2].tobytes()]


def test_equal_length_rows_stack(path):
    ds = H5LazyDataset(path, "same_len", x_dtype=np.float64)
    batch = ds[[2, 5]]
    assert batch.shape == (2, 4) and batch.dtype == torch.float64
    assert batch[:, 0].tolist() == [2, 5]


def test_decode_transform_matches_pillow(path):
    blobs = stored(path)
    decode = functools.partial(decode_image, mode="RGB")
    ds = H5LazyDataset(path, "images", "labels", transform=decode, classes="auto")
    for i in range(len(blobs)):
        x, _ = ds[i]
        want = pillow(blobs[i], "RGB")
        assert x.shape == (3, *want.shape[:2]) and x.dtype == torch.uint8
        np.testing.assert_array_equal(x.permute(1, 2, 0).numpy(), want)
    xs, ys = ds[[0, 1, 2]]
    assert isinstance(xs, list) and len(xs) == 3 and ys.dtype == torch.int64


def test_decode_options(path):
    blobs = stored(path)
    gray = blobs[4]  # row 4 is grayscale PNG
    hwc = decode_image(gray, layout="HWC", dtype=np.uint8)
    assert isinstance(hwc, np.ndarray) and hwc.shape[2] == 1
    np.testing.assert_array_equal(hwc[..., 0], pillow(gray))
    scaled = decode_image(torch.from_numpy(blobs[1]), dtype=torch.float32)
    np.testing.assert_allclose(scaled.permute(1, 2, 0).numpy(), pillow(blobs[1]) / 255.0, rtol=1e-6)
    raw = decode_image(bytes(blobs[1]), dtype=np.float32, scale=False, layout="HWC")
    np.testing.assert_array_equal(raw, pillow(blobs[1]).astype(np.float32))
    sixteen = Image.fromarray(np.array([[0, 65535]], dtype=np.uint16))
    buf = io.BytesIO()
    sixteen.save(buf, format="PNG")
    assert decode_image(buf.getvalue(), dtype=torch.float64).flatten().tolist() == [0.0, 1.0]


def test_decode_errors():
    with pytest.raises(
        ValueError, match=r"cannot decode 4 bytes as an image \(first bytes 00 01 02 03\)"
    ):
        decode_image(np.arange(4, dtype=np.uint8))
    with pytest.raises(TypeError, match="1-d uint8 tensor/array of encoded bytes, got float32"):
        decode_image(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="layout must be one of"):
        decode_image(image_bytes(0, "PNG", (2, 2)), layout="WHC")
    with pytest.raises(TypeError, match="dtype must be an integer or float dtype"):
        decode_image(image_bytes(0, "PNG", (2, 2)), dtype=np.complex64)


def test_pad_collate_after_decode(path):
    decode = functools.partial(decode_image, mode="RGB")
    ds = H5LazyDataset(path, "images", "labels", transform=decode, classes="auto")
    samples = ds.__getitems__([0, 1, 2])
    batch = pad_collate([{"data": x, "labels": {"y": y}} for x, y in samples])
    assert batch["data"].shape[:2] == (3, 3)
    assert batch["lengths"].tolist() == [list(x.shape) for x, _ in samples]
    assert batch["labels"]["y"].tolist() == [int(y) for _, y in samples]
