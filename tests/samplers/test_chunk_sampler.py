import logging

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler.bench.quality import shuffle_quality
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    batched_loader,
    fit_chunk_cache,
)
from nn_handler.dataloaders.samplers.chunks import block_order, deal_batches, window_shuffle

from helpers.chunk_orders import rank_orders
from helpers.files import h5_rows, images
from helpers.resume import check_resume

# (data_len, block_size, window_chunks, world_size)
configs = st.tuples(st.integers(0, 400), st.integers(1, 40), st.integers(1, 6), st.integers(1, 5))


def orders(n, block, window, world, *, seed=0, epoch=0, equal_steps="pad"):
    kw = {"block_size": block, "window_chunks": window, "seed": seed, "equal_steps": equal_steps}
    return rank_orders(n, world, epoch=epoch, **kw)


@given(st.integers(0, 500), st.integers(1, 70), st.integers(1, 9), st.integers(0, 2**40))
def test_single_rank_is_a_permutation(n, block, window, seed):
    (order,) = orders(n, block, window, 1, seed=seed)
    assert sorted(order.tolist()) == list(range(n))


@given(configs)
def test_ranks_are_disjoint_with_equal_counts(cfg):
    n, block, window, world = cfg
    dropped = orders(n, block, window, world, equal_steps="drop")
    assert len({len(o) for o in dropped}) == 1
    joined = np.concatenate(dropped)
    assert len(set(joined.tolist())) == joined.size == n // world * world  # disjoint
    padded = orders(n, block, window, world, equal_steps="pad")
    assert len({len(o) for o in padded}) == 1
    joined = np.concatenate(padded)
    assert set(joined.tolist()) == set(range(n))  # every sample at least once
    sampler = ChunkShuffleSampler(n, block_size=block, world_size=world, rank=0)
    assert joined.size - n == sampler.num_padded < world
    assert sampler.num_dropped == 0 and len(sampler) * world == sampler.total_size


@given(configs, st.integers(0, 2**40), st.integers(0, 100))
@settings(max_examples=50)
def test_pure_function_of_seed_epoch_and_sizes(cfg, seed, epoch):
    n, block, window, world = cfg
    first = orders(n, block, window, world, seed=seed, epoch=epoch)
    again = orders(n, block, window, world, seed=seed, epoch=epoch)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_new_epoch_and_new_seed_give_new_orders():
    base = orders(1000, 16, 4, 2, seed=1, epoch=0)
    assert not np.array_equal(base[0], orders(1000, 16, 4, 2, seed=1, epoch=1)[0])
    assert not np.array_equal(base[0], orders(1000, 16, 4, 2, seed=2, epoch=0)[0])


