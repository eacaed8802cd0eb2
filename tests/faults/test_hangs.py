"""Two hangs once seen under load, as load tests: a loader over our datasets ends with data or an
error within bounded time, under fork, spawn and forkserver, with two CPU burners beside it.

Each run is a child interpreter with its own hard timeout, so a hang fails the test instead of
blocking CI. The /dev/shm case runs in a private mount namespace (``unshare -rm``) holding a
9 MiB tmpfs on /dev/shm, which needs no root; it skips where unprivileged user namespaces are
off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers.load import cpu_burners

pytestmark = pytest.mark.slow

CONTEXTS = ["fork", "spawn", "forkserver"]
# the rewritten file: every context for the contiguous layout (the one that hung), the gzip
# layout under fork; NN_HANDLER_SLOW=1 runs every pair
SLOW = os.environ.get("NN_HANDLER_SLOW") == "1"
REWRITES = [(c, g) for c in CONTEXTS for g in (False, True) if SLOW or not g or c == "fork"]
LIMIT = 120  # seconds per run: far above a healthy one (< 15 s with burners), far below CI's
SRC = str(Path(__file__).resolve().parents[2] / "src")

FULL_SHM = """
import sys, time
sys.path.insert(0, {src!r})
import numpy as np
from nn_handler.dataloaders import RankMemCachedH5Dataset, batched_loader

if __name__ == "__main__":
    ds = RankMemCachedH5Dataset({data!r}, "x", "y", share_memory=True, dtype_y=np.int64,
                                log_fn=lambda _: None)
    start, seen = time.monotonic(), 0
    try:
        for x, y in batched_loader(ds, 512, num_workers=2, multiprocessing_context={context!r}):
            seen += len(x)
        print("OK", seen, flush=True)
    except Exception as exc:
        print("ERR", type(exc).__name__, " ".join(str(exc).split()), flush=True)
"""

REWRITTEN = """
import io, sys
sys.path.insert(0, {src!r})
import h5py, numpy as np
from nn_handler.dataloaders import H5LazyDataset, batched_loader

def write(target, n, base):
    kw = {{"chunks": (256, 16), "compression": "gzip"}} if {gzip!r} else {{}}
    with h5py.File(target, "w") as f:
        f.create_dataset("x", data=np.arange(n * 16, dtype=np.float32).reshape(n, 16) + base, **kw)

if __name__ == "__main__":
    ds = H5LazyDataset({data!r}, "x")
    loader = batched_loader(ds, 200, num_workers=2, multiprocessing_context={context!r},
                            persistent_workers=False, timeout=60)
    assert sum(len(x) for x in loader) == 20000
    new = io.BytesIO()
    write(new, 5000, 7)
    with open({data!r}, "r+b") as fh:  # the same inode: truncated, then shorter content
        fh.truncate(0)
        fh.write(new.getvalue())
    try:
        print("OK", sum(len(x) for x in loader), flush=True)
    except Exception as exc:
        print("ERR", type(exc).__name__, " ".join(str(exc).split()), flush=True)
"""


@pytest.fixture
def burners() -> Iterator[None]:
    """Two processes spinning on the CPU for as long as the test runs."""
    with cpu_burners(2):
        yield


def _run(argv: list[str]) -> tuple[str, float]:
    """Run ``argv`` to its end within ``LIMIT`` seconds; its last line and the time it took."""
    began = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=LIMIT, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"no result within {LIMIT} s (a hang): {exc.stderr!r:.2000}")
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"rc={done.returncode}: {done.stderr[-3000:]}"
    return lines[-1], time.monotonic() - began


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.fixture(scope="module")
def small_shm() -> None:
    if not _unshare_works():
        pytest.skip("unshare -rm cannot mount a tmpfs here (unprivileged user namespaces off)")


@pytest.mark.parametrize("context", CONTEXTS)
def test_a_full_dev_shm_is_an_error_not_a_hang(tmp_path, small_shm, burners, context):
    # the cache (8.1 MiB) fits the 9 MiB /dev/shm; the batches in flight may not
    data = tmp_path / "d.h5"
    with h5py.File(data, "w") as f:
        f["x"] = np.random.default_rng(0).random((32768, 64), dtype=np.float32)
        f["y"] = np.arange(32768, dtype=np.int64)
    script = tmp_path / "loader.py"  # spawn workers import the main module: a real file
    script.write_text(FULL_SHM.format(src=SRC, data=str(data), context=context))
    mount = "mount -t tmpfs -o size=9m tmpfs /dev/shm"
    line, _ = _run(
        ["unshare", "-rm", "sh", "-c", f'{mount} && exec "$0" "$1"', sys.executable, str(script)]
    )
    if line.startswith("OK"):
        assert line == "OK 32768"
    else:
        assert line.startswith("ERR MemoryError"), line
        assert "/dev/shm has" in line and "free of 9.0 MiB" in line and "--shm-size" in line


@pytest.mark.parametrize(
    ("context", "gzip"), REWRITES, ids=[f"{c}-{'gzip' if g else 'contiguous'}" for c, g in REWRITES]
)
def test_a_file_rewritten_in_place_between_epochs_is_an_error_in_time(
    tmp_path, burners, context, gzip
):
    data = tmp_path / "r.h5"
    kw = {"chunks": (256, 16), "compression": "gzip"} if gzip else {}
    with h5py.File(data, "w") as f:
        f.create_dataset("x", data=np.arange(20000 * 16, dtype=np.float32).reshape(-1, 16), **kw)
    script = tmp_path / "loader.py"
    script.write_text(REWRITTEN.format(src=SRC, data=str(data), context=context, gzip=gzip))
    line, seconds = _run([sys.executable, str(script)])
    assert line.startswith("ERR FileChangedError"), line
    assert "r.h5' changed after the dataset was built" in line
    assert seconds < 60  # the DataLoader's own timeout was never needed
