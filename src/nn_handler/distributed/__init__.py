"""World: who this process is in a distributed job (rank, world size, local rank).

Code takes a ``World`` as an argument instead of asking ``torch.distributed`` itself, so tests and
notebooks can build one by hand; ``World.detect()`` finds the real one.

Importing this package registers the process group's key-value store with the I/O layer
(``_job_store.py``): ranks hand each other a stored object's metadata instead of each fetching it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .._validate import check_count
from . import _job_store  # noqa: F401  (registers the job's store with the I/O layer)

__all__ = ["World", "barrier", "smallest_of_ranks"]


@dataclass(frozen=True)
class World:
    """An immutable description of this process's place in the job.

    Attributes:
        rank: Global rank, ``0 <= rank < world_size``.
        world_size: Number of processes in the job.
        local_rank: Rank on this node (selects the GPU).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "local_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an integer, got {value!r}")
        check_count("world_size", self.world_size, minimum=1)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank must be in [0, world_size={self.world_size}), got rank={self.rank!r}"
            )
        check_count("local_rank", self.local_rank)

    @property
    def is_distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the process that logs, shows progress and writes checkpoints)."""
        return self.rank == 0

    @classmethod
    def detect(
        cls,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        log_fn: Callable[[str], None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> World:
        """Return this process's world.

        Sources, in order: the ``rank`` / ``world_size`` arguments (each overrides its own
        field); an initialized ``torch.distributed`` process group; the ``RANK`` /
        ``WORLD_SIZE`` / ``LOCAL_RANK`` variables that ``torchrun`` sets; otherwise a world of
        one process, said once through ``log_fn``.

        Raises:
            ValueError: the values are inconsistent (e.g. ``rank >= world_size``) or an
                environment variable is not an integer.
        """
        env = os.environ if environ is None else environ
        found = _from_process_group() or _from_environment(env)
        if found is None:
            if log_fn is not None and (rank is None or world_size is None):
                log_fn(_fallback_message(rank, world_size))
            found = cls()
        local = found.local_rank if rank is None else _env_int(env, "LOCAL_RANK", rank)
        return cls(
            rank=found.rank if rank is None else rank,
            world_size=found.world_size if world_size is None else world_size,
            local_rank=local,
        )


def _fallback_message(rank: int | None, world_size: int | None) -> str:
    where = "no torch.distributed process group and no RANK/WORLD_SIZE in the environment"
    if world_size is None:
        return f"nn_handler: {where}; running as a single process (world size 1)"
    return f"nn_handler: {where}; using rank 0 of world_size={world_size}"


def _from_process_group() -> World | None:
    if not (dist.is_available() and dist.is_initialized()):
        return None
    local = _env_int(os.environ, "LOCAL_RANK", dist.get_rank())
    return World(dist.get_rank(), dist.get_world_size(), local)


def _from_environment(env: Mapping[str, str]) -> World | None:
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    rank = _env_int(env, "RANK", 0)
    return World(rank, _env_int(env, "WORLD_SIZE", 1), _env_int(env, "LOCAL_RANK", rank))


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc


def barrier() -> None:
    """Wait until every rank of the process group gets here (no group: return at once)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    if dist.get_backend() == "nccl":  # name the GPU, or NCCL guesses (and warns)
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def smallest_of_ranks(value: int) -> int:
    """The smallest ``value`` any rank of the process group holds (``value`` without a group).

    A collective: every rank of the group must call it at the same point (samplers do, at an
    epoch's start). Used where ranks must agree on a number each learned by itself, such as
    the length of a file another process appends to.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    held = torch.tensor([value], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(held, op=dist.ReduceOp.MIN)
    return int(held.item())


def _collective_device() -> torch.device:
    """Where a collective's tensors must be (NCCL: the GPU; gloo, mpi, mixed: the CPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
