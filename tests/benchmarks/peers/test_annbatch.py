"""annbatch's side of the sparse benchmark without annbatch: its runner, result and skips."""

from __future__ import annotations

import os
import stat
import sys

import numpy as np
import pytest
from benchmarks.cases import PeerUnavailableError
from benchmarks.peers.annbatch import (
    AnnbatchEnv,
    AnnbatchUnavailableError,
    _run,
    ensure_env,
    find_python,
    parse_result,
    prepare,
    rates_of,
)

from benchmarks.peers import annbatch_worker as worker

OLD_PYTHON = sys.version_info < (3, 12)  # the main venv: too old for annbatch


def test_the_env_is_a_store_peer_with_its_runner_and_notes():
    env = AnnbatchEnv("/venv/bin/python", "0.3.1")
    runner = env.runner("/data/cells.h5ad", 4096, None)
    assert (env.name, runner.store) == ("annbatch", "/data/cells.annbatch.zarr")
    assert runner.label == "annbatch 0.3.1 (chunk_size=32, preload_nchunks=256)"
    assert runner.batches == {"csr": "SciPy CSR", "dense": "SciPy CSR + .toarray()"}
    assert any("/venv/bin/python" in note for note in env.notes(4096))


def test_prepare_looks_in_the_envs_folder(tmp_path):
    with pytest.raises(AnnbatchUnavailableError, match="annbatch-venv"):
        prepare(str(tmp_path), install=False)


def test_parse_result_takes_the_last_marker_line():
    out = f'progress\n{worker.MARKER}{{"a": 1}}\nnoise\n{worker.MARKER}{{"a": 2}}\n'
    assert parse_result(out) == {"a": 2}
    for bad in ("nothing here\n", f"{worker.MARKER}not json\n", f"{worker.MARKER}[1]\n"):
        with pytest.raises(AnnbatchUnavailableError):
            parse_result(bad)


def test_rates_of_the_worker_result():
    result = {"csr": {"cells": 100, "seconds": 2.0}, "dense": {"cells": 0, "seconds": 0.0}}
    rates = rates_of(result)
    assert rates["csr"] == 50.0 and np.isnan(rates["dense"])
    with pytest.raises(AnnbatchUnavailableError, match="lacks 'dense'"):
        rates_of({"csr": {"cells": 1, "seconds": 1.0}})


def test_run_turns_failures_and_stalls_into_one_line_reasons():
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('x\\nboom\\n'); sys.exit(3)"]
    with pytest.raises(AnnbatchUnavailableError, match=r"^step failed \(exit 3\): boom$"):
        _run(fail, 60, "step")
    with pytest.raises(AnnbatchUnavailableError, match="timed out after 0 s"):
        _run([sys.executable, "-c", "import time; time.sleep(30)"], 0.3, "step")
    with pytest.raises(AnnbatchUnavailableError, match="could not start"):
        _run(["/nonexistent/python"], 60, "step")


def test_missing_environment_is_skipped_when_installing_is_off(tmp_path):
    assert issubclass(AnnbatchUnavailableError, PeerUnavailableError)  # the suite's skip
    with pytest.raises(AnnbatchUnavailableError, match="installing it was turned off"):
        ensure_env(str(tmp_path / "venv"), install=False)
    assert not (tmp_path / "venv").exists()


def test_broken_environment_is_skipped(tmp_path):
    _script(tmp_path / "venv" / "bin" / "python", "echo 'No module named annbatch' >&2\nexit 1\n")
    with pytest.raises(AnnbatchUnavailableError, match=r"importing annbatch failed.*No module"):
        ensure_env(str(tmp_path / "venv"), install=False)


def _script(path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_failed_install_is_skipped_with_pip_s_last_line(tmp_path):
    venv = tmp_path / "venv"
    # a "Python 3.12" whose venv has a Python whose pip finds nothing (no network needed)
    pip_fails = "echo 'ERROR: No matching distribution found for annbatch' >&2; exit 1\n"
    make_venv = '[ "$2" = venv ] && mkdir -p "$3/bin" && cat > "$3/bin/python" <<"X"\n'
    make_venv += f"#!/bin/sh\n{pip_fails}X\n"
    make_venv += '[ "$2" = venv ] && chmod +x "$3/bin/python"\nexit 0\n'
    base = _script(tmp_path / "py312", make_venv)
    with pytest.raises(AnnbatchUnavailableError, match="No matching distribution") as err:
        ensure_env(str(venv), python=base)
    assert str(err.value).startswith("pip install annbatch[zarrs,numba]==0.3.1 failed (exit 1)")
    assert (venv / "bin" / "python").exists()


@pytest.mark.skipif(not OLD_PYTHON, reason="needs a Python older than annbatch's 3.12")
def test_too_old_python_is_skipped_without_making_anything(tmp_path):
    assert find_python(sys.executable) is None and find_python("/nonexistent/python") is None
    with pytest.raises(AnnbatchUnavailableError, match=r"needs Python >= 3\.12"):
        ensure_env(str(tmp_path / "venv"), python=sys.executable)
    assert not (tmp_path / "venv").exists()


def test_worker_maps_store_rows_to_file_rows():
    store_names = np.array(["c2", "c0", "c1"])
    rows = worker.rows_of(np.array([0, 2, 1]), store_names, ["c0", "c1", "c2"])
    np.testing.assert_array_equal(rows, [2, 1, 0])
    with pytest.raises(ValueError, match="not found"):
        worker.rows_of(np.array([0]), np.array(["c0-1"]), ["c0", "c1"])


def test_worker_times_after_two_untimed_batches(tmp_path):
    batches = iter({"X": np.zeros((n, 3))} for n in (100, 100, 7, 8, 9))
    result = worker._timed(batches, 60.0, lambda x: x)
    assert result["cells"] == 7 + 8 + 9 and result["seconds"] >= 0
    assert worker._timed(iter([{"X": np.zeros((5, 3))}]), 60.0, lambda x: x)["cells"] == 0
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 10)
    (tmp_path / "g").write_bytes(b"x" * 5)
    assert worker.dir_bytes(str(tmp_path)) == 15


def test_worker_imports_no_torch_or_nn_handler():
    # it runs under annbatch's own Python, which has neither
    with open(worker.__file__, encoding="utf-8") as f:
        source = f.read()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert all("torch" not in line and "nn_handler" not in line for line in imports)
    assert all(". " not in line and not line.startswith("from .") for line in imports)
    assert os.path.basename(worker.__file__) == "annbatch_worker.py"
