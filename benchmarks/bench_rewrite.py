"""nn-handler rewrite on three bad layouts users really have: loader speed before / after, sizes,
and the rewrite's own speed against a plain h5py copy loop, h5repack (when on PATH, with the
same chunks and codec per dataset) and the chosen codec's write speed on all cores, all measured
in this run.

Layouts:
* ``row-per-chunk``: one 1 KiB row per gzip chunk (x float32 (n, 256), y int64);
* ``gzip9-16MB``: gzip level 9, 16 MiB chunks (x float32 (n, 1024), y int64);
* ``anndata``: a CSR .h5ad written by anndata with gzip and its writer's (h5py's) default chunks
  (reproduced with h5py ``chunks=True`` when anndata is not installed).

Loader: ``batched_loader(ds, 256, sampler=ChunkShuffleSampler(ds))`` (``H5LazyDataset`` x + y,
``H5SparseDataset`` for the .h5ad), rows/s over ``--seconds`` or one epoch. Rewrite: the default
options (zstd level 3, 1 MiB chunks of whole rows); "rewrite MB/s" is the input's decoded bytes
over ``report.seconds``, the writing step alone (read, compress, write: what the codec limit
compares with; verification timed apart); "end to end" over the whole ``rewrite_file`` call
(inspecting and planning, writing, verifying every row through h5py). Codec limit: the
output's decoded bytes cut in its chunks and compressed with the same codec in a pool of every
core, in memory. Input read: the input's decoded data read as the rewrite reads it
(``RowReader.read_range``, 4 MiB slabs, decode pool on every core), nothing written. Bound: when
reading and compressing each keep every core busy, writing ``B`` bytes takes at least
``B / read + B / codec``, so rewrite / codec cannot exceed ``read / (read + codec)``. Copy loop:
``dst[a:b] = src[a:b]`` per dataset into the same chunks and codec.

    python benchmarks/bench_rewrite.py [--scale 1.0] [--seconds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np

from nn_handler._io.file.filters import filters_of
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    H5LazyDataset,
    H5SparseDataset,
    batched_loader,
)
from nn_handler.rewrite import rewrite_file
from nn_handler.rewrite.codecs import Codec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import median

SLAB_BYTES = 4 << 20  # the rewrite's slabs when it reads in order (rewrite.chunking)


def write_row_per_chunk(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = (rng.normal(size=(n, 256)) * 10).round(2).astype(np.float32)
        f.create_dataset("x", data=x, chunks=(1, 256), compression="gzip")
        f.create_dataset("y", data=rng.integers(0, 10, n), chunks=(1,), compression="gzip")


def write_gzip9_16mb(path: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", (n, 1024), np.float32, chunks=(4096, 1024), compression="gzip",
                             compression_opts=9)  # fmt: skip
        for a in range(0, n, 4096):
            rows = min(4096, n - a)
            x[a : a + rows] = (rng.normal(size=(rows, 1024)) * 10).round(2)
        f.create_dataset("y", data=rng.integers(0, 10, n), compression="gzip", compression_opts=9)


def write_anndata(path: Path, n: int) -> str:
    rng = np.random.default_rng(2)
    genes = 2000
    nnz_per_row = rng.binomial(genes, 0.05, n)
    indptr = np.concatenate([[0], np.cumsum(nnz_per_row)])
    indices = np.concatenate([np.sort(rng.choice(genes, k, replace=False)) for k in nnz_per_row])
    data = rng.integers(1, 30, len(indices)).astype(np.float32)
    try:
        import anndata as ad
        import scipy.sparse as sp
    except ImportError:
        with h5py.File(path, "w") as f:
            f.attrs["encoding-type"], f.attrs["encoding-version"] = "anndata", "0.1.0"
            g = f.create_group("X")
            g.attrs["encoding-type"], g.attrs["encoding-version"] = "csr_matrix", "0.1.0"
            g.attrs["shape"] = np.array([n, genes])
            for name, values in (("data", data), ("indices", indices.astype(np.int32)),
                                 ("indptr", indptr)):  # fmt: skip
                g.create_dataset(name, data=values, chunks=True, compression="gzip")
        return "h5py (anndata's layout reproduced)"
    matrix = sp.csr_matrix((data, indices.astype(np.int32), indptr), shape=(n, genes))
    ad.AnnData(matrix).write_h5ad(path, compression="gzip")
    return f"anndata {importlib.metadata.version('anndata')}"


def loader_rate(path: Path, sparse: bool, seconds: float) -> float:
    ds = H5SparseDataset(str(path)) if sparse else H5LazyDataset(str(path), "x", y_key="y")
    loader = batched_loader(ds, 256, sampler=ChunkShuffleSampler(ds, seed=0))
    rows, start = 0, time.perf_counter()
    for batch in loader:
        rows += len(batch[0]) if isinstance(batch, (tuple, list)) else len(batch)
        if time.perf_counter() - start > seconds:
            break
    return rows / (time.perf_counter() - start)


def decoded_bytes(path: Path) -> int:
    total = 0
    with h5py.File(path) as f:

        def add(_: str, obj: object) -> None:
            nonlocal total
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind != "O":
                total += obj.size * obj.dtype.itemsize

        f.visititems(add)
    return total


def codec_limit(path: Path, workers: int) -> float:
    """MB/s of compressing the output's decoded data, chunk by chunk, on every core."""
    jobs = []
    with h5py.File(path) as f:

        def collect(_: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset) and obj.chunks and obj.dtype.kind != "O":
                rows = obj.chunks[0]
                for a in range(0, obj.shape[0], rows):
                    chunk = np.zeros(obj.chunks, obj.dtype)
                    part = obj[a : a + rows]
                    chunk[: len(part)] = part
                    jobs.append((Codec.for_dtype("zstd", 3, obj.dtype), chunk))

        f.visititems(collect)
    nbytes = sum(c.nbytes for _, c in jobs)
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda job: job[0].encode(job[1]), jobs))
    return nbytes / (time.perf_counter() - start) / 1e6


