"""The Python blocks of docs/real_files.md run, in order, in one namespace."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "real_files.md"


def blocks():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_doc_has_snippets():
    assert len(blocks()) >= 6


def test_snippets_run(tmp_path, monkeypatch):
    pytest.importorskip("PIL")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, code in enumerate(blocks()):
        exec(compile(code, f"{DOC.name}[block {i}]", "exec"), namespace)
