"""``nn-handler rewrite`` on the command line; ``inspect`` names the command that fixes a file."""

import shlex
import subprocess
import sys

import h5py
import numpy as np
import pytest

from nn_handler.cli import main
from nn_handler.h5inspect import inspect_file

from helpers.rewrite_files import assert_rewritten, write_every_kind


def _run(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "nn_handler.cli", "rewrite", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_the_command_writes_checks_and_refuses(tmp_path):
    src = write_every_kind(tmp_path / "in.h5", n=200)
    dry = _run("in.h5", "out.h5", "--dry-run", "--chunk-bytes", "4KiB", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "| x | chunks | (200, 7, 5) | float64 | (14, 7, 5)" in dry.stdout
    assert not (tmp_path / "out.h5").exists()
    done = _run("in.h5", "out.h5", "--shuffle-rows", "3", "--dtype", "y=int32", "--memory",
                "64MiB", "--no-progress", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "rows shuffled: 200 (seed 3)" in done.stdout and "verified" in done.stdout
    with h5py.File(tmp_path / "out.h5") as f:
        assert f["y"].dtype == np.int32
    again = _run("in.h5", "out.h5", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        "nn-handler rewrite: error: dst='out.h5' exists; pass force=True (--force) to replace it"
    )
    bad = _run("in.h5", "x.h5", "--dtype", "y", cwd=tmp_path)
    assert bad.returncode == 2 and "--dtype wants NAME=VALUE, got 'y'" in bad.stderr
    assert src.exists()


def test_inspect_names_the_rewrite_that_fixes_the_file(tmp_path, monkeypatch, capsys):
    src = tmp_path / "slow.h5"
    with h5py.File(src, "w") as f:  # one 400-byte row per gzip chunk
        f.create_dataset("x", data=np.arange(20_000, dtype=np.float32).reshape(200, 100),
                         chunks=(1, 100), compression="gzip")  # fmt: skip
    (d,) = inspect_file(src).datasets
    (advice,) = [a for a in d.advice if "nn-handler rewrite" in a]
    command = advice.split("with ", 1)[1]
    assert command == f"nn-handler rewrite {src} {tmp_path / 'slow.fast.h5'}"
    monkeypatch.chdir(tmp_path)
    assert main([*shlex.split(command)[1:], "--no-progress"]) == 0
    fixed = tmp_path / "slow.fast.h5"
    assert_rewritten(src, fixed)
    (after,) = inspect_file(fixed).datasets
    assert after.chunks == (200, 100)
    assert not [a for a in after.advice if "nn-handler rewrite" in a]
    assert "verified" in capsys.readouterr().out
