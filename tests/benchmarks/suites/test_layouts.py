"""``benchmarks.suites.layouts``: the row order, a registered peer's rows, the targets."""

import pytest
from benchmarks.registry import PEERS, Peer
from benchmarks.suites.layouts import contenders, run, targets

from nn_handler.bench.contenders import BASELINE, ONE_PASS, RANDOM_ORDER
from nn_handler.bench.suite import Table
from nn_handler.bench.timing import Result

FAKE = "fake peer (test)"


def _fake(case):
    return [Result(FAKE, 7, 1.0, case.sample_bytes)]


def test_rows_run_baseline_peers_ours_limits_then_one_pass():
    order = contenders()
    assert order[0] is BASELINE[0]
    assert order[-len(ONE_PASS) :] == ONE_PASS
    first_ours = order.index(RANDOM_ORDER[0])
    laid = [p for p in PEERS.values() if "layouts" in p.suites]
    peers = [p.suites["layouts"] for p in laid if p.kind == "peer"]
    limits = [p.suites["layouts"] for p in laid if p.kind == "limit"]
    assert peers and order[1:first_ours] == peers
    assert limits and order[first_ours + len(RANDOM_ORDER) : -len(ONE_PASS)] == limits


def test_a_registered_peer_is_timed_and_compared_by_the_suite(tmp_path, monkeypatch):
    monkeypatch.setitem(PEERS, FAKE, Peer(FAKE, "peer", {"layouts": _fake}))
    lines = []
    tables = run(
        n=200,
        seconds=0.01,
        layouts=["contiguous"],
        batch_size=32,
        chunk_rows=16,
        workdir=str(tmp_path),
        out=lines.append,
    )
    names = [r.name for r in tables[0].rows]
    assert names.index(FAKE) > names.index("naive per-sample h5py")
    assert names.index(FAKE) < names.index("H5LazyDataset batched, EpochShuffleSampler")
    text = "\n".join(lines)
    assert f"| {FAKE} | 7 | 1.00 |" in text
    assert f"- {FAKE} / naive:" in text and f"- {FAKE} / limit:" in text


def test_targets_report_measured_ratios():
    rows = [
        Result("naive per-sample h5py", 10, 1.0, 1),
        Result("H5LazyDataset batched, ChunkShuffleSampler", 300, 1.0, 1),
        Result("limit: sequential chunks, 2 processes", 400, 1.0, 1),
        Result("sequential h5py, 1 process", 100, 1.0, 1),
        Result("sequential read_range [decode]", 120, 1.0, 1),
    ]
    text = targets([Table("chunked-64+gzip", rows)])
    assert "/ naive >= 20: 30.00 (met)" in text
    assert "/ sequential limit >= 0.7: 0.75 (met)" in text
    assert ">= 1.5: 1.20 (NOT met)" in text
    assert "- rank-cache preload / h5py load into RAM >= 1.5: not measured" in text
    assert "was not run" in targets([])


@pytest.mark.slow
def test_suite_runs_end_to_end_with_limits_and_targets(tmp_path):
    lines = []
    tiny = {"n": 300, "seconds": 0.05, "batch_size": 32, "chunk_rows": 16}
    tables = run(
        layouts=["contiguous", "chunked-64+gzip"], workdir=str(tmp_path), out=lines.append, **tiny
    )
    names = [r.name for r in tables[1].rows]
    assert names[0] == "naive per-sample h5py"
    assert any(n.startswith("limit: sequential chunks") for n in names)
    assert any(n.startswith("limit: in-RAM gather") for n in (r.name for r in tables[0].rows))
    text = "\n".join(lines)
    assert "## Shuffle quality" in text and "## Targets (chunked-64+gzip)" in text
    assert list(tmp_path.iterdir()) == []  # temporary files are removed
