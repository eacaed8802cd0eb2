"""The layer rules of the package, checked on its import graph (docs/design.md draws them).

* ``_io`` is reached through its face (``_io/__init__``) only: no module outside it imports a
  module inside it, and each name of the face is imported from the module that defines it.
* Only ``_io`` talks to h5py (the tools that write or inspect files aside, and the assembly
  of output files, ``outputs.assemble``).
* ``outputs`` (model outputs into HDF5: parts, the assembly, the writer) stands on
  ``_validate``, ``distributed`` (the ranks' barrier) and, of ``_io``'s face, the process guard
  (``PerProcess``) and byte reads (``read_at``) alone: it reads no data files, so it
  needs no loader, dataset or HDF5 reader.
* ``_io`` is the bottom layer: it imports no dataset, sampler, loader or training code, and
  no torch (bytes and rows are NumPy; tensors are made one layer up, in ``_tensors``); of the
  package's root modules, only the leaves ``_validate``, ``_host`` and ``_lazy``.
* Inside ``_io``, ``storage`` (bytes: local files, URLs, versions) is the floor: it knows no
  HDF5 file, chunk engine, rows or formats, and imports no h5py. ``_io.platform`` (what the
  operating system offers) is a leaf every layer may ask.
* A private package is imported only inside the package that holds it (``_io`` sits at the
  package root, so the datasets and the tools alike may stand on it).
* ``_tensors`` (rows → tensors, samples and stacked batches) stands on ``_io`` alone.
* ``_transport`` (how batches reach the training loop: worker processes' rings, shared and
  pinned memory, queues, worker iterator, start method, worker threads) stands on ``_io`` and
  ``_tensors`` alone, and is reached through its interface (``_transport/__init__``) only: no
  module outside it imports a module inside it.
* Samplers import nothing that reads files: their order is arithmetic on numbers
  (``_contracts.sharding`` only remembers which live datasets are rank shards).
* Training frameworks are named in code in two places only: ``integrations`` (the adapters,
  each importing its framework) and ``samplers.frameworks`` (who splits a sampler's order besides
  the sampler, found without importing the framework); the samplers ask it, never a framework.
* Each dataset's internals (``_combined``, ``_per_sample``, ``_rank_cache``, ``_sparse``) stand
  on ``_io``, ``_tensors`` and the transport's interface alone, never on another dataset's
  internals or on a public module above them.
* The dataset core (``_core``: file options, sources, chunk caches, windows, read-ahead, output
  buffers) stands on ``_io``, ``_tensors``, ``_contracts`` and the transport's interface alone:
  no dataset, loader or sampler. Every public dataset module (one that opens files with
  ``FileOptions``) builds on it.
* ``_training`` (NNHandler's internals) uses the public ``nn_handler.dataloaders`` surface only.
* No import cycles, counting imports inside functions.
* The package ships only what ``nn-handler bench`` needs: it never imports the repository's
  ``benchmarks`` (peers, limits, targets: not installed), and ``nn_handler.bench`` installs
  nothing (no ``pip``, ``venv``, ``ensurepip`` or ``subprocess``): it times what is there.
* No ``ctypes`` anywhere: native code is reached through maintained libraries (imagecodecs),
  never by calling into a shared library's symbols ourselves.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

PKG = "nn_handler"
SRC = Path(__file__).resolve().parents[1] / "src" / PKG
#: the tools that write or describe files, and so may use h5py themselves
TOOLS = (
    "nn_handler.h5inspect",
    "nn_handler._inspect",
    "nn_handler.demo",
    "nn_handler.cli",
    "nn_handler.bench",
    "nn_handler.rewrite",
)
#: the one module that makes output files (predictions), and so may use h5py itself
WRITERS = ("nn_handler.outputs.assemble",)
OUTPUTS = "nn_handler.outputs"
SAMPLERS = (
    "nn_handler.dataloaders.samplers",
    "nn_handler.dataloaders.chunk_sampler",
    "nn_handler.dataloaders.shard_sampler",
)
INTERNALS = ("_combined", "_per_sample", "_rank_cache", "_sparse")
IO = "nn_handler._io"
STORAGE = "nn_handler._io.storage"
TENSORS = "nn_handler.dataloaders._tensors"
CORE = "nn_handler.dataloaders._core"
TRANSPORT = "nn_handler.dataloaders._transport"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(name: str) -> bool:
    return (SRC.parent / name.replace(".", "/") / "__init__.py").exists()


def _from_imports(path: Path) -> list[tuple[str, ast.ImportFrom]]:
    """Each ``from X import ...`` of ``path`` (inside functions too), with X made absolute."""
    name = _module_name(path)
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.append((base, node))
    return found


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    for base, node in _from_imports(path):
        found.add(base)
        for alias in node.names:  # `from pkg import module`
            if (
                _is_package(base)
                and (SRC.parent / base.replace(".", "/")).joinpath(f"{alias.name}.py").exists()
            ):
                found.add(f"{base}.{alias.name}")
    return found


GRAPH = {_module_name(p): _imports(p) for p in sorted(SRC.rglob("*.py"))}


def _face_names(path: Path) -> set[str]:
    """The names ``path`` imports from ``_io``'s face (``from nn_handler._io import X``)."""
    return {a.name for base, node in _from_imports(path) if base == IO for a in node.names}


