"""inspect on files written by other software: never gives up, advice only where it applies."""

import glob
import json
import os

import h5py
import numpy as np
import pytest

from nn_handler._inspect import dataset as _inspect_dataset
from nn_handler.cli import format_report, main
from nn_handler.dataloaders import H5SparseDataset
from nn_handler.h5inspect import inspect_file

from helpers.real_files import (
    write_anndata,
    write_compound,
    write_encoded,
    write_inspect_cases,
    write_netcdf,
    write_odd_types,
    write_pandas,
    write_pytables,
    write_sparse_10x,
    write_strings,
)


def strict(constant):
    raise ValueError(f"not JSON: {constant}")


def inspect_json(path, capsys):
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=strict)
    return report, {d["path"]: d for d in report["datasets"]}


def inspect_text(path, capsys):
    assert main(["inspect", str(path)]) == 0
    return capsys.readouterr().out


def structures(report, kind):
    return [s for s in report["structures"] if s["kind"] == kind]


def candidates(report):
    return " ".join(a for a in report["advice"] if "candidates" in a)


def test_pandas_table_is_named_with_its_keys(tmp_path, capsys):
    table, _, _ = write_pandas(tmp_path)
    report, ds = inspect_json(table, capsys)
    (s,) = structures(report, "pandas-table")
    assert "df/table:values_block_0" in s["keys"] and "df/table:k" in s["keys"]
    assert "values_block_0 (float64(2,)) = columns a, b" in s["description"]
    assert (
        s["usage"] == f'H5LazyDataset("{table}", x_key="df/table:index")' or "x_key=" in s["usage"]
    )
    table_ds = ds["df/table"]
    assert table_ds["kind"] == "compound"
    assert {f["key"] for f in table_ds["fields"]} == set(s["keys"])
    assert all(d["role"] == "pytables-index" for p, d in ds.items() if "/_i_table/" in p)
    text = inspect_text(table, capsys)
    assert len(text.splitlines()) < 60  # was 321 lines
    assert "pytables-index df/_i_table: PyTables index" in text
    assert "_i_table/k/sorted" not in text


def test_pandas_fixed_blocks(tmp_path, capsys):
    _, fixed, _ = write_pandas(tmp_path)
    report, ds = inspect_json(fixed, capsys)
    (s,) = structures(report, "pandas-fixed")
    assert s["keys"] == ["df/block0_values", "df/block1_values"]
    assert "object columns name (pickled by pandas)" in s["description"]
    assert ds["df/block2_values"]["role"] == "pandas-pickled"
    assert "df/block2_values" not in candidates(report)


def test_pytables_table_and_compound_fields(tmp_path, capsys):
    report, ds = inspect_json(write_pytables(tmp_path), capsys)
    (s,) = structures(report, "pytables-table")
    assert s["keys"] == ["t:idx", "t:vec", "t:tag"]
    assert ds["t"]["fields"][1] == {"name": "vec", "dtype": "float32", "shape": [3], "key": "t:vec"}
    report, ds = inspect_json(write_compound(tmp_path), capsys)
    assert ds["contiguous"]["kind"] == "compound"
    assert "e.g. 'contiguous:id'" in ds["contiguous"]["advice"][0]


def test_strings_and_encoded_are_described(tmp_path, capsys):
    _, ds = inspect_json(write_strings(tmp_path), capsys)
    assert ds["vlen"]["kind"] == ds["fixed"]["kind"] == "string"
    assert "classes='auto'" in ds["vlen"]["advice"][0]
    _, ds = inspect_json(write_encoded(tmp_path), capsys)
    assert ds["images"]["kind"] == "encoded" and ds["images"]["dtype"] == "vlen[uint8]"
    assert "decode_image" in ds["images"]["advice"][0]


def test_odd_types_and_missing_filters(tmp_path, capsys):
    report, ds = inspect_json(write_odd_types(tmp_path), capsys)
    assert set(ds) == {"good", "lzo", "ld", "quad", "time"}  # nothing aborts the file
    lzo = ds["lzo"]
    assert lzo["filters"] == ["lzo"] and lzo["read_strategy"] is None
    assert "filter 305 (lzo) cannot be decoded here" in lzo["advice"][0]
    assert not any("ChunkShuffleSampler" in a for a in lzo["advice"])
    assert ds["ld"]["kind"] == "unsupported" and "np.float64" in ds["ld"]["advice"][0]
    assert ds["quad"]["dtype"] == "HDF5 float (16 bytes)" and ds["quad"]["kind"] == "unsupported"
    assert ds["time"]["dtype"] == "HDF5 time (4 bytes)"
    assert report["advice"] == []  # only 'good' is loadable: no pairs to suggest


def test_an_unreadable_dataset_is_listed_and_the_rest_shown(tmp_path, monkeypatch, capsys):
    path = write_strings(tmp_path)
    real = _inspect_dataset.dataset_report

    def flaky(source, name, dset, limit, role):
        if name == "fixed":
            raise OSError("can't read object header\nsecond line")
        return real(source, name, dset, limit, role)

    monkeypatch.setattr("nn_handler.h5inspect.dataset_report", flaky)
    _report, ds = inspect_json(path, capsys)
    assert ds["fixed"]["kind"] == "unreadable"
    assert ds["fixed"]["error"] == "can't read object header"
    assert ds["vlen"]["kind"] == "string" and len(ds) == 5
    assert "unreadable: can't read object header" in inspect_text(path, capsys)


