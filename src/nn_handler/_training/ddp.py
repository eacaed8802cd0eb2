"""torch.distributed plumbing: start the process group from torchrun's environment, reduce sums.

All collectives here are no-ops in a world of one process, so the training loop calls them
unconditionally.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..distributed import World
from ..distributed import barrier as group_barrier
from .device import bind_local_device, parse_device

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def backend_for(device: torch.device) -> str:
    """``nccl`` for CUDA devices, ``gloo`` otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


def ensure_process_group(
    device: torch.device,
    log_fn: Callable[[str], None] | None,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Initialize ``torch.distributed`` from the torchrun environment unless it already is.

    Returns:
        True when this call initialized the group (the caller then owns its teardown).

    Raises:
        RuntimeError: torch.distributed is unavailable, or a torchrun variable is missing.
    """
    if not dist.is_available():
        raise RuntimeError(
            "use_distributed=True but this torch build has no torch.distributed; "
            "use use_distributed=False"
        )
    if dist.is_initialized():
        return False
    env = os.environ if environ is None else environ
    missing = [name for name in TORCHRUN_VARIABLES if not env.get(name)]
    if missing:
        raise RuntimeError(
            "use_distributed=True but torch.distributed is not initialized and the environment "
            f"lacks {', '.join(missing)}; launch with `torchrun --nproc_per_node N script.py`, "
            "or call torch.distributed.init_process_group() before creating the NNHandler, "
            "or pass use_distributed=False"
        )
    backend = backend_for(device)
    if device.type == "cuda":  # NCCL binds each process to its GPU before the first collective
        torch.cuda.set_device(int(env.get("LOCAL_RANK", env["RANK"])))
    _bind_world_late()
    dist.init_process_group(backend=backend)
    if log_fn is not None and dist.get_rank() == 0:
        log_fn(
            f"nn_handler: initialized torch.distributed ({backend}) from the torchrun "
            f"environment: {dist.get_world_size()} processes, "
            f"master {env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        )
    return True


def _bind_world_late() -> None:
    """Import ``torch.distributed.nn.functional`` while no process group exists.

    Its functions take ``group.WORLD`` as a default argument, bound when the module is first
    imported, and torch imports it late (``torch._dynamo`` does, with the first optimizer).
    Imported after ``init_process_group`` it would hold the group to the end of the process, and
    ``close()`` could not stop gloo's worker threads (docs/training.md, "Ending a distributed
    script"). Imported now, the defaults are None: the default group at call time.
    """
    import torch.distributed.nn.functional  # noqa: F401  (imported for what it binds)


def join(
    device: Any, use_distributed: bool, log_fn: Callable[[str], None] | None
) -> tuple[bool, World, torch.device]:
    """``(owns_group, world, device)`` of this process; starts the process group under DDP.

    Without DDP the world is one process and the device is used as given; under DDP ``cuda``
    becomes this process's local GPU.
    """
    parsed = parse_device(device)
    if not use_distributed:
        return False, World(), parsed
    owns = ensure_process_group(parsed, log_fn)
    world = World.detect()
    return owns, world, bind_local_device(parsed, world.local_rank)


def destroy_process_group() -> None:
    """Tear the default process group down (when one exists)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: torch.Tensor, world: World) -> torch.Tensor:
    """Sum ``values`` over all ranks (in place; returned for chaining)."""
    if world.is_distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def min_max(value: int, world: World, device: torch.device) -> tuple[int, int]:
    """The smallest and largest ``value`` over all ranks."""
    if not world.is_distributed:
        return value, value
    both = torch.tensor([-value, value], dtype=torch.int64, device=device)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return -int(both[0]), int(both[1])


def gather_objects(obj: Any, world: World) -> list[Any]:
    """Every rank's ``obj``, in rank order (pickled over the process group)."""
    if not world.is_distributed:
        return [obj]
    gathered: list[Any] = [None] * world.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def barrier(world: World) -> None:
    """Wait until every rank gets here."""
    if world.is_distributed:
        group_barrier()


def wrap_ddp(
    module: torch.nn.Module, device: torch.device, options: Mapping[str, Any]
) -> DistributedDataParallel:
    """``DistributedDataParallel(module)`` on ``device`` (its parameters broadcast from rank 0)."""
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=device_ids, **options)


def hold_group(wrapper: DistributedDataParallel) -> dist.ProcessGroup:
    """Hold the wrapper's process group here until ``release_group``: the wrapper never frees it.

    A group freed by its DDP wrapper is freed with the GIL held, and gloo then waits for its
    worker threads, one of which may be waiting for the GIL: the process hangs (docs/training.md,
    "Ending a distributed script"). Freed through its Python handle, as ``release_group`` or
    ``destroy_process_group`` free it, the group lets go of the GIL while it waits.
    """
    group: dist.ProcessGroup = wrapper.process_group
    _HELD.append(group)
    return group


def release_group(group: dist.ProcessGroup) -> None:
    """Let go of a group ``hold_group`` held, once its wrapper is gone (a destroyed group ends)."""
    for index, held in enumerate(_HELD):
        if held is group:
            del _HELD[index]
            return


# The groups hold_group holds; the rest go at exit, before Python shuts down.
_HELD: list[dist.ProcessGroup] = []
atexit.register(_HELD.clear)