FACE = {_module_name(p): _face_names(p) for p in sorted(SRC.rglob("*.py"))}


def _within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _own(imports: set[str]) -> set[str]:
    return {i for i in imports if _within(i, PKG)}


def test_the_graph_sees_every_module():
    assert len(GRAPH) > 50 and "nn_handler._io.rows.reader" in GRAPH
    assert "nn_handler._io.file.source" in GRAPH["nn_handler._io.rows.reader"]


def test_only_io_imports_h5py():
    offenders = sorted(
        m
        for m, imports in GRAPH.items()
        if any(_within(i, "h5py") for i in imports) and not _within(m, IO, *TOOLS, *WRITERS)
    )
    assert offenders == []


def test_io_is_reached_through_its_face_only():
    offenders = sorted(
        f"{m} -> {i}"
        for m, imports in GRAPH.items()
        if not _within(m, IO)
        for i in _own(imports)
        if _within(i, IO) and i != IO
    )
    assert offenders == []
    assert "RowReader" in FACE["nn_handler.dataloaders._core.readers"]


def test_the_io_face_names_each_where_it_is_defined():
    """No chain of re-exports: a class or function of the face comes from its own module."""
    import importlib

    from nn_handler import _io, _lazy

    table = _lazy.declared(str(SRC / "_io" / "__init__.py"))
    moved = sorted(
        f"{name}: {where} re-exports {obj.__module__}"
        for where, names in table.items()
        for name in names
        if (
            inspect.isclass(obj := getattr(importlib.import_module(where, IO), name))
            or inspect.isroutine(obj)
        )
        and obj.__module__ not in (f"{IO}{where}", "nn_handler.errors")
    )  # (errors carry the public module users catch them from: nn_handler.errors)
    assert moved == []
    assert _io.__all__ == sorted(_io.__all__)


def test_outputs_stand_on_validate_and_the_io_floor_only():
    allowed = (OUTPUTS, "nn_handler._validate", "nn_handler.distributed", IO)
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, OUTPUTS)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}
    assert f"{OUTPUTS}.writer" in offenders
    io_names = {n for m, names in FACE.items() if _within(m, OUTPUTS) for n in names}
    assert io_names <= {"PerProcess", "read_at"}  # the process guard and byte reads alone


def test_io_is_the_bottom_layer():
    allowed = (IO, "nn_handler._validate", "nn_handler._host", "nn_handler._lazy")
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, IO)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}


