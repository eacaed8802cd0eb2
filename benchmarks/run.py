"""The benchmark suite: every loader on every layout, ratios to a baseline and a limit.

Run: ``python benchmarks/run.py [--n 50000] [--seconds 10] [--layouts chunked-64+gzip,...]``
(the logic lives in ``nn_handler.bench.suite``).

``python benchmarks/run.py --remote [--n N] [--rounds 3] [--latency 0.02] [--seconds 20]``
runs the remote benchmark instead (``bench_remote.py``: a file on an HTTP server 20 ms away,
cold, warm cache, local and h5py on fsspec in one run, with the issue's targets as ratios).
"""

import sys

from nn_handler.bench.suite import main

if __name__ == "__main__":
    if "--remote" in sys.argv[1:]:
        from bench_remote import main as remote

        sys.exit(remote([a for a in sys.argv[1:] if a != "--remote"]))
    sys.exit(main())
