"""The installed ``nn-handler`` console script, run as a subprocess."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.files import images

pytestmark = pytest.mark.slow  # every test runs the installed command as a subprocess

SCRIPT = Path(sys.executable).with_name("nn-handler")


def run(*args, timeout=120):
    env = dict(os.environ, PYTHONWARNINGS="error")
    proc = subprocess.run(
        [str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def path(make_h5):
    return make_h5({"x": (images(50), "gzip"), "y": np.arange(50)})


def test_script_is_installed():
    assert SCRIPT.exists(), "pip install -e . declares the nn-handler console script"


def test_help_everywhere():
    for args in ([], ["inspect"], ["demo"], ["bench"]):
        code, out, _ = run(*args, "--help")
        assert code == 0
        assert "usage: nn-handler" in out
    code, out, _ = run("--version")
    assert code == 0
    assert out.startswith("nn-handler ")


def test_inspect_text(path, monkeypatch):
    code, out, err = run("inspect", path)
    assert code == 0, err
    assert "x  shape=(50, 3, 4) dtype=float32 layout=chunked" in out
    assert "chunks=(8, 3, 4) (8 rows/chunk, 384 B)" in out
    assert "filters=gzip(level=4)" in out
    assert "a random order reads from memory" in out  # 2.4 KB decoded: within the budget
    assert "y  shape=(50,) dtype=int64 layout=contiguous" in out
    monkeypatch.setenv("NN_HANDLER_DECODED_BUDGET", "1KiB")
    code, out, err = run("inspect", path)
    assert code == 0, err
    # beyond the budget, still within the chunk cache: each chunk decoded once in any order
    assert "a random order decodes each chunk once" in out
    assert "fits the chunk cache (rdcc_nbytes=256.0 MiB)" in out


def test_inspect_json_matches(path):
    code, out, _ = run("inspect", path, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["path"] == str(path)
    x = next(d for d in report["datasets"] if d["path"] == "x")
    assert x["shape"] == [50, 3, 4]
    assert x["chunks"] == [8, 3, 4]
    assert x["filters"] == ["gzip(level=4)"]
    assert x["bytes_per_sample"] == 48


def test_errors_are_one_line_without_traceback(tmp_path):
    code, _, err = run("inspect", tmp_path / "missing.h5")
    assert code == 1
    assert (
        err.strip()
        == f"nn-handler inspect: error: HDF5 file not found: path='{tmp_path / 'missing.h5'}'"
    )
    text = tmp_path / "t.h5"
    text.write_text("hello")
    code, _, err = run("inspect", text)
    assert code == 1
    assert "is not an HDF5 file" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_debug_shows_the_traceback(tmp_path):
    code, _, err = run("inspect", tmp_path / "missing.h5", "--debug")
    assert code == 1
    assert "Traceback" in err


def test_bad_usage_exits_2():
    assert run()[0] == 2
    assert run("inspect")[0] == 2
    assert run("frobnicate")[0] == 2
    code, _, err = run("inspect", "x.h5", "--max-datasets", "zero")
    assert code == 2
    assert "invalid int value" in err


def test_demo_quick_mode_reports_accuracy(tmp_path):
    code, out, err = run("demo", "--epochs", "1", "--samples", "small", "--out", tmp_path / "d")
    assert code == 0, err
    assert "epoch 1/1:" in out
    assert "validation accuracy" in out
    assert "(chance 25%)" in out
    assert "samples/s" in out
    assert re.search(r"waiting for data \d+% of the time", out)  # the loop's wait share
    assert re.search(r"epoch 1/1: .* \| waited for data \d+%", out)
    assert (tmp_path / "d" / "demo.h5").exists()  # --out keeps the data


@pytest.mark.slow
def test_demo_distributed_and_loaders(tmp_path):
    code, out, err = run(
        "demo", "--epochs", "1", "--samples", "small", "--distributed", "2", timeout=300
    )
    assert code == 0, err
    assert "2 processes" in out
    assert "validation accuracy" in out
    for loader in ("rank-cached", "combined"):
        code, out, err = run("demo", "--epochs", "1", "--samples", "small", "--loader", loader)
        assert code == 0, err
        assert f"({loader} loader" in out


def test_demo_bad_usage():
    assert run("demo", "--loader", "fast")[0] == 2
    code, _, err = run("demo", "--samples", "3")
    assert code == 2
    assert "expected small, default, large or a number >= 10, got '3'" in err
    code, _, err = run("demo", "--epochs", "0", "--samples", "small")
    assert code == 1
    assert err.strip() == "nn-handler demo: error: epochs must be >= 1, got 0"


def test_bench_file_table_and_recommendation(path):
    code, out, err = run("bench", path, "--x-key", "x", "--y-key", "y", "--seconds", "0.2")
    assert code == 0, err
    assert "| strategy | samples/s | MB/s | vs best |" in out
    assert "| naive per-sample h5py (baseline) |" in out
    assert "ChunkShuffleSampler" in out
    assert "recommendation:" in out
    assert "timing " in err  # progress goes to stderr, the table to stdout


@pytest.mark.slow
def test_bench_step_ms_prints_the_wait_at_each_num_workers(path):
    args = ("bench", path, "--x-key", "x", "--y-key", "y", "--seconds", "0.3")
    code, out, err = run(*args, "--step-ms", "40", timeout=240)
    assert code == 0, err
    section = out.split("with a 40 ms step (")[1].split("recommendation:")[0]
    rows = [r.split(" | ") for r in section.splitlines() if r.startswith("| ") and "%" in r]
    workers = [int(r[0][2:]) for r in rows]
    assert workers[0] == 0 and workers == sorted(workers)
    shares = [float(r[1].rstrip("%")) for r in rows]
    assert all(0 <= s <= 100 for s in shares)
    # a 40 ms step outlasts reading a batch of this small file: the first setting keeps up
    assert "num_workers=0 keeps the wait under 5%" in section, section
    assert "timing a 40 ms step with num_workers=0" in err
    code, _, err = run("bench", "--synthetic", "--step-ms", "5")
    assert code == 2 and "--step-ms applies to a FILE" in err
    code, _, err = run(*args, "--step-ms", "0")
    assert code == 1 and "step_ms must be a step's length in milliseconds (> 0), got 0.0" in err


def test_bench_usage_and_errors(path):
    code, _, err = run("bench")
    assert code == 2
    assert "give either FILE (with --x-key) or --synthetic" in err
    code, _, err = run("bench", path)
    assert code == 2
    assert "--x-key is required with FILE" in err
    code, _, err = run("bench", path, "--x-key", "images")
    assert code == 1
    assert "x_key='images' not found" in err
    assert "'x', 'y'" in err


@pytest.mark.slow
def test_bench_synthetic_suite():
    code, out, err = run(
        "bench",
        "--synthetic",
        "--n",
        "2000",
        "--seconds",
        "0.2",
        "--layouts",
        "contiguous",
        timeout=300,
    )
    assert code == 0, err
    assert "contiguous" in out
    assert "naive per-sample h5py" in out