def test_storage_is_the_floor_of_io():
    allowed = (
        STORAGE,
        f"{IO}.errors",
        f"{IO}.notices",
        f"{IO}.platform",  # what the operating system offers (a leaf: stdlib and notices)
        f"{IO}.process",
        f"{IO}.indices",
        "nn_handler._validate",
    )
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, STORAGE)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}
    assert not [m for m, imports in GRAPH.items() if _within(m, STORAGE) and "h5py" in imports]


def _private_holder(name: str) -> str | None:
    """The package that holds the first private package on ``name``'s path (None: public)."""
    parts = name.split(".")
    for k, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and _is_package(".".join(parts[: k + 1])):
            return ".".join(parts[:k])
    return None


def test_private_packages_are_imported_inside_their_holder_only():
    offenders = sorted(
        f"{m} -> {i}"
        for m, imports in GRAPH.items()
        for i in _own(imports)
        if (holder := _private_holder(i)) is not None and not _within(m, holder)
    )
    assert offenders == []
    assert _private_holder(f"{IO}.rows.reader") == PKG
    assert _private_holder(f"{TENSORS}.tensors") == "nn_handler.dataloaders"


def _reach(start: str) -> set[str]:
    """Every module of ours ``start`` imports, directly or through others (package
    ``__init__`` files left out: they are the public surface, not what a module stands on)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for i in _own(GRAPH[todo.pop()]) & GRAPH.keys():
            if i not in seen and not _is_package(i):
                seen.add(i)
                todo.append(i)
    return seen


def test_io_imports_no_torch():
    offenders = {
        m: sorted(r for r in {m} | _reach(m) if any(_within(i, "torch") for i in GRAPH[r]))
        for m in GRAPH
        if _within(m, IO)
    }
    assert {m: via for m, via in offenders.items() if via} == {}


def test_the_platform_facts_are_a_leaf():
    assert _own(GRAPH[f"{IO}.platform"]) == {f"{IO}.notices"}
    assert _own(GRAPH[f"{IO}.notices"]) == set()


def test_no_ctypes_anywhere_in_src():
    imports = sorted(m for m, found in GRAPH.items() if any(_within(i, "ctypes") for i in found))
    assert imports == []
    mentions = sorted(
        str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "ctypes" in p.read_text()
    )
    assert mentions == []  # importlib.import_module("ctypes"), numpy's arr.ctypes, ...


def test_the_package_never_imports_the_benchmarks():
    offenders = sorted(
        f"{m} -> {i}" for m, imports in GRAPH.items() for i in imports if _within(i, "benchmarks")
    )
    assert offenders == []


def test_the_shipped_bench_installs_nothing():
    bench = SRC / "bench"
    banned = ("pip", "venv", "ensurepip", "subprocess")
    imports = sorted(
        f"{m} -> {i}"
        for m, found in GRAPH.items()
        if _within(m, "nn_handler.bench")
        for i in found
        if _within(i, *banned)
    )
    assert imports == []
    mentions = sorted(
        f"{p.name}: {word}"
        for p in bench.rglob("*.py")
        for word in banned
        if re.search(rf"\b{word}\b", p.read_text())
    )
    assert mentions == []  # a "python -m pip" string run by os.system, a venv path, ...


def test_tensors_stand_on_io_only():
    allowed = (TENSORS, IO, "nn_handler._validate", "nn_handler.dataloaders._contracts")
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, TENSORS)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}


def test_transport_stands_on_io_and_tensors_only():
    allowed = (TRANSPORT, TENSORS, IO, "nn_handler._validate", "nn_handler.dataloaders._contracts")
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, TRANSPORT)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}
    assert f"{TRANSPORT}.ring" in GRAPH


def test_the_transport_is_reached_through_its_interface_only():
    offenders = sorted(
        f"{m} -> {i}"
        for m, imports in GRAPH.items()
        if not _within(m, TRANSPORT)
        for i in imports
        if _within(i, TRANSPORT) and i != TRANSPORT
    )
    assert offenders == []
    assert any(TRANSPORT in imports for m, imports in GRAPH.items() if not _within(m, TRANSPORT))


def test_samplers_read_no_files():
    allowed = (
        "nn_handler._validate",
        "nn_handler.distributed",
        "nn_handler.dataloaders._contracts",  # protocols; sharding: which datasets are rank shards
        *SAMPLERS,
    )
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, *SAMPLERS)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}
    assert "nn_handler.dataloaders.samplers.shards" in offenders
    assert not any(_within(i, "h5py") for m in GRAPH if _within(m, *SAMPLERS) for i in GRAPH[m])


FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "torchdata")
FRAMEWORK_HOMES = ("nn_handler.integrations", "nn_handler.dataloaders.samplers.frameworks")


def _framework_mentions(path: Path) -> set[str]:
    """Frameworks ``path`` imports or names in a string of its code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    strings = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]
    named = {f for f in FRAMEWORKS for text in strings if text == f or text.startswith(f + ".")}
    imported = {f for f in FRAMEWORKS for i in _imports(path) if _within(i, f)}
    return named | imported


