"""Sparse rows (AnnData .h5ad): H5SparseDataset against scDataset and annbatch.

Run: ``python benchmarks/bench_sparse.py [--rows 200000] [--seconds 10] [--repeats 3]``
(needs ``pip install -e ".[bench]"``; the logic lives in ``benchmarks.suites.sparse``).
annbatch (Python >= 3.12, no torch) runs in its own environment, ``--annbatch-venv``
(default ``build/annbatch-venv``), made from a Python >= 3.12 on first use; when that fails
its rows are replaced by one line saying why. ``--tables annbatch`` runs only that table.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.suites.sparse import main

if __name__ == "__main__":
    sys.exit(main())
