import numpy as np
import pytest

from nn_handler.bench import bench_file
from nn_handler.bench import file_bench as fb
from nn_handler.bench.file_advice import recommend

from helpers.files import images


@pytest.fixture
def path(make_h5):
    return make_h5({"x": (images(600), "gzip"), "c": images(600), "y": np.arange(600)})


def names(report):
    return [r.name for r in report.results]


def test_every_strategy_is_timed_on_a_chunked_file(path):
    lines = []
    report = bench_file(path, "x", "y", seconds=0.2, batch_size=64, log_fn=lines.append)
    assert names(report) == [fb.NAIVE, fb.GETITEMS, fb.EPOCH, fb.CHUNK, fb.CACHED]
    assert all(r.samples > 0 for r in report.results)
    assert report.samples == 600
    assert report.sample_bytes == 48 + 8
    assert report.chunk_rows == 8
    assert report.strategy == "decode"
    assert report.preload_s is not None
    assert report.preload_s > 0
    assert len(lines) == 5
    assert report.best.rate == max(r.rate for r in report.results)
    stream, order, cache = report.recommendation
    assert stream.startswith("stream: H5LazyDataset(")
    assert order.startswith("order: a random order reads from memory")  # 34 KB decoded
    assert cache.startswith("cache: RankMemCachedH5Dataset preloads")


def test_contiguous_file_has_no_chunk_sampler_and_x_only_works(path):
    report = bench_file(path, "c", seconds=0.1, batch_size=32)
    assert fb.CHUNK not in names(report)
    assert report.sample_bytes == 48
    assert report.y_key is None


def test_rank_cache_is_skipped_when_memory_is_short(path, monkeypatch):
    monkeypatch.setattr(fb, "available_ram_bytes", lambda: 1000)
    report = bench_file(path, "c", seconds=0.1)
    assert fb.CACHED not in names(report)
    assert report.preload_s is None
    (skipped,) = report.skipped
    assert "more than half of the" in skipped
    assert len(report.recommendation) == 1


def test_recommendation_follows_the_measurements(path):
    report = bench_file(path, "c", seconds=0.1)
    report.results = [
        fb.Result(fb.NAIVE, 100, 1.0, 48),
        fb.Result(fb.EPOCH, 900, 1.0, 48),
        fb.Result(fb.CHUNK, 5000, 1.0, 48),
        fb.Result(fb.CACHED, 60000, 1.0, 48),
    ]
    report.preload_s = 0.5
    stream, cache = recommend(report)
    assert "ChunkShuffleSampler" in stream
    assert "(5,000 samples/s)" in stream
    # streaming epoch 600/5000 = 0.12 s, cached 0.01 s: 0.5 s of preload pays off in epoch 5
    assert "pays off from epoch 5 on" in cache


def test_tiny_files_fill_the_budget_with_more_epochs(make_h5):
    tiny = make_h5({"x": images(10), "y": np.arange(10)})
    report = bench_file(tiny, "x", "y", seconds=0.1, batch_size=256)
    assert all(r.samples > 10 for r in report.results)  # several epochs of one batch each
    assert all(r.rate > 0 for r in report.results)


def test_errors(path, tmp_path, make_h5):
    empty = make_h5({"x": np.zeros((0, 3))})
    with pytest.raises(ValueError, match="has no samples to time"):
        bench_file(empty, "x")
    with pytest.raises(KeyError, match="x_key='nope' not found"):
        bench_file(path, "nope")
    with pytest.raises(ValueError, match="seconds must be > 0"):
        bench_file(path, "x", seconds=0)
    with pytest.raises(FileNotFoundError):
        bench_file(tmp_path / "missing.h5", "x")
