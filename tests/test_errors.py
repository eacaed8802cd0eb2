"""The exceptions users catch live in ``nn_handler.errors`` and carry its name everywhere."""

from __future__ import annotations

import pickle
import traceback
from pathlib import Path

import h5py
import numpy as np
import pytest

import nn_handler
from nn_handler import dataloaders, errors
from nn_handler.dataloaders import H5LazyDataset


def _all_subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _all_subclasses(sub)
    return found


def test_every_error_users_catch_is_named_by_the_public_module() -> None:
    public = {getattr(errors, name) for name in errors.__all__}
    assert _all_subclasses(errors.DataFileError) | {errors.DataFileError} <= public
    for cls in public:
        assert cls.__module__ == "nn_handler.errors", cls
        assert getattr(errors, cls.__name__) is cls
    for name in errors.__all__:  # the same classes where they were exported before
        assert getattr(dataloaders, name, getattr(nn_handler, name, None)) is getattr(errors, name)


@pytest.mark.parametrize("name", errors.__all__)
def test_an_error_pickles_as_itself(name: str) -> None:
    cls = getattr(errors, name)
    raised = cls("what went wrong")
    again = pickle.loads(pickle.dumps(raised))
    assert type(again) is cls and str(again) == "what went wrong"


def test_a_traceback_shows_the_public_name(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros((100, 4), np.float32))
    ds = H5LazyDataset(str(path), "x")
    path.write_bytes(b"\0" * 10)  # replaced by something else
    with pytest.raises(errors.DataFileError) as raised:
        ds[[0, 1]]
    text = "".join(traceback.format_exception(raised.value))
    assert f"nn_handler.errors.{type(raised.value).__name__}:" in text
    ds.close()
