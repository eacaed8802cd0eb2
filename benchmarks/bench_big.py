"""Files bigger than the caches: every pass cold (evicted, and checked) or warm, as labelled.

Writes two files of ``--rows`` rows of 3x32x32 float32 (170,000 rows: 2.09 GB decoded): gzip-1 +
shuffle in 64-row chunks, and uncompressed contiguous. Each pass runs in a process of its own
(so its peak RSS and the shared memory it leaves are its own); before a cold pass the file's
pages are evicted (``POSIX_FADV_DONTNEED``) and ``mincore`` must find none of them resident.

Measured in the same run, each round in turn (medians of ``--rounds`` rounds):

* limits: the disk's sequential rate (``O_DIRECT`` reads of 1 MiB), its random-read rate for
  one row at queue depth 32 (32 threads, ``O_DIRECT``), and the decode limit (the codec
  pipeline on chunks already in memory, one thread per core);
* gzip, the README's line ``batched_loader(ds, 256, shuffle=True)`` with default arguments, the
  first two epochs together (at most 120 s), cold: against the decode limit; and its first
  batch, in seconds from the dataset's construction (target: at most 1 s);
* the same with ``NN_HANDLER_DECODED_BUDGET=256MiB`` (``--seconds`` at most): the warnings said;
* gzip, ``ChunkShuffleSampler`` with the 256 MiB budget (the window path), cold and warm;
* uncompressed, ``shuffle=True``, cold, its first epoch (``--seconds`` at most: each row read
  once, so from the disk): against the disk's random rate; and the same for ``--seconds`` in a
  memory cgroup of 1 GiB, whose page cache cannot hold the 2 GB file (a file bigger than the
  caches; needs root, cgroup v1 or v2).

``--tables sparse`` runs single-cell rows instead: ``H5SparseDataset`` (``sparse_csr`` and dense
batches, a full shuffle, 0 and 2 workers) against the registered store peers (annbatch: its own
environment, converted once into its store) on a ``.h5ad`` of ``--sparse-rows`` cells
(1,000,000 x 20,000 at 5 %: 4 GB of stored values, written block by block), both sides' files
evicted before every pass.
``--sparse-ours FILE`` reads our rows from FILE instead, another ``.h5ad`` of the same cells
(our own conversion: ``nn-handler rewrite cells.h5ad FILE --codec zstd --sparse-chunk-bytes
256KiB --shuffle-rows 0``), while the store peers still convert the original; with
``NN_HANDLER_DECODED_BUDGET=0`` every pass of ours reads the compressed chunks from the disk.

Run: ``python benchmarks/bench_big.py [--rows 170000] [--rounds 3] [--seconds 20]
[--folder DIR] [--tables dense,sparse]`` or ``python benchmarks/run.py --big [the same
options]``. ``--src DIR`` times another tree's ``nn_handler`` (a checkout's ``src``) with the
same files and limits.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import median

ROW_SHAPE, CHUNK_ROWS, BATCH = (3, 32, 32), 64, 256
ROW_BYTES = 4 * 3 * 32 * 32
SMALL_BUDGET = "256MiB"
SMALL_CACHE = 1024**3  # a memory cgroup's limit: the 2 GB file cannot stay in its page cache
_TWO_EPOCHS_CAP_S = 120.0  # a loader far from the limit is timed this long, not two epochs


def write_files(folder: Path, rows: int) -> tuple[Path, Path]:
    """The gzip and the uncompressed file (written once; kept for the next run)."""
    gzip, raw = folder / f"big-gzip-{rows}.h5", folder / f"big-raw-{rows}.h5"
    if gzip.exists() and raw.exists():
        return gzip, raw
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (64 * 100, *ROW_SHAPE), dtype=np.uint8)
    with h5py.File(gzip, "w") as fz, h5py.File(raw, "w") as fr:
        z = fz.create_dataset(
            "x", (rows, *ROW_SHAPE), "f4", chunks=(CHUNK_ROWS, *ROW_SHAPE),
            compression="gzip", compression_opts=1, shuffle=True,
        )  # fmt: skip
        r = fr.create_dataset("x", (rows, *ROW_SHAPE), "f4")
        for f in (fz, fr):
            f.create_dataset("y", data=np.arange(rows) % 10)
        for lo in range(0, rows, len(base)):  # image-like values: a pixel / 255
            hi = min(rows, lo + len(base))
            block = (base[: hi - lo] + np.uint8(lo % 256)).astype(np.float32) / 255
            block[:, 0, 0, 0] = np.arange(lo, hi)  # row i starts with i: mix-ups show
            z[lo:hi] = block
            r[lo:hi] = block
    return gzip, raw


def evict(path: str | os.PathLike[str]) -> int:
    """Drop the pages of ``path`` (every file under it, for a folder); bytes still resident."""
    left = 0
    for file in _files(Path(path)):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)  # (dirty pages are not dropped)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        left += resident_bytes(file)
    return left


def evict_cold(path: str | os.PathLike[str], slack: float = 0.01) -> None:
    """``evict``, and refuse to call a pass cold when over ``slack`` of the bytes stayed."""
    size = sum(f.stat().st_size for f in _files(Path(path)))
    left = evict(path)
    if left > slack * size:
        raise RuntimeError(f"{path}: {left:,} of {size:,} bytes still resident after eviction")


def resident_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of the file ``path`` in the page cache now (``mincore`` over a map of it)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    vec = np.zeros(-(-size // mmap.PAGESIZE), np.uint8)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = np.frombuffer(m, np.uint8)
        failed = libc.mincore(view.__array_interface__["data"][0], size, vec.ctypes.data)
        del view  # (the map closes only once no array points into it)
    if failed:
        raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
    return int(np.count_nonzero(vec & 1)) * mmap.PAGESIZE


def _files(path: Path) -> list[Path]:
    return [p for p in sorted(path.rglob("*")) if p.is_file()] if path.is_dir() else [path]


def disk_sequential(path: Path, seconds: float) -> float:
    """MB/s of 1 MiB ``O_DIRECT`` reads from the start of ``path``."""
    block = 1 << 20
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT wants
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    size, done, began = path.stat().st_size, 0, time.perf_counter()
    try:
        while time.perf_counter() - began < seconds and done + block <= size:
            done += os.preadv(fd, [buf], done)
    finally:
        os.close(fd)
    return done / (time.perf_counter() - began) / 1e6


def disk_random_rows(path: Path, offset: int, rows: int, seconds: float, depth: int = 32) -> float:
    """Rows/s of ``depth`` threads each reading one random row at a time with ``O_DIRECT``."""
    page = mmap.PAGESIZE
    span = -(-(ROW_BYTES + page) // page) * page  # a row's pages, wherever it starts
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    stop, counts = time.perf_counter() + seconds, [0] * depth

    def reader(k: int) -> None:
        buf, rng = mmap.mmap(-1, span), random.Random(k)
        while time.perf_counter() < stop:
            start = (offset + rng.randrange(rows) * ROW_BYTES) // page * page
            os.preadv(fd, [buf], start)
            counts[k] += 1

    began = time.perf_counter()
    threads = [threading.Thread(target=reader, args=(k,)) for k in range(depth)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(fd)
    return sum(counts) / (time.perf_counter() - began)


def decode_limit(path: Path, chunks: int = 800) -> float:
    """Rows/s of the codec pipeline over ``chunks`` chunks in memory, one thread per core."""
    from nn_handler._io.chunks.codecs import pipeline_for

    with h5py.File(path) as f:
        dset = f["x"]
        pipeline = pipeline_for(dset)
        chunks = min(chunks, dset.shape[0] // CHUNK_ROWS)
        raws = [dset.id.read_direct_chunk((k * CHUNK_ROWS, 0, 0, 0)) for k in range(chunks)]
    assert pipeline is not None
    local = threading.local()

    def decode(raw: tuple[int, bytes]) -> None:
        out = getattr(local, "out", None)
        if out is None:
            out = local.out = np.empty(CHUNK_ROWS * ROW_BYTES, np.uint8)
        pipeline.decode_into(np.frombuffer(raw[1], np.uint8), raw[0], out)

    cores = len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(cores) as pool:
        list(pool.map(decode, raws[:cores]))  # (threads started, buffers made)
        began = time.perf_counter()
        list(pool.map(decode, raws))
    return chunks * CHUNK_ROWS / (time.perf_counter() - began)


# ---- one pass, in a process of its own -------------------------------------------------------


def one_pass(case: str, path: str, seconds: float) -> dict[str, Any]:
    """Run ``case`` on ``path``; what it measured (printed as JSON by ``--one``)."""
    import logging
    import resource

    from nn_handler.dataloaders import ChunkShuffleSampler, H5LazyDataset, batched_loader

    said: list[str] = []

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logging.getLogger("nn_handler").addHandler(Said(logging.WARNING))
    io_before = _io_read_bytes()
    began = time.perf_counter()
    ds = H5LazyDataset(path, "x", "y")
    if case == "chunk":
        loader = batched_loader(ds, BATCH, sampler=ChunkShuffleSampler(ds, seed=0))
    else:
        loader = batched_loader(ds, BATCH, shuffle=True)
    rows, epochs_done, first_batch_s = 0, 0, None
    limit = _TWO_EPOCHS_CAP_S if case == "two-epochs" else seconds
    wanted = {"two-epochs": 2, "one-epoch": 1}.get(case)  # (None: epochs until the limit)
    while (wanted is None or epochs_done < wanted) and time.perf_counter() - began < limit:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epochs_done)
        for xb, yb in loader:
            assert bool((xb[:, 0, 0, 0].long() % 10 == yb).all()), "a row mixed up"
            if first_batch_s is None:  # from construction: what a user waits for at start
                first_batch_s = time.perf_counter() - began
            rows += len(yb)
            if time.perf_counter() - began >= limit:
                break
        epochs_done += 1
    elapsed = time.perf_counter() - began
    return {
        "rows": rows,
        "seconds": elapsed,
        "rate": rows / elapsed,
        "first_batch_s": first_batch_s,
        "disk_mb_s": (_io_read_bytes() - io_before) / elapsed / 1e6,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "shm_mb": _shmem_bytes() / 1e6,
        "said": said,
    }


def _io_read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))


def _shmem_bytes() -> int:
    """Bytes of nn_handler's node regions now (the decoded copies this pass made).

    Regions live in the user's folder (``nn_handler-<uid>/``); a tree from before that layout
    (``--src``) kept them in the root.
    """
    root = Path(os.environ.get("NN_HANDLER_SHM_DIR") or "/dev/shm")
    found = [p for p in root.glob("nn_handler-*") if p.is_file()]
    found += [p for p in root.glob(f"nn_handler-{os.geteuid()}/*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in found)


def run_pass(
    case: str, path: Path, seconds: float, src: str | None, cache_bytes: int = 0, **env: str
) -> dict[str, Any]:
    """``one_pass`` in a new process (its own RSS, no state left from other passes).

    ``cache_bytes``: run it in a memory cgroup of that limit, so that its page cache (and
    its memory) cannot hold the file: a file bigger than the caches. Raises ``RuntimeError``
    where no cgroup can be made.
    """
    environment = dict(os.environ, **env)
    if src:
        environment["PYTHONPATH"] = src
    cmd = [sys.executable, __file__, "--one", case, "--file", str(path), "--seconds", str(seconds)]
    group = _memory_cgroup(cache_bytes) if cache_bytes else None
    try:
        enter = None if group is None else (lambda: _join_cgroup(group))
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=environment, check=False, preexec_fn=enter
        )
    finally:
        if group is not None:
            os.rmdir(group)
    if done.returncode != 0:
        raise RuntimeError(f"{case} on {path} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _memory_cgroup(limit: int) -> str:
    """A new memory cgroup (v1 or v2) of ``limit`` bytes; its folder."""
    v1 = Path("/sys/fs/cgroup/memory")
    folder = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / f"nnh-bench-{os.getpid()}"
    try:
        folder.mkdir()
        name = "memory.limit_in_bytes" if v1.is_dir() else "memory.max"
        (folder / name).write_text(str(limit))
    except OSError as exc:
        raise RuntimeError(f"no memory cgroup here ({exc}): run as root on Linux") from exc
    return str(folder)


def _join_cgroup(folder: str) -> None:
    with open(os.path.join(folder, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def round_of(gzip: Path, raw: Path, args: argparse.Namespace) -> dict[str, Any]:
    with h5py.File(raw) as f:
        offset = int(f["x"].id.get_offset())
    rows = args.rows
    r: dict[str, Any] = {}
    evict_cold(gzip)
    r["disk seq MB/s"] = disk_sequential(gzip, min(5.0, args.seconds))
    r["disk rows/s qd32"] = disk_random_rows(raw, offset, rows, min(5.0, args.seconds))
    r["decode limit rows/s"] = decode_limit(gzip)
    small = {"NN_HANDLER_DECODED_BUDGET": SMALL_BUDGET}
    evict_cold(gzip)
    r["gzip shuffle two epochs cold"] = run_pass("two-epochs", gzip, args.seconds, args.src)
    evict_cold(gzip)
    r["gzip shuffle, budget 256MiB"] = run_pass("shuffle", gzip, args.seconds, args.src, **small)
    evict_cold(gzip)
    r["gzip chunk cold"] = run_pass("chunk", gzip, args.seconds, args.src, **small)
    with open(gzip, "rb") as f:  # warm: read it once through the page cache
        while f.read(1 << 24):
            pass
    r["gzip chunk warm"] = run_pass("chunk", gzip, args.seconds, args.src, **small)
    evict_cold(raw)
    r["raw shuffle cold"] = run_pass("one-epoch", raw, args.seconds, args.src)
    evict_cold(raw)
    r["raw shuffle cold, 1 GiB cache"] = run_pass(
        "shuffle", raw, args.seconds, args.src, cache_bytes=SMALL_CACHE
    )
    return r


def report(rounds: list[dict[str, Any]]) -> None:
    def med(key: str, field: str | None = None) -> float:
        return median(x[key] if field is None else x[key][field] for x in rounds)

    print(f"\n## Big and cold files ({len(rounds)} rounds, medians)\n")
    print(
        f"limits: disk {med('disk seq MB/s'):,.0f} MB/s sequential, "
        f"{med('disk rows/s qd32'):,.0f} rows/s random at queue depth 32; decode "
        f"{med('decode limit rows/s'):,.0f} rows/s ({len(os.sched_getaffinity(0))} cores)\n"
    )
    print("| pass | rows/s | first batch s | MB/s from disk | peak RSS MB | shared MB | warnings |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    passes = [k for k in rounds[0] if isinstance(rounds[0][k], dict)]
    for key in passes:
        fields = ("rate", "first_batch_s", "disk_mb_s", "peak_rss_mb", "shm_mb")
        cells = [med(key, f) for f in fields]
        warned = median(len(x[key]["said"]) for x in rounds)
        print(f"| {key} | {cells[0]:,.0f} | {cells[1]:.2f} | {cells[2]:,.0f} | {cells[3]:,.0f} | "
              f"{cells[4]:,.0f} | {warned:.0f} |")  # fmt: skip
    ratios = {
        "gzip shuffle first batch, s (target <= 1)": [
            x["gzip shuffle two epochs cold"]["first_batch_s"] for x in rounds
        ],
        "gzip shuffle two epochs / decode limit (target >= 0.5)": [
            x["gzip shuffle two epochs cold"]["rate"] / x["decode limit rows/s"] for x in rounds
        ],
        "gzip chunk cold / warm (target >= 0.8)": [
            x["gzip chunk cold"]["rate"] / x["gzip chunk warm"]["rate"] for x in rounds
        ],
        "raw shuffle cold / disk qd32 (target >= 0.7)": [
            x["raw shuffle cold"]["rate"] / x["disk rows/s qd32"] for x in rounds
        ],
        "raw shuffle, 1 GiB cache / disk qd32 (target >= 0.7)": [
            x["raw shuffle cold, 1 GiB cache"]["rate"] / x["disk rows/s qd32"] for x in rounds
        ],
    }
    print()
    for label, values in ratios.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"- {label}: {median(values):.2f} (rounds: {shown})")
    said = rounds[0]["gzip shuffle, budget 256MiB"]["said"]
    print(f"- warnings with the 256 MiB budget: {len(said)}" + (f": {said[0]}" if said else ""))


def sparse_table(args: argparse.Namespace, folder: Path) -> str:
    """H5SparseDataset against the store peers on a .h5ad of ``--sparse-rows`` cells, cold."""
    from benchmarks.suites.sparse_data import write_sparse_h5ad_streamed
    from benchmarks.suites.stores import default_envs, prepare_stores, run_vs_stores

    path = folder / f"cells-{args.sparse_rows}x20000-0.05-none.h5ad"
    if not path.exists():
        print(f"writing {path} block by block …", flush=True)
        write_sparse_h5ad_streamed(path, args.sparse_rows, 20_000, 0.05)
    peers = prepare_stores(args.envs or default_envs())
    # annbatch holds add_adatas(dataset_size=) rows in memory while it converts: its 20GB
    # default is killed on a 24 GB machine; 4GB converts this file in five datasets
    ours = args.sparse_ours or str(path)  # (our own conversion of the same cells, if given)
    return run_vs_stores(
        ours, peers, args.seconds, args.rounds, 4096, (0, 2), evict=evict_cold,
        dataset_size="4GB", source_h5ad=str(path),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=170_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--folder", default=str(Path(__file__).resolve().parents[1] / "build"))
    p.add_argument("--src", default=None, help="time another tree's src (PYTHONPATH)")
    p.add_argument("--tables", default="dense", help="dense, sparse or dense,sparse")
    p.add_argument("--sparse-rows", type=int, default=1_000_000, help="cells (1e9 values: 4 GB)")
    p.add_argument("--envs", default=None, help="the store peers' environments (made once)")
    p.add_argument(
        "--sparse-ours",
        default=None,
        help="sparse: read this .h5ad (e.g. nn-handler rewrite of the file) for our rows",
    )
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--file", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one_pass(args.one, args.file, args.seconds)))
        return 0
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    tables = {t.strip() for t in args.tables.split(",")}
    if "dense" in tables:
        gzip, raw = write_files(folder, args.rows)
        report([round_of(gzip, raw, args) for _ in range(args.rounds)])
    if "sparse" in tables:
        print(sparse_table(args, folder), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
