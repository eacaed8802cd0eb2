"""What the integrity checks cost: this checkout against another, interleaved.

The checks are: a plain open before any SWMR open, the layout check (every chunk of the chunk
table against the file's size) when a reader is built, one ``fstat`` / ``stat`` per batch (and
per sample for ``H5SampleDataset``), a layout check per sample on its first read, pread instead
of a memory map for per-sample reads. Each workload runs in a fresh child process with either
``src`` tree on ``PYTHONPATH`` (three times, best kept); children alternate between the trees,
and the table gives the median over children of each and their ratio (``checked / baseline``;
1.00 = no cost).

Usage::

    python benchmarks/bench_integrity.py --baseline /path/to/other/checkout/src [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import median, round_order

HERE = Path(__file__).resolve().parents[1] / "src"

WORKLOADS = {
    "open + close a file, x200": """
        from nn_handler._io.file.source import FileOptions, H5Source
        src = H5Source(P["contig"], FileOptions())
        t = clock()
        for _ in range(200):
            src.file
            src.close()
        done(t)
    """,
    "build H5LazyDataset (gzip, 20k chunks)": """
        from nn_handler.dataloaders import H5LazyDataset
        t = clock()
        H5LazyDataset(P["many"], "x")
        done(t)
    """,
    "memmap: 300 random batches of 256": """
        from nn_handler.dataloaders import H5LazyDataset
        ds = H5LazyDataset(P["contig"], "x")
        rng = np.random.default_rng(0)
        batches = [rng.integers(0, len(ds), 256) for _ in range(300)]
        ds[batches[0]]
        t = clock()
        for b in batches:
            ds[b]
        done(t)
    """,
    "decode: read the gzip file in batches of 512": """
        from nn_handler.dataloaders import H5LazyDataset
        ds = H5LazyDataset(P["gzip"], "x")
        t = clock()
        for start in range(0, len(ds), 512):
            ds[list(range(start, min(start + 512, len(ds))))]
        done(t)
    """,
    "H5SampleDataset: 3000 samples, first epoch": """
        from nn_handler.dataloaders import H5SampleDataset
        ds = H5SampleDataset(P["samples"], attrs=False, sidecar=False)
        t = clock()
        for i in range(len(ds)):
            ds[i]
        done(t)
    """,
    "H5SampleDataset: 3000 samples, second epoch": """
        from nn_handler.dataloaders import H5SampleDataset
        ds = H5SampleDataset(P["samples"], attrs=False, sidecar=False)
        for i in range(len(ds)):
            ds[i]
        t = clock()
        for i in range(len(ds)):
            ds[i]
        done(t)
    """,
}

PRELUDE = """
import json, sys, time
import numpy as np
P = json.loads(sys.argv[1])
clock = time.perf_counter
TIMES = []
def done(t):
    TIMES.append(time.perf_counter() - t)
"""
# each child runs its workload (which builds its own objects) this often and reports the best:
# the first run of a fresh interpreter pays one-off costs that are not the checks'
RUNS_PER_CHILD = 3


def make_files(folder: Path) -> dict[str, str]:
    rng = np.random.default_rng(0)
    paths = {k: str(folder / f"{k}.h5") for k in ("contig", "gzip", "many", "samples")}
    with h5py.File(paths["contig"], "w") as f:
        f["x"] = rng.standard_normal((100_000, 64)).astype(np.float32)
    with h5py.File(paths["gzip"], "w") as f:
        data = rng.integers(0, 9, (50_000, 64)).astype(np.float32)
        f.create_dataset("x", data=data, chunks=(64, 64), compression="gzip")
    with h5py.File(paths["many"], "w") as f:
        data = np.zeros((20_000, 16), np.float32)
        f.create_dataset("x", data=data, chunks=(1, 16), compression="gzip")
    with h5py.File(paths["samples"], "w") as f:
        for i in range(3000):
            f[f"s{i}"] = rng.standard_normal((16, 8)).astype(np.float32)
    return paths


def run(src: Path, code: str, paths: dict[str, str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    body = textwrap.dedent(code)
    script = PRELUDE + f"for _ in range({RUNS_PER_CHILD}):\n" + textwrap.indent(body, "    ")
    script += "\nprint(min(TIMES))\n"
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(paths)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=600,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="src/ of the baseline")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        paths = make_files(Path(folder))
        print("| workload | baseline (ms) | checked (ms) | checked / baseline |")
        print("|---|---:|---:|---:|")
        for name, code in WORKLOADS.items():
            trees = {"baseline": args.baseline, "checked": HERE}
            times: dict[str, list[float]] = {label: [] for label in trees}
            for r in range(args.repeats):  # alternating: drift on a busy machine hits both
                for label in round_order(list(trees), r):
                    times[label].append(run(trees[label], code, paths))
            b, c = median(times["baseline"]), median(times["checked"])
            print(f"| {name} | {b * 1e3:.1f} | {c * 1e3:.1f} | {c / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
