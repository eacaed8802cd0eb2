"""Damaged files, row by row: damaged, truncated and changing files give the right bytes or an error
that names the problem; never garbage, a hang or a crash. Cases that crashed or hung the
interpreter before the fix run in a subprocess with a timeout."""

from __future__ import annotations

import errno
import os
import re
import struct
import time
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nn_handler._io.file import source as source_module
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders import (
    CombinedHDF5Dataset,
    CorruptFileError,
    ExternalDataError,
    FileChangedError,
    H5LazyDataset,
    H5SampleDataset,
    RankMemCachedH5Dataset,
)

from helpers.damage import chunk_infos, flip_byte, reduce_precision, rows, run_python, signal_name

TIMEOUT = 60  # a subprocess that passes takes ~3 s; a regression hangs for minutes or crashes


def write(path: Path, data: np.ndarray, libver: str | None = None, **kw) -> Path:
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("x", data=data, **kw)
    return path


def h5(path: Path, key: str = "x") -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f[key][()]


def test_truncated_latest_format_file_is_refused_with_default_swmr(tmp_path):
    path = write(tmp_path / "t.h5", rows(1000), libver="latest")
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(CorruptFileError, match=r"t\.h5' is truncated") as info:
        H5LazyDataset(path, "x")  # swmr=True (default): HDF5 would accept it in SWMR mode
    assert "locking" not in str(info.value)


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_chunked_file_truncated_mid_chunk_is_refused(tmp_path, libver):
    path = write(tmp_path / "c.h5", rows(1000), libver=libver, chunks=(100, 4))
    last = chunk_infos(path)[-1]
    os.truncate(path, last.byte_offset + last.size // 2)
    with pytest.raises(CorruptFileError, match="is truncated"):
        H5LazyDataset(path, "x", swmr=False)
    with pytest.raises(CorruptFileError, match="is truncated"):
        H5LazyDataset(path, "x")


@pytest.mark.slow
def test_corrupt_superblock_fails_within_seconds_with_default_swmr(tmp_path):
    path = write(tmp_path / "s.h5", rows(100), libver="latest")
    flip_byte(path, 20)  # inside the checksummed superblock v3
    done = run_python(
        f"""
        import time
        from nn_handler.dataloaders import CorruptFileError, H5LazyDataset
        start = time.perf_counter()
        try:
            H5LazyDataset({str(path)!r}, "x")
        except CorruptFileError as exc:
            print(round(time.perf_counter() - start, 2), exc)
        """,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    seconds, message = done.stdout.split(" ", 1)
    assert float(seconds) < 10  # SWMR's metadata retries took more than 10 minutes
    assert "is corrupt" in message and "checksum" in message and "locking" not in message


def short_gzip_file(tmp_path: Path) -> Path:
    data = rows(1000)
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=data, chunks=(100, 4), compression="gzip")
        d.id.write_direct_chunk((0, 0), zlib.compress(data[:50].tobytes()), 0)  # half a chunk
    return path


def test_short_deflate_stream_raises_on_every_path(tmp_path):
    path = short_gzip_file(tmp_path)
    ds = H5LazyDataset(path, "x")
    problem = (
        r"g\.h5': the chunk at \(0, 0\) is corrupt "
        r"\(.*(decoded|inflates) to 800 bytes, expected 1600"
    )
    for read in (lambda: ds[60], lambda: ds[[60, 500]], lambda: ds.__getitems__([3])):
        with pytest.raises(CorruptFileError, match=problem):
            read()
    assert ds[[100, 999]].tolist() == rows(1000)[[100, 999]].tolist()  # other chunks are fine
    with pytest.raises(CorruptFileError, match=problem):
        RankMemCachedH5Dataset(path, "x", log_fn=lambda _: None, rank=0, world_size=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lazy-contiguous", "lazy-chunked", "sample"])
def test_file_truncated_under_a_running_reader_raises_not_sigbus(tmp_path, kind):
    path = tmp_path / "m.h5"
    if kind == "sample":
        build = f"H5SampleDataset({str(path)!r})"
        with h5py.File(path, "w") as f:
            for i in range(20):
                f[f"s{i}"] = rows(2000) + i
    else:
        chunks = (100, 4) if kind == "lazy-chunked" else None
        write(path, rows(100_000), chunks=chunks)
        build = f"H5LazyDataset({str(path)!r}, 'x')"
    done = run_python(
        f"""
        import os
        from nn_handler.dataloaders import FileChangedError, H5LazyDataset, H5SampleDataset
        ds = {build}
        ds[len(ds) - 1]
        os.truncate({str(path)!r}, 4096)
        try:
            ds[len(ds) - 1]
        except FileChangedError as exc:
            print("raised", exc)
        """,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"{signal_name(done.returncode)}: {done.stderr[-2000:]}"
    assert done.stdout.startswith("raised") and "m.h5" in done.stdout


@pytest.mark.parametrize("chunks", [None, (5, 3)])
def test_reduced_precision_integers_are_read_as_hdf5_converts_them(tmp_path, chunks):
    values = np.array([[0xFFF, 0x8000, 5], [0x7FFFF, -1, 2**20], [0, 1, 2**21 - 1]], "<i4")
    path = write(tmp_path / "p.h5", np.tile(values, (7, 1)), libver="earliest", chunks=chunks)
    reduce_precision(path, 20)  # HDF5 now sign-extends bit 19: the bytes are not the values
    expected = h5(path)
    assert not np.array_equal(expected, np.tile(values, (7, 1)))  # the trap is armed
    reader = RowReader(H5Source(path, FileOptions()), "x")
    assert reader.strategy in ("slabs", "chunks")  # not memmap: raw bits would be wrong
    assert reader.read([20, 0, 4]).tobytes() == expected[[20, 0, 4]].tobytes()
    assert reader.read_range(0, 21).tobytes() == expected.tobytes()


def test_external_link_datasets_are_read_from_the_linked_file(tmp_path):
    other = write(tmp_path / "other.h5", rows(10) + 100)
    path = tmp_path / "main.h5"
    with h5py.File(path, "w") as f:
        # same first and last rows in this file, at the offsets of the other file's data: a
        # memory map of this file at those offsets would pass a first/last-row probe
        f.create_dataset("pad", data=np.tile(rows(10) + 100, (3, 1)))
        f["x"] = h5py.ExternalLink("other.h5", "x")
    ds = H5LazyDataset(path, "x")
    assert ds._x.strategy == "slabs"
    assert ds[[3, 0, 9]].numpy().tobytes() == h5(other)[[3, 0, 9]].tobytes()
    ds.close()
    with h5py.File(path, "a") as f:
        f.create_group("samples")["a"] = h5py.ExternalLink("other.h5", "x")
    sample = H5SampleDataset(path, group="samples")[0]["data"]
    assert sample.numpy().tobytes() == h5(other).tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["rewritten-in-place", "renamed-over"])
def test_file_replaced_between_epochs_raises_in_the_workers(tmp_path, how):
    path = write(tmp_path / "r.h5", rows(100))
    ds = H5LazyDataset(path, "x")
    loader = DataLoader(ds, batch_size=10, num_workers=1, multiprocessing_context="fork")
    assert next(iter(loader))[0, 0].item() == 1
    new = tmp_path / "new.h5"
    with h5py.File(new, "w") as f:  # same length; the data sits at another offset
        f.create_dataset("pad", data=np.zeros(16, np.float32))
        f.create_dataset("x", data=rows(100) + 1000)
    if how == "renamed-over":
        os.replace(new, path)
    else:
        path.write_bytes(new.read_bytes())
    with pytest.raises(FileChangedError, match=r"r\.h5' changed after the dataset was built"):
        next(iter(loader))
    with pytest.raises(FileChangedError):
        ds[0]  # the main process too


def test_sidecar_of_a_file_rewritten_with_same_size_and_mtime_is_rebuilt(tmp_path):
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        for i in range(5):
            f[f"t_{i}"] = np.full(3, i, np.float32)
    before = os.stat(path)
    assert H5SampleDataset(path).index_origins == ("built",)
    assert H5SampleDataset(path).index_origins == ("sidecar",)
    with h5py.File(path, "r+") as f:
        del f["t_4"]
        f["t_9"] = np.full(3, 9, np.float32)
    assert os.path.getsize(path) == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime put back
    ds = H5SampleDataset(path)
    assert ds.index_origins == ("built",)
    assert [ds[i]["data"][0].item() for i in range(len(ds))] == [0, 1, 2, 3, 9]


def combined_files(tmp_path: Path, epoch_dtypes: tuple[str, str]) -> list[Path]:
    paths = []
    for name, dtype in zip("ab", epoch_dtypes, strict=True):
        path = tmp_path / f"{name}.h5"
        with h5py.File(path, "w") as f:
            f["fhr_st"] = rows(3)
            f["epoch"] = np.array([2**63 - 5, 2, 3]).astype(dtype)
        paths.append(path)
    return paths


def test_combined_int64_with_uint64_is_refused_not_turned_into_floats(tmp_path):
    paths = combined_files(tmp_path, ("int64", "uint64"))
    with pytest.raises(TypeError, match=r"'epoch' is stored as integers .*a\.h5': int64"):
        CombinedHDF5Dataset(paths, load_fields=["epoch"], pin_memory=False)
    paths = combined_files(tmp_path, ("int64", "int32"))
    batch = CombinedHDF5Dataset(paths, load_fields=["epoch"], pin_memory=False)[[0, 3]]
    assert batch["epoch"].dtype == torch.int64 and batch["epoch"][0].item() == 2**63 - 5


def test_combined_same_file_under_two_spellings_is_refused(tmp_path, monkeypatch):
    path = combined_files(tmp_path, ("int64", "int64"))[0]
    (tmp_path / "link.h5").symlink_to(path)
    os.link(path, tmp_path / "hard.h5")
    monkeypatch.chdir(tmp_path)
    for other in ("./a.h5", tmp_path / "link.h5", tmp_path / "hard.h5", str(path)):
        with pytest.raises(ValueError, match="the same file; each file may appear once"):
            CombinedHDF5Dataset([path, other], pin_memory=False)


def test_open_errors_name_the_real_cause(tmp_path, monkeypatch):
    path = write(tmp_path / "e.h5", rows(10))
    truncated = write(tmp_path / "t.h5", rows(1000))
    os.truncate(truncated, 100)
    corrupt = write(tmp_path / "c.h5", rows(10), libver="latest")
    flip_byte(corrupt, 20)
    for bad, expected in ((truncated, "is truncated"), (corrupt, "is corrupt")):
        with pytest.raises(CorruptFileError, match=expected) as info:
            H5Source(bad, FileOptions(swmr=False)).file
        assert "locking=False" not in str(info.value)  # "superblock" holds "lock"
        assert info.value.path == str(bad)
    locks = [open_error(errno.ENOLCK, "unable to lock file, errno = 37"), open_error(11, "x")]
    locks += [open_error(524, "x"), open_error(None, "unable to lock file, errno = 524")]
    for exc in locks:
        monkeypatch.setattr(h5py, "File", raiser(exc))
        with pytest.raises(OSError, match="pass locking=False"):
            H5Source(path, FileOptions()).file
    monkeypatch.setattr(h5py, "File", raiser(open_error(None, "bad superblock version number")))
    with pytest.raises(CorruptFileError, match="is corrupt") as info:
        H5Source(path, FileOptions()).file
    assert "locking" not in str(info.value)


def open_error(code: int | None, text: str) -> OSError:
    message = f"Unable to synchronously open file ({text})"
    return OSError(message) if code is None else OSError(code, message)


def raiser(exc: OSError):
    def fail(*args, **kwargs):
        raise exc

    return fail


def test_unwritten_gzip_chunks_read_as_the_fill_value_everywhere(tmp_path):
    path = tmp_path / "u.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", (1000, 4), "f4", chunks=(100, 4), compression="gzip", fillvalue=7)
        d[0] = 1
    expected = h5(path)
    ds = H5LazyDataset(path, "x")
    assert ds[500].tolist() == [7] * 4
    assert ds[[0, 500, 999]].numpy().tobytes() == expected[[0, 500, 999]].tobytes()
    assert ds._x.read_range(0, 1000).tobytes() == expected.tobytes()
    cached = RankMemCachedH5Dataset(path, "x", log_fn=lambda _: None, rank=0, world_size=1)
    assert cached[np.arange(1000)].numpy().tobytes() == expected.tobytes()


def forge_first_chunk_size(path: Path, new_size: int) -> None:
    """Rewrite the recorded size of chunk (0, 0) in a version-1 B-tree key."""
    info = chunk_infos(path)[0]
    key = struct.pack("<II", info.size, 0) + bytes(8 * 3)  # size, mask, offsets 0, 0 and 0
    raw = path.read_bytes()
    assert raw.count(key) == 1
    with open(path, "r+b") as fh:
        fh.seek(raw.find(key))
        fh.write(struct.pack("<I", new_size))


@pytest.mark.slow
def test_chunk_size_forged_to_one_byte_is_refused_before_any_read(tmp_path):
    kw = {"chunks": (100, 4), "compression": "gzip", "fletcher32": True}
    path = write(tmp_path / "f.h5", rows(1000), libver="earliest", **kw)
    forge_first_chunk_size(path, 1)
    done = run_python(
        f"""
        from nn_handler.dataloaders import CorruptFileError, H5LazyDataset
        for swmr in (True, False):
            try:
                H5LazyDataset({str(path)!r}, "x", swmr=swmr)
            except CorruptFileError as exc:
                print(exc)
        """,
        timeout=TIMEOUT,
    )  # HDF5's Fletcher-32 filter reads before a 1-byte buffer: SIGSEGV in h5py itself
    assert done.returncode == 0, f"{signal_name(done.returncode)}: {done.stderr[-2000:]}"
    assert done.stdout.count("the chunk at (0, 0) records 1 bytes") == 2


def test_data_outside_the_directory_is_refused_unless_allowed(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    home = tmp_path / "data"
    home.mkdir()
    outside.mkdir()
    secret = outside / "secret.bin"
    secret.write_bytes(bytes(range(80)))
    (home / "inside.bin").write_bytes(bytes(range(80, 160)))
    src = write(outside / "src.h5", rows(10))
    path = home / "d.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("abs", (10, 8), "u1", external=[(str(secret), 0, 80)])
        f.create_dataset("rel", (10, 8), "u1", external=[("../outside/secret.bin", 0, 80)])
        f.create_dataset("ok", (10, 8), "u1", external=[("inside.bin", 0, 80)])
        layout = h5py.VirtualLayout((10, 4), "f4")
        layout[:] = h5py.VirtualSource(str(src), "x", shape=(10, 4))
        f.create_virtual_dataset("vds", layout)
        f["link"] = h5py.ExternalLink(str(src), "x")
    monkeypatch.chdir(home)  # HDF5 resolves relative external-storage names from the cwd
    for key in ("abs", "rel", "vds", "link"):
        with pytest.raises(ExternalDataError, match=f"'{key}' of .*outside the data file's dir"):
            H5LazyDataset(path, key)
        with pytest.raises(ExternalDataError, match="allow_external_files=True"):
            CombinedHDF5Dataset(path, field_names={"fhr_st": key}, pin_memory=False)[0]
        allowed = H5LazyDataset(path, key, allow_external_files=True)
        with h5py.File(path, "r") as f:
            assert allowed[[0, 9]].numpy().tobytes() == f[key][[0, 9]].tobytes()
    with pytest.raises(ExternalDataError):
        H5SampleDataset(path)[0]
    ok = H5LazyDataset(path, "ok")  # inside the directory: fine (HDF5 resolves it from cwd)
    assert ok._x.strategy == "slabs"


def test_forged_sidecars_are_checked_against_the_file(tmp_path):
    from nn_handler.dataloaders._per_sample.index import pack_names
    from nn_handler.dataloaders._per_sample.sidecar import save_sidecar

    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        for i in range(3):
            f[f"t_{i}"] = np.full(3, i, np.float32)
        f["secret"] = np.full(3, 99, np.float32)
    built = H5SampleDataset(path, pattern="t_*")
    header = dict(np.load(str(path) + ".nnh-index.npz", allow_pickle=False).items())
    meta = __import__("json").loads(header["header"].tobytes())
    meta.pop("version")
    blob, offsets = pack_names([b"secret", b"t_0"])  # a name outside pattern="t_*"
    save_sidecar(str(path), {"blob": blob, "offsets": offsets}, meta)
    ds = H5SampleDataset(path, pattern="t_*")
    assert ds.index_origins == ("built",) and len(ds) == len(built) == 3
    assert [ds[i]["data"][0].item() for i in range(3)] == [0, 1, 2]


def test_oversized_sidecar_is_not_inflated(tmp_path):
    import zipfile

    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        for i in range(3):
            f[f"t_{i}"] = np.full(3, i, np.float32)
    H5SampleDataset(path)
    side = str(path) + ".nnh-index.npz"
    with zipfile.ZipFile(side, "a", zipfile.ZIP_DEFLATED) as zf, zf.open("x.npy", "w") as fh:
        for _ in range(64):
            fh.write(bytes(1024**2))  # a 64 MiB member that compresses to ~64 KB
    start = time.perf_counter()
    assert H5SampleDataset(path).index_origins == ("built",)
    assert time.perf_counter() - start < 5  # refused by its declared size, never inflated


@pytest.mark.slow
def test_deflate_bomb_is_refused_at_one_chunk_of_memory(tmp_path):
    path = tmp_path / "b.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", (1000, 1000), "f4", chunks=(100, 1000), compression="gzip")
        d[:] = 1
        bomb = zlib.compressobj(1)
        stream = b"".join(bomb.compress(bytes(1024**2)) for _ in range(512)) + bomb.flush()
        d.id.write_direct_chunk((0, 0), stream, 0)  # 512 MiB of zeros where 400 KB belong
    done = run_python(
        f"""
        import resource
        from nn_handler.dataloaders import CorruptFileError, H5LazyDataset
        ds = H5LazyDataset({str(path)!r}, "x")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            ds[0]
        except CorruptFileError as exc:
            print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, exc)
        """,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    grown_kib, message = done.stdout.split(" ", 1)
    assert re.search(r"inflates (past|to more than the expected) 400000 bytes", message)
    assert int(grown_kib) < 64 * 1024  # was 2.1x h5py's peak: ours, then h5py's inflate


def test_inspect_escapes_control_characters(tmp_path):
    from nn_handler.cli import format_report
    from nn_handler.h5inspect import inspect_file

    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x\x1b[31mRED\u202e", data=np.zeros(3))
        d.attrs["note\x1b[2J"] = "v\x1b[0m\x07"
    text = format_report(inspect_file(path))
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "x\\x1b[31mRED\\u202e" in text and "note\\x1b[2J" in text


BAD_INDICES = [np.uint64(2**64 - 1), torch.tensor(1.7), np.array(1.5), torch.tensor(True)]


@pytest.mark.parametrize("index", BAD_INDICES, ids=repr)
def test_bad_indices_raise_on_every_dataset(tmp_path, index):
    path = write(tmp_path / "i.h5", rows(10))
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["fhr_st"] = rows(10)
    datasets = [
        H5LazyDataset(path, "x"),
        RankMemCachedH5Dataset(path, "x", log_fn=lambda _: None, rank=0, world_size=1),
        CombinedHDF5Dataset(tmp_path / "f.h5", pin_memory=False),
    ]
    for ds in datasets:
        with pytest.raises((TypeError, IndexError)):
            ds[index]
        with pytest.raises((TypeError, IndexError)):
            ds.__getitems__([index])
    with pytest.raises((TypeError, IndexError)):
        H5SampleDataset(path.parent / "f.h5")[index]


def test_fast_paths_agree_with_h5py_on_a_healthy_file(tmp_path):
    """The checks cost nothing in results: memmap and decode still serve healthy files."""
    for kw, strategy in (({}, "memmap"), ({"chunks": (10, 4), "compression": "gzip"}, "decode")):
        path = write(tmp_path / f"{strategy}.h5", rows(100), **kw)
        ds = H5LazyDataset(path, "x")
        assert ds._x.strategy == strategy
        assert ds[[99, 0, 50]].numpy().tobytes() == rows(100)[[99, 0, 50]].tobytes()


def test_source_option_is_validated():
    with pytest.raises(TypeError, match="allow_external_files must be True or False"):
        FileOptions(allow_external_files="yes")  # type: ignore[arg-type]
    assert source_module.FileOptions().allow_external_files is False


WRITER = """
import sys, time, h5py, numpy as np
f = h5py.File(sys.argv[1], "w", libver="latest")
d = f.create_dataset("x", (0, 4), "f4", maxshape=(None, 4), chunks=(10, 4))
f.swmr_mode = True
for line in sys.stdin:  # one line per append of 25 rows; "ready" after each
    n = d.shape[0]
    d.resize((n + 25, 4))
    d[n:] = np.arange(n, n + 25, dtype="f4")[:, None] + np.zeros(4, "f4")
    d.flush()
    print("ready", flush=True)
"""


@pytest.mark.slow
def test_dataset_built_while_a_swmr_writer_appends(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "w.h5"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:

        def append() -> None:
            assert writer.stdin is not None and writer.stdout is not None
            writer.stdin.write("go\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "ready"

        append()
        ds = H5LazyDataset(path, "x")  # a plain open is refused: opened in SWMR mode
        assert len(ds) == 25 and ds._source.may_grow
        append()  # the file grows under the dataset: allowed for a SWMR writer's file
        assert ds[[24, 0]][:, 0].tolist() == [24, 0]
        assert len(ds) == 25  # rows appended later appear in a dataset built later
        again = H5LazyDataset(path, "x")
        assert len(again) == 50 and again[49][0].item() == 49
    finally:
        for pipe in (writer.stdin, writer.stdout):
            if pipe is not None:
                pipe.close()
        writer.wait(timeout=TIMEOUT)
