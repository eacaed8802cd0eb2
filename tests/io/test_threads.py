"""The per-process decode pool: sizing, ordering, errors, fork safety, DataLoader workers."""

import multiprocessing as mp
import os
import threading

import numpy as np
import pytest
import torch

from nn_handler._io.chunks import pool as threads_module
from nn_handler._io.chunks.pool import ENV_VAR, decode_threads, run_parallel
from nn_handler.dataloaders import H5LazyDataset, batched_loader, set_decode_threads

from helpers.files import h5_rows, images
from helpers.platform_marks import needs_fork

TIMEOUT = 120
# Python >= 3.12 warns when a process with threads forks; forking one is what these tests check
FORK_WITH_THREADS = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)


@pytest.fixture(autouse=True)
def default_threads(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    set_decode_threads(None)
    yield
    set_decode_threads(None)


def thread_name(_item):
    return threading.current_thread().name


def test_set_decode_threads_validates():
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        set_decode_threads(0)
    with pytest.raises(TypeError, match="threads must be an integer, got str '2'"):
        set_decode_threads("2")
    set_decode_threads(3)
    assert decode_threads() == 3


def test_environment_variable_and_default(monkeypatch):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert decode_threads() == cores  # every usable core, no cap
    monkeypatch.setenv(ENV_VAR, "5")
    assert decode_threads() == 5
    set_decode_threads(2)  # an explicit call wins over the environment
    assert decode_threads() == 2
    set_decode_threads(None)
    monkeypatch.setenv(ENV_VAR, "many")
    with pytest.raises(ValueError, match=f"{ENV_VAR} must be a positive integer, got 'many'"):
        decode_threads()


def test_default_uses_every_core_divided_among_worker_processes(monkeypatch):
    monkeypatch.setattr(threads_module, "usable_cores", lambda: 32)
    assert decode_threads() == 32  # was capped at 8: num_workers=0 left cores idle
    monkeypatch.setattr(threads_module, "loader_workers", lambda: 4)
    assert decode_threads() == 8  # 4 worker processes x 8 threads: one per core
    monkeypatch.setattr(threads_module, "loader_workers", lambda: 64)
    assert decode_threads() == 1
    set_decode_threads(3)  # an explicit count wins, in workers too
    assert decode_threads() == 3


class _DecodeThreads(torch.utils.data.Dataset):
    """Each item: how many decode threads the process that serves it would run."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return decode_threads()


@needs_fork
@pytest.mark.timeout(TIMEOUT)
def test_a_dataloader_worker_divides_the_cores_among_its_siblings():
    # the pool asks torch's worker info itself when it sizes: no import has to tell it first
    loader = torch.utils.data.DataLoader(
        _DecodeThreads(), batch_size=None, num_workers=2, multiprocessing_context="fork"
    )
    cores = threads_module.usable_cores()
    assert set(loader) == {max(1, cores // 2)}
    assert decode_threads() == cores  # the main process is no worker


def test_run_parallel_keeps_order_and_uses_the_pool():
    set_decode_threads(3)
    assert run_parallel(lambda x: x * x, range(100)) == [x * x for x in range(100)]
    names = set(run_parallel(thread_name, range(50)))
    assert names and all(n.startswith("nn_handler-decode") for n in names)
    set_decode_threads(1)  # one thread: decode in the caller, no pool
    assert set(run_parallel(thread_name, range(5))) == {threading.current_thread().name}


def test_reads_are_decoded_before_readahead():
    set_decode_threads(2)
    gates, order = [threading.Event(), threading.Event()], []
    busy = [threads_module.submit(gate.wait, TIMEOUT) for gate in gates]  # both threads wait
    ahead = [threads_module.submit(order.append, f"ahead{k}") for k in range(4)]
    reader = threading.Thread(target=run_parallel, args=(order.append, ["read0", "read1"]))
    reader.start()
    while len(threads_module._pool.get()._works) < 6:  # the read is queued behind readahead
        threading.Event().wait(0.001)
    gates[0].set()  # one thread runs all the rest, in the order the pool picks them
    reader.join(TIMEOUT)
    for future in ahead:
        future.result(TIMEOUT)
    gates[1].set()
    assert all(future.result(TIMEOUT) for future in busy)
    assert not reader.is_alive()
    assert order == ["read0", "read1", "ahead0", "ahead1", "ahead2", "ahead3"]


def test_a_pool_shut_down_refuses_work_and_keeps_none():
    pool = threads_module._Pool(2)
    pool.executor.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(thread_name, 0, 0)
    assert pool._works == []


def test_run_parallel_raises_and_stops():
    set_decode_threads(2)
    started = []

    def work(x):
        started.append(x)
        if x == 3:
            raise KeyError("boom")
        return x

    with pytest.raises(KeyError, match="boom"):
        run_parallel(work, range(10_000))
    assert len(started) < 10_000  # queued tasks were cancelled, not all run


def _child_report(queue):
    queue.put(
        (
            threads_module._pool.peek() is None,
            sorted(set(run_parallel(thread_name, range(20))))[:1],
            run_parallel(lambda x: x + 1, range(5)),
        )
    )


@needs_fork
@FORK_WITH_THREADS
def test_forked_child_builds_its_own_pool():
    set_decode_threads(2)
    run_parallel(thread_name, range(10))  # the parent now holds a pool
    assert threads_module._pool.peek() is not None
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_report, args=(queue,))
    proc.start()
    inherited_none, names, values = queue.get(timeout=TIMEOUT)
    proc.join(timeout=TIMEOUT)
    assert proc.exitcode == 0
    assert inherited_none  # the parent's pool was dropped at fork
    assert names[0].startswith("nn_handler-decode")
    assert values == [1, 2, 3, 4, 5]


@pytest.mark.slow
@FORK_WITH_THREADS
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_dataloader_workers_decode_in_parallel(make_h5, method):
    data = images(203)
    path = make_h5({"x": (data, "gzip-shuffle"), "y": np.arange(203)})
    set_decode_threads(2)
    ds = H5LazyDataset(path, "x", "y")
    ds[[5, 100, 200]]  # the parent decodes first: its pool must not leak into workers
    gen = torch.Generator().manual_seed(0)
    loader = batched_loader(
        ds,
        16,
        shuffle=True,
        generator=gen,
        num_workers=2,
        multiprocessing_context=method,
        timeout=TIMEOUT,
    )
    seen_x, seen_y = [], []
    for xb, yb in loader:
        seen_x.append(xb.numpy())
        seen_y.append(yb.numpy())
    ys = np.concatenate(seen_y)
    assert sorted(ys.tolist()) == list(range(203))
    np.testing.assert_array_equal(np.concatenate(seen_x), h5_rows(path, "x", ys))


def _after(gate, value):
    gate.wait(30)
    return value


def test_park_lets_the_work_at_hand_finish_and_unpark_runs_what_waited():
    pool = threads_module._Pool(2)
    gate = threading.Event()
    running = pool.submit(lambda v: _after(gate, v), "running", 0)
    threading.Timer(0.2, gate.set).start()
    assert pool.park(timeout=30)  # waits for the running work, then every thread is gone
    assert running.result(timeout=0) == "running"
    assert not any(t.is_alive() for t in pool.executor._threads)
    waiting = pool.submit(lambda v: v * 2, 21, 0)  # parked: queued, not started
    assert not waiting.done()
    pool.unpark()
    assert waiting.result(timeout=30) == 42
    assert pool.submit(thread_name, 0, 0).result(timeout=30).startswith("nn_handler-decode")
    pool.executor.shutdown()


def test_park_gives_up_after_its_timeout_on_a_stuck_work():
    pool = threads_module._Pool(1)
    gate = threading.Event()
    stuck = pool.submit(lambda v: _after(gate, v), 7, 0)
    assert not pool.park(timeout=0.2)  # said, not waited for without a bound
    gate.set()
    assert stuck.result(timeout=30) == 7
    pool.unpark()
    pool.executor.shutdown()


_FORK_PROBE = """
import json, os, sys, threading

forks = []


def record():  # registered before nn_handler's hooks, so it runs after them
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        native = int(f.read().rsplit(b")", 1)[1].split()[17])
    forks.append([native, sorted(t.name for t in threading.enumerate())])


os.register_at_fork(before=record)

import torch

torch.set_num_threads(1)  # with the environment: any thread left at a fork is one of ours

from nn_handler.dataloaders import H5LazyDataset, batched_loader, set_decode_threads
from nn_handler._io import process

set_decode_threads(2)
ds = H5LazyDataset(sys.argv[1], "x", "y")
ds[list(range(0, 200, 7))]  # the decode threads start
process._watcher.get()  # and the collection watcher
ours = sorted(t.name for t in threading.enumerate() if t.name.startswith("nn_handler-"))
loader = batched_loader(
    ds, 16, shuffle=True, num_workers=2, multiprocessing_context="fork", timeout=60
)
ys = torch.cat([y for _, y in loader]).tolist()
again = ds[[3, 150, 4]][1].tolist()  # the pool serves this process again after the forks
print(json.dumps({"ours": ours, "forks": forks, "ys": ys, "again": again}))
"""


@needs_fork
def test_no_thread_of_ours_is_alive_at_a_fork(make_h5, tmp_path):
    import json
    import subprocess
    import sys

    path = make_h5({"x": (images(203), "gzip-shuffle"), "y": np.arange(203)})
    script = tmp_path / "probe.py"
    script.write_text(_FORK_PROBE)
    # NumPy's OpenBLAS and torch's OpenMP pools start threads of their own: one thread each
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script), path],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert any(n.startswith("nn_handler-decode") for n in report["ours"])
    assert "nn_handler-gc" in report["ours"]
    assert len(report["forks"]) == 2  # one per DataLoader worker
    # one thread in the process at each fork: what Python 3.12+ checks before it warns
    assert report["forks"] == [[1, ["MainThread"]]] * 2
    assert sorted(report["ys"]) == list(range(203))
    assert report["again"] == [3, 150, 4]
