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


SUITES = sorted([*BENCHMARKS.joinpath("suites").glob("*.py"), *BENCHMARKS.glob("bench_*.py")])
PEER_MODULES = sorted(p for p in PEERS_DIR.glob("*.py") if p.name != "__init__.py")


def _imported(source: str, package: str) -> set[str]:
    """Absolute names ``source`` (a module of ``package``) imports, wherever in it."""
    parts = package.split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *filter(None, (node.module or "").split("."))])
            found.update(f"{module}.{a.name}" for a in node.names)
    return found


def _imports_of(path: Path) -> set[str]:
    package = ".".join(["benchmarks", *path.parent.relative_to(BENCHMARKS).parts])
    return _imported(path.read_text(), package)


def _within(names: set[str], package: str) -> list[str]:
    return sorted(n for n in names if n.startswith(package + "."))


def _picked_by_name(source: str) -> list[str]:
    """``adapters(...)[name]``: a peer picked out of the registry by its name."""
    return [
        ast.unparse(n)
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Subscript)
        and isinstance(n.value, ast.Call)
        and getattr(n.value.func, "id", None) == "adapters"
    ]


@pytest.mark.parametrize("peer", PEER_MODULES, ids=lambda p: p.stem)
def test_no_peer_imports_a_suite(peer):
    names = _imports_of(peer)
    assert _within(names, "benchmarks.suites") == []
    assert [n for n in names if n.startswith("benchmarks.bench_")] == []


@pytest.mark.parametrize("suite", SUITES, ids=lambda p: p.stem)
def test_no_suite_names_a_peer(suite):
    assert _within(_imports_of(suite), "benchmarks.peers") == []
    assert _picked_by_name(suite.read_text()) == []


def test_the_rules_catch_what_they_forbid():
    peer = "from ..suites.sparse import X\ndef f():\n    from benchmarks.suites import y\n"
    assert _within(_imported(peer, "benchmarks.peers"), "benchmarks.suites") == [
        "benchmarks.suites.sparse.X",
        "benchmarks.suites.y",
    ]
    suite = "from ..peers.annbatch import ensure_env\nimport benchmarks.peers.h5torch\n"
    assert len(_within(_imported(suite, "benchmarks.suites"), "benchmarks.peers")) == 2
    assert _picked_by_name('f = adapters("sparse")["scDataset"]\n') == [
        "adapters('sparse')['scDataset']"
    ]
