"""Each codec is one record of ``codec_registry``: a half-registered codec fails here.

The checks run on the registry itself and, to show they catch what they claim, on records
broken on purpose. Every codec a rewrite writes is round-tripped: a small file rewritten with
it reads back the same bytes through our decoders and through h5py.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from nn_handler._io import codec_registry
from nn_handler._io.chunks import decoders
from nn_handler._io.chunks.codecs import pipeline_for
from nn_handler._io.chunks.decoders import Step
from nn_handler._io.codec_registry import CODECS, RECORDS, FilterCodec, decoder_of, written
from nn_handler._io.file.filters import filters_of
from nn_handler.cli import _build_parser
from nn_handler.rewrite import codecs as rewrite_codecs
from nn_handler.rewrite import rewrite_file

SRC = Path(__file__).resolve().parents[2] / "src" / "nn_handler"
REGISTRY = SRC / "_io" / "codec_registry.py"
DOCS = Path(__file__).resolve().parents[2] / "docs"
#: where codecs are read, checked, described and written: nothing here may list them again
DERIVED = ("_io", "rewrite", "cli", "_inspect", "h5inspect.py")


def problems(records: tuple[FilterCodec, ...]) -> list[str]:
    """What is half registered among ``records`` (empty: every record is whole)."""
    found = []
    codes = [r.code for r in records]
    names = [r.name for r in records]
    found += [f"id {c} has two records" for c in sorted({c for c in codes if codes.count(c) > 1})]
    found += [f"name {n} has two records" for n in sorted({n for n in names if names.count(n) > 1})]
    for r in records:
        if not (r.name and r.source and r.code > 0):
            found.append(f"{r.code}: no name or source")
        if r.encoder is None:
            continue
        if r.decoder is None:  # a rewrite must not write what our reader cannot read
            found.append(f"{r.name} is written but has no decoder")
        if not callable(r.encoder.encode):
            found.append(f"{r.name} is written but has no encode")
        levels = r.encoder.levels
        if levels is not None and not levels.low <= levels.default <= levels.high:
            found.append(f"{r.name}'s default level is not one it accepts")
    return found


def test_every_record_is_whole() -> None:
    assert problems(RECORDS) == []
    assert set(CODECS) == {r.code for r in RECORDS} and len(CODECS) == len(RECORDS)
    assert [r.name for r in written()] == ["zstd", "lz4", "gzip"]


def test_a_half_registered_codec_is_caught() -> None:
    zstd = CODECS[32015]
    undecoded = dataclasses.replace(zstd, decoder=None)
    assert problems((undecoded,)) == ["zstd is written but has no decoder"]
    assert problems((zstd, dataclasses.replace(zstd, name="zstd2"))) == ["id 32015 has two records"]
    assert problems((zstd, dataclasses.replace(zstd, code=1))) == ["name zstd has two records"]
    assert encoder_claims(("zstd", "brotli", "none")) == ["--codec brotli has no record"]


def encoder_claims(choices: tuple[str, ...]) -> list[str]:
    """Choices of ``--codec`` with no record that writes them (``none`` writes no filter)."""
    writers = {r.name for r in written()}
    return [f"--codec {c} has no record" for c in choices if c not in writers | {"none"}]


def _rewrite_parser() -> argparse.ArgumentParser:
    sub = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["rewrite"]


def test_the_cli_and_the_docs_offer_exactly_the_written_codecs() -> None:
    codec = next(a for a in _rewrite_parser()._actions if a.dest == "codec")
    assert codec.choices is not None
    assert tuple(codec.choices) == rewrite_codecs.choices() == ("zstd", "lz4", "gzip", "none")
    assert encoder_claims(tuple(codec.choices)) == []
    usage = re.search(r"\[--codec ([a-z0-9|]+)\]", (DOCS / "cli.md").read_text())
    assert usage is not None and tuple(usage.group(1).split("|")) == rewrite_codecs.choices()


def test_every_decoder_is_available_where_its_library_is_installed() -> None:
    # (this environment has imagecodecs and blosc2: every decoder's availability says yes)
    for record in RECORDS:
        if record.decoder is not None:
            assert decoder_of(Step(record.code, (), 4)) is record.decoder, record.name
    assert decoder_of(Step(32013, (), 4)) is None  # zfp: a record with facts, no decoder


def test_the_decoders_table_lists_every_decoded_filter() -> None:
    listed = {int(c) for c in re.findall(r"^\| [^|]*\((\d+)\) \|", decoders.__doc__ or "", re.M)}
    assert listed == {r.code for r in RECORDS if r.decoder is not None}


def _code_files() -> list[Path]:
    return [
        p
        for p in sorted(SRC.rglob("*.py"))
        if p != REGISTRY and str(p.relative_to(SRC)).startswith(DERIVED)
    ]


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


IDS = {r.code for r in RECORDS if r.code > 255}  # (small numbers are too common to tell)
CONSTANTS = {r.name.upper() for r in RECORDS} | {"DEFLATE"}
NAMES = {r.name for r in RECORDS} | {"none"}


def _naming(node: ast.AST, docs: set[int]) -> str | None:
    """What ``node`` names of the registry's (an id, a constant, a list of codecs), or None."""
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value in IDS:
        return f"id {node.value}"
    if isinstance(node, ast.Attribute) and node.attr.startswith("FILTER_"):
        return f"h5py's {node.attr}"
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return f"defines {node.id}" if node.id.strip("_") in CONSTANTS else None
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in docs:
        listed = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return f"lists codecs {listed}" if sum(v in NAMES for v in listed) >= 2 else None
    return None


