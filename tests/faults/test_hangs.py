"""Two hangs once seen under load, as load tests: a loader over our datasets ends with data or an
error within bounded time, under fork, spawn and forkserver, with two CPU burners beside it.

Each run is a child interpreter under a hard timeout, so a hang fails the test instead of
blocking CI. The runs of the module start together, beside the same two burners (``runs``): each
is load for the others too, and the burners no longer take two cores from one run at a time.
The /dev/shm case runs in a private mount namespace (``unshare -rm``) holding a
9 MiB tmpfs on /dev/shm, which needs no root; it skips where unprivileged user namespaces are
off.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
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
LIMIT = 240  # seconds for the runs together: far above healthy ones (< 60 s), far below CI's
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
import io, sys, time
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
    began = time.monotonic()
    try:
        print("OK", sum(len(x) for x in loader), flush=True)
    except Exception as exc:
        print("SECONDS", time.monotonic() - began, flush=True)  # the epoch that found it
        print("ERR", type(exc).__name__, " ".join(str(exc).split()), flush=True)
"""


def _run_together(argvs: dict[str, list[str]], folder: Path) -> dict[str, list[str] | str]:
    """Start every ``argv`` at once beside two CPU burners; the lines each printed, or why none.

    Every run must end within ``LIMIT`` seconds of the start (a hang is killed with its workers).
    """
    procs = {}
    with cpu_burners(2):
        began = time.monotonic()
        for key, argv in argvs.items():
            with (folder / f"{key}.out").open("w") as out, (folder / f"{key}.err").open("w") as err:
                procs[key] = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
        while any(p.poll() is None for p in procs.values()) and time.monotonic() - began < LIMIT:
            time.sleep(0.1)
    results: dict[str, list[str] | str] = {}
    for key, proc in procs.items():
        err = (folder / f"{key}.err").read_text()[-3000:]
        lines = (folder / f"{key}.out").read_text().strip().splitlines()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            results[key] = f"no result within {LIMIT} s (a hang): {err!r}"
        elif proc.returncode != 0 or not lines:
            results[key] = f"rc={proc.returncode}: {err}"
        else:
            results[key] = lines
    return results


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True, timeout=30)
    return done.returncode == 0


def _full_shm_runs(folder: Path) -> dict[str, list[str]]:
    # the cache (8.1 MiB) fits the 9 MiB /dev/shm; the batches in flight may not
    data = folder / "d.h5"
    with h5py.File(data, "w") as f:
        f["x"] = np.random.default_rng(0).random((32768, 64), dtype=np.float32)
        f["y"] = np.arange(32768, dtype=np.int64)
    mount = "mount -t tmpfs -o size=9m tmpfs /dev/shm"
    argvs = {}
    for context in CONTEXTS:
        script = folder / f"shm-{context}.py"  # spawn workers import the main module: a file
        script.write_text(FULL_SHM.format(src=SRC, data=str(data), context=context))
        sh = ["unshare", "-rm", "sh", "-c", f'{mount} && exec "$0" "$1"']
        argvs[f"shm-{context}"] = [*sh, sys.executable, str(script)]
    return argvs


def _rewrite_runs(folder: Path) -> dict[str, list[str]]:
    argvs = {}
    for context, gzip in REWRITES:
        key = f"rewrite-{context}-{gzip}"
        data = folder / key / "r.h5"
        data.parent.mkdir()
        kw = {"chunks": (256, 16), "compression": "gzip"} if gzip else {}
        with h5py.File(data, "w") as f:
            x = np.arange(20000 * 16, dtype=np.float32).reshape(-1, 16)
            f.create_dataset("x", data=x, **kw)
        script = data.parent / "loader.py"
        script.write_text(REWRITTEN.format(src=SRC, data=str(data), context=context, gzip=gzip))
        argvs[key] = [sys.executable, str(script)]
    return argvs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str] | str]:
    """What every run of this module printed; the /dev/shm runs only where a tmpfs mounts."""
    folder = tmp_path_factory.mktemp("hangs")
    argvs = _rewrite_runs(folder)
    if _unshare_works():
        argvs |= _full_shm_runs(folder)
    return _run_together(argvs, folder)


def _lines(runs: dict[str, list[str] | str], key: str) -> list[str]:
    if key not in runs:
        pytest.skip("unshare -rm cannot mount a tmpfs here (unprivileged user namespaces off)")
    result = runs[key]
    if isinstance(result, str):
        pytest.fail(result)
    return result


@pytest.mark.timeout(2 * LIMIT)
@pytest.mark.parametrize("context", CONTEXTS)
def test_a_full_dev_shm_is_an_error_not_a_hang(runs, context):
    line = _lines(runs, f"shm-{context}")[-1]
    if line.startswith("OK"):
        assert line == "OK 32768"
    else:
        assert line.startswith("ERR MemoryError"), line
        assert "/dev/shm has" in line and "free of 9.0 MiB" in line and "--shm-size" in line


@pytest.mark.timeout(2 * LIMIT)
@pytest.mark.parametrize(
    ("context", "gzip"), REWRITES, ids=[f"{c}-{'gzip' if g else 'contiguous'}" for c, g in REWRITES]
)
def test_a_file_rewritten_in_place_between_epochs_is_an_error_in_time(runs, context, gzip):
    lines = _lines(runs, f"rewrite-{context}-{gzip}")
    assert lines[-1].startswith("ERR FileChangedError"), lines[-1]
    assert "r.h5' changed after the dataset was built" in lines[-1]
    assert float(lines[-2].split()[-1]) < 60  # the DataLoader's own timeout was never needed
