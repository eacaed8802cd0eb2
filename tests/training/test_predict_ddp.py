"""NNHandler.predict under DDP: 1, 2 and 3 gloo ranks make the one-process file, byte for byte."""

from __future__ import annotations

import hashlib

import h5py
import numpy as np
import pytest

from nn_handler import NNHandler
from nn_handler.dataloaders import H5LazyDataset

from helpers.ddp import run_ddp
from helpers.predict import (
    CHUNK_ROWS,
    ROWS,
    Wide,
    count_rows,
    expected_rows,
    predict_rank,
    write_data,
)

pytestmark = [pytest.mark.slow, pytest.mark.ddp]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# batch 48: blocks of one chunk (64 rows, batches 48 + 16); batch 200: blocks of 3 chunks
@pytest.mark.parametrize(("world", "batch_size"), [(1, 48), (2, 48), (3, 200)])
def test_ranks_write_the_one_process_file_bit_for_bit(tmp_path, world, batch_size):
    data = write_data(tmp_path / "x.h5")
    alone = NNHandler(Wide, progress=False, log_fn=None).predict(
        H5LazyDataset(data, "x"), tmp_path / "alone.h5", batch_size=batch_size
    )
    out, counts = tmp_path / "ranks.h5", tmp_path / "counts.txt"
    paths = run_ddp(
        predict_rank, world, tmp_path / "run", data, out, batch_size, str(counts), timeout=180
    )
    assert paths == [str(out)] * world
    assert _digest(out) == _digest(alone)
    # each row once, plus a probe of one row on each rank that found no layout in the folder
    assert ROWS < count_rows(counts) <= ROWS + world
    with h5py.File(out, "r") as f, h5py.File(alone, "r") as g:
        rows = f["predictions"]
        assert rows.chunks[0] == CHUNK_ROWS
        np.testing.assert_array_equal(rows[:], g["predictions"][:])
        np.testing.assert_allclose(rows[:], expected_rows(data), rtol=1e-5, atol=1e-4)
    assert not (tmp_path / "ranks.h5.parts").exists()


def _predict_without_out(data):
    handler = NNHandler(Wide, use_distributed=True, progress=False, log_fn=None)
    try:
        handler.predict(H5LazyDataset(data, "x"))
    except ValueError as exc:
        return str(exc)
    return ""


def test_out_none_under_ddp_is_refused_with_the_fix(tmp_path):
    data = write_data(tmp_path / "x.h5", 10)
    messages = run_ddp(_predict_without_out, 2, tmp_path / "run", data, timeout=120)
    assert all(
        "out=None under DDP (2 processes)" in m and "out='predictions.h5'" in m for m in messages
    )
