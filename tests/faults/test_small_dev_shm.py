"""Docker's default 64 MiB ``/dev/shm``: every dataset class reads right with 2 DataLoader workers,
and the whole job says one line about the small shared memory, naming ``--shm-size``.

Each job (``helpers/small_shm_job.py``) runs in a private mount namespace (``unshare -m``, so
root only) with a 64 MiB tmpfs mounted on ``/dev/shm`` itself: torch puts batches there
whatever ``NN_HANDLER_SHM_DIR`` says. The gzip dataset decodes to 78 MiB, more than fits. With
fork, each dataset has its own loader and ``CombinedHDF5Dataset`` reads first, so its two workers
find that out before the job's main process does, each on its own: before the job-wide notice
(``_io/notice_board.py``), each worker said it, every epoch. With spawn and forkserver one loader
reads them all (their workers take seconds to start); the main process says it, the workers
(which find it again in the same dataset) do not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers.sparse_files import write_anndata

LIMIT = 240  # seconds a job may take (~3-15 s each on two busy cores)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * LIMIT)]

HERE = Path(__file__).resolve().parents[1]
SCRIPT = HERE / "helpers" / "small_shm_job.py"
MOUNT = "mount -t tmpfs -o size=64m tmpfs /dev/shm"
CLASSES = ["combined", "lazy", "rank_cached", "per_sample", "sparse"]


def _can_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-m", "sh", "-c", MOUNT.replace("64m", "1m")]
    return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _can_mount():
        pytest.skip("needs root and a mount namespace (unshare -m) to mount a 64 MiB /dev/shm")
    folder = tmp_path_factory.mktemp("small_shm")
    n = 5000  # 2 x 2048 float32 a row: 78 MiB decoded, in gzip chunks of 16 rows
    big = (np.arange(n * 2 * 2048) % 251).astype(np.float32).reshape(n, 2, 2048)
    with h5py.File(folder / "big.h5", "w") as f:
        f.create_dataset("fhr_st", data=big, chunks=(16, 2, 2048), compression="gzip")
        f["weight"] = np.arange(n, dtype=np.float32)
    with h5py.File(folder / "small.h5", "w") as f:
        f["x"] = np.random.default_rng(0).standard_normal((2000, 64)).astype(np.float32)
        f["y"] = np.arange(2000)
    with h5py.File(folder / "samples.h5", "w") as f:
        for i in range(300):
            f[f"s{i:03d}"] = np.full(16, i, np.float32)
    write_anndata(folder / "sparse.h5ad", "csr-gzip", n_obs=600)
    return folder


def _job(context: str, folder: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NN_HANDLER_SHM_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent / "src"), str(HERE), env.get("PYTHONPATH", "")]
    )
    run = f'{MOUNT} && exec "$0" "$@"'
    argv = ["unshare", "-m", "sh", "-c", run, sys.executable, str(SCRIPT), context, str(folder)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=LIMIT, check=False, env=env)


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_every_dataset_reads_right_and_the_job_says_one_line(files: Path, context: str) -> None:
    done = _job(context, files)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [line for line in done.stdout.splitlines() if line.startswith("OK")] == [
        f"OK {name}" for name in CLASSES
    ]
    about_shm = [
        line
        for line in done.stderr.splitlines()
        if "shm" in line.lower() or "shared memory" in line.lower()
    ]
    assert len(about_shm) == 1, done.stderr[-4000:]
    line = about_shm[0]
    assert "/dev/shm has" in line and "--shm-size=" in line and "78.2 MiB" in line, line