def read_rate(path: Path) -> float:
    """MB/s of reading the input's decoded data as the rewrite does, on every core.

    Every dataset of fixed-size values through ``RowReader.read_range`` in the rewrite's 4 MiB
    slabs (its decode pool on every core), nothing compressed or written.
    """
    source = H5Source(str(path), FileOptions())
    names: list[str] = []
    source.file.visititems(
        lambda k, o: (
            names.append(k)
            if isinstance(o, h5py.Dataset) and o.shape and o.dtype.kind != "O"
            else None
        )
    )
    nbytes, start = 0, time.perf_counter()
    for k in names:
        reader = RowReader(source, k)
        step = max(1, SLAB_BYTES // max(1, reader.row_nbytes))
        for a in range(0, reader.length, step):
            nbytes += reader.read_range(a, min(a + step, reader.length)).nbytes
    seconds = time.perf_counter() - start
    source.close()
    return nbytes / seconds / 1e6


def copy_loop(src: Path, dst: Path, like: Path) -> float:
    """Seconds of a plain h5py copy into the rewrite's chunks and codec (zstd 3)."""
    start = time.perf_counter()
    with h5py.File(src) as a, h5py.File(like) as shape, h5py.File(dst, "w") as b:
        names: list[str] = []
        a.visititems(lambda k, o: names.append(k) if isinstance(o, h5py.Dataset) else None)
        for k in names:
            ref = shape[k]
            kw = {"chunks": ref.chunks, "shuffle": ref.dtype.itemsize > 1,
                  **hdf5plugin.Zstd(clevel=3)} if ref.chunks else {}  # fmt: skip
            out = b.create_dataset(k, a[k].shape, a[k].dtype, **kw)
            step = max(1, (64 << 20) // max(1, a[k].dtype.itemsize * int(np.prod(a[k].shape[1:]))))
            for i in range(0, a[k].shape[0], step):
                out[i : i + step] = a[k][i : i + step]
    return time.perf_counter() - start


def repack_options(src: Path, like: Path) -> dict[str, list[str]]:
    """Per dataset of ``src`` chunked in ``like``: h5repack's ``-l`` / ``-f`` options giving it
    ``like``'s chunks and filters (byte shuffle, then the codec: zstd / lz4 as ``UD=``)."""
    options: dict[str, list[str]] = {}
    with h5py.File(src) as a, h5py.File(like) as b:
        names: list[str] = []
        a.visititems(lambda k, o: names.append(k) if isinstance(o, h5py.Dataset) else None)
        for k in (k for k in names if k in b and b[k].chunks and b[k].dtype.kind != "O"):
            opts = ["-l", f"/{k}:CHUNK={'x'.join(map(str, b[k].chunks))}"]
            for step in filters_of(b[k]):
                if step.code == h5py.h5z.FILTER_SHUFFLE:
                    opts += ["-f", f"/{k}:SHUF"]
                elif step.code == h5py.h5z.FILTER_DEFLATE:
                    opts += ["-f", f"/{k}:GZIP={step.values[0]}"]
                else:  # a plugin filter: id, flag 0 (mandatory), the values HDF5 stores
                    cd = ",".join(map(str, step.values))
                    opts += ["-f", f"/{k}:UD={step.code},0,{len(step.values)},{cd}"]
            options[k] = opts
    return options


def h5repack(src: Path, dst: Path, like: Path) -> float | None:
    """Seconds of h5repack writing ``src`` in ``like``'s chunks and codec, or None (no tool).

    hdf5plugin's filter libraries reach HDF5 through ``HDF5_PLUGIN_PATH``. Every dataset given
    options is checked afterwards, so a repack that silently dropped a filter fails here.
    """
    if shutil.which("h5repack") is None:
        return None
    options = repack_options(src, like)
    argv = ["h5repack", *(o for opts in options.values() for o in opts), str(src), str(dst)]
    env = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
    start = time.perf_counter()
    subprocess.run(argv, check=True, timeout=600, env=env, capture_output=True)
    seconds = time.perf_counter() - start
    with h5py.File(dst) as a, h5py.File(like) as b:
        for k in options:
            theirs, ours = ((d.chunks, [f.code for f in filters_of(d)]) for d in (a[k], b[k]))
            if theirs != ours:
                raise AssertionError(f"h5repack wrote {k!r} unlike the rewrite")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1.0: ~64 MiB per layout")
    parser.add_argument("--seconds", type=float, default=3.0, help="loader budget per run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    workers = len(os.sched_getaffinity(0))
    layouts = {
        "row-per-chunk": (write_row_per_chunk, int(65536 * args.scale), False),
        "gzip9-16MB": (write_gzip9_16mb, int(16384 * args.scale), False),
        "anndata": (write_anndata, int(20000 * args.scale), True),
    }
    print(f"{workers} cores, load {os.getloadavg()[0]:.2f}, scale {args.scale}, "
          f"median of {args.repeats}")  # fmt: skip
    print("| layout | size before → after | loader rows/s before → after (×) | rewrite MB/s "
          "(verify s) | end to end MB/s | copy loop MB/s | h5repack MB/s | codec MB/s on all "
          "cores | input read MB/s | rewrite / codec (end to end) | bound |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (write, n, sparse) in layouts.items():
            src, dst = Path(tmp, f"{name}.h5"), Path(tmp, f"{name}.fast.h5")
            note = write(src, n)
            nbytes = decoded_bytes(src)
            keys = ("before", "after", "rw", "all", "ver", "read", "copy", "repack", "codec")
            runs: dict[str, list[float]] = {k: [] for k in keys}
            for _ in range(args.repeats):
                runs["before"].append(loader_rate(src, sparse, args.seconds))
                start = time.perf_counter()
                report = rewrite_file(src, dst, force=True, progress=False, workers=workers)
                runs["all"].append(nbytes / (time.perf_counter() - start) / 1e6)
                runs["rw"].append(nbytes / report.seconds / 1e6)
                runs["ver"].append(report.verify_seconds)
                runs["after"].append(loader_rate(dst, sparse, args.seconds))
                runs["copy"].append(nbytes / copy_loop(src, Path(tmp, "copy.h5"), dst) / 1e6)
                repack = h5repack(src, Path(tmp, "repack.h5"), dst)
                if repack is not None:
                    runs["repack"].append(nbytes / repack / 1e6)
                runs["codec"].append(codec_limit(dst, workers))
                runs["read"].append(read_rate(src))
            m = {k: median(v) for k, v in runs.items()}
            size = f"{os.path.getsize(src) / 2**20:.1f} → {os.path.getsize(dst) / 2**20:.1f} MiB"
            repack_text = f"{m['repack']:,.0f}" if runs["repack"] else "not on PATH"
            print(f"| {name}{f' ({note})' if note else ''} | {size} | {m['before']:,.0f} → "
                  f"{m['after']:,.0f} ({m['after'] / m['before']:.1f}×) | {m['rw']:,.0f} "
                  f"({m['ver']:.1f}) | {m['all']:,.0f} | {m['copy']:,.0f} | {repack_text} | "
                  f"{m['codec']:,.0f} | {m['read']:,.0f} | {m['rw'] / m['codec']:.2f} "
                  f"({m['all'] / m['codec']:.2f}) | {m['read'] / (m['read'] + m['codec']):.2f} "
                  "|")  # fmt: skip


if __name__ == "__main__":
    main()
