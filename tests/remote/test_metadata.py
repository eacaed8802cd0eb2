"""Chunk indexes kept in the node cache: loaded by the next process, never trusted blindly."""

from __future__ import annotations

import os
import stat
import zipfile

import h5py
import numpy as np
import pytest
import torch

from nn_handler._io.file import layout
from nn_handler._io.storage.chunk_index import ChunkIndex
from nn_handler._io.storage.remote.metadata import MetadataStore
from nn_handler.dataloaders import H5LazyDataset

N, WIDTH, CHUNK = 5000, 8, 50


def _write(path, seed=0, chunk=CHUNK):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        x = rng.standard_normal((N, WIDTH)).astype(np.float32)
        f.create_dataset("x", data=x, chunks=(chunk, WIDTH), compression="gzip")
        f.create_dataset("y", data=rng.integers(0, 10, N))
    return path


@pytest.fixture
def walks(monkeypatch):
    """How many chunk indexes were walked through h5py (the walk a saved index saves)."""
    count = [0]
    walk = layout.read_chunk_index

    def counted(*args, **kwargs):
        count[0] += 1
        return walk(*args, **kwargs)

    monkeypatch.setattr(layout, "read_chunk_index", counted)
    return count


def _same_as_local(ds, local):
    rows = [0, 49, 50, N - 1, 1234, 7]
    with h5py.File(local) as f:
        assert torch.equal(ds[rows][0], torch.from_numpy(f["x"][:][rows]))
        assert torch.equal(ds[rows][1], torch.from_numpy(f["y"][:][rows]))


def _saved(cache):
    return sorted(cache.rglob("meta/*.npz"))


def test_the_next_construction_loads_the_index(http, tmp_path, walks):
    local = _write(http.root / "f.h5")
    cache = tmp_path / "c"
    first = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=cache)
    _same_as_local(first, local)
    assert walks[0] == 1 and len(_saved(cache)) == 1
    requests = http.requests
    again = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=cache)
    assert walks[0] == 1  # loaded, not walked
    _same_as_local(again, local)
    assert http.requests == requests + 1  # the version; the rest from the node's disk


def test_without_a_cache_dir_every_construction_walks(http, walks):
    local = _write(http.root / "f.h5")
    H5LazyDataset(http.url("f.h5"), "x", "y")
    _same_as_local(H5LazyDataset(http.url("f.h5"), "x", "y"), local)
    assert walks[0] == 2


def _rewrite(path, **changes):
    with np.load(path, allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    arrays.update(changes)
    np.savez(path, **arrays)


def _offsets_past_the_end(path):
    with np.load(path) as saved:
        offsets = saved["offsets"].copy()
    offsets[3] = 10**12
    _rewrite(path, offsets=offsets)


def _coords_swapped(path):
    with np.load(path) as saved:
        coords = saved["coords"].copy()
    coords[[0, 1]] = coords[[1, 0]]
    _rewrite(path, coords=coords)


def _offsets_shifted(path):
    with np.load(path) as saved:
        _rewrite(path, offsets=saved["offsets"] + 1)  # inside the object, wrong bytes


DAMAGES = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:100]),
    "garbage": lambda p: p.write_bytes(b"\x00not a zip" * 50),
    "empty": lambda p: p.write_bytes(b""),
    "an npy file": lambda p: _npy(p),
    "offset past the object": _offsets_past_the_end,
    "coordinates out of order": _coords_swapped,
    "other key": lambda p: _rewrite(p, key=np.array("/z")),
    "other shape": lambda p: _rewrite(p, shape=np.array([N + 50, WIDTH])),
    "float offsets": lambda p: _rewrite(p, offsets=np.zeros(N // CHUNK)),
    "object array": lambda p: _with_pickle(p),
    "missing array": lambda p: _drop(p, "masks"),
    "offsets shifted": _offsets_shifted,
}


def _with_pickle(path):
    with np.load(path) as saved:
        arrays = {name: saved[name] for name in saved.files}
    arrays["offsets"] = np.array([object()] * len(arrays["offsets"]), dtype=object)
    np.savez(path, **arrays)


def _npy(path):
    with open(path, "wb") as f:
        np.save(f, np.arange(10))


def _drop(path, name):
    with np.load(path) as saved:
        arrays = {n: saved[n] for n in saved.files if n != name}
    np.savez(path, **arrays)


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_index_file_is_ignored_and_rebuilt(http, tmp_path, walks, damage):
    local = _write(http.root / "f.h5")
    cache = tmp_path / "c"
    H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=cache)
    (saved,) = _saved(cache)
    DAMAGES[damage](saved)
    ds = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=cache)
    _same_as_local(ds, local)
    assert walks[0] == 2  # refused: walked again
    H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=cache)
    assert walks[0] == 2  # and saved again over the damaged file


