import io
import pickle
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader

from helpers.files import LAYOUTS, h5_rows, images

EXPECTED_STRATEGY = {
    "contiguous": "memmap",
    "chunked": "memmap",
    "chunked-one-row": "memmap",
    "chunked-split-rows": "chunks",
    "gzip": "decode",
    "gzip-shuffle": "decode",
    "lzf-fletcher": "chunks",
    "compact": "slabs",
}


def reader(path, key="x", **options):
    return RowReader(H5Source(path, FileOptions(**options)), key)


@pytest.fixture(params=list(LAYOUTS))
def layout_file(request, make_h5):
    data = images(53)  # 53 rows: no chunk size divides it, so every edge chunk is partial
    return make_h5({"x": (data, request.param)}), request.param, data


def test_strategy_follows_layout(layout_file):
    path, layout, _ = layout_file
    assert reader(path).strategy == EXPECTED_STRATEGY[layout]


def test_read_any_order_with_duplicates_equals_h5py(layout_file):
    path, _, data = layout_file
    r = reader(path)
    idx = [52, 0, 7, 7, 3, -1, 13, 8, 52, 40, 41, 6]
    got = r.read(idx)
    expected = h5_rows(path, "x", [i % 53 for i in idx])
    assert got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()
    np.testing.assert_array_equal(got, data[idx])


def test_read_row_range_and_out(layout_file):
    path, _, data = layout_file
    r = reader(path)
    for i in (0, 6, 7, 52, -1, -53):
        row = r.read_row(i)
        assert row.tobytes() == data[i].tobytes()
        assert row.flags.writeable
    assert r.read_range(5, 29).tobytes() == data[5:29].tobytes()
    assert r.read_range(0, 53).tobytes() == data.tobytes()
    assert r.read_range(10, 10).shape == (0, 3, 4)
    out = np.empty((3, 3, 4), np.float32)
    assert r.read([9, 1, 9], out=out) is out
    np.testing.assert_array_equal(out, data[[9, 1, 9]])
    out = np.empty((4, 3, 4), np.float32)
    assert r.read_range(1, 5, out=out) is out
    np.testing.assert_array_equal(out, data[1:5])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(-53, 52), max_size=120))
def test_random_batches_equal_h5py(layout_file, idx):
    path, _, data = layout_file
    got = reader(path).read(idx)
    assert got.shape == (len(idx), 3, 4)
    np.testing.assert_array_equal(got, data[idx] if idx else data[:0])


def test_read_errors(make_h5):
    r = reader(make_h5({"x": images(10)}))
    with pytest.raises(IndexError, match="index 10 is out of range for a dataset of length 10"):
        r.read([0, 10])
    with pytest.raises(IndexError, match="index -11 is out of range"):
        r.read_row(-11)
    with pytest.raises(IndexError, match=r"row range \[3, 11\)"):
        r.read_range(3, 11)
    with pytest.raises(ValueError, match=r"out must have shape \(2, 3, 4\) and dtype float32"):
        r.read([0, 1], out=np.empty((2, 3, 4), np.float64))


def test_scalar_dataset_is_rejected(make_h5):
    path = make_h5({"s": np.float32(3.0)})
    with pytest.raises(ValueError, match=r"key='s' .* scalar \(0-d\) dataset"):
        reader(path, "s")


@pytest.mark.parametrize(
    ("dtype", "layout"),
    [
        (">f4", "contiguous"),
        (">i8", "chunked"),
        ("<u2", "gzip"),
        ("f2", "contiguous"),
        ("c8", "chunked"),
        ("bool", "contiguous"),
        ("S5", "chunked"),
    ],
)
def test_dtypes_keep_their_bytes(make_h5, dtype, layout):
    raw = np.arange(30 * 12).reshape(30, 3, 4)
    data = (raw % 2).astype(dtype) if dtype == "bool" else raw.astype(dtype)
    path = make_h5({"x": (data, layout)})
    got = reader(path).read([29, 3, 3, 0])
    expected = h5_rows(path, "x", [29, 3, 3, 0])
    assert got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()


