"""``benchmarks/bench_feed.py``: its pure helpers (the benchmark itself is not run in CI)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_feed.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_feed", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_feed", module)
    spec.loader.exec_module(module)
    return module


def test_non_decreasing(bench: Any) -> None:
    assert bench.non_decreasing([1.0, 1.0, 2.0])
    assert not bench.non_decreasing([1.0, 3.0, 2.0])
    assert bench.non_decreasing([])


def test_compute_iters(bench: Any) -> None:
    assert bench.compute_iters(0.010, 0.002, 0.001) == 8
    assert bench.compute_iters(0.001, 0.002, 0.001) == 1  # never fewer than one
    assert bench.compute_iters(0.010, 0.0, 0.0) == 1


def test_parse_workers(bench: Any) -> None:
    assert bench.parse_workers("4,8,14") == [4, 8, 14]
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_workers("0,4")


def test_check_verdicts(bench: Any) -> None:
    assert bench.Check("x", [1.4, 1.2, 1.35], 1.3).verdict == "PASS"
    assert bench.Check("x", [1.0, 1.2, 1.1], 1.3).verdict == "FAIL"
    assert bench.Check("cpu", [0.1, 0.3, 0.15], 0.2, at_least=False).verdict == "PASS"
    assert bench.Check("cpu", [0.3], 0.2, at_least=False).verdict == "FAIL"
    missing = bench.Check("gpu", [], 0.4, note="(CUDA absent)")
    assert missing.verdict == "n/a"
    assert "(CUDA absent)" in missing.row()
    table = bench.format_checks("Targets", [bench.Check("W1", [1.5], 1.3)])
    assert "| W1 | 1.50× | >= 1.3× | PASS | 1.50 |" in table


class _Sampler:
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_timed_stream_spans_epochs(bench: Any) -> None:
    loader = [(torch.zeros(4, 2), torch.zeros(4)) for _ in range(3)]
    sampler = _Sampler()
    steps: list[int] = []
    got = bench.timed_stream(
        loader, 0.02, sampler=sampler, warm_epochs=1, step=lambda b: steps.append(1)
    )
    assert got["rate"] > 0 and got["batches"] >= 1
    assert sampler.epochs[:2] == [0, 1]  # the warm epoch, then the timed ones
    assert len(steps) == 3 + got["batches"]


def test_timed_stream_stops_on_empty_loader(bench: Any) -> None:
    got = bench.timed_stream([], 0.01)
    assert got["batches"] == 0


def test_run_rounds_alternates(bench: Any) -> None:
    order: list[str] = []

    def contender(name: str) -> Any:
        return lambda: order.append(name) or {"rate": 1.0}

    opts = bench.Opts(0.01, 2, None, False, out=lambda _: None)
    results = bench.run_rounds("t", {"a": contender("a"), "b": contender("b")}, opts)
    assert order == ["a", "b", "b", "a"]
    assert results["a"]["rate"] == [1.0, 1.0]
