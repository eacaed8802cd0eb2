"""``benchmarks.registry``: every peer registered once, by its own module; suites ask it."""

import ast
from pathlib import Path

import pytest
from benchmarks.registry import PEERS, Peer, adapters, register

from benchmarks import registry

PEERS_DIR = Path(registry.__file__).with_name("peers")
BENCHMARKS = PEERS_DIR.parent
#: what only the peer's own module may name: importing the library, starting the pool
WIRED_ONCE = {
    "h5torch.py": ('import_module("h5torch")',),
    "scdataset.py": ('import_module("scdataset")',),
    "process_limit.py": ('get_context("forkserver").Pool',),
}


def _register_calls(path: Path) -> int:
    tree = ast.parse(path.read_text())
    return sum(
        isinstance(n, ast.Call) and getattr(n.func, "id", None) == "register"
        for n in ast.walk(tree)
    )


def test_each_peer_is_registered_once_by_its_own_module():
    adapters("layouts")  # loads the peers
    modules = sorted(p for p in PEERS_DIR.glob("*.py") if p.name != "__init__.py")
    calls = {p.stem: _register_calls(p) for p in modules}
    # the annbatch worker is a standalone script run in annbatch's own environment
    assert calls.pop("annbatch_worker") == 0
    assert set(calls.values()) == {1}
    assert len(PEERS) == len(calls)
    assert {"h5torch", "scDataset BlockShuffling", "sequential chunks", "annbatch"} <= set(PEERS)


def test_a_peer_cannot_be_registered_twice(monkeypatch):
    monkeypatch.setattr(registry, "PEERS", dict(PEERS))
    peer = Peer("twice (test)", "peer", {})
    register(peer)
    with pytest.raises(ValueError, match=r"peer 'twice \(test\)' is registered twice"):
        register(peer)


@pytest.mark.parametrize(("owner", "needles"), sorted(WIRED_ONCE.items()))
def test_peers_are_wired_in_their_module_only(owner, needles):
    elsewhere = [
        str(p.relative_to(BENCHMARKS))
        for p in BENCHMARKS.rglob("*.py")
        if p.name != owner and any(n in p.read_text() for n in needles)
    ]
    assert elsewhere == []


def test_suites_get_adapters_by_suite_and_kind():
    workload_peers = adapters("workloads", kind="peer")
    assert list(workload_peers) == ["scDataset BlockShuffling", "h5torch"]
    assert set(adapters("workloads", kind="limit")) == {
        "in-RAM NumPy gather",
        "libdeflate",
        "sequential chunks",
    }
    assert adapters("no such suite") == {}
