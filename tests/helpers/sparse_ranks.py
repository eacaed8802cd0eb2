"""Rank functions for the sparse DDP tests (no anndata import: spawned ranks start faster)."""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist

from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    DistributedEpochSampler,
    H5SparseDataset,
    batched_loader,
)


def split_rows_rank(path: str, csc_path: str) -> dict[str, Any]:
    """Two epochs with each sampler; rows identified by ``n_genes = 3 * row``."""
    # both ranks open the CSC file at once: one builds its CSR copy, the other waits for it
    csc = H5SparseDataset(csc_path, label="n_genes")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    ds = H5SparseDataset(path, label="n_genes")
    rank, world = dist.get_rank(), dist.get_world_size()
    samplers = {
        "chunk": ChunkShuffleSampler(ds, window_chunks=2, rank=rank, world_size=world),
        "distributed": DistributedEpochSampler(
            len(ds), rank=rank, world_size=world, equal_steps="drop"
        ),
    }
    out: dict[str, Any] = {}
    for kind, sampler in samplers.items():
        out[kind] = {}
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            xs, ys = zip(*batched_loader(ds, 8, sampler=sampler), strict=True)
            out[kind][epoch] = (torch.cat(xs).numpy(), torch.cat(ys).numpy() // 3)
    dist.barrier()
    cx, cy = csc[:]
    out["csc"] = (cx.numpy(), cy.numpy() // 3)
    out["origin"] = csc.origins[0]
    return out
