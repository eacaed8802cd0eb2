"""``nn_handler.bench``: helpers, the synthetic suite end to end on tiny data, shuffle quality."""

import h5py
import numpy as np
import pytest

from nn_handler.bench import (
    LAYOUTS,
    NaiveH5Dataset,
    Result,
    batch_len,
    format_table,
    make_images,
    run_suite,
    shuffle_quality,
    suite_layouts,
    write_images,
    write_layout_file,
)


def test_write_images_layouts(tmp_path):
    path = tmp_path / "imgs.h5"
    images = write_images(str(path), 100, LAYOUTS, chunk_rows=16)
    with h5py.File(path, "r") as f:
        assert f["chunked-64+gzip"].chunks == (16, 3, 32, 32)
        assert f["chunked-64+gzip"].compression == "gzip"
        np.testing.assert_array_equal(f["contiguous"][()], images)
        assert len(f["labels"]) == 100


def test_layout_file_is_readable_by_every_contender(tmp_path):
    images, labels = make_images(50)
    path = tmp_path / "c.h5"
    write_layout_file(str(path), images, labels, suite_layouts()["chunked-64+gzip+shuffle"], 16)
    naive = NaiveH5Dataset(str(path), "central", "0/labels")
    x, y = naive[7]
    np.testing.assert_array_equal(x.numpy(), images[7])
    assert int(y) == labels[7]
    naive.close()


def test_batch_len_and_table():
    assert batch_len({"central": np.zeros((4, 2)), "y": np.zeros(4)}) == 4
    assert batch_len((np.zeros((3, 1)), 0)) == 3
    rows = [Result("a", 100, 2.0, 10), Result("b", 400, 2.0, 10)]
    text = format_table("t", rows, {"b / a": ("b", "a"), "missing": ("b", "zzz")})
    assert "| b | 400 | 2.00 | 200 | 0 |" in text
    assert "- b / a: 4.00×" in text and "missing" not in text


@pytest.mark.slow
def test_suite_runs_end_to_end(tmp_path):
    lines = []
    tables = run_suite(
        n=300,
        seconds=0.05,
        layouts=["contiguous", "chunked-64+gzip"],
        batch_size=32,
        chunk_rows=16,
        workdir=str(tmp_path),
        out=lines.append,
    )
    assert [t.layout for t in tables] == ["contiguous", "chunked-64+gzip"]
    names = [r.name for r in tables[1].rows]
    assert names[0] == "naive per-sample h5py"
    assert "H5LazyDataset batched, ChunkShuffleSampler" in names
    assert "sequential read_range [decode]" in names
    # ours against the baseline only: peers, limits and targets are the repository's benchmarks
    every = [r.name for t in tables for r in t.rows]
    assert not [n for n in every if n.startswith("limit") or n == "h5torch"]
    text = "\n".join(lines)
    assert "## chunked-64+gzip" in text and "## Shuffle quality" in text
    assert "Targets" not in text
    assert list(tmp_path.iterdir()) == []  # temporary files are removed
    with pytest.raises(ValueError, match=r"unknown layouts \['nope'\]; known: contiguous"):
        run_suite(n=10, layouts=["nope"], out=lines.append)


def test_shuffle_quality_of_extremes():
    n = 1024
    ordered = shuffle_quality(np.arange(n), 16, 64, 4)
    assert ordered.displacement == 0 and ordered.neighbour_correlation == pytest.approx(1)
    assert ordered.blocks_per_batch == 4 and ordered.decodes_per_block == 1
    reverse = shuffle_quality(np.arange(n)[::-1], 16, 64, 4)
    assert reverse.displacement == pytest.approx(0.5, abs=0.01)
    thrash = shuffle_quality(np.arange(n).reshape(16, 64).T.ravel(), 64, 64, 4)
    assert thrash.decodes_per_block == 64  # every access misses a 4-chunk LRU
    with pytest.raises(ValueError, match="order must be a permutation of range"):
        shuffle_quality([0, 0, 1], 1, 1, 1)