def test_one_dimensional_and_wide_rows(make_h5):
    labels = np.arange(100, dtype=np.int64)[::-1].copy()
    path = make_h5({"y": labels, "w": (np.ones((4, 1000)), "chunked")})
    r = reader(path, "y")
    assert r.row_shape == ()
    np.testing.assert_array_equal(r.read([5, 0, 99]), labels[[5, 0, 99]])
    assert r.read_row(-1).shape == ()
    assert int(r.read_row(-1)) == 0


def test_variable_length_strings_use_h5py(make_h5):
    words = np.array(["a", "bb", "ccc", "", "ééé"], dtype=object)
    path = make_h5({"s": words.astype(h5py.string_dtype())})
    r = reader(path, "s")
    assert r.strategy == "slabs"
    got = r.read([4, 0, 4, 2])
    assert got.tolist() == h5_rows(path, "s", [4, 0, 4, 2]).tolist()
    assert r.read_range(1, 3).tolist() == [b"bb", b"ccc"]
    assert r.read_row(1) == b"bb"


def test_unwritten_chunks_read_as_fill_value(tmp_path):
    path = tmp_path / "sparse.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(40, 3), dtype="f4", chunks=(8, 3), fillvalue=-1.0)
        d[8:16] = 5.0  # only chunk 1 is written
        f.create_dataset("never", shape=(10, 2), dtype="i4", fillvalue=7)
    r = reader(path)
    assert r.strategy == "chunks"  # not mapped: unwritten chunks have no bytes in the file
    np.testing.assert_array_equal(r.read([0, 9, 39])[:, 0], [-1.0, 5.0, -1.0])
    never = reader(path, "never")
    assert never.strategy == "slabs"
    np.testing.assert_array_equal(never.read([0, 9]), np.full((2, 2), 7))


def test_userblock_offsets_are_absolute(make_h5):
    data = images(20)
    path = make_h5({"x": data, "c": (data, "chunked")}, userblock_size=1024)
    for key in ("x", "c"):
        r = reader(path, key)
        assert r.strategy == "memmap"
        np.testing.assert_array_equal(r.read([19, 0, 5]), data[[19, 0, 5]])


def test_virtual_and_external_datasets_use_h5py(tmp_path):
    data = images(12)
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f["x"] = data
    raw = tmp_path / "ext.bin"
    data.tofile(raw)
    path = tmp_path / "main.h5"
    with h5py.File(path, "w") as f:
        layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
        layout[:] = h5py.VirtualSource(str(src), "x", shape=data.shape)
        f.create_virtual_dataset("v", layout)
        f.create_dataset(
            "e", shape=data.shape, dtype=data.dtype, external=[(str(raw), 0, data.nbytes)]
        )
    for key in ("v", "e"):
        r = reader(path, key)
        assert r.strategy == "slabs"
        np.testing.assert_array_equal(r.read([11, 2, 2, 0]), data[[11, 2, 2, 0]])


def test_file_object_source(make_h5):
    data = images(15)
    path = make_h5({"x": (data, "chunked")})
    buf = io.BytesIO(path.read_bytes())
    r = reader(buf, swmr=False)
    assert r.strategy == "chunks"  # no path to map
    np.testing.assert_array_equal(r.read([14, 1]), data[[14, 1]])
    clone = pickle.loads(pickle.dumps(r))
    np.testing.assert_array_equal(clone.read([3]), data[[3]])


def test_reader_pickles_after_use_and_reads_again(make_h5):
    data = images(30)
    path = make_h5({"x": data})
    r = reader(path)
    r.read([1, 2])
    clone = pickle.loads(pickle.dumps(r))
    assert clone.strategy == "memmap"
    np.testing.assert_array_equal(clone.read([29, 0]), data[[29, 0]])


def _slabs(path: Any, calls: list[tuple[int, int]]) -> RowReader:
    """A reader whose rows ``SlabRows`` reads (h5py), each slab it reads noted in ``calls``."""
    from nn_handler._io.rows.slabs import SlabRows

    r = reader(path)
    slabs = SlabRows(r.rows, r.source)
    original = slabs._read_slab

    def spy(dset: Any, start: int, stop: int, buf: Any) -> Any:
        calls.append((start, stop))
        return original(dset, start, stop, buf)

    slabs._read_slab = spy  # type: ignore[method-assign]
    r._rows = slabs
    return r


