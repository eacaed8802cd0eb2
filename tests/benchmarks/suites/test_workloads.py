"""The workload suite end to end on tiny files: tables, quality, targets."""

from typing import Any

import h5py
import numpy as np
import pytest
from benchmarks.registry import PEERS, Peer
from benchmarks.suites.workload_files import WORKLOADS, make_rows, write_workload
from benchmarks.suites.workloads import _quality, run_workloads


def test_workload_files_hold_row_ids_and_the_layout(tmp_path):
    for name in ("W2", "W3", "W4"):
        w = WORKLOADS[name]
        path = tmp_path / f"{name}.h5"
        n = 2 * w.chunk_rows + 3
        write_workload(str(path), w, n)
        with h5py.File(path, "r") as f:
            assert f["central"].chunks[0] == w.chunk_rows and f["central"].compression == "gzip"
            assert f["0/labels"][()].tolist() == list(range(n))
            np.testing.assert_array_equal(f["central"][()], make_rows(w, 0, n))


def test_quality_of_served_batches():
    ordered = [np.arange(0, 8), np.arange(8, 16)]
    per_batch, corr = _quality(ordered, 4)
    assert per_batch == 2 and corr == pytest.approx(1)


#: the smallest workloads that still run every contender: 300 rows, batches of 32
TINY: dict[str, Any] = {"scale": 0.003, "seconds": 0.05, "batch_size": 32, "workers": (0, 2)}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_suite_prints_the_issue_table(tmp_path):
    lines: list[str] = []
    tables = run_workloads(["W2"], rounds=1, workdir=str(tmp_path), out=lines.append, **TINY)
    text = "\n".join(lines)
    assert "## W2: 300 × 3×32×32 float32, chunks of 64 rows, gzip-1 + shuffle" in text
    assert "| ours, worker threads | 2 |" in text and "CPU efficiency" in text
    assert "## Summary (the targets' table)" in text and "W2: best / limit >= 0.8" in text
    assert tables[0].limit > 0 and tables[0].get("ours (batched, ChunkShuffleSampler)", 0)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match=r"unknown workloads \['W9'\]; known: W1"):
        run_workloads(["W9"], out=lines.append)


def _fake_peer(case, workers):
    """Batches of ``(x, row ids)`` in file order, as a peer's loader serves them."""
    if workers:
        return None  # a peer that only runs in the main process: no row at 2 workers
    ids = np.arange(case.n)
    return [(np.zeros((len(b), 1)), b) for b in np.array_split(ids, max(1, case.n // 32))]


def test_a_registered_peer_is_timed_in_every_round_at_each_worker_count(tmp_path, monkeypatch):
    name = "fake peer (test)"
    monkeypatch.setitem(PEERS, name, Peer(name, "peer", {"workloads": _fake_peer}))
    lines: list[str] = []
    tables = run_workloads(["W1"], rounds=2, workdir=str(tmp_path), out=lines.append, **TINY)
    row = tables[0].get(name, 0)
    assert row is not None and len(row.rates) == 2  # one rate per round, the median reported
    assert tables[0].get(name, 2) is None
    assert row.neighbour_corr > 0.99  # file order, as served
    assert f"| {name} | 0 |" in "\n".join(lines)
