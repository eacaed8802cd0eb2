"""What importing the package loads: no codec or other heavy optional library until data needs it.

Every spawn or forkserver DataLoader worker imports the package afresh, so each module imported
at import time is paid for once per worker. These tests run in fresh interpreters (pytest's own
process has imported everything long before) and check behaviour, not time:
``benchmarks/bench_import.py`` times it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers.damage import run_python

SRC = str(Path(__file__).resolve().parents[1] / "src")
#: optional libraries a worker must not pay for before its data needs them
HEAVY = (
    "imagecodecs", "hdf5plugin", "blosc2", "numcodecs", "fsspec", "aiohttp", "tqdm.auto",
    "scipy", "pandas", "anndata", "lightning", "pytorch_lightning",
)  # fmt: skip


def _run(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter on this tree; the JSON it prints last."""
    path = os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])
    done = run_python(code, timeout=120, PYTHONPATH=path)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_importing_the_package_loads_no_heavy_library():
    got = _run(f"""
        import json, sys
        heavy = {HEAVY!r}
        import torch, h5py, numpy
        before = {{m for m in heavy if m in sys.modules}}  # (torch's own, if any)
        def new():
            return sorted({{m for m in heavy if m in sys.modules}} - before)
        import nn_handler.dataloaders
        package = new()
        from nn_handler.dataloaders import H5LazyDataset, batched_loader
        worker = new()
        import nn_handler.dataloaders as d
        for name in d.__all__:
            getattr(d, name)
        print(json.dumps({{"package": package, "worker": worker, "surface": new()}}))
    """)
    assert got == {"package": [], "worker": [], "surface": []}


def test_the_package_imports_none_of_its_datasets():
    got = _run("""
        import json, sys
        import nn_handler.dataloaders
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("nn_handler."))))
    """)
    assert "nn_handler.dataloaders" in got
    for module in ("h5_dataloader", "loader", "combined_h5_dataset", "samplers", "_core"):
        assert f"nn_handler.dataloaders.{module}" not in got
    assert "nn_handler.handler" not in got and "nn_handler._io.chunks.codecs" not in got


@pytest.fixture(scope="module")
def codec_files(tmp_path_factory) -> dict[str, str]:
    """One small file per codec: gzip (HDF5's own), and hdf5plugin's blosc, zstd, lz4."""
    hdf5plugin = pytest.importorskip("hdf5plugin")
    folder = tmp_path_factory.mktemp("codecs")
    data = np.arange(200 * 6, dtype=np.float32).reshape(200, 6) % 17
    filters = {
        "gzip": {"compression": "gzip", "shuffle": True},
        "blosc": dict(hdf5plugin.Blosc(cname="lz4")),
        "zstd": dict(hdf5plugin.Zstd()),
        "lz4": dict(hdf5plugin.LZ4()),
    }
    paths = {}
    for name, kw in filters.items():
        paths[name] = str(folder / f"{name}.h5")
        with h5py.File(paths[name], "w") as f:
            f.create_dataset("x", data=data + len(name), chunks=(16, 6), **kw)
    return paths


def test_a_fresh_process_reads_every_codec_after_the_import(codec_files):
    """Plugin filters are found when a dataset is built (hdf5plugin loaded, filters checked),
    its codec library then, before any worker forks; the rows equal h5py's."""
    got = _run(f"""
        import json, sys
        from nn_handler.dataloaders import H5LazyDataset
        loaded = {{}}
        rows = {{}}
        for name, path in {codec_files!r}.items():
            ds = H5LazyDataset(path, "x")
            loaded[name] = [m for m in ("hdf5plugin", "imagecodecs") if m in sys.modules]
            rows[name] = ds[[0, 57, 199]].tolist()
            ds.close()
        print(json.dumps({{"loaded": loaded, "rows": rows}}))
    """)
    decoder = ["imagecodecs"] if importlib.util.find_spec("imagecodecs") else []
    for name, path in codec_files.items():
        assert got["loaded"][name] == ["hdf5plugin", *decoder], name  # type: ignore[index]
        with h5py.File(path, "r") as f:
            assert got["rows"][name] == f["x"][[0, 57, 199]].tolist(), name  # type: ignore[index]
