import itertools
import logging
import math
import os
import re
from collections import Counter

import numpy as np
import pytest
import torch

from nn_handler.dataloaders import (
    BatchedDataset,
    DistributedEpochSampler,
    create_optimized_dataloader,
    epoch_permutation,
)

from helpers.recordings import FIELD_NAMES, read_file, write_recording

LOGGER = "nn_handler.dataloaders"  # the dataset and its internals log under their own names
SEED = 3


@pytest.fixture
def files(tmp_path):
    sizes = [17, 9, 21]  # 47 samples: divisible by neither 2 nor 3
    return [
        write_recording(tmp_path / f"r{k}.h5", n, seed=k, uid_start=100 * k)
        for k, n in enumerate(sizes)
    ]


def _make(files, rank, world, **kw):
    kw.setdefault("load_fields", ["uid"])
    return create_optimized_dataloader(
        files, 5, 0, rank, world, seed=SEED, field_names=FIELD_NAMES, **kw
    )


def _cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _flat(batches):
    return list(itertools.chain.from_iterable(batches))


def _epoch(loader, epoch):
    loader.sampler.set_epoch(epoch)
    return [b["uid"].tolist() for b in loader]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_pad_covers_every_sample_with_at_most_world_minus_one_repeats(files, world):
    loaders = [_make(files, r, world) for r in range(world)]
    uid_of = loaders[0].dataset[:]["uid"].numpy()
    n = len(uid_of)
    per_rank = math.ceil(n / world)
    for epoch in (0, 1):
        batches = [_epoch(loader, epoch) for loader in loaders]
        counts = {len(b) for b in batches} | {len(loader) for loader in loaders}
        assert counts == {math.ceil(per_rank / 5)}  # the same number of batches on every rank
        samples = [_flat(b) for b in batches]
        assert all(len(s) == per_rank for s in samples)
        everything = Counter(_flat(samples))
        assert set(everything) == set(uid_of.tolist())  # covering
        # the only repeats: the first (per_rank * world - n) samples of the epoch's permutation
        repeats = uid_of[epoch_permutation(n, SEED, epoch)[: per_rank * world - n]]
        assert everything - Counter(uid_of.tolist()) == Counter(repeats.tolist())
        assert len(repeats) <= world - 1


