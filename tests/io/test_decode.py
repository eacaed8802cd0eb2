"""Parallel chunk decoding: bytes identical to h5py for every filter combination we claim."""

import itertools
import zlib

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nn_handler._io.chunks.decoders as decoders_module
import nn_handler._io.chunks.shuffle as shuffle_module
from nn_handler._io.chunks.codecs import ChunkPipeline, pipeline_for
from nn_handler._io.chunks.decoders import (
    ChunkDecodeError,
    Step,
    fletcher32,
    fletcher32_numpy,
    unshuffle_into,
)
from nn_handler._io.chunks.libraries import IMAGECODECS
from nn_handler._io.errors import CorruptFileError
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader

DTYPES = ["<f4", ">f4", "u1", "f2", "c8", "bool", ">i2", "<i8", "S5"]
# (gzip level or None, shuffle, fletcher32): every combination the decoder claims
PIPELINES = [
    (level, shuffle, fletcher)
    for level, shuffle, fletcher in itertools.product([None, 1, 4, 9], [False, True], [False, True])
    if level is not None or shuffle or fletcher
]
SHAPE, CHUNKS = (45, 5, 6), (8, 2, 6)  # 45 rows: partial edge chunk; (2, 6): chunks split rows


@pytest.fixture(params=["imagecodecs", "fallbacks"])
def inflater(request, monkeypatch):
    """Run a test with imagecodecs (when installed) and with zlib / NumPy."""
    if request.param == "fallbacks":
        monkeypatch.setattr(IMAGECODECS, "deflate_decode", None)
        monkeypatch.setattr(IMAGECODECS, "h5checksum_fletcher32", None)
        monkeypatch.setattr(shuffle_module, "blosc_unshuffles", lambda: False)
    elif IMAGECODECS.deflate_decode is None:
        pytest.skip("the optional 'imagecodecs' package is not installed")
    return request.param


