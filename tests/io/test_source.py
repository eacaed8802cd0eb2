import io
import multiprocessing as mp
import pickle

import h5py
import numpy as np
import pytest

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source, close_inherited_sources, dataset_keys

from helpers.files import images
from helpers.platform_marks import needs_fork
from helpers.process import as_if_forked


@pytest.fixture
def path(make_h5):
    return make_h5({"x": images(10), "train/images": images(10), "train/labels": np.arange(10)})


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.h5"
    with pytest.raises(FileNotFoundError, match="HDF5 file not found") as info:
        H5Source(missing, FileOptions())
    assert info.value.filename == str(missing)


def test_directory_and_non_hdf5(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory"):
        H5Source(tmp_path, FileOptions())
    bad = tmp_path / "notes.h5"
    bad.write_text("not hdf5")
    with pytest.raises(OSError, match="is not an HDF5 file"):
        H5Source(bad, FileOptions())


def test_missing_key_lists_the_datasets(path):
    src = H5Source(path, FileOptions())
    with pytest.raises(
        KeyError, match=r"x_key='images' not found .*'train/images', 'train/labels', 'x'"
    ):
        src.dataset("images", arg="x_key")
    with pytest.raises(TypeError, match=r"key='train' .* is a Group, not a dataset"):
        src.dataset("train")


def test_nested_keys_and_listing(path):
    src = H5Source(path, FileOptions())
    assert src.dataset("train/labels").shape == (10,)
    assert sorted(dataset_keys(src.file)) == ["train/images", "train/labels", "x"]


def test_dataset_objects_are_cached_per_process(path):
    src = H5Source(path, FileOptions())
    assert src.dataset("x") is src.dataset("x")  # the chunk cache lives on this object
    src.close()
    assert not src.is_open
    assert src.dataset("x").shape == (10, 3, 4)  # reopens
    assert src.is_open


def test_options_are_validated():
    with pytest.raises(ValueError, match="locking must be one of True, False, 'best-effort', None"):
        FileOptions(locking="yes")
    with pytest.raises(ValueError, match=r"rdcc_w0 must be in \[0, 1\], got 2"):
        FileOptions(rdcc_w0=2)
    with pytest.raises(ValueError, match="rdcc_nbytes must be >= 0, got -1"):
        FileOptions(rdcc_nbytes=-1)
    with pytest.raises(TypeError, match="swmr must be True or False"):
        FileOptions(swmr="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("locking", [True, False, "best-effort", None])
def test_locking_modes_open(path, locking):
    src = H5Source(path, FileOptions(locking=locking))
    assert src.dataset("x").shape == (10, 3, 4)


def test_chunk_cache_options_reach_the_file(path):
    src = H5Source(path, FileOptions(rdcc_nbytes=3 * 1024**2, rdcc_nslots=10007, rdcc_w0=0.5))
    cache = src.file.id.get_access_plist().get_cache()
    assert cache[1:] == (10007, 3 * 1024**2, 0.5)


def test_files_no_writer_holds_open_plainly_and_file_objects_too(path):
    # SWMR read mode only for a file a SWMR writer holds (tests/test_damaged_files.py): a plain
    # open checks the file's length and checksums at once, where SWMR would retry for minutes
    assert not H5Source(path, FileOptions(swmr=True)).file.swmr_mode
    assert not H5Source(path, FileOptions(swmr=False)).file.swmr_mode
    src = H5Source(io.BytesIO(path.read_bytes()), FileOptions(swmr=True))
    assert src.dataset("x").shape == (10, 3, 4)  # no warning (filterwarnings=error)


def test_pickle_drops_the_handle_at_any_time(path):
    src = H5Source(path, FileOptions())
    src.dataset("x")
    clone = pickle.loads(pickle.dumps(src))
    assert src.is_open and not clone.is_open
    assert not clone.inherited
    np.testing.assert_array_equal(clone.dataset("x")[3], images(10)[3])


def test_foreign_pid_handle_is_replaced(path):
    src = H5Source(path, FileOptions())
    first = src.file
    as_if_forked()  # as if this object had been copied from another process
    assert src.inherited
    second = src.file
    assert second is not first
    assert not first.id.valid  # the inherited handle was closed
    assert src.is_open and not src.inherited


def _child_reads(src: H5Source, queue) -> None:
    inherited = src.inherited
    closed = close_inherited_sources()
    row = src.dataset("x")[4]
    queue.put((inherited, closed, src.is_open and not src.inherited, row.tolist()))


@needs_fork
def test_forked_child_reopens_instead_of_using_the_parent_handle(path):
    src = H5Source(path, FileOptions())
    src.dataset("x")  # parent holds an open handle
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_reads, args=(src, queue))
    proc.start()
    inherited, closed, own, row = queue.get(timeout=60)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert inherited and closed >= 1 and own
    assert row == images(10)[4].tolist()
    assert src.is_open  # the parent's handle is untouched
    assert src.dataset("x")[4].tolist() == row


def test_open_error_explains_locking(monkeypatch, path):
    def refuse(*args, **kwargs):
        raise OSError(37, "unable to lock file, errno = 37, error message = 'No locks available'")

    monkeypatch.setattr(h5py, "File", refuse)
    src = H5Source(path, FileOptions(swmr=False))
    with pytest.raises(OSError, match="pass locking=False"):
        src.file


def test_repr(path):
    src = H5Source(path, FileOptions())
    assert repr(src).endswith("closed)")
    src.file
    assert repr(src) == f"H5Source({str(path)!r}, open)"


def test_dataset_without_hdf5_chunk_cache(make_h5):
    path = make_h5({"train/images": (images(10), "gzip")})
    source = H5Source(path, FileOptions(rdcc_nbytes=10**6))
    plain = source.dataset("train/images")
    assert plain.id.get_access_plist().get_chunk_cache()[1] == 10**6
    source.close()
    uncached = source.dataset("train/images", chunk_cache=False)
    assert uncached.id.get_access_plist().get_chunk_cache()[1] == 0
    assert source.dataset("train/images", chunk_cache=False) is uncached  # kept per process
    np.testing.assert_array_equal(uncached[3], images(10)[3])
    with pytest.raises(KeyError, match="'nope' not found"):
        source.dataset("nope", chunk_cache=False)


@pytest.mark.slow
def test_filter_plugins_load_before_the_first_open(tmp_path):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    import subprocess
    import sys

    path = tmp_path / "zstd.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=images(20), chunks=(4, 3, 4), **hdf5plugin.Zstd())
    script = (
        "import sys\n"
        "from nn_handler.dataloaders import H5LazyDataset\n"
        "assert 'hdf5plugin' not in sys.modules\n"
        f"ds = H5LazyDataset({str(path)!r}, 'x')\n"
        "print(float(ds[[7]][0, 0, 0]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "7.0"
