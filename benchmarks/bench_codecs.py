"""Chunk codecs, old against new on the same chunks: decoded MB/s with 1 and 2 threads.

"new" is ``_io/chunks/codecs.py`` as it is (imagecodecs); "fallback" the same code with
imagecodecs switched off (zlib, NumPy: a plain ``pip install nn-handler``; "—" where h5py
decodes instead); "old" the decoders of a git revision (``--baseline``, default 5bc6b5e:
libdeflate and hdf5plugin's libraries through ``ctypes``, NumPy shuffle and Fletcher-32), loaded
from ``git show``. Each thread decodes every chunk of a file into its own buffer; rounds
alternate old / new / fallback and the median of the rounds is reported, so a busy machine slows
all of them alike. The step rows time one filter alone on the chunks of the gzip + shuffle file
(shuffle and Fletcher-32 on their inflated bytes); the numcodecs row is a candidate that was
measured and not taken.

Run: ``python benchmarks/bench_codecs.py [--rounds 7] [--baseline 5bc6b5e]``
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np

import nn_handler._io.chunks.decoders as decoders
import nn_handler._io.chunks.plugins as plugins
from nn_handler._io.chunks.codecs import pipeline_for
from nn_handler.bench import machine_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import median

OLD_FILES = ("codec.py", "inflate.py", "pipeline.py")
OLD_DIR = "src/nn_handler/_io/chunks"
LAYOUTS: dict[str, dict[str, Any]] = {
    "gzip": {"compression": "gzip", "compression_opts": 4},
    "gzip + shuffle": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
    "gzip + shuffle + fletcher32": {"compression": "gzip", "shuffle": True, "fletcher32": True},
    "zstd": dict(hdf5plugin.Zstd(clevel=3)),
    "lz4": dict(hdf5plugin.LZ4()),
    "blosc (lz4, shuffle)": dict(hdf5plugin.Blosc(cname="lz4", clevel=5)),
    "bitshuffle + lz4": dict(hdf5plugin.Bitshuffle(cname="lz4")),
}
ROWS, ROW, CHUNK_ROWS = 2048, 2000, 128  # float32 rows of 8 KB, chunks of 1 MB (W3-like)
Decode = Callable[[np.ndarray[Any, Any], int, np.ndarray[Any, Any]], Any]
Chunks = list[tuple[int, np.ndarray[Any, Any]]]


def load_old(revision: str) -> types.ModuleType:
    """The old chunk decoders (codec, inflate, pipeline) of ``revision`` as a package."""
    root = tempfile.mkdtemp(prefix="old_codecs_")
    package = os.path.join(root, "old_chunks")
    os.mkdir(package)
    open(os.path.join(package, "__init__.py"), "w").close()
    for name in OLD_FILES:
        text = subprocess.run(
            ["git", "show", f"{revision}:{OLD_DIR}/{name}"], check=True, capture_output=True
        ).stdout
        with open(os.path.join(package, name), "wb") as fh:
            fh.write(text)
    sys.path.insert(0, root)
    return importlib.import_module("old_chunks.pipeline")


@contextmanager
def fallbacks() -> Iterator[None]:
    """The new code with imagecodecs switched off (zlib, NumPy)."""
    saved = {
        (module, name): value
        for module in (decoders, plugins)
        for name, value in vars(module).items()
        if name.startswith("_") and name.endswith(("_decode", "_fletcher32"))
    }
    for module, name in saved:
        setattr(module, name, None)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def write_file(path: str) -> None:
    rng = np.random.default_rng(0)
    data = np.round(rng.standard_normal((ROWS, ROW)), 2).astype("<f4")  # compresses ~2x
    with h5py.File(path, "w") as f:
        for name, kw in LAYOUTS.items():
            f.create_dataset(name, data=data, chunks=(CHUNK_ROWS, ROW), **kw)


def raw_chunks(dset: h5py.Dataset) -> Chunks:
    found = []
    for i in range(dset.id.get_num_chunks()):
        mask, raw = dset.id.read_direct_chunk(dset.id.get_chunk_info(i).chunk_offset)
        found.append((mask, np.frombuffer(raw, np.uint8)))
    return found


def rate(decode: Decode, chunks: Chunks, nbytes: int, threads: int) -> float:
    """Decoded MB/s of ``threads`` threads, each decoding every chunk once."""

    def work(_: int) -> None:
        out = np.empty(nbytes, np.uint8)
        for mask, raw in chunks:
            decode(raw, mask, out)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))  # warm: threads, per-thread state
        start = time.perf_counter()
        list(pool.map(work, range(threads)))
        seconds = time.perf_counter() - start
    return threads * len(chunks) * nbytes / seconds / 1e6


def steps(
    old: types.ModuleType, chunks: Chunks, nbytes: int
) -> Iterator[tuple[str, Chunks, dict[str, Decode]]]:
    """Each filter alone: (name, its inputs, old / new / fallback decoders)."""
    inflated = []
    for mask, raw in chunks:
        out = np.empty(nbytes, np.uint8)
        decoders.inflate_into(raw, out)
        inflated.append((mask, out))
    old_codec = sys.modules[old.__package__ + ".codec"]
    old_inflate = sys.modules[old.__package__ + ".inflate"]

    def inflate(raw: Any, mask: int, out: Any) -> None:
        decoders.inflate_into(raw, out)

    def unshuffle(raw: Any, mask: int, out: Any) -> None:
        decoders.unshuffle_into(raw, out, 4)

    def fletcher(raw: Any, mask: int, out: Any) -> None:
        decoders.fletcher32(raw)

    yield (
        "inflate",
        chunks,
        {
            "old": lambda raw, mask, out: old_inflate.inflate_into(raw, out),
            "new": inflate,
            "fallback": inflate,
        },
    )
    yield (
        "unshuffle (4-byte elements)",
        inflated,
        {
            "old": lambda raw, mask, out: old.unshuffle_into(raw, out, 4),
            "new": unshuffle,
            "fallback": unshuffle,
        },
    )
    shuffle_codec = decoders.library("numcodecs", "Shuffle")
    if shuffle_codec is not None:  # a candidate we measured and did not take: not faster
        codec = shuffle_codec(4)
        yield (
            "unshuffle: NumPy (old) / numcodecs.Shuffle (new)",
            inflated,
            {"old": unshuffle, "new": lambda raw, mask, out: codec.decode(raw, out=out)},
        )
    yield (
        "fletcher32",
        inflated,
        {
            "old": lambda raw, mask, out: old_codec.fletcher32(raw),
            "new": fletcher,
            "fallback": fletcher,
        },
    )


def measure(
    cases: dict[str, Decode], chunks: Chunks, nbytes: int, rounds: int
) -> dict[tuple[str, int], float]:
    runs: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for threads in (1, 2):
            for name, decode in cases.items():
                with fallbacks() if name == "fallback" else _nothing():
                    runs.setdefault((name, threads), []).append(
                        rate(decode, chunks, nbytes, threads)
                    )
    return {key: median(values) for key, values in runs.items()}


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def table_row(name: str, threads: int, got: dict[tuple[str, int], float]) -> str:
    o, n = got[("old", threads)], got[("new", threads)]
    fb = got.get(("fallback", threads))
    fallback = "—" if fb is None else f"{fb:,.0f}"
    return f"| {name} | {threads} | {o:,.0f} | {n:,.0f} | {n / o:.2f} | {fallback} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", default="5bc6b5e")
    args = parser.parse_args()
    old = load_old(args.baseline)
    print(f"# Chunk codecs: old ({args.baseline}) / new / fallback\n\n{machine_line()}\n")
    header = (
        "| threads | old MB/s | new MB/s | new / old | fallback MB/s |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    print(f"| chunks (1 MB of float32) {header}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "codecs.h5")
        write_file(path)
        with h5py.File(path, "r") as f:
            for name in LAYOUTS:
                dset = f[name]
                new, before = pipeline_for(dset), old.pipeline_for(dset)
                assert new is not None, name
                assert before is not None, name
                cases = {"old": before.decode_into, "new": new.decode_into}
                if name.startswith("gzip"):  # plugin filters have no fallback: h5py decodes them
                    cases["fallback"] = new.decode_into
                got = measure(
                    cases,
                    raw_chunks(dset),
                    new.chunk_nbytes,
                    args.rounds,
                )
                for threads in (1, 2):
                    print(table_row(name, threads, got))
            print(f"\n| one step alone (gzip + shuffle chunks) {header}")
            nbytes = CHUNK_ROWS * ROW * 4
            for step, inputs, cases in steps(old, raw_chunks(f["gzip + shuffle"]), nbytes):
                got = measure(cases, inputs, nbytes, args.rounds)
                for threads in (1, 2):
                    print(table_row(step, threads, got))


if __name__ == "__main__":
    main()
