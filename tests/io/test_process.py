"""PerProcess, and the rule it gives every holder: a child process never sees a parent's state."""

from __future__ import annotations

import ast
import copy
import gc
import multiprocessing as mp
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nn_handler._io.chunks import pool as threads
from nn_handler._io.process import (
    PerProcess,
    collection_paused,
    pause_collection_until_h5py_returns,
    process_alive,
    process_generation,
)
from nn_handler.dataloaders import CombinedHDF5Dataset, H5LazyDataset, H5SampleDataset

from helpers.files import h5_rows, images
from helpers.process import as_if_forked
from helpers.recordings import write_recording
from helpers.samples import trajectories, write_samples

TIMEOUT = 120
SRC = Path(__file__).resolve().parents[2] / "src" / "nn_handler"


def test_slot_is_made_once_and_kept():
    slot: PerProcess[list[int]] = PerProcess(list)
    assert slot.peek() is None and not slot.inherited
    first = slot.get()
    first.append(1)
    assert slot.get() is first and slot.peek() is first
    assert slot.pop() is first and slot.peek() is None


def test_slot_without_factory_is_set_by_its_holder():
    slot: PerProcess[str] = PerProcess()
    with pytest.raises(LookupError, match="no factory"):
        slot.get()
    assert slot.get_or_make(lambda: "a") == "a"
    assert slot.get_or_make(lambda: "b") == "a"
    assert slot.set("c") == "c" and slot.get() == "c"


def test_pickle_and_copy_carry_the_factory_not_the_value():
    slot: PerProcess[dict[str, int]] = PerProcess(dict)
    slot.get()["k"] = 1
    for clone in (pickle.loads(pickle.dumps(slot)), copy.copy(slot), copy.deepcopy(slot)):
        assert clone.peek() is None and not clone.inherited
        assert clone.get() == {}
    assert slot.get() == {"k": 1}


def test_after_fork_values_are_inherited_and_never_returned():
    slot: PerProcess[dict[str, int]] = PerProcess(dict)
    parent_value = slot.get()
    generation = process_generation()
    as_if_forked()
    assert process_generation() == generation + 1
    assert slot.inherited and slot.peek() is None
    assert slot.get() is not parent_value and not slot.inherited
    empty: PerProcess[int] = PerProcess()
    empty.set(3)
    as_if_forked()
    assert empty.pop() == 3  # handed over once so the holder can release it


def test_threads_racing_on_a_new_slot_share_one_value():
    slot: PerProcess[object] = PerProcess(object)
    start = threading.Barrier(8)
    seen: list[object] = []

    def take() -> None:
        start.wait(timeout=TIMEOUT)
        seen.append(slot.get())

    workers = [threading.Thread(target=take) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=TIMEOUT)
    assert len(seen) == 8 and len({id(v) for v in seen}) == 1


def test_repr_says_whose_value_it_holds():
    slot: PerProcess[int] = PerProcess()
    assert repr(slot) == "PerProcess(empty)"
    slot.set(1)
    assert repr(slot) == "PerProcess(set)"
    as_if_forked()
    assert repr(slot) == "PerProcess(inherited)"


# -- every holder, in real child processes ------------------------------------------------------


def _slots(root: Any) -> list[PerProcess[Any]]:
    """Every PerProcess reachable from ``root`` through attributes and containers."""
    found: list[PerProcess[Any]] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, np.ndarray, torch.Tensor)):
            continue
        seen.add(id(obj))
        if isinstance(obj, PerProcess):
            found.append(obj)
            continue
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("nn_handler"):
            stack.extend(vars(obj).values())
    return found


def _read_everything(holders: dict[str, Any]) -> dict[str, Any]:
    lazy = {name: ds[[5, 0, 5, 9]].numpy() for name, ds in holders.items() if "lazy" in name}
    combined = holders["combined"][[3, 0, 7]]
    return {
        **lazy,
        "combined": {
            k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in combined.items()
        },
        "sample": holders["sample"][4]["data"].numpy(),
    }


def _child(holders: dict[str, Any], queue: Any) -> None:
    try:
        slots = [s for h in holders.values() for s in _slots(h)] + [threads._pool, threads._lock]
        visible = sum(s.peek() is not None for s in slots)
        queue.put(("ok", len(slots), visible, _read_everything(holders)))
    except BaseException as exc:  # report, don't hang the parent
        queue.put(("error", repr(exc), 0, {}))


