"""The benchmark suite: every loader on every layout, ratios to a baseline and a limit.

Run: ``python benchmarks/run.py [--n 50000] [--seconds 10] [--layouts chunked-64+gzip,...]``
(the logic lives in ``nn_handler.bench.suite``).
"""

import sys

from nn_handler.bench.suite import main

if __name__ == "__main__":
    sys.exit(main())
