"""rewrite_file writes every kind of data back equal to the input, in the planned layout."""

import os

import h5py
import numpy as np
import pytest

from nn_handler._io.file.filters import filters_of
from nn_handler.rewrite import ROW_ORDER_KEY, rewrite_file
from nn_handler.rewrite.codecs import choices, record_of

from helpers.rewrite_files import N, assert_rewritten, write_every_kind

pytest.importorskip("hdf5plugin")  # reads the zstd / lz4 chunks (a GPU machine may lack it)

ROWS = {"x", "y", "u8", "b", "s", "fs", "img", "tab", "t", "g/h/z"}


@pytest.fixture
def src(tmp_path):
    return write_every_kind(tmp_path / "in.h5")


@pytest.mark.parametrize("codec", choices())
def test_every_kind_round_trips(src, tmp_path, codec):
    dst = tmp_path / "out.h5"
    report = rewrite_file(src, dst, codec=codec, chunk_bytes=4096, memory="32MiB", workers=2)
    assert_rewritten(src, dst)
    with h5py.File(dst) as f:
        assert f["x"].chunks == (14, 7, 5)  # 4096 // (7 * 5 * 8) whole rows
        assert f["g/h/z"].chunks == (170, 3)  # the input's (n, 1) chunks split rows
        # filter ids, not .compression: h5py 3.10 calls a plugin's filter None, 3.16 "unknown"
        ids = {step.code for step in filters_of(f["x"])}
        written = {record.code for record in map(record_of, choices()) if record is not None}
        record = record_of(codec)
        assert ids & written == (set() if record is None else {record.code})
    copied = {c.split(":")[0] for c in report.copied}
    assert copied == {"scalar", "empty", "zero_rows"}
    assert sum(v.rows_checked for v in report.verified) >= N * len(ROWS)


def test_shuffle_rows_permutes_every_row_dataset_alike(src, tmp_path):
    dst = tmp_path / "out.h5"
    report = rewrite_file(src, dst, shuffle_rows=7, chunk_bytes=8192, memory="32MiB")
    assert report.plan.rows == N
    assert_rewritten(src, dst, permuted=ROWS)
    with h5py.File(dst) as f:
        order = f[ROW_ORDER_KEY][...]
        assert np.array_equal(order, np.random.default_rng(7).permutation(N))
        assert f[ROW_ORDER_KEY].attrs["seed"] == 7
        assert set(f[ROW_ORDER_KEY].attrs["datasets"]) == ROWS
        assert "argsort(row_order)" in f[ROW_ORDER_KEY].attrs["description"]
        # the documented way back: input row j is output row argsort(order)[j]
        with h5py.File(src) as a:
            back = np.argsort(order)
            assert np.array_equal(f["x"][...][back], a["x"][...])
            assert np.array_equal(f["y"][...], f["t"][...].astype(np.int64))  # still aligned


def test_shuffling_a_shuffled_file_composes_the_orders(src, tmp_path):
    once, twice = tmp_path / "once.h5", tmp_path / "twice.h5"
    rewrite_file(src, once, shuffle_rows=1, memory="32MiB")
    rewrite_file(once, twice, shuffle_rows=2, memory="32MiB")
    with h5py.File(src) as a, h5py.File(twice) as b:
        order = b[ROW_ORDER_KEY][...]
        assert np.array_equal(b["y"][...], a["y"][...][order])  # relative to the original


def test_attributes_groups_and_scales_are_carried_over(src, tmp_path):
    dst = tmp_path / "out.h5"
    rewrite_file(src, dst, memory="32MiB")
    with h5py.File(src) as a, h5py.File(dst) as b:
        assert dict(b.attrs) == dict(a.attrs)
        assert b.attrs.get_id("ascii").get_type().get_size() == 5  # the HDF5 type itself
        assert np.array_equal(b["g/h"].attrs["k"], np.arange(3))
        assert b["y"].attrs["units"] == "count"
        assert h5py.h5ds.is_scale(b["t"].id)
        assert [s.name for s in b["y"].dims[0].values()] == ["/t"]
        assert b["y"].dims[0].keys() == ["time"]
        assert b["s"].dtype == a["s"].dtype and b["fs"].dtype == a["fs"].dtype


