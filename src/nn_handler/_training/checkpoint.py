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
_RNG_KEYS = ("python", "numpy", "torch", "cuda")


class CheckpointError(ValueError):
    """A checkpoint file cannot be restored: truncated, damaged, or not an NNHandler checkpoint.

    A ``ValueError``, so code that catches ``ValueError`` for it keeps working.
    """

    __module__ = "nn_handler.errors"  # where users catch it (tracebacks and pickles say so)


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


def check_rng(state: Any, path: Any, rank: int) -> None:
    """Raise ``CheckpointError`` unless ``state`` is a state ``restore_rng`` can restore.

    Each generator's state is tried on a scratch generator of its kind, so a damaged one is
    found before any global RNG (or the model) has changed.
    """
    try:
        _try_rng_states(state)
    except Exception as exc:  # each RNG raises its own kinds (IndexError, TypeError, …)
        raise CheckpointError(
            f"checkpoint {str(path)!r} holds a damaged RNG state for rank {rank} ({exc!r}); "
            "the file is damaged or was not written by NNHandler.save"
        ) from exc


def _try_rng_states(state: Any) -> None:
    if not isinstance(state, dict) or any(key not in state for key in _RNG_KEYS):
        raise ValueError(f"expected a dict with keys {format_names(_RNG_KEYS)}")
    random.Random().setstate(state["python"])
    kind, key, pos, has_gauss, gauss = state["numpy"]
    key = np.asarray(key, dtype=np.uint32)
    np.random.RandomState().set_state((kind, key, pos, has_gauss, gauss))
    torch.Generator().set_state(state["torch"].cpu())
    cuda = state["cuda"]
    if not isinstance(cuda, list | tuple) or not all(
        isinstance(s, torch.Tensor) and s.dtype == torch.uint8 for s in cuda
    ):
        raise ValueError("the CUDA states are not a list of uint8 tensors")


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
        CheckpointError: the file is truncated, not an nn_handler checkpoint, or of a newer
            version.
    """
    target = Path(path)
    if not target.is_file():
        raise FileNotFoundError(f"no checkpoint at path={str(target)!r}")
    payload = _load(target, device)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = format_names(map(str, payload)) if isinstance(payload, dict) else type(payload)
        raise CheckpointError(
            f"path={str(target)!r} is not an NNHandler checkpoint (written by NNHandler.save); "
            f"it holds {found}"
        )
    if payload["version"] > VERSION:
        raise CheckpointError(
            f"checkpoint {str(target)!r} has format version {payload['version']}, newer than "
            f"this nn_handler reads ({VERSION}); upgrade nn_handler"
        )
    missing = [key for key in REQUIRED_KEYS if key not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {str(target)!r} lacks {format_names(missing)}")
    _check_ranks(payload["ranks"], target)
    return payload


def _check_ranks(ranks: Any, target: Path) -> None:
    """Each saving rank's entry must be a dict with ``rng`` and ``progress`` (``save_run``)."""
    fine = isinstance(ranks, list)
    fine = fine and all(isinstance(e, dict) and {"rng", "progress"} <= e.keys() for e in ranks)
    if not fine:
        shown = repr(ranks)
        shown = shown if len(shown) <= 80 else shown[:80] + "..."
        raise CheckpointError(
            f"checkpoint {str(target)!r} holds damaged per-rank state ({shown}; expected a list "
            "of one {'rng': ..., 'progress': ...} per saving rank)"
        )


def _load(target: Path, device: torch.device) -> Any:
    """``torch.load`` (weights only), its failures on a damaged file as ``CheckpointError``."""
    try:
        return torch.load(target, map_location=device, weights_only=True)
    except PermissionError:
        raise  # the file may be fine: the user must fix the access, not the file
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        # torch's zip reader fails on a cut archive with EINVAL (OSError), RuntimeError or EOF
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {str(target)!r} is truncated or not a checkpoint (cannot read it as "
            f"one written by NNHandler.save; torch.load says: {reason})"
        ) from exc


def rank_entry(
    ranks: list[dict[str, Any]], rank: int, world_size: int, path: Any
) -> dict[str, Any]:
    """This rank's ``{"rng", "progress"}`` from a checkpoint saved by ``len(ranks)`` processes.

    With the same number of processes, each rank takes its own entry. With another number, an
    epoch-end checkpoint restores no position and leaves the RNG states as they are (``rng``
    None); a mid-epoch one resumes elastically (``elastic_entry``).

    Raises:
        ValueError: a mid-epoch checkpoint whose sampler keeps no position, and a different
            number of processes.
    """
    if len(ranks) == world_size:
        return ranks[rank]
    if all(entry["progress"] is None for entry in ranks):
        return {"rng": None, "progress": None}
    return elastic_entry(ranks, rank, path)


def elastic_entry(ranks: list[dict[str, Any]], rank: int, path: Any) -> dict[str, Any]:
    """Rank ``rank``'s entry of a new world resuming a mid-epoch checkpoint of ``len(ranks)``.

    The epoch goes on from the sampler's global position (every saving rank stored the same
    one); this world starts a new phase of the epoch (``batches`` 0). The running sums of all
    saving ranks go to rank 0 (epoch means stay means over every sample trained); ranks that
    existed before keep their RNG streams, new ranks keep theirs as they are.

    Raises:
        ValueError: the sampler keeps no position (it was fast-forwarded by skipping batches,
            which needs the same number of processes).
    """
    first = ranks[0]["progress"]
    if first is None or first.get("sampler_state") is None:
        raise ValueError(
            f"checkpoint {str(path)!r} was saved mid-epoch by {len(ranks)} process(es) with a "
            "sampler that keeps no position; resume it with the same number of processes, or "
            "use one of nn_handler's samplers (the handler's default), which resume on any"
        )
    progress = dict(first)
    progress["batches"] = 0
    progress["sums"] = _merged_sums([entry["progress"]["sums"] for entry in ranks], rank)
    own = ranks[rank] if rank < len(ranks) else None
    if own is None:
        progress["epoch_rng"] = capture_rng()
    else:
        progress["epoch_rng"] = own["progress"]["epoch_rng"]
    return {"rng": None if own is None else own["rng"], "progress": progress}


def _merged_sums(sums: list[dict[str, Any] | None], rank: int) -> dict[str, Any] | None:
    """All ranks' running sums on rank 0, zeros elsewhere (their all-reduce is unchanged)."""
    present = [s for s in sums if s is not None]
    if not present:
        return None
    total = [sum(values) for values in zip(*(s["values"] for s in present), strict=True)]
    values = total if rank == 0 else [0.0] * len(total)
    return {"names": list(present[0]["names"]), "values": values}
