"""H5SparseDataset against anndata's / scipy's reading of the same files."""

from __future__ import annotations

import pickle
import shutil

import h5py
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from nn_handler.dataloaders import ChunkShuffleSampler, H5SparseDataset, batched_loader
from nn_handler.dataloaders._sparse import rows as _sparse_rows
from nn_handler.dataloaders._sparse.batch import csr_index_dtype

from helpers.sparse_files import (
    EMPTY_ROWS,
    LAYOUTS,
    LONG_ROW,
    N_OBS,
    N_VARS,
    TINY_CHUNK,
    dense_x,
    reference,
    tenx_reference,
    write_10x,
    write_anndata,
)

ALL_LAYOUTS = [*LAYOUTS, "10x"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """layout -> (path, dense reference)."""
    root = tmp_path_factory.mktemp("sparse")
    made = {}
    for layout in LAYOUTS:
        path = write_anndata(root / f"{layout}.h5ad", layout)
        made[layout] = (path, dense_x(reference(path)))
    tenx = write_10x(root / "tenx.h5")
    made["10x"] = (tenx, tenx_reference(tenx))
    return made


def _batches(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    picks = [rng.permutation(n)[:40], rng.integers(0, n, 64)]  # unsorted; with repeats
    picks += [np.array([LONG_ROW, *EMPTY_ROWS, LONG_ROW, 7, 7]), np.array([n - 1, 0])]
    return picks


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
def test_batches_equal_the_reference(files, layout):
    path, expected = files[layout]
    ds = H5SparseDataset(path)
    assert ds.shape == expected.shape == (N_OBS, N_VARS)
    np.testing.assert_array_equal(ds[:].numpy(), expected)
    for idx in _batches(len(ds)):
        batch = ds[idx]
        assert batch.dtype == torch.float32 and batch.shape == (len(idx), N_VARS)
        np.testing.assert_array_equal(batch.numpy(), expected[idx])
    np.testing.assert_array_equal(ds[torch.tensor([4, 2])].numpy(), expected[[4, 2]])
    np.testing.assert_array_equal(ds[[-1, -N_OBS]].numpy(), expected[[-1, 0]])
    assert ds[[]].shape == (0, N_VARS)


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
def test_single_rows_are_dense(files, layout):
    path, expected = files[layout]
    ds = H5SparseDataset(path)
    for row in (LONG_ROW, *EMPTY_ROWS, 7, -1):
        np.testing.assert_array_equal(ds[row].numpy(), expected[row])
    assert ds[LONG_ROW].shape == (N_VARS,)


@pytest.mark.parametrize("layout", ["csr-gzip-tiny", "csr-plain", "csc-gzip", "10x"])
def test_sparse_csr_output(files, layout):
    path, expected = files[layout]
    ds = H5SparseDataset(path, output="sparse_csr", dtype=np.float64)
    for idx in _batches(len(ds), seed=1):
        batch = ds[idx]
        assert batch.layout == torch.sparse_csr and batch.dtype == torch.float64
        np.testing.assert_array_equal(batch.to_dense().numpy(), expected[idx])
        crow, col = batch.crow_indices().numpy(), batch.col_indices().numpy()
        for r in range(len(idx)):  # every row sorted by column
            assert np.all(np.diff(col[crow[r] : crow[r + 1]]) > 0)
    np.testing.assert_array_equal(ds[3].numpy(), expected[3])  # one row: still dense


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
@given(request=st.lists(st.integers(0, N_OBS - 1), max_size=60), unique=st.booleans())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_sparse_csr_batches_equal_the_reference_for_any_request(files, layout, request, unique):
    # sorted, unsorted, repeated, empty: rows read straight to their places, or read in file
    # order and put back in the request's order (repeats) -- the same batch either way
    path, expected = files[layout]
    idx = np.array(list(dict.fromkeys(request)) if unique else request, dtype=np.int64)
    batch = H5SparseDataset(path, output="sparse_csr")[idx]
    assert batch.crow_indices().dtype == batch.col_indices().dtype == torch.int32
    np.testing.assert_array_equal(batch.to_dense().numpy(), expected[idx])


def test_sparse_csr_batches_of_several_files_and_column_subsets(tmp_path, files):
    path, expected = files["csr-gzip-tiny"]
    other = tmp_path / "copy.h5ad"
    shutil.copy(path, other)
    idx = np.array([160, 3, 10, 200, 10 + N_OBS, 7], dtype=np.int64)
    both = H5SparseDataset([path, other], output="sparse_csr")[idx]
    assert both.col_indices().dtype == torch.int32
    np.testing.assert_array_equal(both.to_dense().numpy(), np.vstack([expected, expected])[idx])
    picked = H5SparseDataset(path, output="sparse_csr", columns=[40, 2, 5])[idx % N_OBS]
    np.testing.assert_array_equal(picked.to_dense().numpy(), expected[idx % N_OBS][:, [40, 2, 5]])


def test_csr_index_dtype_follows_scipy():
    big = np.iinfo(np.int32).max
    assert csr_index_dtype(20_000, 4_000_000) == np.int32
    assert csr_index_dtype(big, big) == np.int32
    assert csr_index_dtype(big + 1, 10) == np.int64
    assert csr_index_dtype(10, big + 1) == np.int64


def test_rows_longer_than_a_chunk_span_several_chunks(files):
    path, expected = files["csr-gzip-tiny"]
    with h5py.File(path, "r") as f:
        assert f["X/data"].chunks == (TINY_CHUNK,)
        indptr = f["X/indptr"][()]
    assert indptr[LONG_ROW + 1] - indptr[LONG_ROW] == N_VARS > 2 * TINY_CHUNK
    ds = H5SparseDataset(path)
    np.testing.assert_array_equal(ds[[LONG_ROW]].numpy(), expected[[LONG_ROW]])


def test_reads_go_through_the_chunk_reader(files):
    ds = H5SparseDataset(files["csr-gzip-tiny"][0])
    rows = ds._files[0].rows
    assert (rows.data.strategy, rows.indices.strategy) == ("decode", "decode")
    assert H5SparseDataset(files["csr-lzf-tiny"][0])._files[0].rows.data.strategy == "chunks"
    assert H5SparseDataset(files["csr-plain"][0])._files[0].rows.data.strategy == "memmap"


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32])
def test_dtype(files, dtype):
    path, expected = files["csr-gzip"]
    batch = H5SparseDataset(path, dtype=dtype)[[1, 2, 4]]
    assert batch.numpy().dtype == dtype
    np.testing.assert_array_equal(batch.numpy(), expected[[1, 2, 4]].astype(dtype))