def test_frameworks_are_named_by_their_adapters_and_samplers_frameworks_only():
    found = {_module_name(p): _framework_mentions(p) for p in sorted(SRC.rglob("*.py"))}
    offenders = {m: f for m, f in found.items() if f and not _within(m, *FRAMEWORK_HOMES)}
    assert offenders == {}
    assert found["nn_handler.dataloaders.samplers.frameworks"] == {"accelerate"}
    assert found["nn_handler.integrations.lightning"] == {"lightning"}
    sampler_users = {
        m for m, imports in GRAPH.items() if FRAMEWORK_HOMES[1] in imports and _within(m, *SAMPLERS)
    }
    assert sampler_users == {"nn_handler.dataloaders.samplers.epoch"}  # the base asks it alone


@pytest.mark.parametrize("internals", INTERNALS)
def test_dataset_internals_stand_on_io_only(internals):
    package = f"nn_handler.dataloaders.{internals}"
    allowed = (
        package,
        IO,
        TENSORS,
        TRANSPORT,  # the interface only (test_the_transport_is_reached_through_its_interface_only)
        "nn_handler._host",
        "nn_handler._validate",
        "nn_handler.distributed",
        "nn_handler.dataloaders._contracts",
    )
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, package)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}


def test_the_dataset_core_stands_on_io_tensors_and_the_transport_interface():
    allowed = (
        CORE,
        IO,
        TENSORS,
        TRANSPORT,
        "nn_handler._validate",
        "nn_handler.dataloaders._contracts",
    )
    offenders = {
        m: sorted(i for i in _own(imports) if not _within(i, *allowed))
        for m, imports in GRAPH.items()
        if _within(m, CORE)
    }
    assert {m: bad for m, bad in offenders.items() if bad} == {}
    assert f"{CORE}.files" in offenders


def test_every_dataset_module_builds_on_the_core():
    datasets = {
        m
        for m, names in FACE.items()
        if m.rpartition(".")[0] == "nn_handler.dataloaders" and not _is_package(m)
        and "FileOptions" in names
    }  # fmt: skip
    assert "nn_handler.dataloaders.h5_sparse_dataset" in datasets
    assert sorted(m for m in datasets if CORE not in GRAPH[m]) == []


def test_training_uses_the_public_dataloaders_surface_only():
    private = {
        i
        for m, imports in GRAPH.items()
        if _within(m, "nn_handler._training", "nn_handler.handler")
        for i in imports
        if _within(i, "nn_handler.dataloaders")
        and any(part.startswith("_") for part in i.split(".")[2:])
    }
    assert private == set()


def test_no_import_cycles():
    own = {m: _own(imports) & GRAPH.keys() for m, imports in GRAPH.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(own[m]):
            if n == m or _within(m, n):  # a module importing its own package's __init__
                continue
            if state.get(n) == 1:
                cycles.append([*path[path.index(n) :], n] if n in path else [m, n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(own):
        if m not in state:
            visit(m, [m])
    assert cycles == []
