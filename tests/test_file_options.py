"""``file_options=``: every dataset takes its file options as one ``FileOptions``, or as the
separate keywords the seeds name, and the two agree or the constructor says why not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from nn_handler.dataloaders import FileOptions, H5LazyDataset
from nn_handler.dataloaders.combined_h5_dataset import create_optimized_dataloader

from helpers.dataset_classes import FACTORIES, dataset_classes, dense_file, make_dataset
from helpers.recordings import write_recording

KINDS = [cls.__name__ for cls in FACTORIES]


def _make(kind: str, tmp_path: Path, **kw):
    return make_dataset(kind, tmp_path, **kw)


def test_every_dataset_class_has_a_factory():
    assert set(FACTORIES) == dataset_classes()


def _first(ds):
    sample = ds[0]
    if isinstance(sample, dict):
        return {k: v for k, v in sample.items() if isinstance(v, torch.Tensor)}
    return sample


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return torch.equal(a, b)


@pytest.mark.parametrize("kind", KINDS)
def test_every_dataset_takes_file_options(kind, tmp_path):
    options = FileOptions(swmr=False, rdcc_nbytes=4 << 20)  # one locking flag per open file
    given = _make(kind, tmp_path, file_options=options)
    plain = _make(kind, tmp_path)
    assert _equal(_first(given), _first(plain))
    # a keyword that agrees with file_options, or is left at its default, is fine
    _make(kind, tmp_path, file_options=options, swmr=False)


@pytest.mark.parametrize("kind", KINDS)
def test_a_keyword_that_disagrees_with_file_options_raises(kind, tmp_path):
    options = FileOptions(locking=False)
    with pytest.raises(TypeError, match=rf"{kind}: got file_options= and locking=True"):
        _make(kind, tmp_path, file_options=options, locking=True)


@pytest.mark.parametrize("kind", KINDS)
def test_file_options_must_be_file_options(kind, tmp_path):
    with pytest.raises(TypeError, match=rf"{kind}: file_options must be a FileOptions"):
        _make(kind, tmp_path, file_options={"swmr": False})


def test_the_options_reach_the_file(tmp_path):
    options = FileOptions(rdcc_nbytes=3 << 20, rdcc_nslots=101, swmr=False)
    path = dense_file(tmp_path)
    ds = H5LazyDataset(path, "x", file_options=options)
    assert ds._source.options == options
    same = H5LazyDataset(path, "x", rdcc_nbytes=3 << 20, rdcc_nslots=101, swmr=False)
    assert same._source.options == options
    replaced = dataclasses.replace(options, rdcc_w0=0.5)
    assert H5LazyDataset(path, "x", file_options=replaced)._source.options.rdcc_w0 == 0.5


def test_create_optimized_dataloader_passes_file_options_on(tmp_path):
    path = tmp_path / "r.h5"
    write_recording(path, 6, seed=0, uid_start=0, guid_kind="vlen-str")
    loader = create_optimized_dataloader(
        [path], 2, 0, rank=0, world_size=1, file_options=FileOptions(swmr=False, locking=False)
    )
    assert len(list(loader)) == 3
