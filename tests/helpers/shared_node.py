"""What other jobs leave on a shared node, for the adversarial tests (differential, corpus)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from pathlib import Path

import numpy as np


def after_a_killed_job(path: str) -> None:
    """Leave what a job killed mid-epoch leaves: the file's region, blocks half decoded."""
    proc = mp.get_context("fork").Process(target=_claim_and_die, args=(path,))
    proc.start()
    proc.join(60)
    assert proc.exitcode is not None, "the job did not end"


def _claim_and_die(path: str) -> None:
    """Claim the first blocks of the file's decoded region, scribble into them, be killed."""
    try:
        from nn_handler.dataloaders import H5LazyDataset

        ds = H5LazyDataset(path, "x")
        engine = getattr(ds._row_readers()[0]._rows, "engine", None)
        decoded = getattr(engine, "_decoded", None)
        view = decoded._attach() if decoded is not None else None
        if view is not None and view.claims is not None:
            first = np.arange(min(3, decoded.geometry.count))
            mine, _ = view.claims.claim(first, stalled=False)
            view.blocks[mine].view(np.uint8)[...] = 0xAB
    finally:
        os.kill(os.getpid(), signal.SIGKILL)  # (a damaged file may fail first: killed all the same)


def plant_folder(folder: str) -> None:
    """As another user: a folder under our name, open to all, with files that look like regions."""
    Path(folder).mkdir(mode=0o777)
    Path(folder).chmod(0o777)
    for k in range(3):
        (Path(folder) / f"{k:032x}").write_bytes(b"NNHREG02" + bytes(70_000))
