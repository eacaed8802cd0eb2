"""The sparse suite's stores table: mixing, ratios to the first store peer, skips."""

from __future__ import annotations

import numpy as np
import pytest
from benchmarks.cases import Conversion
from benchmarks.suites.stores_table import Row, blocks_per_batch, stores_table


def test_blocks_per_batch_counts_distinct_64_cell_blocks():
    batches = np.array([[0, 1, 63, 64], [0, 128, 192, 1000]])
    assert blocks_per_batch(batches) == (2 + 4) / 2
    assert blocks_per_batch(batches, block=1000) == (1 + 2) / 2
    assert np.isnan(blocks_per_batch(np.zeros((0, 4096), np.int64)))


def test_blocks_per_batch_of_a_full_shuffle_is_near_the_random_expectation():
    order = np.random.default_rng(0).permutation(200_000)[: 8 * 4096].reshape(8, 4096)
    assert blocks_per_batch(order) == pytest.approx(3125 * (1 - (1 - 1 / 3125) ** 4096), rel=0.01)


def _rows() -> list[Row]:
    return [
        Row("annbatch 0.3.1", "SciPy CSR", "csr", [10.0, 30.0, 20.0], 2290.0, base=True),
        Row("annbatch 0.3.1", "SciPy CSR + .toarray()", "dense", [5.0], 2290.0, base=True),
        Row("ours, num_workers=0", "sparse_csr", "csr", [40.0], 2291.0),
        Row("ours, num_workers=0", "dense", "dense", [10.0, 12.0, 8.0], 2291.0),
    ]


def _cells(table: str) -> list[list[str]]:
    lines = [line for line in table.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_table_divides_each_row_by_the_base_of_the_same_kind():
    conversion = Conversion(37.0, 12_800_000_000, 912_000_000)
    text = stores_table(
        "## t", _rows(), base="annbatch", conversions=[("annbatch", conversion)], notes=["a note"]
    )
    cells = _cells(text)
    assert [c[2] for c in cells] == ["20", "5", "40", "10"]  # medians
    assert [c[4] for c in cells] == ["1.00", "1.00", "2.00", "2.00"]
    assert cells[0][3] == "10, 30, 20" and cells[2][5] == "2,291"
    assert "37.0 s, peak RSS 12.80 GB, a second copy of 912 MB" in text
    assert "- a note" in text and "skipped" not in text


def test_table_without_its_store_peer_says_why_in_one_line():
    text = stores_table(
        "## t", _rows()[2:], base="annbatch", skips=[("annbatch", "no Python >= 3.12")]
    )
    assert [c[4] for c in _cells(text)] == ["-", "-"]
    assert [line for line in text.splitlines() if "annbatch" in line[:12]] == [
        "- annbatch: skipped (no Python >= 3.12)."
    ]


def test_table_row_without_runs_or_with_a_zero_base():
    rows = [Row("annbatch", "SciPy CSR", "csr", [0.0], base=True), Row("ours", "sparse_csr", "csr")]
    cells = _cells(stores_table("## t", rows, base="annbatch"))
    assert cells[0][4] == "-" and cells[1][2:] == ["-", "-", "-", "-"]