@pytest.fixture
def holders(make_h5, tmp_path):
    data = images(12)
    built = {
        f"lazy-{layout}": H5LazyDataset(make_h5({"x": (data, layout)}), "x")
        for layout in ("contiguous", "gzip-shuffle", "lzf-fletcher", "compact")
    }
    files = [write_recording(tmp_path / f"r{i}.h5", 6, seed=i, uid_start=10 * i) for i in range(2)]
    built["combined"] = CombinedHDF5Dataset(files, cache_size=8)
    built["sample"] = H5SampleDataset(write_samples(tmp_path / "s.h5", trajectories(6)))
    threads.set_decode_threads(2)
    return built


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_children_never_see_the_parents_handles_caches_or_locks(holders, method):
    expected = _read_everything(holders)  # the parent opens, maps, decodes and caches
    parent_slots = [s for h in holders.values() for s in _slots(h)]
    assert sum(s.peek() is not None for s in parent_slots) >= len(holders)
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(holders, queue))
    proc.start()
    status, count, visible, got = queue.get(timeout=TIMEOUT)
    proc.join(timeout=TIMEOUT)
    threads.set_decode_threads(None)
    assert proc.exitcode == 0 and status == "ok", count
    assert count >= len(parent_slots) and visible == 0
    for name, value in expected.items():
        if isinstance(value, dict):
            assert set(got[name]) == set(value)
            for field, arr in value.items():
                np.testing.assert_array_equal(np.asarray(got[name][field]), np.asarray(arr))
        else:
            np.testing.assert_array_equal(got[name], value)
    path = holders["lazy-gzip-shuffle"].path
    np.testing.assert_array_equal(got["lazy-gzip-shuffle"], h5_rows(path, "x", [5, 0, 5, 9]))


def test_only_the_process_module_guards_against_fork():
    """Per-process state goes through PerProcess: no module keeps its own pid check."""
    allowed = {"_io/process.py"}
    # the suite's peer adapters are written as their users would write them
    allowed |= {p.relative_to(SRC).as_posix() for p in (SRC / "bench").glob("*.py")}
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "register_at_fork":
                offenders.append(f"{rel}:{node.lineno} register_at_fork")
            if isinstance(node, ast.Compare) and "getpid" in ast.unparse(node):
                offenders.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert [o for o in offenders if o.split(":")[0] not in allowed] == []


def test_collection_paused_nests_across_threads_and_restores_the_switch():
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other():
        with collection_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collection_paused():
        assert not gc.isenabled()
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread still waits
    release.set()
    thread.join(10)
    assert gc.isenabled()
    gc.disable()
    try:  # off before: stays off after
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_forked_child_collects_again(monkeypatch):
    with collection_paused():
        as_if_forked()  # the parent's waiting thread does not exist in the child
        assert gc.isenabled()
        with collection_paused():  # and the child's own pauses work
            assert not gc.isenabled()
        assert gc.isenabled()


def _collecting_again(seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not gc.isenabled() and time.monotonic() < deadline:
        time.sleep(0.005)
    return gc.isenabled()


def test_a_pause_inside_an_h5py_call_lasts_until_h5py_lets_go():
    from h5py._objects import phil

    assert gc.isenabled()
    pause_collection_until_h5py_returns()  # outside h5py: nothing to cover
    assert gc.isenabled()
    with phil:  # as inside an h5py call that reads through our file object
        pause_collection_until_h5py_returns()
        pause_collection_until_h5py_returns()  # the same call: one pause
        time.sleep(0.2)
        assert not gc.isenabled()  # between two reads of the call, too
    assert _collecting_again()
    with phil:  # the next call pauses again
        pause_collection_until_h5py_returns()
        assert not gc.isenabled()
    assert _collecting_again()


def test_a_forked_child_does_not_wait_for_the_parents_watcher():
    from h5py._objects import phil

    with phil:
        pause_collection_until_h5py_returns()
        as_if_forked()
        assert gc.isenabled()
        pause_collection_until_h5py_returns()  # the child's own watcher
        assert not gc.isenabled()
    assert _collecting_again()


def test_a_child_that_exited_but_was_not_reaped_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # a worker that has ended
    try:
        deadline = time.monotonic() + 30
        while process_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # (until it has exited: a zombie, its parent not waiting yet)
        assert not process_alive(child.pid)
        assert os.waitpid(child.pid, os.WNOHANG)[0] == child.pid  # a zombie: reaped only now
    finally:
        child.wait(10)  # (already reaped: Popen takes ECHILD as the end)
    assert process_alive(os.getpid())
