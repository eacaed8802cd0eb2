import inspect
import io
import pickle
import sys

import numpy as np
import pytest
import torch

from nn_handler import World
from nn_handler.dataloaders import batched_loader
from nn_handler.dataloaders._rank_cache import memory as _memory
from nn_handler.dataloaders._rank_cache import shard_cache as _shard_cache
from nn_handler.dataloaders._transport import pinned as _pinned
from nn_handler.dataloaders.rank_cached_h5_dataloader import (
    EpochShuffleSampler,
    RankMemCachedH5Dataset,
    _balanced_contiguous_shard,
    _interleaved_indices,
)

from helpers.files import LAYOUTS, h5_rows, images

N = 37
MODES = ["contiguous", "interleave"]


def quiet(_message: str) -> None:
    pass


def negate_(t: torch.Tensor) -> torch.Tensor:
    return t.neg_()  # in place: must not reach the cache


def plus_ten(t: torch.Tensor) -> torch.Tensor:
    return t + 10


def build(path, *args, **kwargs) -> RankMemCachedH5Dataset:
    kwargs.setdefault("log_fn", quiet)
    kwargs.setdefault("rank", 0)
    kwargs.setdefault("world_size", 1)
    return RankMemCachedH5Dataset(path, *args, **kwargs)


def expected_rows(total: int, world: int, rank: int, mode: str) -> np.ndarray:
    if mode == "contiguous":
        return np.arange(*_balanced_contiguous_shard(total, world, rank))
    return _interleaved_indices(total, world, rank)


@pytest.fixture
def path(make_h5):
    return make_h5({"x": (images(N), "gzip"), "y": np.arange(N) * 3, "grp/z": images(N, 1)})


def test_seed_signature():
    params = inspect.signature(RankMemCachedH5Dataset).parameters
    seed = {
        "path": inspect.Parameter.empty,
        "x_key": inspect.Parameter.empty,
        "y_key": None,
        "mode": "contiguous",
        "dtype_x": np.float32,
        "dtype_y": None,
        "transform": None,
        "target_transform": None,
        "pin_host_memory": True,
        "share_memory": False,
        "rdcc_nbytes": 256 * 1024**2,
        "rdcc_nslots": 1_000_003,
        "rdcc_w0": 0.75,
        "swmr": True,
        "log_fn": print,
    }
    assert list(params)[: len(seed)] == list(seed)
    for name, default in seed.items():
        assert params[name].default is default or params[name].default == default, name
    keyword_only = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keyword_only[:12] == list(seed)[3:]
    extras = {n: params[n].default for n in keyword_only[12:]}
    assert extras == {
        "rank": None,
        "world_size": None,
        "locking": "best-effort",
        "equal_steps": "pad",
        "cache_device": None,
        "allow_external_files": False,
        "storage_options": None,  # a URL's filesystem options (docs/remote.md)
        "cache_dir": None,
        "cache_limit": None,
        "file_options": None,  # all of the file options as one FileOptions
    }


def test_reexports_come_from_samplers():
    from nn_handler.dataloaders import samplers

    assert EpochShuffleSampler is samplers.EpochShuffleSampler
    assert _balanced_contiguous_shard is samplers._balanced_contiguous_shard
    assert _interleaved_indices is samplers._interleaved_indices


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("mode", MODES)
def test_cache_equals_h5py_for_every_rank(make_h5, layout, mode):
    path = make_h5({"x": (images(N), layout), "y": (np.arange(N) * 3, layout)})
    xs, ys = h5_rows(path, "x"), h5_rows(path, "y")
    for world in (1, 3, 4):
        seen = []
        for rank in range(world):
            ds = build(path, "x", "y", mode=mode, rank=rank, world_size=world, dtype_y=np.int32)
            rows = expected_rows(N, world, rank, mode)
            np.testing.assert_array_equal(ds.shard_indices, rows)
            assert ds.x.dtype == torch.float32 and ds.y.dtype == torch.int32
            assert ds.x.numpy().tobytes() == xs[rows].tobytes()
            np.testing.assert_array_equal(ds.y.numpy(), ys[rows])
            seen.extend(ds.shard_indices.tolist())
        assert sorted(seen) == list(range(N))  # every row once over all ranks


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "gzip"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("dtype_x", "expected"),
    [(None, torch.float32), (np.float64, torch.float64), ("float16", torch.float16)],
)
def test_x_only_and_casts(make_h5, layout, mode, dtype_x, expected):
    path = make_h5({"x": (images(N), layout)})
    ds = build(path, "x", mode=mode, rank=1, world_size=2, dtype_x=dtype_x)
    rows = expected_rows(N, 2, 1, mode)
    assert ds.y is None and ds.x.dtype == expected
    want = images(N)[rows].astype(np.dtype(dtype_x or np.float32))
    np.testing.assert_array_equal(ds.x.numpy(), want)
    sample = ds[2]
    assert isinstance(sample, torch.Tensor)
    np.testing.assert_array_equal(sample.numpy(), want[2])