def test_categorical_label(files):
    path, _ = files["csr-gzip"]
    adata = reference(path)
    ds = H5SparseDataset(path, label="cell_type")
    assert ds.label_categories == list(adata.obs["cell_type"].cat.categories) == ["a", "b", "c"]
    idx = np.array([5, 0, 9, 5, 100])
    _x, y = ds[idx]
    assert y.dtype == torch.int64
    np.testing.assert_array_equal(y.numpy(), adata.obs["cell_type"].cat.codes.to_numpy()[idx])
    assert y[0].item() == -1  # the missing value
    _x7, y7 = ds[7]
    assert y7.item() == adata.obs["cell_type"].cat.codes.iloc[7]


@pytest.mark.parametrize(
    ("label", "dtype"), [("n_genes", torch.int64), ("score", torch.float64), ("is_b", torch.bool)]
)
def test_numeric_labels(files, label, dtype):
    path, _ = files["csc-gzip"]
    adata = reference(path)
    ds = H5SparseDataset(path, label=label)
    assert ds.label_categories is None
    _, y = ds[[3, 1, 100]]
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), adata.obs[label].to_numpy()[[3, 1, 100]])


def test_string_labels_from_a_dataset(files):
    path, _ = files["10x"]
    ds = H5SparseDataset(path, label="matrix/barcodes")
    assert ds.label_categories == [f"AAC-{k}" for k in range(7)]
    _, y = ds[[0, 8, 13]]
    assert y.tolist() == [0, 1, 6]
    names = H5SparseDataset(files["csr-gzip"][0], label="_index")  # obs index: strings
    assert names.label_categories[:2] == ["cell0", "cell1"]


