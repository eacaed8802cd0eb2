"""Sparse rows (AnnData .h5ad): H5SparseDataset + ChunkShuffleSampler against scDataset.

Run: ``python benchmarks/bench_sparse.py [--rows 200000] [--seconds 10] [--repeats 3]``
(needs ``pip install -e ".[bench]"``; the logic lives in ``nn_handler.bench.sparse``).
"""

import sys

from nn_handler.bench.sparse import main

if __name__ == "__main__":
    sys.exit(main())
