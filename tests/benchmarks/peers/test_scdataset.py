"""``benchmarks.peers.scdataset``: scDataset in the layout suite; skipped when not installed."""

import importlib

import pytest

from benchmarks.peers import scdataset as peer
from nn_handler.bench import make_images, suite_layouts, write_layout_file
from nn_handler.bench.contenders import Case


def test_scdataset_reads_the_layout_file(tmp_path):
    pytest.importorskip("scdataset")
    images, labels = make_images(200)
    path = tmp_path / "c.h5"
    write_layout_file(str(path), images, labels, suite_layouts()["chunked-64+gzip"], 16)
    case = Case(str(path), "c", images, labels, 32, 5.0, True, 16)
    (result,) = peer.layouts(case)
    assert result.name == peer.NAME and result.samples == 200 - 2 * 32  # after two untimed


def test_without_scdataset_the_peer_is_skipped(tmp_path, monkeypatch):
    real = importlib.import_module

    def missing(name: str, *args: object) -> object:
        if name == "scdataset":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(peer.importlib, "import_module", missing)
    images, labels = make_images(10)
    case = Case(str(tmp_path / "none.h5"), "c", images, labels, 8, 0.01, True, 16)
    assert peer.layouts(case) == []