def test_nullable_labels(tmp_path):
    path = write_anndata(tmp_path / "n.h5ad", "csr-gzip")
    with h5py.File(path, "a") as f:
        g = f.create_group("obs/maybe")
        g.attrs["encoding-type"] = "nullable-integer"
        g["values"] = np.arange(N_OBS)
        g["mask"] = np.zeros(N_OBS, dtype=bool)
        s = f.create_group("obs/text")
        s.attrs["encoding-type"] = "nullable-string-array"
        s.create_dataset("values", data=np.array(["x", "y", ""] * 52 + ["x"], dtype="S"))
        s["mask"] = np.array([False, False, True] * 52 + [False])
    _, y = H5SparseDataset(path, label="maybe")[[2, 9]]
    assert y.tolist() == [2, 9]
    ds = H5SparseDataset(path, label="text")
    assert ds.label_categories == ["x", "y"]  # the masked entries' value is not a category
    assert ds[[0, 1, 2]][1].tolist() == [0, 1, -1]
    ds.close()
    with h5py.File(path, "a") as f:
        f["obs/maybe/mask"][4] = True
    with pytest.raises(ValueError, match=r"label='maybe' in .* has 1 missing values"):
        H5SparseDataset(path, label="maybe")


def test_column_subset_by_name_and_number(files):
    path, expected = files["csr-gzip-tiny"]
    names = ["gene7", "gene0", "gene44", "gene8"]  # not in file order
    picked = expected[:, [7, 0, 44, 8]]
    ds = H5SparseDataset(path, columns=names)
    assert ds.n_cols == 4 and ds.column_names == names
    idx = _batches(N_OBS)[0]
    np.testing.assert_array_equal(ds[idx].numpy(), picked[idx])
    np.testing.assert_array_equal(ds[LONG_ROW].numpy(), picked[LONG_ROW])
    sparse = H5SparseDataset(path, columns=names, output="sparse_csr")
    np.testing.assert_array_equal(sparse[idx].to_dense().numpy(), picked[idx])
    by_number = H5SparseDataset(path, columns=np.array([7, 0, 44, 8]))
    assert by_number.column_names == names
    np.testing.assert_array_equal(by_number[idx].numpy(), picked[idx])
    tenx = H5SparseDataset(files["10x"][0], columns=["ENSG00003"], var_key="matrix/features/id")
    np.testing.assert_array_equal(tenx[:].numpy(), files["10x"][1][:, [3]])


def test_column_errors(files):
    path, _ = files["csr-gzip"]
    with pytest.raises(KeyError, match=r"1 of the 2 columns are not in .*: \['nope'\]"):
        H5SparseDataset(path, columns=["gene1", "nope"])
    with pytest.raises(ValueError, match=r"columns asks for \['gene1'\] more than once"):
        H5SparseDataset(path, columns=["gene1", "gene1"])
    with pytest.raises(TypeError, match=r"only names .* or only numbers"):
        H5SparseDataset(path, columns=["gene1", 2])
    with pytest.raises(TypeError, match="columns must be a sequence"):
        H5SparseDataset(path, columns="gene1")
    with pytest.raises(IndexError, match="columns holds 45, outside the 45 columns"):
        H5SparseDataset(path, columns=[0, 45])
    with pytest.raises(ValueError, match=r"var_key='obs/score' in .* must be a dataset of 45"):
        H5SparseDataset(path, var_key="obs/score")


def test_several_files_align_columns_by_name(tmp_path):
    order = np.random.default_rng(3).permutation(N_VARS)
    first = write_anndata(tmp_path / "a.h5ad", "csr-gzip-tiny", seed=0)
    second = write_anndata(tmp_path / "b.h5ad", "csc-gzip", seed=1, n_obs=60, var_order=order)
    ref_a, ref_b = dense_x(reference(first)), dense_x(reference(second))
    names = [f"gene{j}" for j in (3, 40, 0)]
    ds = H5SparseDataset([first, second], columns=names, label="cell_type")
    assert len(ds) == N_OBS + 60 and ds.origins == ["rows", "built"]
    col_b = [int(np.flatnonzero(order == j)[0]) for j in (3, 40, 0)]
    expected = np.concatenate([ref_a[:, [3, 40, 0]], ref_b[:, col_b]])
    idx = np.random.default_rng(0).integers(0, len(ds), 80)
    x, y = ds[idx]
    np.testing.assert_array_equal(x.numpy(), expected[idx])
    codes = np.concatenate(
        [reference(p).obs["cell_type"].cat.codes.to_numpy() for p in (first, second)]
    )
    np.testing.assert_array_equal(y.numpy(), codes[idx])
    with pytest.raises(ValueError, match="name their columns differently"):
        H5SparseDataset([first, second])


