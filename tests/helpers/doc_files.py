"""The small files that the snippets of the docs and of the seed documents name.

``write_doc_files`` prepares a working directory for ``tests/test_docs.py``, ``write_seed_files``
one for ``tests/test_seed_snippets.py``. The files are tiny (well under a megabyte together) so
that a snippet runs in a second; their shapes are what the snippets' models expect.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from helpers.samples import trajectories, write_samples

SIDE = 16  # docs: images are SIDE × SIDE, the docs' models use nn.Linear(16 * 16, 10)
CLASSES = 10
T = 12  # time steps per window of a recording file
RECORDING_CLASSES = 3


def images(n: int, shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)``: learnable, the label lights one pixel of the image."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n)
    data = rng.normal(0, 1, (n, *shape)).astype(np.float32)
    flat = data.reshape(n, -1)
    flat[np.arange(n), labels] += 4.0  # class k raises value k: a linear model learns it fast
    return data, labels.astype(np.int64)


def write_images(
    path: Path, n: int, shape: tuple[int, ...], *, keys: tuple[str, str] = ("images", "labels")
) -> Path:
    """Write ``images`` / ``labels`` (or ``keys``) to ``path``, plain contiguous datasets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    x, y = images(n, shape)
    with h5py.File(path, "w") as f:
        f.create_dataset(keys[0], data=x)
        f.create_dataset(keys[1], data=y)
    return path


def write_recording(path: Path, n: int, seed: int) -> Path:
    """One file of ``n`` windows with every default field of ``CombinedHDF5Dataset``.

    Ids are ``patient_000`` … ``patient_009`` and flags, epochs and classes are spread so that
    every filter combination the snippets use keeps some samples in every file.
    """
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, RECORDING_CLASSES, size=(n, T))
    with h5py.File(path, "w") as f:
        f["fhr_st"] = rng.standard_normal((n, 2, T)).astype(np.float32)
        f["fhr_ph"] = rng.standard_normal((n, 2, T)).astype(np.float32)
        f["target"] = np.eye(RECORDING_CLASSES, dtype=np.float32)[classes]
        f["weight"] = rng.random(n).astype(np.float32)
        f["guid"] = np.array([f"patient_{i % 10:03d}".encode() for i in range(n)], dtype="S11")
        f["cs_label"] = np.arange(n) % 2 == 0
        f["bg_label"] = (np.arange(n) % 3 == 0).astype(np.int8)
        f["epoch"] = np.round(rng.uniform(0, 100, n), 1)
    return path


def write_doc_files(folder: Path) -> None:
    """Every file the README and ``docs/*.md`` snippets open, relative to ``folder``."""
    x, y = images(1001, (SIDE, SIDE))  # 1001 rows: two ranks get shards of 501 and 500
    with h5py.File(folder / "data.h5", "w") as f:
        f.create_dataset("train/images", data=x)
        f.create_dataset("train/labels", data=y)
        # compressed and chunked, the case ChunkShuffleSampler is for
        f.create_dataset("images", data=x, chunks=(64, SIDE, SIDE), compression="gzip")
        f.create_dataset("labels", data=y, chunks=(64,), compression="gzip")
    with h5py.File(folder / "big.h5", "w") as f:  # the performance page's big compressed file
        f.create_dataset("x", data=x, chunks=(64, SIDE, SIDE), compression="gzip", shuffle=True)
        f.create_dataset("y", data=y)
    for name in ("my_dataset.h5", "large_dataset.h5"):  # the NNHandler guide
        write_images(folder / "data" / name, 256, (SIDE, SIDE))
    for i in range(3):  # the CombinedHDF5Dataset guide
        write_recording(folder / f"train{i + 1}.h5", 60, seed=i)
    for i in range(2):  # the H5SampleDataset guide
        write_samples(folder / f"part{i}.h5", trajectories(40, start=40 * i, seed=i))


def write_seed_files(folder: Path) -> None:
    """Every file the seed documents' snippets open (``/some/`` is mapped to ``folder/some``).

    The rank-cached files have an odd number of rows on purpose: files rarely divide evenly by
    the number of ranks, and the seeds' DDP snippets must cope with shards that differ by one.
    """
    shape = (3, 8, 8)  # CHW images, as the torchvision transforms of the seed expect
    for name in ("my_dataset.h5", "large_dataset.h5"):
        write_images(folder / "data" / name, 1025, shape)
    path = write_images(folder / "data" / "imbalanced_dataset.h5", 1025, shape)
    with h5py.File(path, "a") as f:  # 90 % of the samples in class 0
        labels = f["labels"][()]
        labels[np.arange(len(labels)) % 10 != 0] = 0
        f["labels"][...] = labels
    rng = np.random.default_rng(0)
    (folder / "data" / "features.h5").parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(folder / "data" / "features.h5", "w") as f:
        f["embeddings"] = rng.standard_normal((1025, 32)).astype(np.float32)
    for i in range(3):
        write_recording(folder / f"train{i + 1}.h5", 200, seed=i)
    (folder / "some").mkdir()
    for i, name in enumerate(("path.h5", "path2.h5")):  # the blog's files: trajectory_0 … n-1
        write_samples(folder / "some" / name, trajectories(20, seed=i))