def test_edge_cases_get_advice_that_applies(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NN_HANDLER_DECODED_BUDGET", "1KiB")  # (a random order costs then)
    path = write_inspect_cases(tmp_path)
    report, ds = inspect_json(path, capsys)
    assert ds["empty"]["kind"] == "empty"
    assert ds["empty"]["advice"] == ["empty (0 rows): nothing to load"]
    assert ds["tiny"]["advice"] == [
        "10 rows in one chunk: read whole once (RankMemCachedH5Dataset); no chunk-aware "
        "sampling needed"
    ]
    assert "a random order decodes each chunk once" in ds["big"]["advice"][0]  # the cache holds it
    assert ds["time"]["kind"] == "dimension"
    assert "memory speed" not in " ".join(ds["time"]["advice"])
    assert "never written" in ds["unwritten"]["advice"][0]
    pairs = candidates(report)
    assert "'empty'" not in pairs and "'time'" not in pairs and "'unwritten'" not in pairs
    root = report["groups"][0]["attrs"]
    assert root["numbers"] == [0, 1, 2, 3, 4]
    assert root["big_numbers"] == {"dtype": "int64", "shape": [1000], "first": list(range(8))}
    assert root["note"] == "line one\nline two\n\x1b[31mred\x1b[0m"


def test_text_is_one_line_per_attribute_escaped_and_summarised(tmp_path, capsys):
    text = inspect_text(write_inspect_cases(tmp_path), capsys)
    assert "      @note = line one\\nline two\\n\\x1b[31mred\\x1b[0m" in text
    assert "\x1b" not in text
    assert "  … 28 more datasets of the same shape and type" in text
    assert sum(line.startswith("  runs/r") for line in text.splitlines()) == 2
    assert "… 24 more): candidates" in text


def test_control_characters_in_names_are_escaped(tmp_path):

    path = tmp_path / "names.h5"
    with h5py.File(path, "w") as f:
        f["bad\x1b[2Jname\n"] = np.arange(3)
        f["bad\x1b[2Jname\n"].attrs["k\r"] = "v\x07"
    out = format_report(inspect_file(path))
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "bad\\x1b[2Jname\\n" in out and "@k\\r = v\\x07" in out


def test_netcdf_dimensions(tmp_path, capsys):
    _report, ds = inspect_json(write_netcdf(tmp_path), capsys)
    for dim in ("sample", "feature"):
        assert ds[dim]["kind"] == "dimension"
        assert ds[dim]["advice"] == [
            "netCDF dimension without data (0 bytes stored): names an axis, not samples"
        ]
    assert ds["signal"]["read_strategy"] == "memmap"


def test_anndata_and_10x_sparse_groups(tmp_path, capsys):
    path = write_anndata(tmp_path)
    report, ds = inspect_json(path, capsys)
    (sparse,) = structures(report, "sparse-matrix")
    assert sparse["usage"] == f"H5SparseDataset({str(path)!r}, label='cell_type')"
    assert "AnnData sparse matrix (CSR, 30x8)" in sparse["description"]
    assert sparse["description"].endswith(" stored values")
    assert ds["X/data"]["role"] == ds["X/indices"]["role"] == "sparse-matrix"
    assert "'X/data'" not in candidates(report) and "'X/indices'" not in candidates(report)
    (cat,) = structures(report, "categorical")
    assert cat["keys"] == ["obs/cell_type/codes"]
    assert structures(report, "anndata")
    report, _ = inspect_json(write_sparse_10x(tmp_path), capsys)
    (tenx,) = structures(report, "sparse-matrix")
    assert tenx["usage"].startswith("H5SparseDataset(") and "10x Genomics" in tenx["description"]
    assert len(eval(tenx["usage"], {"H5SparseDataset": H5SparseDataset})) > 0  # it reads


@pytest.mark.slow
def test_pytables_own_test_files_never_abort():
    tables = pytest.importorskip("tables")
    files = sorted(glob.glob(os.path.join(os.path.dirname(tables.__file__), "tests", "*.h5")))
    if not files:
        pytest.skip("this PyTables install ships no test files")
    for path in files:
        report = inspect_file(path)
        json.dumps(report.to_dict(), allow_nan=False)
        assert not report.errors, (path, report.errors)
        format_report(report)


def test_one_row_chunks_need_no_sampler_advice(make_h5, monkeypatch):
    monkeypatch.setenv("NN_HANDLER_DECODED_BUDGET", "64")  # (x: 320 B decoded, then beyond it)
    path = make_h5({"x": (np.ones((20, 4), np.float32), "gzip")})
    with h5py.File(path, "a") as f:
        f.create_dataset("one", data=np.ones((20, 4)), chunks=(1, 4), compression="gzip")
    ds = {d.path: d for d in inspect_file(path).datasets}
    first, small = ds["one"].advice
    assert first == "one row per chunk: random access decodes only the rows it needs"
    assert "ChunkShuffleSampler" not in small
    assert small.startswith("chunks of 32 B are small")  # but per-chunk costs dominate: fix it
    assert small.endswith(f"with nn-handler rewrite {path} {path.with_suffix('')}.fast.h5")
    assert "a random order decodes each chunk once" in ds["x"].advice[0]  # (the chunk cache)