def test_new_dtypes_and_a_subset_of_keys(src, tmp_path):
    dst = tmp_path / "out.h5"
    rewrite_file(src, dst, keys=["x", "g"], dtypes={"x": "float32"}, memory="32MiB")
    with h5py.File(src) as a, h5py.File(dst) as b:
        assert sorted(b) == ["g", "x"]
        assert b["x"].dtype == np.float32
        assert np.array_equal(b["x"][...], a["x"][...].astype(np.float32))
        assert np.array_equal(b["g/h/z"][...], a["g/h/z"][...])


def test_a_seeded_sample_of_rows_is_verified_when_asked(src, tmp_path):
    report = rewrite_file(src, tmp_path / "out.h5", verify_rows=10, memory="32MiB")
    checked = {v.path: (v.rows_checked, v.sampled) for v in report.verified}
    assert checked["x"] == (10, True)
    assert checked["odd"] == (10, True)
    assert "seeded sample" in report.format()


def test_dry_run_writes_nothing(src, tmp_path):
    dst = tmp_path / "out.h5"
    report = rewrite_file(src, dst, dry_run=True, chunk_bytes="64KiB", memory="32MiB")
    assert not dst.exists()
    assert os.listdir(tmp_path) == ["in.h5"]
    text = report.format()
    assert "| x | chunks | (1003, 7, 5) | float64 | (234, 7, 5) | shuffle+zstd(level=3)" in text
    assert "scalar (0-d)" in text
    by_path = {d.path: d for d in report.plan.datasets}
    assert by_path["x"].estimated_bytes and by_path["x"].read_mb_s


def test_incompressible_data_is_stored_plain_by_default(tmp_path):
    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        f["noise"] = np.random.default_rng(0).integers(0, 256, (4096, 64), dtype=np.uint8)
    report = rewrite_file(src, tmp_path / "out.h5", memory="32MiB")
    (plan,) = report.plan.datasets
    assert plan.codec == "none"
    with h5py.File(tmp_path / "out.h5") as f:
        assert f["noise"].compression is None and f["noise"].chunks == (4096, 64)


def test_inputs_of_tiny_chunks_are_read_in_runs_and_round_trip(tmp_path, monkeypatch):
    from nn_handler._io.chunks.block_fillers import TableChunks

    runs = []
    original = TableChunks.fill_run
    monkeypatch.setattr(
        TableChunks, "fill_run", lambda self, *a: runs.append(self) or original(self, *a)
    )
    src, dst, n = tmp_path / "in.h5", tmp_path / "out.h5", 301
    rng = np.random.default_rng(3)
    table = np.zeros(n, [("id", "<i8"), ("w", "<f4"), ("tag", "S2")])
    table["id"], table["w"], table["tag"] = np.arange(n), rng.random(n), b"ab"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=rng.random((n, 16), np.float32), chunks=(1, 16),
                         compression="gzip")  # fmt: skip
        f.create_dataset("y", data=np.arange(n), chunks=(1,), compression="gzip", shuffle=True)
        f.create_dataset("g/z", data=rng.integers(0, 9, (n, 2)).astype(np.int16), chunks=(2, 2),
                         compression="gzip", fletcher32=True)  # fmt: skip
        f.create_dataset("tab", data=table, chunks=(4,), compression="gzip")
    report = rewrite_file(src, dst, chunk_bytes=1024, memory="32MiB", workers=2)
    assert_rewritten(src, dst)
    assert {v.path for v in report.verified} == {"x", "y", "g/z", "tab"}
    assert len({id(r) for r in runs}) == 4  # every input was read in runs
