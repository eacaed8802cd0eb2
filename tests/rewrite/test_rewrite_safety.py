"""Atomic output, never over the input, clear errors for bad arguments, verification that bites."""

import os

import h5py
import numpy as np
import pytest

from nn_handler.rewrite import VerifyError, rewrite_file
from nn_handler.rewrite.codecs import Codec

from helpers.rewrite_files import write_every_kind


@pytest.fixture
def src(tmp_path):
    return write_every_kind(tmp_path / "in.h5", n=300)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failure_mid_way_leaves_no_output_and_no_temp(src, tmp_path, monkeypatch, error):
    calls = {"n": 0}
    encode = Codec.encode

    def failing(self, chunk):
        calls["n"] += 1
        if calls["n"] == 5:
            raise error("disk on fire")
        return encode(self, chunk)

    monkeypatch.setattr(Codec, "encode", failing)
    with pytest.raises(error, match="disk on fire"):
        rewrite_file(src, tmp_path / "out.h5", chunk_bytes=1024, memory="16MiB")
    assert sorted(os.listdir(tmp_path)) == ["in.h5"]


def test_a_wrong_chunk_fails_verification_and_is_not_kept(src, tmp_path, monkeypatch):
    encode = Codec.encode

    def corrupt(self, chunk):
        chunk = chunk.copy()
        chunk.reshape(-1).view(np.uint8)[0] ^= 1
        return encode(self, chunk)

    monkeypatch.setattr(Codec, "encode", corrupt)
    with pytest.raises(VerifyError, match="differs from input row"):
        rewrite_file(src, tmp_path / "out.h5", memory="16MiB")
    assert sorted(os.listdir(tmp_path)) == ["in.h5"]


def test_never_over_the_input(src, tmp_path):
    with pytest.raises(ValueError, match="is the input file"):
        rewrite_file(src, src, force=True)
    os.link(src, tmp_path / "hard.h5")
    os.symlink(src, tmp_path / "soft.h5")
    for other in ("hard.h5", "soft.h5"):
        with pytest.raises(ValueError, match="never writes over its input"):
            rewrite_file(src, tmp_path / other, force=True)
    with h5py.File(src) as f:
        assert f["y"].shape == (300,)


def test_an_existing_output_needs_force(src, tmp_path):
    dst = tmp_path / "out.h5"
    dst.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="force=True"):
        rewrite_file(src, dst)
    assert dst.read_bytes() == b"keep me"
    rewrite_file(src, dst, force=True, memory="16MiB")
    assert h5py.is_hdf5(dst)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"codec": "brotli"}, ValueError, "codec must be one of zstd, lz4, gzip, none"),
        ({"codec": "gzip", "level": 10}, ValueError, r"level for gzip .* \[1, 9\], got 10"),
        ({"codec": "lz4", "level": 3}, ValueError, "takes none, got level=3"),
        ({"chunk_bytes": "lots"}, ValueError, "chunk_bytes must be a size"),
        ({"chunk_bytes": 0}, ValueError, "chunk_bytes must be >= 1"),
        ({"memory": "1MiB"}, ValueError, "memory must be at least"),
        ({"keys": "x"}, TypeError, "keys must be a list"),
        ({"keys": ["x", "nope"]}, KeyError, "'nope' not in"),
        ({"dtypes": {"s": "float32"}}, ValueError, "only numeric datasets change dtype"),
        ({"dtypes": {"x": "U3"}}, ValueError, "must be a numeric dtype"),
        ({"dtypes": {"nope": "f4"}}, KeyError, "dtypes: 'nope' not datasets"),
        ({"shuffle_rows": -1}, ValueError, "shuffle_rows must be >= 0"),
        ({"verify_rows": 0}, ValueError, "verify_rows must be >= 1"),
        ({"workers": 0.5}, TypeError, "workers must be an integer"),
    ],
)
def test_bad_arguments_say_what_is_wrong(src, tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        rewrite_file(src, tmp_path / "out.h5", **kwargs)
    assert not (tmp_path / "out.h5").exists()


def test_memory_must_hold_eight_chunks(tmp_path):
    src = tmp_path / "big_rows.h5"
    with h5py.File(src, "w") as f:  # 4 MiB rows: one row per chunk needs 32 MiB
        f.create_dataset("x", (3, 1024, 1024), "f4", chunks=(1, 1024, 1024), compression="gzip")
    with pytest.raises(ValueError, match=r"memory=16777216 is too small .* at least 33554432"):
        rewrite_file(src, tmp_path / "out.h5", memory="16MiB")


def test_missing_input_and_output_folder(src, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        rewrite_file(tmp_path / "nope.h5", tmp_path / "out.h5")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        rewrite_file(src, tmp_path / "no" / "out.h5")


def _peak_rss_growth(src: str, dst: str, memory: str) -> int:
    """Run in a fresh process: the peak RSS the rewrite adds over the imports (bytes)."""
    import resource

    import nn_handler.rewrite

    h5py.File(src).close()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    nn_handler.rewrite.rewrite_file(src, dst, memory=memory, chunk_bytes="256KiB")
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024


@pytest.mark.slow
def test_memory_bounds_what_the_rewrite_holds(tmp_path):
    import multiprocessing as mp

    src = tmp_path / "big.h5"
    rng = np.random.default_rng(0)
    with h5py.File(src, "w") as f:  # 128 MiB decoded, in 4 MiB gzip chunks
        x = f.create_dataset("x", (32768, 1024), "f4", chunks=(1024, 1024), compression="gzip",
                             compression_opts=1)  # fmt: skip
        for a in range(0, 32768, 4096):
            x[a : a + 4096] = rng.integers(0, 100, (4096, 1024))
    with mp.get_context("spawn").Pool(1) as pool:
        result = pool.apply_async(_peak_rss_growth, (str(src), str(tmp_path / "out.h5"), "32MiB"))
        growth = result.get(timeout=240)
    assert growth < 96 * 2**20  # memory=32 MiB (+ HDF5 and the pool's slack), never 128 MiB
