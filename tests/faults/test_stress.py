"""Fault cases looped under load: CPU burners on every core and a thread making cyclic garbage.

Each loop runs in a process of its own session (forked from one that imported torch once) with a
bound, so a hang is a failure that names the loop it happened in, never a stuck test run (its
DataLoader workers are killed with it). ``NN_HANDLER_STRESS_LOOPS`` sets the loops (CI: the
default; before a release: 200).
"""

import os

import pytest

from helpers.forked_runs import run_forked
from helpers.load import cpu_burners

pytestmark = [pytest.mark.stress, pytest.mark.slow]

LOOPS = int(os.environ.get("NN_HANDLER_STRESS_LOOPS", "8"))
BOUND_S = 20.0  # no result may be slower than this, under load
# Each loop is a child forked from one interpreter that imported these (helpers.forked_runs): a
# fresh interpreter per loop spent most of its time importing torch, which is not the case.
_PRELOAD = "import h5py, numpy, torch, torch.utils.data, nn_handler.dataloaders"

# A chunked, uncompressed file read by H5LazyDataset with 2 fork workers; a new file is renamed
# over it between two epochs: the second epoch must raise FileChangedError.
_REPLACED = """
import os, sys, threading, time

import h5py
import numpy as np
from torch.utils.data import DataLoader

from nn_handler.dataloaders import FileChangedError, H5LazyDataset

folder = sys.argv[1]


def litter(stop):
    while not stop.is_set():
        cycle = [h5py.File(os.path.join(folder, "g.h5"), "w")]
        cycle.append(cycle)  # freed by a collection, on whichever thread it runs
        cycle[0].close()
        time.sleep(0.001)


def write(path, offset, pad):
    with h5py.File(path, "w") as f:
        if pad:
            f.create_dataset("pad", data=np.zeros(16, np.float32))
        data = np.arange(400 * 16, dtype=np.float32).reshape(400, 16) + offset
        f.create_dataset("x", data=data, chunks=(8, 16))


stop = threading.Event()
threading.Thread(target=litter, args=(stop,), daemon=True).start()
path = os.path.join(folder, "r.h5")
write(path, 0, False)
loader = DataLoader(
    H5LazyDataset(path, "x"), batch_size=10, num_workers=2, multiprocessing_context="fork"
)
assert next(iter(loader))[0, 0].item() == 0
write(os.path.join(folder, "new.h5"), 1000, True)
os.replace(os.path.join(folder, "new.h5"), path)
try:
    for _ in loader:
        pass
except FileChangedError:
    stop.set()
    print("raised")
"""


# The layouts reported failing under load: chunked, compressed, never written (fill value only),
# read through every H5LazyDataset path with the real h5py, in the decode pool's threads.
_UNWRITTEN = """
import sys

import h5py
import numpy as np
import torch

from nn_handler.dataloaders import ChunkShuffleSampler, H5LazyDataset, batched_loader

folder = sys.argv[1]
LAYOUTS = [
    ("latest", "<f4", dict(maxshape=(None, 3), compression="gzip", shuffle=True)),
    ("earliest", ">u4", dict(compression="gzip", shuffle=True, fletcher32=True)),
    ("v110", ">f2", dict(compression="gzip")),
]
idx = [5, 40, 17, 63, 0]
for k, (libver, dtype, kw) in enumerate(LAYOUTS):
    path = f"{folder}/{k}.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("x", (64, 3), dtype, chunks=(8, 3), fillvalue=3, **kw)
    with h5py.File(path) as f:
        want = f["x"][()].astype(np.dtype(dtype).newbyteorder("="))
    ds = H5LazyDataset(path, "x")
    order = list(ChunkShuffleSampler(ds, seed=1))
    pairs = [
        (ds[idx], want[idx]),
        (ds[3:60:7], want[3:60:7]),
        (ds[::-1], want[::-1]),
        (torch.stack(ds.__getitems__(idx)), want[idx]),
        (H5LazyDataset(path, "x", x_dtype=np.float64)[idx], want[idx].astype(np.float64)),
        (torch.cat(list(batched_loader(ds, 16, sampler=ChunkShuffleSampler(ds, seed=1)))),
         want[order]),
    ]
    for n, (got, expected) in enumerate(pairs):
        assert got.numpy().tobytes() == expected.tobytes(), (libver, dtype, n)
print("same")
"""


@pytest.fixture
def burners():
    with cpu_burners(len(os.sched_getaffinity(0))):
        yield


def _run_loops(script: str, tmp_path) -> list[tuple[float, str]]:
    """``(seconds, last output)`` of each loop; ``inf`` for one killed at the bound."""
    folders = [tmp_path / str(loop) for loop in range(LOOPS)]
    for folder in folders:
        folder.mkdir()
    results = []
    for run in run_forked(_PRELOAD, script, folders, BOUND_S):
        if run.seconds is None:
            results.append((float("inf"), "no result within the bound"))
            continue
        assert run.returncode == 0, run.err
        results.append((run.seconds, run.out))
    return results


def test_a_file_replaced_between_epochs_raises_within_the_bound_under_load(tmp_path, burners):
    results = _run_loops(_REPLACED, tmp_path)
    slow = [(i, r) for i, r in enumerate(results) if r[0] >= BOUND_S or r[1] != "raised"]
    assert slow == [], f"{len(slow)} of {LOOPS} loops: {slow}"


def test_chunks_never_written_read_as_the_fill_value_under_load(tmp_path, burners):
    results = _run_loops(_UNWRITTEN, tmp_path)
    wrong = [(i, r) for i, r in enumerate(results) if r[0] >= BOUND_S or r[1] != "same"]
    assert wrong == [], f"{len(wrong)} of {LOOPS} loops: {wrong}"
