"""``benchmarks/bench_import.py``: its helpers, and its probe run once on this tree (untimed)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_import.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_import", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_import", module)
    spec.loader.exec_module(module)
    return module


def _run(package: float, worker: float, batch: float | None = None) -> dict[str, Any]:
    run = {"base": 1.0, "package": package, "worker": worker, "surface": 0.01}
    return run if batch is None else {**run, "first batch": batch}


def test_summarize_takes_medians_and_marks_steps_never_timed(bench: Any) -> None:
    got = bench.summarize([_run(0.1, 0.0), _run(0.3, 0.0), _run(0.2, 0.0)])
    assert got["package"] == pytest.approx(0.2) and got["worker"] == 0.0
    assert math.isnan(got["first batch"])


def test_tables_and_ratios(bench: Any) -> None:
    results = {
        ("this tree", "bytecode"): [_run(0.01, 0.04, 2.0)],
        ("this tree", "compiled"): [_run(0.02, 0.08, 2.5)],
        ("old", "bytecode"): [_run(0.10, 0.0, 2.1)],
        ("old", "compiled"): [_run(0.30, 0.0, 2.9)],
    }
    table = bench.format_table(results, ["this tree", "old"])
    assert "| this tree | bytecode | 10 | 40 | 50 | 10 | 2000 | 1 |" in table
    assert "| old | compiled | 300 | 0 | 300 | 10 | 2900 | 1 |" in table
    ratios = bench.format_ratios(results, ["this tree", "old"])
    assert "- bytecode: old / this tree, package + worker: 2.00" in ratios
    assert "- compiled: old / this tree, package + worker: 3.00" in ratios


def test_the_two_ways_of_loading_code(bench: Any, tmp_path: Path) -> None:
    cached = bench._env("/some/src", "bytecode", str(tmp_path))
    assert cached["PYTHONPATH"] == "/some/src"
    assert cached["PYTHONPYCACHEPREFIX"] == str(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in cached
    compiled = bench._env("/some/src", "compiled", str(tmp_path))
    assert compiled["PYTHONDONTWRITEBYTECODE"] == "1"
    assert "PYTHONPYCACHEPREFIX" not in compiled


def test_the_probe_runs_on_this_tree(bench: Any, tmp_path: Path) -> None:
    got = bench._probe(bench.HERE, "bytecode", str(tmp_path), None)
    assert got is not None
    assert set(got) >= {"base", "package", "worker", "surface"} and "first batch" not in got
    assert got["heavy_package"] == [] and got["heavy_worker"] == []