def sample(dtype, shape, seed=0):
    """Data that compresses somewhat (small integers) and shows mix-ups (row i starts with i)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 7, size=shape)
    raw.reshape(shape[0], -1)[:, 0] = np.arange(shape[0]) % 100
    if dtype == "bool":
        return (raw % 2).astype(bool)
    if dtype == "c8":
        return (raw + 1j * raw[::-1]).astype(dtype)
    if dtype == "S5":
        return np.char.mod("%d", raw).astype("S5")
    return raw.astype(dtype)


def make_file(tmp_path, data, chunks=CHUNKS, name="d.h5", **filters):
    path = tmp_path / name
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=chunks, **filters)
    return path


def filter_kwargs(level, shuffle, fletcher):
    kw = {"shuffle": shuffle, "fletcher32": fletcher}
    if level is not None:
        kw.update(compression="gzip", compression_opts=level)
    return kw


def reader(path, key="x", **options):
    return RowReader(H5Source(path, FileOptions(**options)), key)


def h5(path, key="x"):
    with h5py.File(path, "r") as f:
        return f[key][()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pipeline", PIPELINES, ids=str)
def test_every_pipeline_and_dtype_equals_h5py(tmp_path, inflater, dtype, pipeline):
    data = sample(dtype, SHAPE)
    path = make_file(tmp_path, data, **filter_kwargs(*pipeline))
    r = reader(path)
    assert r.strategy == "decode"
    expected = h5(path)
    idx = [44, 0, 7, 8, 8, 40, -1, 23, 16]
    got = r.read(idx)
    assert got.dtype == expected.dtype
    assert got.tobytes() == expected[idx].tobytes()
    assert r.read_range(0, 45).tobytes() == expected.tobytes()
    assert r.read_range(3, 42).tobytes() == expected[3:42].tobytes()
    assert r.read_row(-1).tobytes() == expected[-1].tobytes()


@pytest.fixture(
    params=[
        ("<f4", filter_kwargs(4, False, False)),
        (">f4", filter_kwargs(9, True, True)),
        ("f2", filter_kwargs(1, True, False)),
        ("u1", filter_kwargs(6, True, True)),
    ],
    ids=["gzip-f4", "gzip-shuffle-fletcher->f4", "gzip-shuffle-f2", "all-u1"],
)
def random_file(request, tmp_path):
    dtype, kwargs = request.param
    data = sample(dtype, (61, 3, 5), seed=3)
    path = make_file(tmp_path, data, chunks=(7, 2, 3), **kwargs)
    return path, h5(path)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    idx=st.lists(st.integers(-61, 60), max_size=150),
    span=st.tuples(st.integers(0, 61), st.integers(0, 61)),
    budget=st.sampled_from([0, 300, 10**9]),
)
def test_random_batches_and_ranges_equal_h5py(random_file, idx, span, budget):
    path, expected = random_file
    r = reader(path, rdcc_nbytes=budget)
    got = r.read(idx)
    assert got.shape == (len(idx), 3, 5)
    assert got.tobytes() == expected[np.asarray(idx, dtype=np.int64)].tobytes()
    again = r.read(idx[::-1])  # second batch: served partly from the decoded-chunk cache
    assert again.tobytes() == expected[np.asarray(idx[::-1], dtype=np.int64)].tobytes()
    start, stop = sorted(span)
    assert r.read_range(start, stop).tobytes() == expected[start:stop].tobytes()


def test_one_dimensional_and_single_chunk(tmp_path):
    labels = np.arange(1000, dtype=np.int64)[::-1].copy()
    path = make_file(tmp_path, labels, chunks=(999,), compression="gzip", shuffle=True)
    r = reader(path)
    assert r.strategy == "decode" and r.row_shape == ()
    np.testing.assert_array_equal(r.read([999, 0, 998, 5]), labels[[999, 0, 998, 5]])
    assert int(r.read_row(-1)) == 0
    assert r.read_range(0, 1000).tobytes() == labels.tobytes()


def test_unallocated_chunks_read_fill_value(tmp_path):
    path = tmp_path / "sparse.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset(
            "x", shape=(40, 3), dtype="f4", chunks=(8, 3), fillvalue=-1.0, compression="gzip"
        )
        d[8:16] = 5.0  # only chunk 1 is written
    r = reader(path)
    assert r.strategy == "decode"
    expected = h5(path)
    assert r.read([0, 9, 39, 12]).tobytes() == expected[[0, 9, 39, 12]].tobytes()
    assert r.read_range(0, 40).tobytes() == expected.tobytes()


def test_filter_mask_skips_filters(tmp_path):
    """Chunks written with an optional filter skipped (mask bit set) decode as h5py reads them."""
    data = sample("<f4", (24, 4))
    path = make_file(tmp_path, data, chunks=(8, 4), compression="gzip", shuffle=True)
    plain = data[8:16].tobytes()
    with h5py.File(path, "r+") as f:
        d = f["x"]
        d.id.write_direct_chunk((8, 0), plain, filter_mask=0b11)  # shuffle and deflate skipped
        unshuffled = zlib.compress(data[16:24].tobytes())
        d.id.write_direct_chunk((16, 0), unshuffled, filter_mask=0b01)  # shuffle skipped
    expected = h5(path)
    np.testing.assert_array_equal(expected, data)
    r = reader(path)
    assert r.read([20, 9, 0, 15]).tobytes() == expected[[20, 9, 0, 15]].tobytes()


def test_pipelines_in_any_order(tmp_path, inflater):
    """Fletcher-32 first, shuffle after deflate, deflate twice: HDF5 allows them, so do we."""
    data = sample("<i4", (30, 5))
    orders = {
        "fletcher-shuffle-deflate": ["fletcher32", "shuffle", "deflate"],
        "deflate-shuffle": ["deflate", "shuffle"],
        "deflate-deflate-fletcher": ["deflate", "deflate", "fletcher32"],
    }
    path = tmp_path / "orders.h5"
    with h5py.File(path, "w") as f:
        for name, filters in orders.items():
            plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            plist.set_chunk((7, 5))
            for flt in filters:
                {"deflate": lambda p: p.set_deflate(5), "shuffle": lambda p: p.set_shuffle()}.get(
                    flt, lambda p: p.set_fletcher32()
                )(plist)
            space = h5py.h5s.create_simple(data.shape)
            tid = h5py.h5t.py_create(data.dtype)
            dsid = h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=plist)
            dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    for name in orders:
        r = reader(path, name)
        assert r.strategy == "decode", name
        assert r.read([29, 0, 14, 3]).tobytes() == data[[29, 0, 14, 3]].tobytes(), name
        assert r.read_range(0, 30).tobytes() == data.tobytes(), name


def test_corrupt_chunk_raises_as_h5py_does(tmp_path):
    data = np.arange(400, dtype="f4").reshape(100, 4)
    path = make_file(tmp_path, data, chunks=(10, 4), shuffle=True, fletcher32=True)
    with h5py.File(path, "r") as f:
        info = f["x"].id.get_chunk_info(3)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + 5)
        byte = fh.read(1)[0]
        fh.seek(info.byte_offset + 5)
        fh.write(bytes([byte ^ 0xFF]))
    r = reader(path, swmr=False)
    np.testing.assert_array_equal(r.read([0, 99]), data[[0, 99]])  # other chunks still fine
    h5py_says = r"(?i)filter returned failure|fletcher"  # the wording depends on HDF5's version
    with h5py.File(path, "r") as f, pytest.raises(OSError, match=h5py_says):
        f["x"][35]
    corrupt = r"'/x' of .*d\.h5'.* chunk at \(30, 0\) is corrupt .*Fletcher-32"
    with pytest.raises(CorruptFileError, match=corrupt):
        r.read([35])
    with pytest.raises(CorruptFileError, match=corrupt):
        r.read_range(0, 100)


def test_unsupported_filters_are_decoded_by_h5py(tmp_path):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    data = sample("<f4", (40, 3, 4))
    path = tmp_path / "others.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("lzf", data=data, chunks=(8, 3, 4), compression="lzf")
        f.create_dataset("scale", data=data, chunks=(8, 3, 4), scaleoffset=2)
        f.create_dataset("blosc", data=data, chunks=(8, 3, 4), **hdf5plugin.Blosc())
        f.create_dataset("zstd", data=data, chunks=(8, 3, 4), **hdf5plugin.Zstd())
    # blosc and zstd are decoded by imagecodecs when installed (tests/io/test_chunk_codecs.py)
    plugins = "decode" if decoders_module.library("imagecodecs", "zstd_decode") else "chunks"
    for key in ("lzf", "scale", "blosc", "zstd"):
        r = reader(path, key)
        assert r.strategy == (plugins if key in ("blosc", "zstd") else "chunks"), key
        assert r.read([39, 2, 2]).tobytes() == h5(path, key)[[39, 2, 2]].tobytes(), key


def test_codec_only_when_file_bytes_equal_memory_bytes(tmp_path):
    path = tmp_path / "types.h5"
    with h5py.File(path, "w") as f:
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(5)
        tid.set_strpad(h5py.h5t.STR_NULLTERM)  # h5py reads it as null-padded "S5": converted
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_chunk((4,))
        plist.set_deflate(4)
        dsid = h5py.h5d.create(f.id, b"nullterm", tid, h5py.h5s.create_simple((10,)), dcpl=plist)
        words = np.array([b"abcd", b"xy"] * 5, dtype="S5")
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, words, mtype=tid)
        packed = np.dtype([("a", "u1"), ("b", "<f8")])  # h5py keeps the file's packed layout
        f.create_dataset("packed", data=np.ones(10, packed), chunks=(5,), compression="gzip")
        f.create_dataset("plain", data=np.zeros((10, 2)), chunks=(5, 2))
        f.create_dataset("contig", data=np.zeros((10, 2)))
    with h5py.File(path, "r") as f:
        assert pipeline_for(f["nullterm"]) is None
        assert pipeline_for(f["packed"]) is not None
        assert pipeline_for(f["plain"]) is None  # no filters: memmap's job
        assert pipeline_for(f["contig"]) is None
    assert reader(path, "nullterm").strategy == "chunks"
    for key in ("nullterm", "packed"):
        assert reader(path, key).read([9, 0]).tobytes() == h5(path, key)[[9, 0]].tobytes()


def test_fletcher32_matches_hdf5_checksums(tmp_path):
    """The checksum HDF5 stored after each chunk equals ours, odd lengths and 0xFFFF sums too."""
    rng = np.random.default_rng(1)
    cases = {
        "odd": (rng.integers(0, 256, (40, 5)).astype("u1"), (3, 5)),  # 15-byte chunks
        "even": (rng.integers(0, 256, (40, 8)).astype("u1"), (5, 8)),
        "ones": (np.full((20, 6), 0xFF, "u1"), (4, 6)),  # every word 0xFFFF: sums ≡ 0
        "zeros": (np.zeros((20, 6), "u1"), (4, 6)),
        "long": (rng.integers(0, 256, (3, 5001)).astype("u1"), (1, 5001)),  # > 360 words
    }
    path = tmp_path / "sums.h5"
    with h5py.File(path, "w") as f:
        for name, (data, chunks) in cases.items():
            f.create_dataset(name, data=data, chunks=chunks, fletcher32=True)
    with h5py.File(path, "r") as f:
        for name in cases:
            d = f[name]
            for i in range(d.id.get_num_chunks()):
                _, raw = d.id.read_direct_chunk(d.id.get_chunk_info(i).chunk_offset)
                body = np.frombuffer(raw[:-4], np.uint8)
                stored = int.from_bytes(raw[-4:], "little")
                assert fletcher32(body) == fletcher32_numpy(body) == stored, name


def test_decode_errors(inflater):
    codec = ChunkPipeline((Step(1, (), 4),), (4,), np.dtype("<f4"))
    with pytest.raises(ChunkDecodeError, match="corrupt"):
        codec.decode(b"not a zlib stream")
    with pytest.raises(ChunkDecodeError, match="decoded to 3 bytes, expected 16"):
        codec.decode(zlib.compress(b"abc"))
    with pytest.raises(ChunkDecodeError, match="more than the expected 16"):
        codec.decode(zlib.compress(bytes(17)))
    with pytest.raises(ChunkDecodeError, match=r"corrupt|truncated"):
        codec.decode(zlib.compress(bytes(16))[:-5])
    checked = ChunkPipeline((Step(3, (), 1),), (1,), np.dtype("u1"))
    with pytest.raises(ChunkDecodeError, match="too short"):
        checked.decode(b"ab")
    with pytest.raises(ChunkDecodeError, match="Fletcher-32"):
        checked.decode(b"a\x00\x00\x00\x00")


@given(st.binary(max_size=64), st.integers(1, 9))
def test_unshuffle_inverts_hdf5_shuffle(raw, itemsize):
    buf = np.frombuffer(raw, np.uint8)
    count = len(raw) // itemsize
    body = count * itemsize
    shuffled = np.concatenate([buf[:body].reshape(count, itemsize).T.ravel(), buf[body:]]).astype(
        np.uint8
    )
    out = np.empty_like(shuffled)
    unshuffle_into(shuffled, out, itemsize)
    assert out.tobytes() == raw
