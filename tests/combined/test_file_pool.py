import multiprocessing as mp
import os
import pickle
import re

import numpy as np
import pytest

from nn_handler._io.file.options import FileOptions
from nn_handler.dataloaders._combined.fields import FieldInfo, FileSchema
from nn_handler.dataloaders._combined.file_pool import FileColumns, FilePool

from helpers.files import images
from helpers.platform_marks import needs_fork


@pytest.fixture
def paths(make_h5):
    return [
        make_h5({"x": images(5 + k, seed=k), "y": (np.arange(5 + k) + 100 * k, "gzip")})
        for k in range(5)
    ]


def _pool(paths, max_open=2):
    return FilePool(paths, FileOptions(), {"x": "x", "y": "y"}, max_open)


def _fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_least_recently_used_file_is_closed(paths):
    pool = _pool(paths)
    base = _fds()
    assert pool.reader(0, "x").strategy == "memmap" and pool.reader(0, "y").strategy == "decode"
    pool.reader(1, "y")
    pool.reader(0, "x")  # 0 becomes the most recent
    assert pool.open_files == [1, 0]
    pool.reader(2, "x")  # evicts 1
    assert pool.open_files == [0, 2]
    assert [s.is_open for s in pool.sources] == [True, False, True, False, False]
    # file 0: handle + memmap of x; file 2: handle + memmap of x
    assert _fds() - base == 4
    np.testing.assert_array_equal(pool.reader(1, "y").read(np.array([4, 0])), [104, 100])
    pool.close()
    assert pool.open_files == [] and _fds() == base


def test_reads_stay_correct_through_evictions(paths):
    pool = _pool(paths, max_open=1)
    rng = np.random.default_rng(0)
    for _ in range(40):
        k = int(rng.integers(0, len(paths)))
        rows = rng.integers(0, 5 + k, size=4)
        np.testing.assert_array_equal(pool.reader(k, "x").read(rows), images(5 + k, seed=k)[rows])
        assert len(pool.open_files) == 1


def test_columns_count_bytes(paths):
    pool = _pool(paths)
    info = {"x": FieldInfo("x", 5, (3, 4), np.dtype(np.float32))}
    cols = FileColumns(pool, 0, FileSchema(str(paths[0]), 5, info))
    assert cols.read("x", np.array([0, 2])).shape == (2, 3, 4)
    assert cols.nbytes == 2 * 3 * 4 * 4


def test_pickled_pool_arrives_closed(paths):
    pool = _pool(paths)
    pool.reader(3, "x")
    clone = pickle.loads(pickle.dumps(pool))
    assert clone.open_files == [] and pool.open_files == [3]
    np.testing.assert_array_equal(clone.reader(3, "x").read([1]), images(8, seed=3)[[1]])
    pool.close()
    clone.close()


def _child(pool, queue):
    inherited = pool.open_files  # the parent's handles are dropped, never used
    rows = pool.reader(4, "y").read(np.array([8, 1]))
    queue.put((inherited, rows.tolist(), pool.open_files))


@needs_fork
def test_forked_child_drops_what_it_inherited(paths):
    pool = _pool(paths)
    pool.reader(0, "x"), pool.reader(1, "y")
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(pool, queue))
    proc.start()
    inherited, rows, after = queue.get(timeout=60)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert inherited == [] and rows == [408, 401] and after == [4]
    assert pool.open_files == [0, 1]  # the parent's pool is untouched
    pool.close()


def test_bad_arguments(paths, tmp_path):
    with pytest.raises(ValueError, match="max_open_files must be >= 1, got 0"):
        _pool(paths, max_open=0)
    with pytest.raises(FileNotFoundError, match=r"nope\.h5"):
        _pool([*paths, tmp_path / "nope.h5"])
    with pytest.raises(ValueError, match="at least one"):
        _pool([])
    with pytest.raises(KeyError, match=re.escape("field_names['x']='missing' not found")):
        FilePool(paths, FileOptions(), {"x": "missing"}, 2).reader(0, "x")