@given(configs)
@settings(max_examples=60)
def test_block_locality(cfg):
    """A window touches at most window + 2 blocks; ranks share only the blocks at their borders."""
    n, block, window, world = cfg
    parts = orders(n, block, window, world, equal_steps="drop")
    span = window * block
    for order in parts:
        for start in range(0, len(order), span):
            assert np.unique(order[start : start + span] // block).size <= window + 2
    owners = np.zeros(-(-n // block) if n else 0, dtype=np.int64)
    for order in parts:
        owners[np.unique(order // block)] += 1
    assert np.maximum(owners - 1, 0).sum() <= world - 1  # one split block per rank border


def test_resume_mid_epoch():
    check_resume(lambda: ChunkShuffleSampler(103, block_size=8, window_chunks=3, seed=4))
    check_resume(lambda: ChunkShuffleSampler(103, block_size=8, batch_size=5, num_workers=3))
    check_resume(
        lambda: ChunkShuffleSampler(103, block_size=8, rank=1, world_size=3, equal_steps="drop")
    )


def test_state_belongs_to_its_sizes():
    state = ChunkShuffleSampler(100, block_size=8, window_chunks=3).state_dict()
    assert state == {
        "seed": 0,
        "epoch": 0,
        "consumed": 0,
        "data_len": 100,
        "block_size": 8,
        "window_chunks": 3,
        "world_size": 1,
        "batch_size": None,
        "num_workers": 0,
        "phases": [],
    }
    other = ChunkShuffleSampler(100, block_size=16, window_chunks=3)
    with pytest.raises(ValueError, match="saved with block_size=8 but this sampler has"):
        other.load_state_dict(state)


def test_repeated_epoch_warns_once():
    sampler = ChunkShuffleSampler(50, block_size=5)
    list(sampler)
    with pytest.warns(UserWarning, match=r"call sampler\.set_epoch\(epoch\)"):
        list(sampler)


def test_no_shuffle_is_file_order_split_across_ranks():
    parts = [
        list(ChunkShuffleSampler(10, block_size=3, shuffle=False, rank=r, world_size=2))
        for r in range(2)
    ]
    assert parts == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


@given(st.integers(0, 300), st.integers(1, 50))
def test_block_order_and_window_shuffle(n, block):
    blocks = np.random.default_rng(n).permutation(-(-n // block)).astype(np.int64)
    order = block_order(n, block, blocks)
    expected = [i for b in blocks.tolist() for i in range(b * block, min(n, (b + 1) * block))]
    assert order.tolist() == expected
    shuffled = window_shuffle(order, 7, np.random.default_rng(0))
    for start in range(0, n, 7):
        assert sorted(shuffled[start : start + 7].tolist()) == sorted(order[start : start + 7])


@given(st.integers(0, 3000), st.integers(1, 40), st.integers(1, 6), st.integers(2, 5))
@settings(max_examples=60)
def test_workers_get_their_own_chunks(n, batch, window, workers):
    """Batch i goes to worker i % workers: each worker's batches come from its own windows."""
    block = 16
    sampler = ChunkShuffleSampler(
        n, block_size=block, window_chunks=window, batch_size=batch, num_workers=workers
    )
    order = np.array(list(sampler), dtype=np.int64)
    assert sorted(order.tolist()) == list(range(n))
    owners = np.zeros(-(-n // block) if n else 0, dtype=np.int64)
    for worker in range(workers):
        mine = [order[i : i + batch] for i in range(worker * batch, n, workers * batch)]
        if mine:
            owners[np.unique(np.concatenate(mine) // block)] += 1
    shared = np.maximum(owners - 1, 0).sum()
    assert shared <= (workers - 1) * (window + 2 + -(-batch // block))


@given(st.integers(0, 200), st.integers(1, 9), st.integers(2, 4))
def test_deal_batches_keeps_batches_whole(n, batch, workers):
    order = np.arange(n, dtype=np.int64)
    dealt = deal_batches(order, batch, workers)
    full = n // batch
    assert sorted(dealt.tolist()) == list(range(n))
    chunks = [dealt[i : i + batch].tolist() for i in range(0, n, batch)]
    assert all(c == list(range(c[0], c[0] + len(c))) for c in chunks)  # whole batches
    assert dealt[full * batch :].tolist() == order[full * batch :].tolist()  # tail stays last
    if full < 2:
        return
    runs = {w: [chunks[i][0] // batch for i in range(w, full, workers)] for w in range(workers)}
    for natural in runs.values():  # every worker reads one contiguous run, in order
        assert natural == list(range(natural[0], natural[0] + len(natural))) if natural else True
    tail_worker = full % workers
    if runs[tail_worker]:
        assert runs[tail_worker][-1] == full - 1  # the tail's worker owns the batches before it


def test_reads_block_size_from_the_dataset(make_h5):
    path = make_h5({"x": (images(40), "gzip"), "c": images(40)})
    assert ChunkShuffleSampler(H5LazyDataset(path, "x")).block_size == 8
    contiguous = ChunkShuffleSampler(H5LazyDataset(path, "c"))
    assert contiguous.block_size == 1 and contiguous.window_chunks == 64
    assert ChunkShuffleSampler(H5LazyDataset(path, "x"), block_size=4).block_size == 4


def test_errors():
    with pytest.raises(TypeError, match="has no chunk_rows: pass block_size="):
        ChunkShuffleSampler(100)
    with pytest.raises(TypeError, match="has no chunk_rows: pass block_size="):
        ChunkShuffleSampler([1, 2, 3])
    with pytest.raises(TypeError, match="dataset must be a dataset with a length or an int"):
        ChunkShuffleSampler(object(), block_size=2)
    with pytest.raises(ValueError, match="block_size must be >= 1, got 0"):
        ChunkShuffleSampler(10, block_size=0)
    with pytest.raises(ValueError, match="window_chunks must be >= 1, got 0"):
        ChunkShuffleSampler(10, block_size=2, window_chunks=0)
    with pytest.raises(ValueError, match="equal_steps must be one of 'pad', 'drop'; got 'odd'"):
        ChunkShuffleSampler(10, block_size=2, equal_steps="odd")
    with pytest.raises(ValueError, match="rank must be in"):
        ChunkShuffleSampler(10, block_size=2, rank=3, world_size=2)
    with pytest.raises(ValueError, match="num_workers=4 needs batch_size="):
        ChunkShuffleSampler(10, block_size=2, num_workers=4)
    with pytest.raises(ValueError, match="num_workers must be >= 0, got -1"):
        ChunkShuffleSampler(10, block_size=2, num_workers=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'windows'"):
        ChunkShuffleSampler(10, block_size=2, windows=3)


def test_sizes_the_chunk_cache_for_its_window(make_h5, caplog):
    path = make_h5({"x": (images(200), "gzip"), "y": np.arange(200)})
    row = 3 * 4 * 4
    ds = H5LazyDataset(path, "x", "y", rdcc_nbytes=1000)
    sampler = ChunkShuffleSampler(ds, window_chunks=5)
    assert ds.chunk_cache_nbytes == 1000  # the sampler reads numbers, it never resizes
    with caplog.at_level(logging.INFO, logger="nn_handler.dataloaders.loader"):
        batched_loader(ds, 16, sampler=sampler)  # the loader sizes the cache for the window
    assert ds.chunk_cache_nbytes == (5 + 2) * 8 * row
    assert "grown from 1000 to 2688 bytes" in caplog.text
    roomy = H5LazyDataset(path, "x", rdcc_nbytes=10**6)
    assert ChunkShuffleSampler(roomy).window_chunks == 64  # default window: what the cache holds
    assert roomy.chunk_cache_nbytes == 10**6
    small = H5LazyDataset(path, "x", rdcc_nbytes=10 * 8 * row)
    unsized = ChunkShuffleSampler(small, size_cache=False)
    assert unsized.window_chunks == 8
    batched_loader(small, 16, sampler=unsized)
    assert small.chunk_cache_nbytes == 10 * 8 * row
    x, y = ds[list(sampler)[:10]]
    np.testing.assert_array_equal(x.numpy(), h5_rows(path, "x", y.numpy()))


def test_the_window_plan_keeps_the_file_open_and_reaches_every_key(make_h5):
    # a compound field reads through the reader of its records: the plan reaches it too
    table = np.zeros(200, dtype=[("a", "<f4", (3, 4)), ("b", "<i8")])
    table["a"], table["b"] = images(200), np.arange(200)
    path = make_h5({"x": (images(200), "gzip"), "t": (table, "gzip")})
    row = 3 * 4 * 4
    ds = H5LazyDataset(path, "x", "t:a", rdcc_nbytes=1000)
    ds[0]  # this process holds the file now
    assert ds.is_open
    sampler = ChunkShuffleSampler(ds, window_chunks=5)
    loader = batched_loader(ds, 16, sampler=sampler)
    assert ds.is_open  # the cache grew without closing the file
    field_need = (5 + 2) * 8 * table.dtype.itemsize
    assert ds.chunk_cache_nbytes == max((5 + 2) * 8 * row, field_need)
    for x, y in loader:
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    ds.close()
    ds[0]  # HDF5's own cache takes the new budget at the next open
    assert ds._source.file.id.get_access_plist().get_cache()[2] == ds.chunk_cache_nbytes
    roomy = H5LazyDataset(path, "x", "t:a", rdcc_nbytes=10**6)
    fit_chunk_cache(roomy, ChunkShuffleSampler(roomy, window_chunks=5))
    assert roomy.chunk_cache_nbytes == 10**6
    assert [r.readahead_rows for r in (roomy._x, roomy._y.records)] == [5 * 8, 5 * 8]


def test_epoch_through_batched_loader_decodes_each_chunk_once(make_h5):
    path = make_h5({"x": (images(203), "gzip"), "y": np.arange(203)})
    ds = H5LazyDataset(path, "x", "y", rdcc_nbytes=0)
    sampler = ChunkShuffleSampler(ds, window_chunks=4, seed=3)
    loader = batched_loader(ds, 16, sampler=sampler)
    decoded = []
    source = ds._x._rows.engine.source  # the engine fills one chunk per call
    original = source.fill

    def spy(block, dest):
        decoded.append(block)
        return original(block, dest)

    source.fill = spy
    loader.sampler.set_epoch(1)
    ys = torch.cat([y for _, y in loader]).numpy()
    assert sorted(ys.tolist()) == list(range(203))
    assert len(decoded) == len(set(decoded)) == 26  # every chunk decoded exactly once


def test_shuffle_quality_against_full_shuffle():
    """The numbers quoted in docs/performance.md (n=100k, chunks of 64, batches of 256)."""
    n, block, batch, cache = 100_000, 64, 256, 325
    full = np.array(list(EpochShuffleSampler(n, seed=0)))
    chunked = np.array(list(ChunkShuffleSampler(n, block_size=block, window_chunks=32)))
    q_full = shuffle_quality(full, block, batch, cache)
    q_chunk = shuffle_quality(chunked, block, batch, cache)
    assert 0.32 < q_full.displacement < 0.35 and 0.32 < q_chunk.displacement < 0.35
    assert abs(q_full.neighbour_correlation) < 0.01
    assert 0.01 < q_chunk.neighbour_correlation < 0.05  # ~1/window_chunks
    assert q_full.file_neighbours_together < 0.005
    assert 0.1 < q_chunk.file_neighbours_together < 0.15  # ~batch / (window * block)
    assert q_full.blocks_per_batch > 230 and q_chunk.blocks_per_batch < 34
    assert q_full.decodes_per_block > 45 and q_chunk.decodes_per_block == 1.0


@pytest.mark.slow
def test_dataloader_workers_read_every_sample_once(make_h5):
    path = make_h5({"x": (images(300), "gzip"), "y": np.arange(300)})
    ds = H5LazyDataset(path, "x", "y")
    sampler = ChunkShuffleSampler(ds, window_chunks=3, batch_size=16, num_workers=2)
    loader = batched_loader(
        ds, 16, sampler=sampler, num_workers=2, multiprocessing_context="spawn", timeout=120
    )
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        xs, ys = zip(*loader, strict=True)
        y = torch.cat(ys).numpy()
        assert sorted(y.tolist()) == list(range(300))
        np.testing.assert_array_equal(torch.cat(xs).numpy(), h5_rows(path, "x", y))