def test_large_batches_are_split_into_bounded_slabs(make_h5, monkeypatch):
    import nn_handler._io.rows.slabs as slabs_module

    data = images(200)
    path = make_h5({"x": (data, "gzip")})
    monkeypatch.setattr(slabs_module, "_MAX_SLAB_BYTES", 8 * 48)  # one 8-row chunk per slab
    calls: list[tuple[int, int]] = []
    r = _slabs(path, calls)
    idx = np.arange(200)[::-1]
    np.testing.assert_array_equal(r.read(idx), data[idx])
    assert all(stop - start <= 8 for start, stop in calls)
    assert len(calls) == 25  # each chunk read exactly once


def test_each_chunk_read_once_per_batch(make_h5):
    data = images(64)
    path = make_h5({"x": (data, "gzip")})
    calls: list[tuple[int, int]] = []
    r = _slabs(path, calls)
    idx = [63, 1, 2, 3, 9, 63, 0, 40]
    np.testing.assert_array_equal(r.read(idx), data[idx])
    assert calls == [(0, 16), (40, 48), (56, 64)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.integers(0, 53), st.integers(0, 20)), max_size=30))
def test_read_runs_equals_the_slices(layout_file, runs):
    # any order, overlapping, empty: each run lands where dst says, as its own slice would
    path, _, data = layout_file
    starts = np.array([s for s, _ in runs], dtype=np.int64)
    stops = np.minimum(starts + np.array([n for _, n in runs], dtype=np.int64), 53)
    lengths = stops - starts
    dst = np.cumsum(lengths) - lengths
    out = np.zeros((int(lengths.sum()), 3, 4), np.float32)
    reader(path).read_runs(starts, stops, dst, out)
    expected = [data[s:e] for s, e in zip(starts.tolist(), stops.tolist(), strict=True)]
    np.testing.assert_array_equal(out, np.concatenate(expected) if expected else out)


def test_read_runs_outside_the_dataset_raise(layout_file):
    path, _, _ = layout_file
    out = np.zeros((10, 3, 4), np.float32)
    one = np.array([0], dtype=np.int64)
    for starts, stops in (([50], [54]), ([-1], [2]), ([5], [4])):
        with pytest.raises(IndexError):
            reader(path).read_runs(np.array(starts), np.array(stops), one, out)


def _chunks_written(path, order, rows=53, chunk=8):
    data = images(rows)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=data.shape, dtype=data.dtype, chunks=(chunk, 3, 4))
        for c in order:  # HDF5 places each chunk where the file ends when it is first written
            d[c * chunk : (c + 1) * chunk] = data[c * chunk : (c + 1) * chunk]
    return data


@pytest.mark.parametrize(
    ("order", "spans"),
    [([0, 1, 2, 3, 4, 5, 6], 1), ([6, 5, 4, 3, 2, 1, 0], 7), ([0, 1, 2, 5, 6, 3, 4], 3)],
)
def test_mapped_chunks_end_to_end_read_as_one_span(tmp_path, order, spans):
    path = tmp_path / "x.h5"
    data = _chunks_written(path, order)
    r = reader(path)
    assert r.strategy == "memmap"
    assert r._rows.firsts.size == spans
    idx = [52, 0, 7, 8, 15, 16, 40, 3, 3]
    np.testing.assert_array_equal(r.read(idx), data[idx])
    starts = np.array([50, 0, 6, 31, 53, 23, 24, 47, 16], np.int64)
    stops = np.array([53, 10, 17, 41, 53, 24, 24, 49, 32], np.int64)
    lengths = stops - starts
    out = np.zeros((int(lengths.sum()), 3, 4), np.float32)
    r.read_runs(starts, stops, np.cumsum(lengths) - lengths, out)
    expected = [data[s:e] for s, e in zip(starts.tolist(), stops.tolist(), strict=True)]
    np.testing.assert_array_equal(out, np.concatenate(expected))
