"""Every python snippet of docs/integrations.md runs as written, on a small file it expects.

A snippet is preceded by ``<!-- run: python -->`` (one process) or ``<!-- run: torchrun N -->``
(``torchrun --standalone --nproc_per_node N``); it runs in a folder holding ``data.h5``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.integrations import write_indexed

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"
BLOCK = re.compile(r"(?:<!-- run: (?P<how>[^>]+?) -->\n)?```python\n(?P<code>.*?)```", re.DOTALL)
NEEDS = {"lightning": "lightning", "accelerate": "accelerate", "torchdata": "torchdata"}
# Appended to a torchrun snippet: it must end its process group as docs/training.md says, so that
# no gloo worker thread is left to race Python's exit (which aborts the process by chance).
GLOO_CHECK = """
from helpers.ddp import GLOO_SETTLE_S as _SETTLE_S, gloo_threads as _gloo_threads
if _left := _gloo_threads(_SETTLE_S):
    raise SystemExit(f"gloo threads alive at the end of the snippet: {_left}")
"""
TESTS = Path(__file__).resolve().parent


def _snippets() -> list[tuple[str, str]]:
    return [(m["how"] or "", m["code"]) for m in BLOCK.finditer(DOC.read_text())]


def _command(how: str, script: Path) -> list[str]:
    if how == "python":
        return [sys.executable, str(script)]
    processes = re.fullmatch(r"torchrun (\d+)", how)
    assert processes, f"unknown run marker {how!r}"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*launcher, "--nproc_per_node", processes.group(1), str(script)]


def test_every_python_snippet_says_how_it_runs():
    snippets = _snippets()
    assert len(snippets) == 8
    assert all(how for how, _ in snippets), "a python block without a <!-- run: ... --> marker"


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("index", range(8))
def test_snippet_runs(tmp_path, index):
    how, code = _snippets()[index]
    for module, package in NEEDS.items():
        if f"import {module}" in code or f"from {module}" in code:
            pytest.importorskip(package)
    write_indexed(tmp_path / "data.h5", rows=403)
    script = tmp_path / f"snippet{index}.py"
    script.write_text(code + (GLOO_CHECK if how.startswith("torchrun") else ""))
    paths = [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]  # TESTS: GLOO_CHECK's
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        _command(how, script), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=360
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
