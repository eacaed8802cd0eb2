"""Byte-shuffle undone by c-blosc (a framed block) and by NumPy: HDF5's bytes, h5py's values."""

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nn_handler._io.chunks.decoders as decoders_module
import nn_handler._io.chunks.shuffle as shuffle_module
from nn_handler._io.chunks.decoders import scratch, unshuffle_into
from nn_handler._io.chunks.libraries import IMAGECODECS
from nn_handler._io.chunks.shuffle import (
    FRAME,
    blosc_unshuffles,
    framed_fits,
    unshuffle_planes,
)
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader

# not skipped when imagecodecs is there but its c-blosc fails the check: those tests then fail
needs_blosc = pytest.mark.skipif(
    IMAGECODECS.blosc_decode is None,
    reason="the optional 'imagecodecs' package is not installed",
)


def hdf5_shuffle(data: np.ndarray, itemsize: int) -> np.ndarray:
    """HDF5's shuffle: byte planes of the whole elements, then the bytes after them as is."""
    count = data.size // itemsize
    body = count * itemsize
    planes = data[:body].reshape(count, itemsize).T.ravel()
    return np.concatenate([planes, data[body:]]).astype(np.uint8)


@pytest.fixture
def blosc_only(monkeypatch):
    """Fail the test if the NumPy copy runs: every unshuffle must be c-blosc's."""

    def refuse(*_args):
        raise AssertionError("the NumPy unshuffle ran")

    monkeypatch.setattr(decoders_module, "unshuffle_planes", refuse)


@needs_blosc
@pytest.mark.parametrize("itemsize", [2, 3, 4, 5, 8, 13, 16, 255])
@pytest.mark.parametrize("count", [2, 7, 33, 1000, 4099])
@pytest.mark.parametrize("where", ["scratch", "elsewhere"])
def test_blosc_unshuffles_like_hdf5(blosc_only, itemsize, count, where):
    values = np.random.default_rng(count).integers(0, 256, count * itemsize, dtype=np.uint8)
    shuffled = hdf5_shuffle(values, itemsize)
    if where == "scratch":  # framed in place, in the room scratch keeps before it
        src = scratch(shuffled.size, 1)
        src[:] = shuffled
    else:  # copied into a scratch buffer first
        src = shuffled.copy()
    out = np.zeros_like(values)
    unshuffle_into(src, out, itemsize)
    assert out.tobytes() == values.tobytes()
    assert src.tobytes() == shuffled.tobytes()  # the header went before src, not into it


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=3000), itemsize=st.integers(1, 300), in_scratch=st.booleans())
def test_unshuffle_inverts_hdf5_shuffle_on_every_path(raw, itemsize, in_scratch):
    values = np.frombuffer(raw, np.uint8)
    shuffled = hdf5_shuffle(values, itemsize)
    src = scratch(shuffled.size, 0) if in_scratch else shuffled.copy()
    src[:] = shuffled
    out = np.empty_like(shuffled)
    unshuffle_into(src, out, itemsize)
    assert out.tobytes() == raw
    planes = np.empty_like(shuffled)
    unshuffle_planes(shuffled, planes, itemsize)
    assert planes.tobytes() == raw


@needs_blosc
def test_imagecodecs_blosc_passes_the_check():
    assert blosc_unshuffles()


def test_what_a_frame_holds():
    assert not framed_fits(12, 1)  # one-byte elements: nothing to unshuffle
    assert not framed_fits(2 * 256, 256)  # the header's typesize is one byte
    assert not framed_fits(13, 4)  # a byte after the last element
    assert not framed_fits(4, 4)  # one element
    assert framed_fits(8, 4) == blosc_unshuffles()


def test_without_blosc_numpy_unshuffles(monkeypatch):
    monkeypatch.setattr(shuffle_module, "blosc_unshuffles", lambda: False)
    values = np.arange(4000, dtype="<u4").view(np.uint8)
    src = scratch(values.size, 1)
    src[:] = hdf5_shuffle(values, 4)
    out = np.empty_like(values)
    unshuffle_into(src, out, 4)
    assert out.tobytes() == values.tobytes()


DTYPES = {
    "u1": np.dtype("u1"),
    ">i2": np.dtype(">i2"),
    "<f4": np.dtype("<f4"),
    "<i8": np.dtype("<i8"),
    "compound": np.dtype([("a", "<f4"), ("b", "u1"), ("c", "<i8")]),  # 13 bytes, packed
}


def sample(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(5)
    data = np.zeros(shape, dtype)
    for name in dtype.names or [None]:
        field = data if name is None else data[name]
        field[...] = rng.integers(0, 1000, shape).astype(field.dtype)
    return data


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("chunks", [(8, 3, 7), (8, 2, 7)], ids=["whole-rows", "split-rows"])
def test_shuffled_gzip_datasets_read_as_h5py_does(tmp_path, monkeypatch, dtype, chunks):
    """37 rows of 3×7 (a partial edge chunk), read through the chunk engine: h5py's values."""
    ran = []
    framed = decoders_module.unshuffle_framed
    monkeypatch.setattr(decoders_module, "unshuffle_framed", lambda *a: ran.append(1) or framed(*a))
    data = sample(DTYPES[dtype], (37, 3, 7))
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=chunks, compression="gzip", shuffle=True)
    with h5py.File(path, "r") as f:
        expected = f["x"][()]
    r = RowReader(H5Source(path, FileOptions()), "x")
    assert r.strategy == "decode"
    idx = [36, 0, 7, 8, 33, 32, 5, 5]
    assert r.read(idx).tobytes() == expected[idx].tobytes()
    assert r.read_range(0, 37).tobytes() == expected.tobytes()
    assert bool(ran) == (DTYPES[dtype].itemsize > 1 and blosc_unshuffles())


def test_scratch_keeps_room_before_each_buffer():
    buf = scratch(100, 7)
    assert buf.base is not None
    offset = buf.__array_interface__["data"][0] - buf.base.__array_interface__["data"][0]
    assert offset == FRAME and buf.size == 100
