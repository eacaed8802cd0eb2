import h5py
import numpy as np
import pytest

from nn_handler.h5inspect import inspect_file

from helpers.files import images


@pytest.fixture
def path(make_h5, tmp_path):
    p = make_h5(
        {
            "train/images": (images(100), "gzip-shuffle"),
            "train/labels": np.arange(100),
            "split": (images(100), "chunked-split-rows"),
            "plain": (images(100), "chunked"),
            "scalar": np.float32(2),
        }
    )
    with h5py.File(p, "a") as f:
        f.attrs["title"] = b"my data"
        f["train"].attrs["note"] = "x" * 500
        f["train/labels"].attrs["classes"] = np.arange(3)
        f["names"] = np.array(["a", "b"], dtype=object).astype(h5py.string_dtype())
    return p


def by_path(report):
    return {d.path: d for d in report.datasets}


def test_layouts_chunks_filters_and_strategies(path):
    report = inspect_file(path)
    ds = by_path(report)
    img = ds["train/images"]
    assert img.shape == (100, 3, 4)
    assert img.dtype == "float32"
    assert img.layout == "chunked"
    assert img.chunks == (8, 3, 4)
    assert img.rows_per_chunk == 8
    assert img.chunk_bytes == 8 * 48
    assert img.filters == ["shuffle", "gzip(level=4)"]
    assert img.bytes_per_sample == 48
    assert img.data_bytes == 100 * 48
    with h5py.File(path) as f:
        assert img.storage_bytes == f["train/images"].id.get_storage_size()
    assert img.compression_ratio == round(4800 / img.storage_bytes, 2)
    assert ds["train/labels"].layout == "contiguous"
    assert ds["train/labels"].read_strategy == "memmap"
    assert ds["plain"].read_strategy == "memmap"
    assert ds["split"].read_strategy == "chunks"
    assert ds["scalar"].shape == ()
    assert ds["scalar"].read_strategy is None
    assert ds["names"].dtype == "string[variable-length, utf-8]"


def test_attributes_are_decoded_and_truncated(path):
    report = inspect_file(path, max_attr_chars=40)
    groups = {g.path: g for g in report.groups}
    # attributes are JSON values, not reprs
    assert groups["/"].attrs == {"title": "my data"}
    note = groups["train"].attrs["note"]
    assert len(note) == 40
    assert note.endswith("…")
    assert by_path(report)["train/labels"].attrs == {"classes": [0, 1, 2]}


def test_advice_is_specific(path, monkeypatch):
    (fits,) = by_path(inspect_file(path))["train/images"].advice
    assert "a random order reads from memory" in fits and "fits the decoded budget" in fits
    monkeypatch.setenv("NN_HANDLER_DECODED_BUDGET", "1KiB")
    ds = by_path(inspect_file(path))
    (img_advice,) = ds["train/images"].advice
    assert "a random order decodes each chunk once" in img_advice  # the chunk cache holds it
    assert "memory speed" in ds["train/labels"].advice[0]
    assert "a sample spans 4 chunks ((5, 2, 2))" in ds["split"].advice[0]
    assert "chunks=(5, 3, 4)" in ds["split"].advice[0]
    assert "scalar (0-d)" in ds["scalar"].advice[0]
    assert "variable-length" in ds["names"].advice[0]


def test_cache_advice_for_big_chunks(make_h5, monkeypatch):
    # 2 MiB rows, 8-row chunks = 16 MiB, 65 chunks (only the first written: a small file)
    monkeypatch.setenv("NN_HANDLER_DECODED_BUDGET", "512MiB")  # below its 1 GiB decoded
    p = make_h5({})
    with h5py.File(p, "a") as f:
        x = f.create_dataset(
            "x", (520, 512, 1024), np.float32, chunks=(8, 512, 1024), compression="gzip"
        )
        x[:8] = 1
    (d,) = inspect_file(p).datasets
    text = " ".join(d.advice)
    assert "larger than h5py's default 1 MiB chunk cache" in text
    assert "pass rdcc_nbytes=1073741824" in text  # 64 chunks x 16 MiB
    assert "rewrite the file into chunks of 1 row (~2.0 MiB)" in text
    assert f"with nn-handler rewrite {p} {p.with_name(p.stem + '.fast.h5')}" in text


def test_few_chunks_get_no_sampler_advice_but_cache_advice(make_h5):
    big = np.zeros((8, 512, 1024), np.float32)  # one 16 MiB chunk
    p = make_h5({"x": (big, "gzip")})
    (d,) = inspect_file(p).datasets
    text = " ".join(d.advice)
    assert "8 rows in one chunk: read whole once" in text
    assert "ChunkShuffleSampler" not in text and "rows per sample" not in text
    assert "larger than h5py's default 1 MiB chunk cache" in text
    assert "shuffle window" not in text


def test_file_level_advice_pairs_keys(path):
    report = inspect_file(path)
    (advice,) = report.advice
    assert advice.startswith("4 datasets share 100 rows along axis 0")
    assert "'train/images'" in advice
    assert report.superblock_version == 0
    assert report.swmr_mode_capable is False


def test_swmr_format_and_dataset_cap(make_h5):
    p = make_h5({f"s{i}": np.arange(3) for i in range(10)}, libver="latest")
    report = inspect_file(p, max_datasets=4)
    assert report.swmr_mode_capable
    assert len(report.datasets) == 4
    assert report.omitted_datasets == 6


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        inspect_file(tmp_path / "missing.h5")
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"nope")
    with pytest.raises(OSError, match="not an HDF5 file"):
        inspect_file(bad)


def test_a_dataset_beyond_the_budget_and_the_chunk_cache_gets_both_fixes(tmp_path, monkeypatch):
    monkeypatch.setenv("NN_HANDLER_DECODED_BUDGET", "1MiB")
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:  # 400 MB decoded, one chunk written: a small file
        x = f.create_dataset(
            "x", (100_000, 1024), "f4", chunks=(64, 1024), compression="gzip", shuffle=True
        )
        x[:64] = 1.0
    (advice,) = by_path(inspect_file(path))["x"].advice
    assert "exceeds the decoded budget (1.0 MiB)" in advice
    assert "a random order decodes a 64-row chunk per sample (shuffle+gzip(level=4))" in advice
    assert "ChunkShuffleSampler" in advice and f"nn-handler rewrite {path}" in advice
