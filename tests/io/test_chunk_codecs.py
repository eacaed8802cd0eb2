"""Native decoders (gzip, shuffle, Fletcher-32, blosc(2), lz4, bitshuffle, zstd): h5py's bytes."""

import zlib

import h5py
import numpy as np
import pytest

import nn_handler._io.chunks.decoders as decoders_module
import nn_handler._io.chunks.plugins as plugins_module
import nn_handler._io.chunks.shuffle as shuffle_module
from nn_handler._io.chunks.block_fillers import TableChunks
from nn_handler._io.chunks.codecs import ChunkPipeline, pipeline_for
from nn_handler._io.chunks.decoders import ChunkDecodeError, Step, inflate_into, unshuffle_into
from nn_handler._io.chunks.libraries import IMAGECODECS, Library
from nn_handler._io.codec_registry import DEFLATE, RECORDS, decoder_of
from nn_handler._io.errors import CorruptFileError
from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.reader import RowReader

hdf5plugin = pytest.importorskip("hdf5plugin")
HDF5_FILTERS = ("gzip", "gzip-shuffle-fletcher")  # decoded without imagecodecs too
needs_imagecodecs = pytest.mark.skipif(
    decoders_module.library("imagecodecs", "zstd_decode") is None,
    reason="the plugin filters are decoded with the optional 'imagecodecs' package",
)


def filters():
    """name -> create_dataset keywords, one per codec and a few combinations."""
    return {
        "gzip": {"compression": "gzip", "compression_opts": 1},
        "gzip-shuffle-fletcher": {"compression": "gzip", "shuffle": True, "fletcher32": True},
        "blosc-lz4": dict(hdf5plugin.Blosc(cname="lz4", clevel=5)),
        "blosc-zstd-bitshuffle": dict(
            hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE)
        ),
        "blosc-noshuffle": dict(
            hdf5plugin.Blosc(cname="blosclz", shuffle=hdf5plugin.Blosc.NOSHUFFLE)
        ),
        "blosc2": dict(hdf5plugin.Blosc2(cname="lz4", clevel=5)),
        "zstd": dict(hdf5plugin.Zstd(clevel=3)),
        "shuffle-zstd": {"shuffle": True, **hdf5plugin.Zstd(clevel=1)},
        "lz4": dict(hdf5plugin.LZ4()),
        "lz4-small-blocks": dict(hdf5plugin.LZ4(nbytes=256)),
        "bitshuffle": dict(hdf5plugin.Bitshuffle(cname="none")),
        "bitshuffle-lz4": dict(hdf5plugin.Bitshuffle(cname="lz4")),
        "bitshuffle-zstd": dict(hdf5plugin.Bitshuffle(cname="zstd")),
    }


def data_for(dtype, n=90):
    rng = np.random.default_rng(3)
    # half noise, half runs: some blocks compress, some are stored raw (lz4 / blosc paths)
    base = np.round(rng.standard_normal((n, 5, 7)), 1).astype(dtype)
    base[::3] = np.arange(35, dtype=dtype).reshape(5, 7)
    return base


@pytest.fixture(scope="module")
def codec_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("codecs") / "codecs.h5"
    with h5py.File(path, "w") as f:
        for name, kw in filters().items():
            for dtype in ("<f4", "<i2", "u1", ">f8"):
                f.create_dataset(f"{name}/{dtype}", data=data_for(dtype), chunks=(8, 5, 7), **kw)
    return path


def reader(path, key):
    return RowReader(H5Source(path, FileOptions(swmr=False)), key)


@pytest.mark.parametrize("name", list(filters()))
def test_every_codec_reads_the_bytes_h5py_reads(codec_file, name):
    if name not in HDF5_FILTERS:
        pytest.importorskip("imagecodecs")
    rng = np.random.default_rng(0)
    with h5py.File(codec_file, "r") as f:
        for dtype in ("<f4", "<i2", "u1", ">f8"):
            key = f"{name}/{dtype}"
            expected = f[key][()]
            r = reader(codec_file, key)
            assert isinstance(r._rows.engine.source, TableChunks), key  # decoded here, not by h5py
            idx = rng.integers(0, len(expected), 300)  # duplicates, any order, last partial chunk
            assert r.read(idx).tobytes() == expected[idx].tobytes(), key
            assert r.read_range(3, 85).tobytes() == expected[3:85].tobytes(), key
            assert r.read_range(0, 90).tobytes() == expected.tobytes(), key