def test_big_endian_is_cached_native(make_h5):
    path = make_h5({"x": images(9).astype(">f4")})
    ds = build(path, "x", dtype_x=None)
    assert ds.x.dtype == torch.float32
    np.testing.assert_array_equal(ds.x.numpy(), images(9))


def test_samples_and_batches(path):
    ds = build(path, "x", "y", mode="interleave", rank=1, world_size=3, dtype_x=None)
    rows = _interleaved_indices(N, 3, 1)
    file_x = h5_rows(path, "x")
    assert ds.shard_size == len(rows) == 12
    assert len(ds) == 13  # padded to the 13 of ranks 0 and 2: position 12 repeats row 0
    x, y = ds[0]
    np.testing.assert_array_equal(x.numpy(), file_x[1])
    assert y.item() == 3
    assert ds[11][1].item() == rows[-1] * 3
    assert ds[12][1].item() == ds[-1][1].item() == rows[0] * 3
    assert ds[np.int64(2)][1].item() == rows[2] * 3 and ds[torch.tensor(2)][1].item() == rows[2] * 3
    idx = [3, 0, 3, 11, -2]  # -2: position 11 of the 13
    want = rows[[3, 0, 3, 11, 11]]
    xb, yb = ds[idx]
    np.testing.assert_array_equal(xb.numpy(), file_x[want])
    np.testing.assert_array_equal(yb.numpy(), want * 3)
    for key in (np.array(idx), torch.tensor(idx)):
        np.testing.assert_array_equal(ds[key][1].numpy(), yb.numpy())
    np.testing.assert_array_equal(ds[1:7:2][1].numpy(), rows[1:7:2] * 3)
    samples = ds.__getitems__(idx)
    assert len(samples) == 5
    for (xs, ys), r in zip(samples, want, strict=True):
        np.testing.assert_array_equal(xs.numpy(), file_x[r])
        assert ys.item() == r * 3
    assert ds[[]][0].shape == (0, 3, 4)


def test_index_errors(path):
    ds = build(path, "x", "y", rank=0, world_size=2)  # 19 samples
    with pytest.raises(IndexError, match="index 19 is out of range for a dataset of length 19"):
        ds[19]
    with pytest.raises(IndexError, match="index -20 is out of range"):
        ds[-20]
    with pytest.raises(IndexError, match="index 30 is out of range"):
        ds.__getitems__([0, 30])
    with pytest.raises(IndexError, match="index 19 is out of range"):
        ds[[19]]
    with pytest.raises(TypeError, match="index must be an integer"):
        ds[1.5]


def test_transforms_run_per_sample_on_copies(path):
    ds = build(path, "x", "y", transform=negate_, target_transform=plus_ten, dtype_y=np.float32)
    before = ds.x.clone()
    x, y = ds[4]
    np.testing.assert_array_equal(x.numpy(), -images(N)[4])
    assert y.item() == 22
    xb, yb = ds[[4, 5]]
    np.testing.assert_array_equal(xb.numpy(), -images(N)[[4, 5]])
    np.testing.assert_array_equal(yb.numpy(), [22, 25])
    (_, y1), (x2, _) = ds.__getitems__([4, 5])
    np.testing.assert_array_equal(x2.numpy(), -images(N)[5])
    assert y1.item() == 22
    assert torch.equal(ds.x, before)  # in-place transforms never touched the cache


def test_transformed_batch_of_mixed_shapes_is_a_list(path):
    # as H5LazyDataset: samples of one shape are stacked, others come back as a list
    ds = build(path, "x", transform=lambda t: t.flatten()[: 1 + int(t.flatten()[0] > 0.5)])
    batch = ds[list(range(10))]
    samples = [ds[i] for i in range(10)]
    assert len({s.shape for s in samples}) == 2 and isinstance(batch, list)
    for got, want in zip(batch, samples, strict=True):
        assert torch.equal(got, want)


