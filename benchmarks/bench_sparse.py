"""Sparse rows (AnnData .h5ad): H5SparseDataset against its registered peers.

Run: ``python benchmarks/bench_sparse.py [--rows 200000] [--seconds 10] [--repeats 3]``
(needs ``pip install -e ".[bench]"``; the logic lives in ``benchmarks.suites.sparse``).
A store peer (annbatch: Python >= 3.12, no torch) runs in its own environment under ``--envs``
(default ``build``), made on first use; when that fails its rows are replaced by one line
saying why. ``--tables stores`` (or ``annbatch``) runs only that table.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.suites.sparse import main

if __name__ == "__main__":
    sys.exit(main())