@pytest.mark.parametrize("name", [*filters(), "gzip-shuffle"])
def test_chunk_heads_are_the_chunks_first_rows(tmp_path, name):
    # a head decoded no further than it must (deflate stops early; a shuffle over one
    # compressor puts only the head's elements back together) equals the whole chunk's rows
    if name not in (*HDF5_FILTERS, "gzip-shuffle"):
        pytest.importorskip("imagecodecs")
    kw = {"compression": "gzip", "shuffle": True} if name == "gzip-shuffle" else filters()[name]
    path = tmp_path / "heads.h5"
    with h5py.File(path, "w") as f:
        for dtype in ("<f4", "<i2", "u1", ">f8"):
            f.create_dataset(dtype, data=data_for(dtype), chunks=(8, 5, 7), **kw)
    cheap = name in ("gzip", "gzip-shuffle", "shuffle-zstd")
    for dtype in ("<f4", "<i2", "u1", ">f8"):
        expected = data_for(dtype)
        r = reader(path, dtype)
        assert r.decodes_heads is cheap, (name, dtype)
        wanted = [(0, 1), (3, 8), (11, 2), (5, 5)]  # (11: the short last chunk)
        for (chunk, rows), head in zip(wanted, r.read_chunk_heads(wanted), strict=True):
            assert head.tobytes() == expected[chunk * 8 : chunk * 8 + rows].tobytes(), name


def decoded_here() -> set[str]:
    """Names of the filters decoded here in this environment (with their default parameters)."""
    return {r.name for r in RECORDS if decoder_of(Step(r.code, (), 1)) is not None}


def test_supported_filters_with_imagecodecs():
    pytest.importorskip("imagecodecs")
    assert {"blosc", "lz4", "bitshuffle", "zstd"} <= decoded_here()
    if pytest.importorskip("blosc2"):
        assert "blosc2" in decoded_here()


def test_without_the_libraries_only_hdf5_filters_are_decoded(codec_file, monkeypatch):
    """A plain install: deflate by zlib, Fletcher-32 by NumPy, plugin filters left to h5py."""
    missing = Library("imagecodecs_is_not_installed")
    for module in (decoders_module, plugins_module, shuffle_module):
        monkeypatch.setattr(module, "IMAGECODECS", missing)
    monkeypatch.setattr(shuffle_module, "blosc_unshuffles", lambda: False)  # (checked once)
    monkeypatch.setattr(plugins_module, "_blosc2_package", lambda: None)
    assert decoded_here() == {"gzip", "shuffle", "fletcher32"}
    for name in ("zstd", "lz4", "blosc-lz4", "blosc2", "bitshuffle", "bitshuffle-lz4"):
        assert reader(codec_file, f"{name}/<f4").strategy == "chunks", name
    with h5py.File(codec_file, "r") as f:
        for name in ("gzip", "gzip-shuffle-fletcher"):
            expected = f[f"{name}/<f4"][()]
            r = reader(codec_file, f"{name}/<f4")
            assert isinstance(r._rows.engine.source, TableChunks), name
            assert r.read_range(0, 90).tobytes() == expected.tobytes(), name


def test_unsupported_filter_keeps_h5py(tmp_path):
    path = tmp_path / "lzf.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data_for("<f4"), chunks=(8, 5, 7), compression="lzf")
    with h5py.File(path, "r") as f:
        assert pipeline_for(f["x"]) is None
    assert reader(path, "x").strategy == "chunks"


