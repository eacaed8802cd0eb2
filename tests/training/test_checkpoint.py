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
    with pytest.raises(ValueError, match=r"checkpoint .*empty.* is truncated or not a checkpoint"):
        read(tmp_path / "empty.pt", CPU)


def test_rank_entry_matches_ranks_or_refuses_mid_epoch_changes():
    ranks = [{"rng": "r0", "progress": None}, {"rng": "r1", "progress": None}]
    assert rank_entry(ranks, 1, 2, "c.pt") == ranks[1]
    assert rank_entry(ranks, 2, 4, "c.pt") == {"rng": None, "progress": None}
    ranks[0]["progress"] = {"batches": 3, "sampler_state": None}
    with pytest.raises(
        ValueError,
        match=re.escape(
            "'c.pt' was saved mid-epoch by 2 process(es) with a sampler that keeps no position"
        ),
    ):
        rank_entry(ranks, 0, 1, "c.pt")


def test_rank_entry_resumes_mid_epoch_on_another_world():
    """2 -> 3: the sampler's global position, batches from 0, sums gathered on rank 0."""

    def progress(rank):
        sums = {"names": ["acc"], "values": [4.0, 2.0 + rank, 1.0]}
        state = {"consumed": 8, "world_size": 2, "phases": []}
        return {"epoch": 1, "epoch_rng": f"e{rank}", "batches": 2, "steps": 2, "elapsed": 1.0,
                "sums": sums, "sampler_state": state}  # fmt: skip

    ranks = [{"rng": f"r{r}", "progress": progress(r)} for r in range(2)]
    entries = [rank_entry(ranks, r, 3, "c.pt") for r in range(3)]
    assert [e["rng"] for e in entries] == ["r0", "r1", None]
    assert all(e["progress"]["batches"] == 0 and e["progress"]["steps"] == 2 for e in entries)
    assert all(e["progress"]["sampler_state"]["consumed"] == 8 for e in entries)
    assert [e["progress"]["sums"]["values"] for e in entries] == [
        [8.0, 5.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    ]  # fmt: skip
    assert [e["progress"]["epoch_rng"] for e in entries[:2]] == ["e0", "e1"]
