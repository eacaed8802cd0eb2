"""``benchmarks/run.py --remote``: the remote benchmark end to end on a tiny file."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a server process and five epochs
@pytest.mark.timeout(180)
def test_run_remote_reports_every_target_as_a_ratio():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    args = ["--remote", "--n", "3000", "--rounds", "2", "--seconds", "0.3", "--latency", "0"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), *args],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "medians of 2 round(s)" in out
    for row in ("local file", "remote cold", "remote warm cache", "h5py on an fsspec file object"):
        assert row in out
    targets = [line for line in out.splitlines() if line.startswith("- ")]
    assert len(targets) == 4 and all(line.endswith(("(met)", "(NOT met)")) for line in targets)
    assert "1,000 random rows fetch <= 25% of the file" in out