def test_another_version_of_the_object_does_not_reuse_it(http, tmp_path, walks):
    _write(http.root / "f.h5")
    cache = tmp_path / "c"
    H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=cache)
    local = _write(http.root / "f.h5", seed=1, chunk=2 * CHUNK)  # other bytes and chunks
    ds = H5LazyDataset(http.url("f.h5"), "x", "y", cache_dir=cache)
    assert walks[0] == 2 and ds.chunk_rows == 2 * CHUNK
    _same_as_local(ds, local)
    assert len(_saved(cache)) == 2  # one per version, each in its own entry


def _index(n=6):
    coords = np.zeros((n, 2), dtype=np.int64)
    coords[:, 0] = np.arange(n) * 10
    offsets = 1000 + np.arange(n, dtype=np.int64)[::-1] * 100  # any order in the file
    return ChunkIndex(coords, offsets, np.full(n, 100, np.int64), np.zeros(n, np.int64))


def test_store_round_trip_in_coordinate_order(tmp_path):
    store = MetadataStore(tmp_path, size=10_000)
    index = _index()
    parts = (index.coords, index.offsets, index.sizes, index.masks)
    shuffled = ChunkIndex(*(a[[3, 0, 5, 1, 4, 2]] for a in parts))
    store.save_index("/x", (60, 4), (10, 4), shuffled)
    loaded = store.load_index("/x", (60, 4), (10, 4))
    assert loaded is not None
    for a, b in zip(
        (loaded.coords, loaded.offsets, loaded.sizes, loaded.masks),
        (index.coords, index.offsets, index.sizes, index.masks),
        strict=True,
    ):
        assert np.array_equal(a, b)
    assert store.load_index("/x", (60, 4), (20, 4)) is None  # other chunking
    assert store.load_index("/y", (60, 4), (10, 4)) is None  # nothing saved for it
    assert MetadataStore(tmp_path, size=1500).load_index("/x", (60, 4), (10, 4)) is None
    with zipfile.ZipFile(next((tmp_path / "meta").glob("*.npz"))) as z:
        assert not any(name.startswith(".") for name in z.namelist())


def test_store_skips_an_index_off_the_grid(tmp_path):
    store = MetadataStore(tmp_path, size=10_000)
    bad = _index()
    bad.coords[2, 0] = 25  # not a multiple of the chunk rows
    store.save_index("/x", (60, 4), (10, 4), bad)
    assert store.load_index("/x", (60, 4), (10, 4)) is None


def test_store_ignores_a_folder_it_cannot_write(tmp_path):
    (tmp_path / "meta").write_text("a file where the folder should be")
    store = MetadataStore(tmp_path, size=10_000)
    store.save_index("/x", (60, 4), (10, 4), _index())  # no error: the next process walks
    assert store.load_index("/x", (60, 4), (10, 4)) is None


def test_an_index_file_that_is_a_link_or_not_ours_is_ignored(tmp_path):
    store = MetadataStore(tmp_path, size=10_000)
    store.save_index("/x", (60, 4), (10, 4), _index())
    (saved,) = (tmp_path / "meta").glob("*.npz")
    elsewhere = tmp_path / "elsewhere.npz"
    saved.rename(elsewhere)
    saved.symlink_to(elsewhere)  # a valid index, but through a link
    assert store.load_index("/x", (60, 4), (10, 4)) is None
    store.save_index("/x", (60, 4), (10, 4), _index())  # replaces the link, not its target
    assert not saved.is_symlink() and elsewhere.exists()
    assert store.load_index("/x", (60, 4), (10, 4)) is not None
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "meta").stat().st_mode) == 0o700
    if os.geteuid() == 0:  # a file of another user
        os.chown(saved, 1234, 1234)
        assert store.load_index("/x", (60, 4), (10, 4)) is None


def test_a_meta_folder_that_is_a_link_is_not_used(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "meta").symlink_to(tmp_path / "elsewhere")
    store = MetadataStore(tmp_path / "entry", size=10_000)
    store.save_index("/x", (60, 4), (10, 4), _index())
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert store.load_index("/x", (60, 4), (10, 4)) is None
