"""Checkpoint files and random-number-generator states.

A checkpoint is one ``torch.save`` dict of plain types and tensors, so it loads with
``weights_only=True`` (no arbitrary pickles run on load). NumPy's RNG state is stored as a
list of ints for the same reason.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._validate import format_names

FORMAT = "nn_handler.checkpoint"
VERSION = 1
REQUIRED_KEYS = ("format", "version", "model", "epoch", "global_step", "world_size", "ranks")


def capture_rng() -> dict[str, Any]:
    """The state of Python's, NumPy's, torch's and (when in use) CUDA's global RNGs."""
    kind, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    in_use = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda = torch.cuda.get_rng_state_all() if in_use else []
    return {
        "python": random.getstate(),
        "numpy": (kind, [int(k) for k in key], int(pos), int(has_gauss), float(gauss)),
        "torch": torch.get_rng_state(),
        "cuda": cuda,
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Restore the RNG states taken by ``capture_rng``.

    CUDA states are restored when the same number of CUDA devices is visible; a checkpoint
    taken on GPUs and loaded on a CPU-only machine keeps the CPU states only.
    """
    random.setstate(state["python"])
    kind, key, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"].cpu())
    cuda = state["cuda"]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def write(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically (temp file + rename): a crash never leaves half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        torch.save({"format": FORMAT, "version": VERSION, **payload}, temp)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return target


def read(path: str | os.PathLike[str], device: torch.device) -> dict[str, Any]:
    """Load a checkpoint written by ``write`` onto ``device``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not an nn_handler checkpoint, or of a newer version.
    """
    target = Path(path)
    if not target.is_file():
        raise FileNotFoundError(f"no checkpoint at path={str(target)!r}")
    try:
        payload = torch.load(target, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"cannot read path={str(target)!r} as an NNHandler checkpoint (written by "
            f"NNHandler.save): torch.load says: {reason}"
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = format_names(map(str, payload)) if isinstance(payload, dict) else type(payload)
        raise ValueError(
            f"path={str(target)!r} is not an NNHandler checkpoint (written by NNHandler.save); "
            f"it holds {found}"
        )
    if payload["version"] > VERSION:
        raise ValueError(
            f"checkpoint {str(target)!r} has format version {payload['version']}, newer than "
            f"this nn_handler reads ({VERSION}); upgrade nn_handler"
        )
    missing = [key for key in REQUIRED_KEYS if key not in payload]
    if missing:
        raise ValueError(f"checkpoint {str(target)!r} lacks {format_names(missing)}")
    return payload


def rank_entry(
    ranks: list[dict[str, Any]], rank: int, world_size: int, path: Any
) -> dict[str, Any]:
    """This rank's ``{"rng", "progress"}`` from a checkpoint saved by ``len(ranks)`` processes.

    With another number of processes only an epoch-end checkpoint resumes (no per-rank
    position to restore), and the RNG states are left as they are (``rng`` is None).

    Raises:
        ValueError: a mid-epoch checkpoint and a different number of processes.
    """
    if len(ranks) == world_size:
        return ranks[rank]
    if any(entry["progress"] is not None for entry in ranks):
        raise ValueError(
            f"checkpoint {str(path)!r} was saved mid-epoch by {len(ranks)} process(es); resume "
            f"it with {len(ranks)} (this run has {world_size}), or load a checkpoint saved at "
            "the end of an epoch"
        )
    return {"rng": None, "progress": None}