def test_a_filter_id_or_codec_list_is_named_in_the_registry_only() -> None:
    offenders = []
    for path in _code_files():
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (named := _naming(node, docs)) is not None:
                offenders.append(f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)} {named}")
    assert offenders == []
    assert _naming(ast.parse("x = ('zstd', 'gzip')").body[0].value, set()) is not None


def _exported(tree: ast.AST) -> set[str]:
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def test_the_registry_names_are_not_reexported_through_other_modules() -> None:
    """(``_io/__init__`` is ``_io``'s face, the one door other layers use: it may.)"""
    shared = set(codec_registry.__all__)
    face = SRC / "_io" / "__init__.py"
    for path in _code_files():
        assert path == face or not _exported(ast.parse(path.read_text())) & shared, path


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("registry") / "in.h5"
    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        f["x"] = (rng.standard_normal((300, 7)) * 3).round(1).astype("<f4")
        f["i"] = rng.integers(-500, 500, size=(300, 3)).astype("<i2")
        f["u"] = (np.arange(300 * 5) % 13).astype("u1").reshape(300, 5)
    return path


def _levels(name: str) -> list[int | None]:
    record = rewrite_codecs.record_of(name)
    levels = None if record is None or record.encoder is None else record.encoder.levels
    return [None] if levels is None else [levels.low, levels.default, levels.high]


@pytest.mark.parametrize(
    ("name", "level"),
    [(name, level) for name in rewrite_codecs.choices() for level in _levels(name)],
)
def test_every_written_codec_round_trips(source: Path, tmp_path: Path, name: str, level) -> None:
    record = rewrite_codecs.record_of(name)
    if record is not None and not record.readable_here():
        pytest.skip(f"{name}: {record.source}")
    dst = tmp_path / "out.h5"
    rewrite_file(source, dst, codec=name, level=level, chunk_bytes=1024, memory="32MiB")
    with h5py.File(source) as fin, h5py.File(dst) as f:
        for key in ("x", "i", "u"):
            dset = f[key]
            assert dset[()].tobytes() == fin[key][()].tobytes(), (name, key)  # through h5py
            codes = [info.code for info in filters_of(dset)]
            assert codes[-1:] == ([] if record is None else [record.code]), (name, key)
            pipeline = pipeline_for(dset)
            assert (pipeline is None) == (record is None), (name, key)
            if pipeline is not None:
                _assert_our_decoders_read(dset, pipeline, fin[key][()])


def _assert_our_decoders_read(dset: h5py.Dataset, pipeline, expected: np.ndarray) -> None:
    rows = dset.chunks[0]
    for start in range(0, dset.shape[0], rows):
        mask, raw = dset.id.read_direct_chunk((start, *[0] * (dset.ndim - 1)))
        chunk = pipeline.decode(raw, mask)[: dset.shape[0] - start]
        assert chunk.tobytes() == expected[start : start + rows].tobytes(), (dset.name, start)


@pytest.mark.parametrize("name", [r.name for r in written()])
def test_a_rewritten_pipeline_reports_the_registered_name(tmp_path: Path, name: str) -> None:
    pytest.importorskip("hdf5plugin")
    path = tmp_path / "f.h5"
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((10,))
    rewrite_codecs.Codec.for_dtype(name, None, np.dtype("f4")).set_filters(dcpl)
    with h5py.File(path, "w") as f:
        space = h5py.h5s.create_simple((100,))
        h5py.h5d.create(f.id, b"x", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
        names = [info.name for info in filters_of(f["x"])]
    assert names == ["shuffle", name]
