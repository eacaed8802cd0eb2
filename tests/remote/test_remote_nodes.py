"""Two "nodes" train from one object on the HTTP server, each with its own cache directory.

Each rank of a 2-rank gloo group plays a node (its own ``cache_dir``, its own ``X-Client``
header, so the server's log tells the nodes apart). Over two epochs of ``ChunkShuffleSampler``
+ ``batched_loader``: every sample exactly once per epoch across the ranks, with the bytes of
the local file, and each node asks for each byte range at most once (the version probe at
construction aside), and the two open the file with the metadata requests of one (each
metadata block is fetched by one rank and handed to the other through the group's store). A
node reads another share of the chunks each epoch, so its second epoch fetches only what its
first did not read; reading both epochs again then fetches nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from nn_handler.dataloaders import H5LazyDataset

from helpers.ddp import run_ddp, run_nodes
from helpers.remote_ranks import two_nodes_rank

N, WIDTH, CHUNK, BATCH = 4000, 64, 50, 100  # chunks of 12.8 KB: many requests
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
PROBE = (0, 1)  # the one-byte range that asks for the object's version at construction

pytestmark = pytest.mark.slow  # two ranks, spawned or under torchrun


def _write(path):
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = rng.standard_normal((N, WIDTH)).astype(np.float32)
        f.create_dataset("x", data=x, chunks=(CHUNK, WIDTH), compression="gzip")
        f.create_dataset("y", data=np.arange(N))  # each row's label is its index


@pytest.mark.timeout(120)
def test_two_nodes_each_fetch_every_piece_once(http, tmp_path):
    _write(http.root / "f.h5")
    with h5py.File(http.root / "f.h5", "r") as f:
        expected = f["x"][()]
    url, caches = http.url("f.h5"), tmp_path / "caches"
    results = run_ddp(two_nodes_rank, 2, tmp_path / "out", url, str(caches), 2, BATCH, timeout=90)

    for epoch in (0, 1):
        parts = [r["epochs"][epoch] for r in results]
        rows = np.concatenate([y for _, y in parts])
        assert np.array_equal(np.sort(rows), np.arange(N))  # each sample once, across ranks
        assert len(parts[0][1]) == len(parts[1][1]) == N // 2
        for x, y in parts:
            np.testing.assert_array_equal(x, expected[y])  # the local file's bytes, row by row
    assert not np.array_equal(results[0]["epochs"][0][1], results[0]["epochs"][1][1])

    for node, r in enumerate(results):
        first, second = r["requests"]
        assert 0 < first <= second
        assert r["replayed"] == second  # all it read once is served from the node's disk
        asked = Counter(
            (start, end) for who, _, start, end in http.client_ranges if who == f"node{node}"
        )
        twice = {piece: n for piece, n in asked.items() if n > 1 and piece != PROBE}
        assert twice == {}
        assert sum(asked.values()) - asked[PROBE] == second  # the server saw what the rank sent
    assert sorted(p.name for p in caches.iterdir()) == ["node0", "node1"]
    # the two nodes opened the file with the metadata requests of one (the group's store)
    alone = H5LazyDataset(url, "x", "y", cache_dir=str(tmp_path / "alone"))
    one = alone._source.byte_source().remote.requests
    alone.close()
    assert sum(r["opened"] for r in results) == one, ([r["opened"] for r in results], one)


@pytest.mark.timeout(300)
def test_the_ddp_example_trains_two_nodes_from_a_url(http, tmp_path):
    """``examples/ddp_train.py --data URL --cache-dir DIR``, once per "node" (torchrun)."""
    data = http.root / "blobs.h5"
    make = [sys.executable, str(EXAMPLE), "--make-data", str(data), "--samples", "2000"]
    subprocess.run(make, check=True, timeout=120)
    outputs, _ = run_nodes(
        EXAMPLE,
        lambda node: [
            *("--data", http.url("blobs.h5"), "--epochs", "2", "--workers", "0"),
            *("--cache-dir", str(tmp_path / f"node{node}")),
            *("--storage-option", f'headers={{"X-Client": "node{node}"}}'),
        ],
        ROOT,
    )
    found = re.search(r"rank 0 of 2: validation accuracy ([\d.]+)% on 400 samples", outputs[0])
    assert found, outputs
    assert float(found.group(1)) > 60  # chance is 25%
    for node in ("node0", "node1"):
        asked = Counter((s, e) for who, _, s, e in http.client_ranges if who == node)
        assert asked, node
        assert {piece: n for piece, n in asked.items() if n > 1 and piece != PROBE} == {}