def test_batched_loader_and_sampler(path):
    ds = build(path, "x", "y", rank=2, world_size=3)
    rows = expected_rows(N, 3, 2, "contiguous")
    sampler = ds.make_sampler(seed=3)
    loader = batched_loader(ds, 5, sampler=sampler)
    orders = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        ys = torch.cat([y for _, y in loader]).numpy()
        assert len(ys) == ds.samples_per_rank == 13  # 12 samples, padded to the ranks' 13
        assert set(ys.tolist()) == set((rows * 3).tolist())
        orders.append(ys.tolist())
    assert orders[0] != orders[1]


@pytest.mark.parametrize("total", [0, 1, 2, 3, 4, 5, 7, 8, 9, 13])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", MODES)
def test_equal_steps(make_h5, total, world, mode):
    path = make_h5({"x": images(total), "y": np.arange(total)})
    for policy in ("pad", "drop", None):
        if policy == "pad" and 0 < total < world:
            for rank in range(world):  # every rank refuses, not only the empty ones
                with pytest.raises(ValueError, match="equal_steps='pad' cannot pad an empty"):
                    build(path, "x", "y", mode=mode, rank=rank, world_size=world)
            continue
        counts, seen = [], []
        for rank in range(world):
            ds = build(path, "x", "y", mode=mode, rank=rank, world_size=world, equal_steps=policy)
            sampler = ds.make_sampler(seed=1)
            order = list(sampler)
            assert len(order) == len(sampler) == ds.samples_per_rank == len(ds)
            assert set(order) <= set(range(ds.shard_size))
            size = ds.shard_size
            assert ds.num_padded == sampler.num_padded == max(0, ds.samples_per_rank - size)
            assert ds.num_dropped == sampler.num_dropped == max(0, size - ds.samples_per_rank)
            counts.append(len(order))
            seen.extend(ds.y[order].tolist())
        if policy is None:
            assert sorted(seen) == list(range(total))
        else:
            assert len(set(counts)) == 1  # every rank takes the same number of steps
        if policy == "pad":
            assert set(seen) == set(range(total))  # nothing left out
            assert counts[0] == -(-total // world)
        if policy == "drop":
            assert len(seen) == len(set(seen)) == total // world * world  # nothing twice


def test_empty_shard_is_logged(make_h5):
    path = make_h5({"x": images(2)})
    with pytest.raises(ValueError, match=r"2 samples but world_size=4: ranks 2\.\.3 would get"):
        build(path, "x", rank=0, world_size=4)
    with pytest.raises(ValueError, match="2 samples but world_size=3: rank 2 would get an empty"):
        build(path, "x", rank=0, world_size=3)
    lines = []
    ds = build(path, "x", rank=3, world_size=4, equal_steps="drop", log_fn=lines.append)
    assert len(ds) == 0 and ds.samples_per_rank == 0 and list(ds.make_sampler()) == []
    assert ds.x.shape == (0, 3, 4)
    assert any("rank 3/4 has an empty shard (length 0)" in line for line in lines)
    none = build(path, "x", rank=3, world_size=4, equal_steps=None, mode="interleave")
    assert len(none) == 0 and none.samples_per_rank == 0
    padded = build(path, "x", rank=1, world_size=2)  # 2 samples, 2 ranks: no empty shard
    assert len(padded) == 1 and padded.num_padded == 0


def test_make_sampler_contract(path):
    ds = build(path, "x", rank=2, world_size=3)  # 12 samples; ranks 0 and 1 hold 13
    assert type(ds).is_rank_sharded is True and ds.world == World(2, 3, 2)
    s = ds.make_sampler(seed=5, shuffle=False)
    assert isinstance(s, EpochShuffleSampler)
    assert (s.data_len, s.seed, s.shuffle, s.num_samples) == (12, 5, False, 13)
    assert list(s) == [*range(12), 0]  # pads with its own samples
    assert ds.num_padded == 1 and ds.num_dropped == 0
    drop = build(path, "x", rank=0, world_size=3, equal_steps="drop")
    assert (drop.shard_size, len(drop), drop.samples_per_rank, drop.num_dropped) == (13, 12, 12, 1)


def test_world_detection(path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    lines = []
    single = RankMemCachedH5Dataset(path, "x", log_fn=lines.append)
    assert single.world == World() and len(single) == N
    assert any("single process" in line for line in lines)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    env = RankMemCachedH5Dataset(path, "x", "y", log_fn=quiet, mode="interleave")
    assert env.world == World(1, 3, 1)
    np.testing.assert_array_equal(env.y.numpy(), _interleaved_indices(N, 3, 1) * 3)
    explicit = RankMemCachedH5Dataset(path, "x", "y", log_fn=quiet, rank=0, world_size=2)
    assert explicit.world.rank == 0 and explicit.world.world_size == 2


def test_bad_input(path, tmp_path, make_h5):
    with pytest.raises(
        ValueError, match="mode must be one of 'contiguous', 'interleave'; got 'blocks'"
    ):
        build(path, "x", mode="blocks")
    with pytest.raises(
        ValueError, match="equal_steps must be one of 'pad', 'drop', None; got 'even'"
    ):
        build(path, "x", equal_steps="even")
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=3\), got rank=3"):
        build(path, "x", rank=3, world_size=3)
    with pytest.raises(ValueError, match="rank must be in"):
        build(path, "x", rank=-1, world_size=3)
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        build(path, "x", rank=0, world_size=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shuffle'"):
        build(path, "x", shuffle=True)
    with pytest.raises(TypeError, match="share_memory must be True or False, got 'yes'"):
        build(path, "x", share_memory="yes")
    with pytest.raises(TypeError, match="transform must be callable or None"):
        build(path, "x", transform="flip")
    with pytest.raises(TypeError, match="dtype_y must be a NumPy dtype"):
        build(path, "x", "y", dtype_y="floaty")
    with pytest.raises(FileNotFoundError, match=r"missing\.h5"):
        build(tmp_path / "missing.h5", "x")
    with pytest.raises(KeyError, match=r"y_key='labels' not found .* datasets: 'grp/z', 'x', 'y'"):
        build(path, "x", "labels")
    bad = make_h5({"x": images(5), "y": np.arange(6), "s": np.array([b"a"] * 5)})
    with pytest.raises(ValueError, match="x_key='x' has 5 samples but y_key='y' has 6"):
        build(bad, "x", "y")
    with pytest.raises(TypeError, match=r"x_key='s' has dtype \|S1, which torch cannot represent"):
        build(bad, "s", dtype_x=None)


def test_memory_checks_run_before_allocating(path, monkeypatch):
    monkeypatch.setattr(_memory, "available_ram_bytes", lambda: 1000)
    with pytest.raises(MemoryError) as info:
        build(path, "x", "y", rank=1, world_size=2)
    text = str(info.value)
    need = 18 * 3 * 4 * 4 + 18 * 8
    assert f"rank 1's shard of 'x' and 'y' in {str(path)!r} needs {need} B" in text  # 1008 bytes
    assert "only 1000 B is available" in text and "H5LazyDataset" in text
    monkeypatch.setattr(_memory, "available_ram_bytes", lambda: None)
    monkeypatch.setattr(_memory, "shm_space", lambda path=_memory.SHM_PATH: (100, 64 * 1024**2))
    build(path, "x", share_memory=False)  # /dev/shm is not used
    with pytest.raises(MemoryError, match=r"--shm-size=.*SIGBUS|SIGBUS.*--shm-size="):
        build(path, "x", share_memory=True)


def test_log_line_and_progress_bar(make_h5, monkeypatch):
    path = make_h5({"x": images(40)})
    lines = []
    build(path, "x", rank=1, world_size=2, log_fn=lines.append, dtype_x=np.float64)
    line = next(line for line in lines if "cached" in line)
    assert "rank 1/2 cached 20 of 40 rows of 'x' (rows 20:40): 1.9 KiB in" in line
    assert "MB/s" in line
    tty = io.StringIO()
    tty.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(_shard_cache, "PROGRESS_BYTES", 0)
    build(path, "x", rank=0, world_size=2)  # local rank 0 draws the bar on a terminal
    assert "rank 0 caching" in tty.getvalue()
    shown = tty.getvalue()
    build(path, "x", rank=1, world_size=2)  # other ranks stay quiet
    assert tty.getvalue() == shown


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_pin_without_cuda_logs_once(path, monkeypatch):
    monkeypatch.setattr(_pinned, "_LOGGED", set())
    lines = []
    first = build(path, "x", log_fn=lines.append, share_memory=True)
    second = build(path, "x", log_fn=lines.append)
    assert sum("CUDA is not available" in line for line in lines) == 1
    assert not first.is_pinned and not second.is_pinned and not first.x.is_pinned()
    assert first.x.is_shared() and not second.x.is_shared()
    assert torch.equal(first[[1, 2]], second[[1, 2]])
    off = build(path, "x", log_fn=lines.append, pin_host_memory=False)
    assert not off.is_pinned


def test_repr_close_and_pickle(path):
    lines = []
    with build(
        path, "x", "y", mode="interleave", rank=1, world_size=2, log_fn=lambda m: lines.append(m)
    ) as ds:
        text = repr(ds)
    assert text.startswith(
        f"RankMemCachedH5Dataset(path={str(path)!r}, x_key='x' (37, 3, 4) float32->float32"
    )
    for part in (
        "y_key='y' (37,) int64->int64",
        "mode='interleave'",
        "rank=1/2",
        "rows 1::2",
        "shard_size=18, len=19",
        "equal_steps='pad' (19/rank)",
        "1008 B",
        "not shared",
        "not pinned",
    ):
        assert part in text, part
    assert ds[0][1].item() == 3  # close() is harmless: all in RAM
    clone = pickle.loads(pickle.dumps(ds))  # a lambda log_fn does not travel
    assert torch.equal(clone.x, ds.x) and clone.world == ds.world and clone.shard_size == 18
    assert "rows 0:19" in repr(build(path, "x", rank=0, world_size=2))


def test_pickling_a_private_cache_checks_shm(path, monkeypatch):
    ds = build(path, "x")
    shared = build(path, "x", share_memory=True)
    monkeypatch.setattr(_memory, "shm_space", lambda path=_memory.SHM_PATH: (10, 64 * 1024**2))
    with pytest.raises(MemoryError) as info:
        pickle.dumps(ds)
    text = str(info.value)
    assert "rank 0's cache (share_memory=False), which torch moves into shared memory" in text
    assert "needs 1.7 KiB of shared memory but /dev/shm has only 10 B free" in text
    assert torch.equal(pickle.loads(pickle.dumps(shared)).x, shared.x)  # already shared: fine


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pinned_cache_and_batches(path):
    ds = build(path, "x", "y", share_memory=True)
    assert ds.is_pinned and ds.x.is_pinned() and ds.x.is_shared()
    xb, yb = ds[[3, 1]]
    assert xb.is_pinned() and yb.is_pinned()
    np.testing.assert_array_equal(xb.cuda(non_blocking=True).cpu().numpy(), images(N)[[3, 1]])


def test_cache_device_moves_the_cache_and_gathers_there(path):
    """``meta`` is a real non-CPU device without hardware: the plumbing is tested for real."""
    lines = []
    ds = build(path, "x", "y", cache_device="meta", log_fn=lines.append)
    assert ds.x.device.type == "meta" and ds.y.device.type == "meta"
    assert not ds.is_pinned
    assert "cache moved to meta" in lines[-1]
    xb, yb = ds[[3, 1, 3]]
    assert xb.device.type == "meta" and xb.shape == (3, 3, 4) and yb.shape == (3,)
    assert ds[2][0].device.type == "meta"
    assert "on meta" in repr(ds)
    with pytest.raises(RuntimeError, match="cache lives on meta: serve it from this process"):
        pickle.dumps(ds)
    cpu = build(path, "x", "y", cache_device="cpu")
    np.testing.assert_array_equal(cpu[[3, 1]][0].numpy(), images(N)[[3, 1]])


def test_cache_device_errors(path, monkeypatch):
    with pytest.raises(ValueError, match="cache_device='gpu0' is not a device name"):
        build(path, "x", cache_device="gpu0")
    with pytest.raises(ValueError, match="share_memory=True shares a host cache"):
        build(path, "x", cache_device="meta", share_memory=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="cache_device='cuda' but CUDA is not available"):
        build(path, "x", cache_device="cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cache_on_the_gpu(path):
    ds = build(path, "x", "y", cache_device="cuda")
    assert ds.x.is_cuda and ds.y.is_cuda
    xb, yb = ds[[3, 1, 3]]
    assert xb.is_cuda and yb.is_cuda
    np.testing.assert_array_equal(xb.cpu().numpy(), images(N)[[3, 1, 3]])
    np.testing.assert_array_equal(yb.cpu().numpy(), h5_rows(path, "y", [3, 1, 3]))
    loader = batched_loader(ds, 8, sampler=ds.make_sampler(seed=1))
    seen = torch.cat([y for _, y in loader]).cpu().numpy()
    assert sorted(seen.tolist()) == sorted(h5_rows(path, "y").tolist())
