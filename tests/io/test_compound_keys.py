"""Keys that name one field of a compound (table) dataset: ``"<dataset>:<field>"``."""

import h5py
import numpy as np
import pytest
import torch

from nn_handler._io.file.options import FileOptions
from nn_handler._io.file.source import H5Source
from nn_handler._io.rows.fields import FieldReader, open_reader
from nn_handler._io.rows.keys import resolve_key, splits
from nn_handler.dataloaders import CombinedHDF5Dataset, H5LazyDataset, RankMemCachedH5Dataset

from helpers.real_files import table_rows, write_compound, write_pandas, write_pytables

ORDER = [9, 3, 3, 0, 49, 17, 8]


@pytest.fixture
def path(tmp_path):
    return write_compound(tmp_path)


def expected(path, dataset, field, rows=None):
    with h5py.File(path) as f:
        values = f[dataset][field]
    return values if rows is None else values[np.asarray(rows)]


def test_splits_tries_every_colon_from_the_right():
    assert splits("a/b:c") == [("a/b", "c")]
    assert splits("a:b:c") == [("a:b", "c"), ("a", "b:c")]
    assert splits(":a") == []
    assert splits("a:") == []


def test_resolve_prefers_an_existing_dataset_name(path):
    with h5py.File(path) as f:
        assert resolve_key(f, "odd:name", arg="k", where="f").field is None
        got = resolve_key(f, "grp/gzip:pixels", arg="k", where="f")
        assert (got.path, got.field) == ("grp/gzip", "pixels")
        assert resolve_key(f, "nothing:here", arg="k", where="f") is None
        with pytest.raises(KeyError, match=r"has no field 'pix'; its fields are 'id', 'label'"):
            resolve_key(f, "contiguous:pix", arg="k", where="f")
        with pytest.raises(TypeError, match=r"'plain' has dtype float32, not a compound"):
            resolve_key(f, "plain:x", arg="k", where="f")
        with pytest.raises(TypeError, match=r"'grp' is a group"):
            resolve_key(f, "grp:x", arg="k", where="f")


@pytest.mark.parametrize(
    ("dataset", "strategy"),
    [("contiguous", "memmap"), ("chunked", "memmap"), ("grp/gzip", "decode")],
)
@pytest.mark.parametrize("field", ["pixels", "label", "w"])
def test_field_reader_matches_h5py(path, dataset, strategy, field):
    reader = open_reader(H5Source(path, FileOptions()), f"{dataset}:{field}", arg="x_key")
    assert isinstance(reader, FieldReader)
    assert reader.strategy == strategy
    want = expected(path, dataset, field)
    assert reader.row_shape == want.shape[1:]
    np.testing.assert_array_equal(reader.read(ORDER), want[ORDER])
    np.testing.assert_array_equal(reader.read_range(5, 20), want[5:20])
    np.testing.assert_array_equal(reader.read_row(-1), want[-1])
    out = np.empty((len(ORDER), *reader.row_shape), reader.dtype)
    assert reader.read(ORDER, out=out) is out
    with pytest.raises(ValueError, match="out must have shape"):
        reader.read(ORDER, out=out[:2])


def test_lazy_dataset_with_field_keys(path):
    ds = H5LazyDataset(path, "grp/gzip:pixels", "grp/gzip:label")
    pixels, labels = expected(path, "grp/gzip", "pixels"), expected(path, "grp/gzip", "label")
    x, y = ds[ORDER]
    assert x.shape == (len(ORDER), 2, 3) and x.dtype == torch.float32
    np.testing.assert_array_equal(x.numpy(), pixels[ORDER])
    np.testing.assert_array_equal(y.numpy(), labels[ORDER])
    x0, y0 = ds[4]
    np.testing.assert_array_equal(x0.numpy(), pixels[4])
    assert int(y0) == labels[4]
    items = ds.__getitems__(ORDER)
    np.testing.assert_array_equal(torch.stack([s[0] for s in items]).numpy(), pixels[ORDER])
    assert ds.x_key == "grp/gzip:pixels"
    assert "grp/gzip:pixels" in repr(ds)


def test_big_endian_field_is_cast(path):
    ds = H5LazyDataset(path, "contiguous:w", x_dtype=np.float32)
    np.testing.assert_array_equal(ds[ORDER].numpy(), expected(path, "contiguous", "w", ORDER))
    assert ds[ORDER].dtype == torch.float32


def test_a_real_colon_name_is_a_dataset(path):
    ds = H5LazyDataset(path, "odd:name")
    np.testing.assert_array_equal(ds[[1, 2]].numpy(), [1, 2])