@needs_imagecodecs
def test_decoded_length_is_checked(codec_file):
    with h5py.File(codec_file, "r") as f:
        for name in ("zstd", "lz4", "blosc-lz4", "bitshuffle-lz4", "gzip"):
            dset = f[f"{name}/<f4"]
            pipeline = pipeline_for(dset)
            mask, raw = dset.id.read_direct_chunk((0, 0, 0))
            raw = np.frombuffer(raw, np.uint8)
            good = np.empty(pipeline.chunk_nbytes, np.uint8)
            pipeline.decode_into(raw, mask, good)
            assert good.tobytes() == dset[0:8].tobytes(), name
            with pytest.raises(ChunkDecodeError):
                pipeline.decode_into(raw[: raw.size // 2], mask, good)  # truncated stream
            with pytest.raises(ValueError, match="out holds 8 bytes"):
                pipeline.decode_into(raw, mask, np.empty(8, np.uint8))


@needs_imagecodecs
def test_corrupt_chunk_raises_corrupt_file_error_naming_it(tmp_path):
    path = tmp_path / "bad.h5"
    data = data_for("<f4")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(8, 5, 7), **hdf5plugin.Zstd())
        info = f["x"].id.get_chunk_info(2)
    with open(path, "r+b") as fh:  # break chunk 2's zstd magic number
        fh.seek(info.byte_offset)
        fh.write(b"\xff" * 4)
    r = reader(path, "x")
    np.testing.assert_array_equal(r.read([0, 8, 89]), data[[0, 8, 89]])  # other chunks fine
    with h5py.File(path, "r") as f, pytest.raises(OSError, match=r"(?i)filter|read"):
        f["x"][17]  # h5py refuses it too
    with pytest.raises(CorruptFileError, match=r"bad\.h5'.* the chunk at \(16, 0, 0\) is corrupt"):
        r.read([17])


@pytest.mark.parametrize("library", [True, False], ids=["imagecodecs", "zlib"])
def test_inflate_into_checks_length(monkeypatch, library):
    if library and IMAGECODECS.deflate_decode is None:
        pytest.skip("the optional 'imagecodecs' package is not installed")
    if not library:
        monkeypatch.setattr(IMAGECODECS, "deflate_decode", None)
    payload = np.arange(1000, dtype=np.uint8)
    stream = np.frombuffer(zlib.compress(payload.tobytes()), np.uint8)
    out = np.empty(1000, np.uint8)
    assert inflate_into(stream, out).nbytes == 1000
    assert out.tobytes() == payload.tobytes()
    with pytest.raises(ChunkDecodeError, match="more than the expected 999"):
        inflate_into(stream, np.empty(999, np.uint8))
    with pytest.raises(ChunkDecodeError, match="corrupt"):
        inflate_into(np.frombuffer(b"not zlib", np.uint8), out)
    pipeline = ChunkPipeline((Step(DEFLATE, (), 1),), (1001,), np.dtype("u1"))
    with pytest.raises(ChunkDecodeError, match=r"1000 bytes, expected 1001"):
        pipeline.decode_into(stream, 0, np.empty(1001, np.uint8))


def test_unshuffle_into_matches_hdf5_layout():
    values = np.arange(10, dtype="<u4") * 0x01020304
    shuffled = values.view(np.uint8).reshape(10, 4).T.copy().ravel()
    tail = np.array([7, 9], np.uint8)  # bytes past the last whole element stay put
    src = np.concatenate([shuffled, tail])
    out = np.empty_like(src)
    unshuffle_into(src, out, 4)
    assert out[:40].tobytes() == values.tobytes() and out[40:].tolist() == [7, 9]
    with pytest.raises(ChunkDecodeError):
        unshuffle_into(src, out[:-1], 4)


@needs_imagecodecs
@pytest.mark.parametrize("one_call", [True, False], ids=["lz4h5", "per-block"])
@pytest.mark.parametrize("cname", ["none", "lz4", "zstd"])
def test_bitshuffle_blocks_and_leftover_elements(tmp_path, monkeypatch, cname, one_call):
    """Chunks of several blocks, a partial last block and count % 8 elements stored as is."""
    if not one_call:  # lz4 blocks one call each, as when a block's size equals its data's
        monkeypatch.setattr(IMAGECODECS, "lz4h5_decode", None)
    path = tmp_path / "bs.h5"
    rng = np.random.default_rng(5)
    chunk_rows = {"5003": 5003, "5": 5, "16": 16}  # several blocks / leftover only / one block
    with h5py.File(path, "w") as f:
        for dtype in ("<f4", "<i2", ">f8", "u1"):
            data = np.round(rng.standard_normal(12_345) * 50).astype(dtype)
            kw = dict(hdf5plugin.Bitshuffle(cname=cname))
            for name, rows in chunk_rows.items():
                f.create_dataset(f"{dtype}/{name}", data=data, chunks=(rows,), **kw)
    with h5py.File(path, "r") as f:
        for dtype in ("<f4", "<i2", ">f8", "u1"):
            for name, rows in chunk_rows.items():
                dset = f[f"{dtype}/{name}"]
                pipeline = pipeline_for(dset)
                for i in range(0, dset.id.get_num_chunks(), 97):
                    offset = dset.id.get_chunk_info(i).chunk_offset
                    mask, raw = dset.id.read_direct_chunk(offset)
                    got = pipeline.decode(raw, mask)
                    expected = dset[offset[0] : offset[0] + rows]
                    assert got[: expected.size].tobytes() == expected.tobytes(), (dtype, name, i)
