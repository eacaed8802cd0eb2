"""The benchmark suite: every loader on every layout, ratios to a baseline and a limit.

Run: ``python benchmarks/run.py [--n 50000] [--seconds 10] [--layouts chunked-64+gzip,...]``
(the logic lives in ``benchmarks.suites.layouts``; ``--workloads W1,W2,...`` runs
``benchmarks.suites.workloads`` instead).

``python benchmarks/run.py --remote [--n N] [--rounds 3] [--latency 0.02] [--seconds 20]``
runs the remote benchmark instead (``bench_remote.py``: a file on an HTTP server 20 ms away,
cold, warm cache, local and h5py on fsspec in one run, with the targets as ratios).

``python benchmarks/run.py --feed [--n 50000] [--rounds 3] [--seconds 4] [--start-method M]``
runs the DataLoader-worker table on the CPU (``bench_feed.py``: num_workers=2 against 0
on W1, W2 and a small gzip file, the main process's CPU per batch and a CPU training loop fed by
workers); ``--gpu [--n 200000] [--seconds 3] [--gpu-workers 4,8,14]`` runs its GPU tables
(copy limit, W1 through ``DevicePrefetcher``, W2 against the decode limit, a small CNN fed by
the loader, the rank cache on the device); without CUDA it runs the host parts and says so.

``python benchmarks/run.py --big [--rows 170000] [--rounds 3] [--seconds 20]`` runs the big and
cold files' table (``bench_big.py``: 2 GB files, every pass cold and checked so, or warm, against
the disk's and the decoder's limits measured in the same run).

``python benchmarks/run.py --wait [--batches 200000] [--rounds 5]`` times what ``WaitMeter``
costs a loop per batch (``bench_wait.py``; target: under 2 microseconds).

``python benchmarks/run.py --import [--src OTHER/src] [--rounds 7]`` times what importing the
package costs a fresh process (a spawn worker) beyond torch, h5py and numpy, this tree against
another, and the first batch with 2 spawn workers (``bench_import.py``).

``python benchmarks/run.py --storm [--n 50000] [--latency 0.02] [--throttle 200]`` starts 1, 4
and 16 processes on one node and 4 × 4 on four (one cache dir each; also with a gloo group) against
one object at once, then 64 against a store that throttles, without and with a group
(``bench_storm.py``): requests by kind, bytes, time to the first batch.

``python benchmarks/run.py --predict [--gb 1] [--rounds 3] [--ranks 2]`` times
``NNHandler.predict``'s write rate on 2 gloo ranks against h5py writing the same rows alone
(``bench_predict.py``; target: >= 0.8 of it).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.suites.layouts import main

if __name__ == "__main__":
    if "--remote" in sys.argv[1:]:
        from bench_remote import main as remote

        sys.exit(remote([a for a in sys.argv[1:] if a != "--remote"]))
    if "--big" in sys.argv[1:]:
        from bench_big import main as big

        sys.exit(big([a for a in sys.argv[1:] if a != "--big"]))
    if "--storm" in sys.argv[1:]:
        from bench_storm import main as storm

        sys.exit(storm([a for a in sys.argv[1:] if a != "--storm"]))
    if "--import" in sys.argv[1:]:
        from bench_import import main as import_cost

        sys.exit(import_cost([a for a in sys.argv[1:] if a != "--import"]))
    if "--wait" in sys.argv[1:]:
        from bench_wait import main as wait

        sys.exit(wait([a for a in sys.argv[1:] if a != "--wait"]))
    if "--predict" in sys.argv[1:]:
        from bench_predict import main as predict

        sys.exit(predict([a for a in sys.argv[1:] if a != "--predict"]))
    if {"--feed", "--gpu"} & set(sys.argv[1:]):
        from bench_feed import main as feed

        sys.exit(feed(sys.argv[1:]))
    sys.exit(main())