@pytest.mark.parametrize("world", [1, 2, 3])
def test_drop_gives_disjoint_equal_parts(files, world):
    loaders = [_make(files, r, world, equal_steps="drop") for r in range(world)]
    n = len(loaders[0].dataset)
    for epoch in (0, 1):
        samples = [_flat(_epoch(loader, epoch)) for loader in loaders]
        assert all(len(s) == n // world for s in samples)
        union = set().union(*map(set, samples))
        assert len(union) == (n // world) * world  # pairwise disjoint, no repeats
        assert union <= set(loaders[0].dataset[:]["uid"].tolist())


def test_two_epochs_give_different_orders_and_drop_last(files):
    loader = _make(files, 1, 2, drop_last=True)
    first, second = _epoch(loader, 0), _epoch(loader, 1)
    assert first != second and sorted(_flat(first)) != _flat(first)
    assert all(len(b) == 5 for b in first) and len(first) == len(loader) == 24 // 5
    assert _epoch(loader, 0) == first  # an epoch's order is a pure function of (seed, epoch)
    assert isinstance(loader.dataset, BatchedDataset)  # batched_loader: one read per batch
    inner = loader.sampler
    assert isinstance(inner, DistributedEpochSampler)
    assert (inner.rank, inner.world_size, inner.seed) == (1, 2, SEED)


def test_batches_hold_the_stored_fields(files):
    loader = create_optimized_dataloader(
        files, 8, 0, cs_label=True, field_names=FIELD_NAMES, dtype=torch.float64
    )
    loader.sampler.set_epoch(0)
    data = {str(p): read_file(p) for p in files}
    by_uid = {int(d["uid"][r]): (d, r) for d in data.values() for r in range(len(d["uid"]))}
    seen = 0
    for batch in loader:
        assert batch["fhr_st"].dtype == torch.float64 and isinstance(batch["guid"], list)
        for pos, uid in enumerate(batch["uid"].tolist()):
            d, r = by_uid[uid]
            assert bool(d["cs_label"][r]) and batch["guid"][pos] == d["guid"][r]
            np.testing.assert_array_equal(batch["fhr_st"][pos].numpy(), d["fhr_st"][r])
            seen += 1
    assert seen == sum(int(d["cs_label"].sum()) for d in data.values())


def test_rank_and_world_size_are_detected(files, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    inner = _make(files, None, None).sampler
    assert (inner.rank, inner.world_size) == (1, 3)


def test_machine_defaults(files, caplog):
    loader = create_optimized_dataloader(files, 4, field_names=FIELD_NAMES)
    cores = _cores()
    assert 1 <= loader.num_workers <= min(8, cores)
    assert loader.persistent_workers and loader.prefetch_factor == 2
    assert not loader.pin_memory or torch.cuda.is_available()
    assert not loader.dataset.pin_memory  # the DataLoader pins, after the workers
    custom = create_optimized_dataloader(files, 4, 2, prefetch_factor=3, persistent_workers=False)
    assert (custom.num_workers, custom.prefetch_factor, custom.persistent_workers) == (2, 3, False)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        pinned = create_optimized_dataloader(files, 4, 0, pin_memory=True)
    if not torch.cuda.is_available():
        assert not pinned.pin_memory and "batches are not pinned" in caplog.text


def test_auto_workers_share_the_cores_between_local_ranks(files, monkeypatch):
    cores = _cores()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores * 4))
    assert create_optimized_dataloader(files, 4, rank=0, world_size=2).num_workers == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    expected = min(8, max(1, cores // 2))
    assert create_optimized_dataloader(files, 4, None, 0, 2).num_workers == expected


@pytest.mark.slow
@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_two_workers_yield_what_the_main_process_yields(files, context):
    main = _make(files, 0, 2, load_fields=["uid", "guid", "fhr_st"])
    workers = create_optimized_dataloader(
        files,
        5,
        2,
        0,
        2,
        seed=SEED,
        field_names=FIELD_NAMES,
        load_fields=["uid", "guid", "fhr_st"],
        multiprocessing_context=context,
        timeout=120,
    )
    assert workers.persistent_workers
    for epoch in (0, 1):  # persistent workers: set_epoch still reshuffles (sampler in main)
        main.sampler.set_epoch(epoch)
        workers.sampler.set_epoch(epoch)
        expected, got = list(main), list(workers)
        assert [b["uid"].tolist() for b in got] == [b["uid"].tolist() for b in expected]
        for a, b in zip(got, expected, strict=True):
            assert a["guid"] == b["guid"]
            assert a["fhr_st"].numpy().tobytes() == b["fhr_st"].numpy().tobytes()


def test_bad_arguments(files):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'cache'; loader arguments"):
        create_optimized_dataloader(files, 4, 0, cache=3)
    with pytest.raises(
        TypeError, match=re.escape("dataset arguments: 'allow_external_files', 'allowed_guids'")
    ):
        create_optimized_dataloader(files, 4, 0, generator=None)
    with pytest.raises(TypeError, match="pass the files as hdf5_files"):
        create_optimized_dataloader(files, 4, 0, paths=files)
    with pytest.raises(ValueError, match=r"persistent_workers=True needs num_workers > 0"):
        create_optimized_dataloader(files, 4, 0, persistent_workers=True)
    with pytest.raises(ValueError, match=r"prefetch_factor=2 needs num_workers > 0"):
        create_optimized_dataloader(files, 4, 0, prefetch_factor=2)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        create_optimized_dataloader(files, 0, 0)
    with pytest.raises(ValueError, match="num_workers must be >= 0, got -1"):
        create_optimized_dataloader(files, 4, -1)
    with pytest.raises(ValueError, match="equal_steps must be one of 'pad', 'drop'; got 'cut'"):
        create_optimized_dataloader(files, 4, 0, equal_steps="cut")
    with pytest.raises(ValueError, match=r"no sample is left after the filters .*allowed_guids"):
        create_optimized_dataloader(files, 4, 0, allowed_guids=["nobody"])
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\), got rank=2"):
        create_optimized_dataloader(files, 4, 0, 2, 2)
    with pytest.raises(ValueError, match="rank must be in"):  # checked before any file is read
        create_optimized_dataloader(["/nonexistent/a.h5"], 4, 0, 5, 2)
