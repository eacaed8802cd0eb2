"""Nothing read from a data file, a sidecar or a checkpoint is unpickled or evaluated.

A static check over the whole package (every ``np.load`` passes ``allow_pickle=False``, every
``torch.load`` ``weights_only=True``, nothing calls ``pickle.load`` / ``eval`` / ``exec``), and
live checks with payloads that would leave a marker file behind if they ever ran.
"""

from __future__ import annotations

import ast
import os
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import nn_handler
from nn_handler import NNHandler
from nn_handler.dataloaders import H5SampleDataset

SOURCE = Path(nn_handler.__file__).parent
MARKER = "nn_handler_pwned"


class Payload:
    """Unpickling this runs ``os.mkdir(marker)``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _calls(tree: ast.AST):
    """``(owner, name, keywords, node)`` of every call: ``np.load(...)`` is ``("np", "load")``,
    a bare ``eval(...)`` is ``(None, "eval")``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, owner = node.func, None
        if isinstance(func, ast.Attribute):
            name = func.attr
            owner = func.value.id if isinstance(func.value, ast.Name) else "?"
        else:
            name = getattr(func, "id", "")
        yield owner, name, {k.arg: k.value for k in node.keywords}, node


def test_no_pickle_load_eval_or_exec_in_the_package():
    checked = 0
    for path in SOURCE.rglob("*.py"):
        for owner, name, kwargs, node in _calls(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(SOURCE)}:{node.lineno}"
            if owner in ("np", "numpy") and name == "load":
                value = kwargs.get("allow_pickle")
                assert isinstance(value, ast.Constant) and value.value is False, where
                checked += 1
            if owner == "torch" and name == "load":
                value = kwargs.get("weights_only")
                assert isinstance(value, ast.Constant) and value.value is True, where
                checked += 1
            assert not (owner == "pickle" and name in ("load", "loads")), where
            assert not (owner is None and name in ("eval", "exec")), where
    assert checked >= 1  # the checkpoint reader (sidecars are parsed without np.load at all)


def test_a_pickled_sidecar_member_is_never_unpickled(tmp_path):
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        for i in range(3):
            f[f"t_{i}"] = np.full(2, i, np.float32)
    assert H5SampleDataset(path).index_origins == ("built",)
    side = Path(str(path) + ".nnh-index.npz")
    loaded = dict(np.load(side, allow_pickle=False))
    marker = tmp_path / MARKER
    evil = np.empty(1, dtype=object)
    evil[0] = Payload(marker)
    np.savez(side, header=loaded["header"], blob=evil, offsets=loaded["offsets"])
    ds = H5SampleDataset(path)
    assert ds.index_origins == ("built",) and len(ds) == 3
    assert not marker.exists()


def test_a_checkpoint_holding_a_pickle_is_refused_without_running_it(tmp_path):
    marker = tmp_path / MARKER
    bad = tmp_path / "evil.pt"
    torch.save({"format": "nn_handler", "model": Payload(marker)}, bad, pickle_protocol=2)
    assert not marker.exists()
    handler = NNHandler(torch.nn.Linear, {"in_features": 2, "out_features": 2}, log_fn=None)
    with pytest.raises(
        ValueError, match=r"checkpoint .*evil\.pt. is truncated or not a checkpoint"
    ):
        handler.load(bad)
    assert not marker.exists()
    with open(tmp_path / "plain.pkl", "wb") as fh:
        pickle.dump(Payload(marker), fh, protocol=2)
    with pytest.raises(ValueError, match="cannot read"):
        handler.load(tmp_path / "plain.pkl")
    assert not marker.exists()


def test_object_and_string_datasets_are_not_samples(tmp_path):
    path = tmp_path / "o.h5"
    with h5py.File(path, "w") as f:
        f["s"] = np.array([b"a", b"b"], dtype=h5py.string_dtype())
    with pytest.raises(TypeError, match="torch cannot hold"):
        H5SampleDataset(path)[0]