def test_categories_merge_across_files(tmp_path):
    from helpers.sparse_files import ad, matrix, obs_frame, pd

    paths = []
    for k, kinds in enumerate([("a", "b"), ("c", "a")]):
        adata = ad.AnnData(
            matrix(30, seed=k),
            obs=obs_frame(30, k, kinds),
            var=pd.DataFrame(index=[f"gene{j}" for j in range(N_VARS)]),
        )
        adata.write_h5ad(tmp_path / f"{k}.h5ad", compression="gzip")
        paths.append(tmp_path / f"{k}.h5ad")
    ds = H5SparseDataset(paths, label="cell_type")
    assert ds.label_categories == ["a", "b", "c"]
    _, y = ds[:]
    labels = np.concatenate(
        [reference(p).obs["cell_type"].astype(object).to_numpy() for p in paths]
    )
    text = [None if v < 0 else ds.label_categories[v] for v in y.tolist()]
    assert text == [None if isinstance(v, float) else v for v in labels]


def test_chunk_shuffle_epoch_reads_every_row_once_and_each_chunk_once(files):
    path, expected = files["csr-gzip-tiny"]
    ds = H5SparseDataset(path, rdcc_nbytes=0)
    starts = ds.block_starts
    with h5py.File(path, "r") as f:
        indptr, nnz = f["X/indptr"][()], f["X/data"].shape[0]
    assert starts[0] == 0 and np.all(np.diff(starts) > 0)
    first_chunk = indptr[starts] // TINY_CHUNK  # each block starts in its own chunk
    assert np.all(np.diff(first_chunk) > 0)
    sampler = ChunkShuffleSampler(ds, window_chunks=3, seed=2)
    loader = batched_loader(ds, 8, sampler=sampler)  # the loader sizes the cache
    assert ds.chunk_cache_nbytes >= 5 * 2 * TINY_CHUNK * 4  # grown for the window
    decoded = []
    reader = ds._files[0].rows.data
    source = reader._rows.engine.source  # the engine fills one chunk per call
    original = source.fill

    def spy(block, dest):
        decoded.append(block)
        return original(block, dest)

    source.fill = spy
    seen = list(loader)
    order = np.array(list(ChunkShuffleSampler(ds, window_chunks=3, seed=2)))  # the same order
    np.testing.assert_array_equal(torch.cat(seen).numpy(), expected[order])
    assert sorted(order.tolist()) == list(range(N_OBS))
    assert sorted(decoded) == sorted(set(decoded))  # no chunk of data decoded twice
    assert len(set(decoded)) == -(-nnz // TINY_CHUNK)


def test_memory_mapped_files_have_no_blocks(files):
    ds = H5SparseDataset(files["csr-plain"][0])
    assert ds.block_starts is None and ds.chunk_rows is None
    sampler = ChunkShuffleSampler(ds)
    assert sampler.block_size == 1  # nothing to gain from blocks: a plain full shuffle


def test_dataloader_per_sample_collate(files):
    path, expected = files["10x"]
    ds = H5SparseDataset(path, label="matrix/barcodes")
    loader = DataLoader(ds, batch_size=16, shuffle=False)
    xs, ys = zip(*loader, strict=True)
    np.testing.assert_array_equal(torch.cat(xs).numpy(), expected)
    assert torch.cat(ys).shape == (N_OBS,)


def test_pickle_and_indptr_reread(files, monkeypatch):
    path, expected = files["csr-gzip"]
    ds = H5SparseDataset(path)
    ds[[1, 2]]
    assert ds.is_open
    same = pickle.loads(pickle.dumps(ds))
    assert not same.is_open and same._files[0].rows._indptr is not None
    monkeypatch.setattr(_sparse_rows, "_PICKLE_INDPTR_BYTES", 0)
    light = pickle.loads(pickle.dumps(ds))
    assert light._files[0].rows._indptr is None  # large: read again where it is used
    np.testing.assert_array_equal(light[[9, 3]].numpy(), expected[[9, 3]])


def test_repr_close_and_context_manager(files, tmp_path):
    path, _ = files["csr-gzip"]
    with H5SparseDataset(path, label="cell_type") as ds:
        ds[1]  # row 0 is empty: reading it opens nothing
        text = repr(ds)
        assert "csr_matrix" in text and f"shape=({N_OBS}, {N_VARS})" in text
        assert "label='cell_type'" in text and text.endswith("open)")
    assert not ds.is_open
    copies = [tmp_path / f"copy{i}.h5ad" for i in range(3)]  # one file listed twice is refused
    for copy in copies:
        copy.write_bytes(path.read_bytes())
    assert "3 files" in repr(H5SparseDataset(copies))


def test_auto_detection_and_groups(tmp_path, files):
    path, expected = files["csr-gzip"]
    with h5py.File(path, "a") as f:
        f.copy("X", "layers/counts")
    assert H5SparseDataset(path).group == "X"
    layer = H5SparseDataset(path, group="layers/counts")
    np.testing.assert_array_equal(layer[[4, 2]].numpy(), expected[[4, 2]])
    assert H5SparseDataset(files["10x"][0]).group == "matrix"
    assert H5SparseDataset(files["10x"][0]).column_names[:2] == ["gene0", "gene1"]


def test_unsorted_and_repeated_columns_sum_as_in_scipy(tmp_path):
    from helpers.sparse_files import sp

    # row 0: columns out of order; row 1: column 2 stored twice; row 2: empty; row 3: sorted
    indptr = np.array([0, 3, 6, 6, 8])
    indices = np.array([4, 0, 2, 2, 1, 2, 0, 3], dtype=np.int32)
    data = np.arange(1, 9, dtype=np.float32)
    path = tmp_path / "raw.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs["encoding-type"] = "csr_matrix"
        g.attrs["shape"] = (4, 5)
        g.create_dataset("data", data=data, chunks=(3,), compression="gzip")
        g.create_dataset("indices", data=indices, chunks=(3,), compression="gzip")
        g["indptr"] = indptr
    expected = sp.csr_matrix((data, indices, indptr), shape=(4, 5)).toarray()
    idx = [3, 1, 0, 1, 2]
    np.testing.assert_array_equal(H5SparseDataset(path)[idx].numpy(), expected[idx])
    csr = H5SparseDataset(path, output="sparse_csr")[idx]
    np.testing.assert_array_equal(csr.to_dense().numpy(), expected[idx])
    assert csr.col_indices().tolist() == [0, 3, 1, 2, 0, 2, 4, 1, 2]  # sorted, summed once
    panel = H5SparseDataset(path, columns=[2, 0], output="sparse_csr")[[1, 0]]
    np.testing.assert_array_equal(panel.to_dense().numpy(), expected[[1, 0]][:, [2, 0]])


@pytest.fixture
def tiny_row_blocks(monkeypatch):
    """Dense batches zeroed and scattered in blocks of 3 rows on 3 decode threads."""
    from nn_handler._io.chunks import pool
    from nn_handler.dataloaders._sparse import batch as sparse_batch

    def blocks(n_rows: int, row_nbytes: int) -> list[tuple[int, int]]:
        return [(a, min(n_rows, a + 3)) for a in range(0, n_rows, 3)]

    monkeypatch.setattr(sparse_batch, "_row_blocks", blocks)
    pool.set_decode_threads(3)
    yield
    pool.set_decode_threads(None)


@pytest.mark.parametrize("layout", ["csr-plain", "csr-gzip-tiny", "csc-gzip"])
def test_dense_batches_in_row_blocks_on_threads(files, layout, tiny_row_blocks):
    path, expected = files[layout]
    ds = H5SparseDataset(path)
    for idx in _batches(len(ds), seed=2):
        np.testing.assert_array_equal(ds[idx].numpy(), expected[idx])


def test_repeated_columns_sum_in_row_blocks_on_threads(tmp_path, tiny_row_blocks):
    from helpers.sparse_files import sp

    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 6, 20)
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    indices = rng.integers(0, 4, int(indptr[-1])).astype(np.int32)  # repeats, any order
    data = rng.random(int(indptr[-1])).astype(np.float32)
    path = tmp_path / "raw.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs["encoding-type"] = "csr_matrix"
        g.attrs["shape"] = (20, 4)
        for name, values in (("data", data), ("indices", indices), ("indptr", indptr)):
            g[name] = values
    expected = sp.csr_matrix((data, indices, indptr), shape=(20, 4)).toarray()
    idx = rng.permutation(20)
    np.testing.assert_allclose(H5SparseDataset(path)[idx].numpy(), expected[idx], rtol=1e-6)
