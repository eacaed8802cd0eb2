"""``benchmarks.peers.h5torch``: h5torch reads the suite's layout file; rows when installed."""

import numpy as np
import pytest

from benchmarks.peers import h5torch as peer
from nn_handler.bench import make_images, suite_layouts, write_layout_file
from nn_handler.bench.contenders import Case


def test_h5torch_reads_the_layout_file(tmp_path):
    h5torch = pytest.importorskip("h5torch")
    images, labels = make_images(50)
    path = tmp_path / "c.h5"
    write_layout_file(str(path), images, labels, suite_layouts()["chunked-64+gzip+shuffle"], 16)
    ds = h5torch.Dataset(str(path))
    sample = ds[7]
    np.testing.assert_array_equal(sample["central"], images[7])
    assert sample["0/labels"] == labels[7]
    ds.close()
    case = Case(str(path), "c", images, labels, 8, 0.01, True, 16)
    assert [r.name for r in peer.layouts(case)] == ["h5torch"]


def test_without_h5torch_the_peer_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(peer, "_module", lambda: None)
    images, labels = make_images(10)
    case = Case(str(tmp_path / "none.h5"), "c", images, labels, 8, 0.01, True, 16)
    assert peer.layouts(case) == []
    assert peer.workloads(case, 0) is None  # type: ignore[arg-type]
