"""Checkpoint files and RNG states."""

import random
import re

import numpy as np
import pytest
import torch

from nn_handler._training.checkpoint import capture_rng, rank_entry, read, restore_rng, write

CPU = torch.device("cpu")


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_rng_states_round_trip_through_a_weights_only_file(tmp_path):
    state = capture_rng()
    first = _draws()
    write(tmp_path / "c.pt", {"rng": state, "model": {}, "epoch": 0, "global_step": 0,
                              "world_size": 1, "ranks": []})  # fmt: skip
    _draws()
    restore_rng(read(tmp_path / "c.pt", CPU)["rng"])
    assert _draws() == first


def test_write_is_atomic_and_makes_folders(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b" / "c.pt"
    payload = {"model": {}, "epoch": 1, "global_step": 2, "world_size": 1, "ranks": []}
    write(target, payload)
    assert read(target, CPU)["epoch"] == 1

    def crash(obj, path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        write(target, {**payload, "epoch": 9})
    assert sorted(p.name for p in target.parent.iterdir()) == ["c.pt"]
    monkeypatch.undo()
    assert read(target, CPU)["epoch"] == 1


def test_read_rejects_newer_and_incomplete_checkpoints(tmp_path):
    torch.save({"format": "nn_handler.checkpoint", "version": 99}, tmp_path / "new.pt")
    with pytest.raises(ValueError, match="has format version 99, newer than this nn_handler reads"):
        read(tmp_path / "new.pt", CPU)
    torch.save({"format": "nn_handler.checkpoint", "version": 1, "model": {}}, tmp_path / "old.pt")
    with pytest.raises(ValueError, match="lacks 'epoch', 'global_step', 'ranks', 'world_size'"):
        read(tmp_path / "old.pt", CPU)
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"cannot read path=.*empty"):
        read(tmp_path / "empty.pt", CPU)


def test_rank_entry_matches_ranks_or_refuses_mid_epoch_changes():
    ranks = [{"rng": "r0", "progress": None}, {"rng": "r1", "progress": None}]
    assert rank_entry(ranks, 1, 2, "c.pt") == ranks[1]
    assert rank_entry(ranks, 2, 4, "c.pt") == {"rng": None, "progress": None}
    ranks[0]["progress"] = {"batches": 3}
    with pytest.raises(
        ValueError,
        match=re.escape(
            "'c.pt' was saved mid-epoch by 2 process(es); resume it with 2 (this run has 1)"
        ),
    ):
        rank_entry(ranks, 0, 1, "c.pt")