def test_whole_compound_key_says_which_keys_work(path):
    with pytest.raises(
        TypeError, match=r"compound \(table\) dataset; pick one field .*'contiguous:id'"
    ):
        H5LazyDataset(path, "contiguous")
    with pytest.raises(TypeError, match=r"compound \(table\) dataset: pick one field"):
        RankMemCachedH5Dataset(path, "contiguous", log_fn=lambda _: None)
    with pytest.raises(KeyError, match=r"has no field 'nope'"):
        H5LazyDataset(path, "contiguous:nope")


@pytest.mark.parametrize("mode", ["contiguous", "interleave"])
def test_rank_cached_with_field_keys(path, mode):
    ds = RankMemCachedH5Dataset(
        path, "grp/gzip:pixels", "chunked:label", mode=mode, rank=1, world_size=3,
        log_fn=lambda _: None, pin_host_memory=False,
    )  # fmt: skip
    rows = ds.shard_indices
    np.testing.assert_array_equal(ds.x.numpy(), expected(path, "grp/gzip", "pixels", rows))
    np.testing.assert_array_equal(ds.y.numpy(), expected(path, "chunked", "label", rows))
    assert ds.x.dtype == torch.float32


def test_combined_loads_field_keys(path, tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["contiguous"] = table_rows(20, seed=3)
    ds = CombinedHDF5Dataset(
        [path, other], load_fields=["contiguous:pixels", "id"], cache_size=0, pin_memory=False,
        field_names={"id": "contiguous:id"},
    )  # fmt: skip
    assert len(ds) == 70
    batch = ds[[0, 49, 50, 69]]
    first, second = table_rows(50), table_rows(20, seed=3)
    want = np.stack(
        [first["pixels"][0], first["pixels"][49], second["pixels"][0], second["pixels"][19]]
    )
    np.testing.assert_array_equal(batch["contiguous:pixels"].numpy(), want)
    assert batch["id"].tolist() == [0, 49, 0, 19]


def test_pandas_table_columns(tmp_path):
    table, _, frame = write_pandas(tmp_path)
    ds = H5LazyDataset(table, "df/table:values_block_0", "df/table:k")
    x, y = ds[ORDER[:4]]
    np.testing.assert_array_equal(x.numpy(), frame[["a", "b"]].to_numpy()[ORDER[:4]])
    np.testing.assert_array_equal(y.numpy(), frame["k"].to_numpy()[ORDER[:4]])
    names = H5LazyDataset(table, "df/table:values_block_1")[[0, 1, 2]]
    assert names == [["cat"], ["dog"], ["bird"]]  # a (1,)-shaped string block per row


def test_pytables_array_column(tmp_path):
    path = write_pytables(tmp_path)
    ds = H5LazyDataset(path, "t:vec", "t:tag", classes=["cat", "dog", "bird"])
    x, y = ds[[0, 3, 24]]
    np.testing.assert_array_equal(x.numpy(), [[0, 0.5, 0], [3, 3.5, -3], [24, 24.5, -24]])
    assert y.tolist() == [0, 0, 0] and ds.classes == ["cat", "dog", "bird"]
    assert ds[[1, 2]][1].tolist() == [1, 2]


@pytest.mark.slow
def test_cli_bench_accepts_field_keys(path, capsys):
    from nn_handler.cli import main

    argv = ["bench", str(path), "--x-key", "grp/gzip:pixels", "--y-key", "contiguous:label"]
    assert main([*argv, "--seconds", "0.1", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "grp/gzip:pixels + contiguous:label, 50 samples" in out
    assert "naive per-sample h5py (baseline)" in out


def test_combined_names_the_columns_of_a_whole_table(path):
    with pytest.raises(
        TypeError,
        match=r"compound \(table\) dataset: load one column, e.g. load_fields=\['contiguous:id'",
    ):
        CombinedHDF5Dataset(path, load_fields=["t"], field_names={"t": "contiguous"}, cache_size=0)


def test_field_and_label_datasets_pickle_for_spawn_workers(path, tmp_path):
    import pickle

    from helpers.real_files import write_strings

    ds = pickle.loads(pickle.dumps(H5LazyDataset(path, "grp/gzip:pixels", "chunked:label")))
    np.testing.assert_array_equal(ds[ORDER][0].numpy(), expected(path, "grp/gzip", "pixels", ORDER))
    labelled = H5LazyDataset(write_strings(tmp_path), "x", "vlen", classes="auto")
    copy = pickle.loads(pickle.dumps(labelled))
    assert copy.label_map == labelled.label_map
    assert copy[[0, 1]][1].tolist() == labelled[[0, 1]][1].tolist()
