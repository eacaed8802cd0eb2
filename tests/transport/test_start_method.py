"""Loaders we build start their workers with forkserver while threads not ours run."""

import json
import multiprocessing
import subprocess
import sys
import threading

import numpy as np
import pytest

from nn_handler.dataloaders import H5LazyDataset, batched_loader
from nn_handler.dataloaders._transport import start_method
from nn_handler.dataloaders._transport.start_method import other_threads, worker_context

from helpers.files import h5_rows, images
from helpers.platform_marks import needs_fork, needs_fork_default, needs_forkserver

TIMEOUT = 120

_SCRIPT = """
import json, logging, sys, threading

import numpy as np
import torch

from nn_handler.dataloaders import H5LazyDataset, batched_loader


def main():
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, name="user-helper")
    helper.start()
    ds = H5LazyDataset(sys.argv[1], "x", "y")
    loader = batched_loader(ds, 16, shuffle=True, num_workers=2, timeout=60)
    xs, ys = [], []
    for x, y in loader:
        xs.append(x.numpy().tolist())
        ys.append(y.numpy().tolist())
    stop.set()
    helper.join()
    context = type(loader.multiprocessing_context).__name__
    print(json.dumps({"context": context, "xs": xs, "ys": ys}))


if __name__ == "__main__":
    main()
"""


def _run(tmp_path, script, h5):
    path = tmp_path / "train.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path), str(h5)], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


@pytest.fixture
def h5(make_h5):
    return make_h5({"x": (images(67), "gzip-shuffle"), "y": np.arange(67)})


def _assert_exact(report, h5):
    ys = np.concatenate([np.asarray(y) for y in report["ys"]])
    assert sorted(ys.tolist()) == list(range(67))
    want = h5_rows(h5, "x", ys)
    xs = np.concatenate([np.asarray(x) for x in report["xs"]]).astype(want.dtype)
    np.testing.assert_array_equal(xs, want)


@needs_fork_default
@needs_forkserver
def test_a_guarded_script_with_threads_gets_forkserver_workers_and_the_same_bytes(tmp_path, h5):
    report, log = _run(tmp_path, _SCRIPT, h5)
    assert report["context"] == "ForkServerContext"
    assert "start with forkserver, not fork" in log and "thread 'user-helper'" in log
    _assert_exact(report, h5)


@needs_fork_default
def test_an_unguarded_script_keeps_fork_and_says_why(tmp_path, h5):
    script = _SCRIPT.replace('if __name__ == "__main__":\n    main()', "main()")
    report, log = _run(tmp_path, script, h5)
    assert report["context"] == "NoneType"  # torch's default: fork
    assert 'put the script\'s code under `if __name__ == "__main__":`' in log
    _assert_exact(report, h5)


@needs_fork
def test_a_context_the_user_gave_is_kept(h5):
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, name="user-helper")
    helper.start()
    try:
        assert "thread 'user-helper'" in other_threads()
        assert worker_context("fork") is None  # the user's choice: ours is not asked
        loader = batched_loader(
            H5LazyDataset(h5, "x", "y"), 16, num_workers=1, multiprocessing_context="fork"
        )
        ys = np.concatenate([y.numpy() for _, y in loader])
        assert ys.tolist() == list(range(67))
        assert loader.multiprocessing_context is multiprocessing.get_context("fork")
    finally:
        stop.set()
        helper.join()


def test_nothing_else_running_keeps_the_default(monkeypatch):
    monkeypatch.setattr(start_method, "other_threads", lambda: [])
    assert worker_context(None) is None


def test_guarded_lines_are_the_main_blocks_body(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(
        "import os\n"  # 1
        "x = 1\n"  # 2
        'if __name__ == "__main__":\n'  # 3
        "    run()\n"  # 4
        "    more(\n"  # 5
        "        x)\n"  # 6
        "if '__main__' == __name__:\n"  # 7
        "    other()\n"  # 8
        "if __name__ != '__main__':\n"  # 9
        "    no()\n"  # 10
    )
    assert start_method._guarded_lines(str(path)) == frozenset({4, 5, 6, 8})


@needs_fork_default
@needs_forkserver
def test_a_private_rank_cache_keeps_fork(h5, monkeypatch, caplog):
    from nn_handler.dataloaders import RankMemCachedH5Dataset
    from nn_handler.dataloaders.loader import BatchedDataset

    monkeypatch.setattr(start_method, "other_threads", lambda: ["CUDA"])
    monkeypatch.setattr(start_method, "_said", set())
    private = RankMemCachedH5Dataset(h5, "x", "y", rank=0, world_size=1)
    shared = RankMemCachedH5Dataset(h5, "x", "y", rank=0, world_size=1, share_memory=True)
    assert private.fork_only and not shared.fork_only
    with caplog.at_level("WARNING", logger="nn_handler.dataloaders"):
        assert worker_context(None, BatchedDataset(private)) is None
    assert "pass share_memory=True for forkserver workers" in caplog.text
    assert worker_context(None, BatchedDataset(shared)) is multiprocessing.get_context("forkserver")


@needs_fork_default
def test_what_does_not_pickle_keeps_fork(h5, monkeypatch, caplog):
    monkeypatch.setattr(start_method, "other_threads", lambda: ["CUDA"])
    monkeypatch.setattr(start_method, "_said", set())
    ds = H5LazyDataset(h5, "x", "y", transform=lambda x: x * 2)  # a lambda: fork only
    with caplog.at_level("WARNING", logger="nn_handler.dataloaders"):
        assert worker_context(None, ds) is None
    assert "does not pickle" in caplog.text and "module level" in caplog.text
    loader = batched_loader(ds, 16, num_workers=1, timeout=60)
    xs = np.concatenate([x.numpy() for x, _ in loader])
    np.testing.assert_array_equal(xs, h5_rows(h5, "x") * 2)
