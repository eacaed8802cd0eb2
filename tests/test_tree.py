"""The tree the sources describe is the tree there is.

Every file a docstring or a comment in ``src/`` names (``rows/choice.py``, ``docs/sparse.md``)
exists: relative to the naming module's folder or to one of its ancestors, up to the
repository root. A module moved without its mentions fixed fails here.
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
