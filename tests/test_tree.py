"""The tree the sources describe is the tree there is.

Every file a docstring or a comment in ``src/`` names (``rows/choice.py``, ``docs/sparse.md``)
exists: relative to the naming module's folder or to one of its ancestors, up to the
repository root. So does every module named with dots (``nn_handler.dataloaders.loader``,
``_io.rows.keys``, ``chunks.engine.ChunkEngine``), relative to the same folders up to ``src``:
its packages and its module, and the first name after them, which the module (or a package's
``__init__``) must bind. A dotted name counts as a module's when it starts with ``nn_handler``
or ``_`` (and the naming module binds no such name itself) or with two names of modules of the
tree; ``data.h5`` is a file. A module moved or a name removed without its mentions fixed fails
here.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nn_handler"
MENTION = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|md))\b")
DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
#: the last part of a file's name written with dots (``data.h5``), not of a module
FILE_SUFFIXES = frozenset({"h5", "hdf5", "h5ad", "nnh", "npy", "json", "md", "py", "toml", "zarr"})


def _prose(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every docstring and comment of ``path``."""
    text = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


def _bound(tree: ast.AST) -> set[str]:
    """Every name a module binds anywhere: assigned, defined, imported or an argument."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _module_names(src: Path) -> set[str]:
    """The names of the tree's modules and packages."""
    found = {p.stem for p in src.rglob("*.py")} | {p.name for p in src.rglob("*") if p.is_dir()}
    return found - {"__init__", "__pycache__"}


def _names_a_module(parts: list[str], bound: set[str], modules: set[str], top: str) -> bool:
    first = parts[0]
    if parts[-1] in FILE_SUFFIXES or first.startswith("__"):
        return False
    if first == top:
        return True
    if first in bound:  # a variable, argument or attribute path of the naming module
        return False
    return first.startswith("_") or (first in modules and parts[1] in modules)


def _module_resolves(folder: Path, parts: list[str]) -> bool:
    """Whether ``parts`` are packages in ``folder``, then a module or a name their last binds."""
    for i, part in enumerate(parts):
        if (folder / part).is_dir():
            folder = folder / part
            continue
        if (folder / f"{part}.py").is_file():
            module = folder / f"{part}.py"
            rest = parts[i + 1 : i + 2]
        else:
            module, rest = folder / "__init__.py", parts[i : i + 1]
            if i == 0 or not module.is_file():
                return False
        return not rest or rest[0] in _bound(ast.parse(module.read_text()))
    return True


def _stale_modules(path: Path, top: Path, modules: set[str]) -> list[str]:
    """Dotted module names in ``path`` (a module of the package ``top``) that do not resolve."""
    bound = _bound(ast.parse(path.read_text())) - {top.name}
    folders = [f for f in path.parents if f >= top.parent]
    found = []
    for line, prose in _prose(path):
        for match in DOTTED.finditer(prose):
            parts = match.group(1).split(".")
            if not _names_a_module(parts, bound, modules, top.name):
                continue
            if not any(_module_resolves(folder, parts) for folder in folders):
                found.append(f"{path.relative_to(top.parent)}:{line}: {match.group(1)}")
    return found


def _resolves(path: Path, mention: str, root: Path) -> bool:
    return any((folder / mention).is_file() for folder in path.parents if folder >= root)


def _unresolved(path: Path, root: Path = ROOT) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: {match.group(1)}"
        for line, prose in _prose(path)
        for match in MENTION.finditer(prose)
        if not _resolves(path, match.group(1), root)
    ]


def test_every_file_named_in_a_docstring_or_comment_exists():
    stale = {entry for path in sorted(SRC.rglob("*.py")) for entry in _unresolved(path)}
    assert stale == set()


def test_a_stale_mention_is_found(tmp_path):
    (tmp_path / "pkg" / "rows").mkdir(parents=True)
    (tmp_path / "pkg" / "rows" / "choice.py").write_text("")
    module = tmp_path / "pkg" / "sub" / "mod.py"
    module.parent.mkdir()
    module.write_text('"""Read in ``rows/choice.py``, then ``rows/gone.py``."""\n# see mod.py\n')
    assert _unresolved(module, tmp_path) == ["pkg/sub/mod.py:1: rows/gone.py"]


def test_every_module_named_with_dots_exists():
    modules = _module_names(SRC)
    stale = {e for path in sorted(SRC.rglob("*.py")) for e in _stale_modules(path, SRC, modules)}
    assert stale == set()


def test_a_stale_dotted_module_is_found(tmp_path):
    pkg = tmp_path / "src" / "pkg"
    (pkg / "rows").mkdir(parents=True)
    (pkg / "rows" / "__init__.py").write_text("from .keys import KEY\n")
    (pkg / "rows" / "keys.py").write_text("KEY = 1\n")
    module = pkg / "sub" / "mod.py"
    module.parent.mkdir()
    module.write_text(
        '"""``rows.keys.KEY``, ``rows.KEY`` and ``pkg.rows.keys``; ``data.h5`` is a file.\n\n'
        "Stale: ``_rows.keys``, ``pkg.rows.gone``, ``rows.keys.GONE`` and ``pkg.sub.other``.\n"
        "``rows.size`` may be a variable's: one module name, not read as a module's.\n"
        '"""\n\n_local = {}  # _local.get is a name of this module\n'
    )
    assert _stale_modules(module, pkg, _module_names(pkg)) == [
        f"pkg/sub/mod.py:1: {name}"
        for name in ("_rows.keys", "pkg.rows.gone", "rows.keys.GONE", "pkg.sub.other")
    ]
