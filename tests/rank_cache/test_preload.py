import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders._rank_cache import preload as _preload
from nn_handler.dataloaders._rank_cache.preload import preload_rows, window_rows, windows

from helpers.files import LAYOUTS, h5_rows, images

N = 53


@settings(max_examples=200)
@given(st.integers(0, 60), st.integers(0, 80), st.integers(1, 9), st.integers(1, 12))
def test_windows_cover_rows_in_order_within_aligned_blocks(start, length, step, block):
    rows = range(start, start + length, step)
    positions = []
    for first, last, lo, hi in windows(rows, block):
        assert lo < hi
        assert (first, last) == (rows[lo], rows[hi - 1])
        assert first // block == last // block  # one aligned block: no chunk read twice
        positions.extend(range(lo, hi))
    assert positions == list(range(len(rows)))


def _reader(make_h5, layout, dtype=np.float32):
    path = make_h5({"x": (images(N, dtype=dtype), layout)})
    return path, RowReader(H5Source(path, FileOptions()), "x")


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(("start", "stop", "step"), [(0, N, 1), (5, 40, 1), (2, N, 3), (1, N, 9)])
@pytest.mark.parametrize("cast", [None, np.float64, np.float16])
@pytest.mark.parametrize("block_bytes", [1, 700, 64 * 1024**2])
def test_preload_equals_h5py(make_h5, monkeypatch, layout, start, stop, step, cast, block_bytes):
    monkeypatch.setattr(_preload, "BLOCK_BYTES", block_bytes)
    path, reader = _reader(make_h5, layout)
    rows = range(start, stop, step)
    out = np.empty((len(rows), 3, 4), dtype=cast or np.float32)
    seen = []
    assert preload_rows(reader, rows, out, seen.append) is out
    expected = h5_rows(path, "x", list(rows)).astype(out.dtype)
    np.testing.assert_array_equal(out, expected)
    assert sum(seen) == out.nbytes


def test_preload_empty_and_wrong_shape(make_h5):
    _, reader = _reader(make_h5, "gzip")
    out = np.empty((0, 3, 4), np.float32)
    assert preload_rows(reader, range(7, 7), out) is out
    with pytest.raises(ValueError, match=r"out must have shape \(3, 3, 4\), got \(2, 3, 4\)"):
        preload_rows(reader, range(3), np.empty((2, 3, 4), np.float32))


def test_byte_swap_to_native(make_h5):
    _, reader = _reader(make_h5, "chunked", dtype=">f4")
    out = np.empty((N, 3, 4), np.float32)
    preload_rows(reader, range(N), out)
    np.testing.assert_array_equal(out, images(N))


@pytest.mark.parametrize(("layout", "step"), [("contiguous", 1), ("gzip", 1), ("gzip", 3)])
def test_reads_stay_within_one_window(make_h5, monkeypatch, layout, step):
    # never one giant read: every call to the reader covers at most one window of rows
    monkeypatch.setattr(_preload, "BLOCK_BYTES", 20 * 48)  # 20 rows of 48 bytes (16 for gzip)
    _, reader = _reader(make_h5, layout)
    calls = []
    for name in ("read", "read_range"):
        original = getattr(reader, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            result = _original(*args, **kwargs)
            calls.append(len(result))
            return result

        monkeypatch.setattr(reader, name, spy)
    rows = range(0, N, step)
    preload_rows(reader, rows, np.empty((len(rows), 3, 4), np.float64))
    assert len(calls) >= N // window_rows(reader)
    assert max(calls) <= window_rows(reader)


def test_cast_memory_is_bounded_by_one_window(make_h5, monkeypatch):
    # peak memory beyond the final buffer stays near one window, not a second full copy
    n = 4000
    data = np.arange(n * 256, dtype=np.float32).reshape(n, 256)  # 4 MB
    path = make_h5({"x": (data, "gzip")})
    reader = RowReader(H5Source(path, FileOptions()), "x")
    monkeypatch.setattr(_preload, "BLOCK_BYTES", 64 * 1024)
    out = np.empty((n, 256), np.float64)  # 8 MB, allocated before tracing
    tracemalloc.start()
    try:
        preload_rows(reader, range(n), out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, data.astype(np.float64))
    assert peak < 1024**2, f"peak {peak} bytes while casting 4 MB"
