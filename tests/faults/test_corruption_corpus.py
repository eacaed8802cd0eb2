"""A seeded corpus of damaged files: each ends in the right bytes (what h5py reads) or a clean
exception within 10 s, never wrong data, a hang or a signal; the compressed ones also decoded
whole after a job killed mid-pass left the file's region (a segment half filled) behind.

Every case is read in child processes (``corruption.py``), once with h5py for the reference and
once with ``H5LazyDataset`` (batch, per-sample and whole-range reads). CI reads two seeds of the
corpus; ``NN_HANDLER_SLOW=1`` reads five. ``NN_HANDLER_CORPUS_REPORT=path.json`` writes the
counts and every case's outcome there.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import replace
from unittest import mock

import pytest

from nn_handler._io.storage.shm_folder import SHM_DIR_ENV

from helpers.corruption import CASE_SECONDS, Case, Outcome, build_corpus, run_cases

SLOW = os.environ.get("NN_HANDLER_SLOW", "") not in ("", "0")
CLEAN_ERRORS = (
    "nn_handler.errors.",
    "builtins.OSError",
    "builtins.FileNotFoundError",
    "builtins.KeyError",
    "builtins.ValueError",
    "builtins.TypeError",
    "builtins.IndexError",
)

pytestmark = pytest.mark.slow


def verdict(reference: Outcome, ours: Outcome) -> str:
    """``"ok"``, ``"clean error"`` or what went wrong."""
    if ours.status == "ok":
        if reference.status == "ok" and reference.digest == ours.digest:
            return "ok"
        return "wrong data" if reference.status == "ok" else f"served data h5py {reference.status}s"
    if ours.status == "error":
        if ours.seconds > CASE_SECONDS:
            return "slow error"
        return "clean error" if ours.error.startswith(CLEAN_ERRORS) else "unclean error"
    return ours.status  # hang or signal


def test_damaged_files_read_right_or_fail_cleanly(tmp_path):
    cases: list[Case] = []
    for seed in range(5 if SLOW else 2):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        cases += build_corpus(folder, seed, flips_per_region=3 if SLOW else 2)
    reference = run_cases("h5py", cases, tmp_path)
    ours = run_cases("ours", cases, tmp_path)
    # the compressed cases again, decoded whole, each after a killed job left its region behind
    shared = [k for k, c in enumerate(cases) if c.base.startswith("gzip")]
    (tmp_path / "shm").mkdir()
    with mock.patch.dict(os.environ, {SHM_DIR_ENV: str(tmp_path / "shm")}):
        ours += run_cases("ours-shared", [cases[k] for k in shared], tmp_path)
    cases += [replace(cases[k], damage=f"{cases[k].damage}, after a killed job") for k in shared]
    reference += [reference[k] for k in shared]
    verdicts = [verdict(r, o) for r, o in zip(reference, ours, strict=True)]
    counts = Counter(verdicts)
    report = os.environ.get("NN_HANDLER_CORPUS_REPORT")
    if report:
        rows = [
            {"base": c.base, "damage": c.damage, "verdict": v, "h5py": r.status, "ours": o.error}
            for c, v, r, o in zip(cases, verdicts, reference, ours, strict=True)
        ]
        with open(report, "w") as fh:
            json.dump({"cases": len(cases), "counts": counts, "rows": rows}, fh, indent=1)
    bad = [
        f"{c.base} {c.damage}: {v} ({o.error or o.status})"
        for c, v, o in zip(cases, verdicts, ours, strict=True)
        if v not in ("ok", "clean error")
    ]
    assert not bad, f"{len(bad)} of {len(cases)} cases: " + "; ".join(bad[:10])
    assert counts["ok"] + counts["clean error"] == len(cases) >= 100
