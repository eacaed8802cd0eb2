"""Rank functions for the remote DDP tests: each rank a "node" with its own cache directory."""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

from nn_handler.dataloaders import ChunkShuffleSampler, H5LazyDataset, batched_loader


def two_nodes_rank(url: str, cache_root: str, epochs: int, batch_size: int) -> dict[str, Any]:
    """``epochs`` of ``ChunkShuffleSampler`` + ``batched_loader`` on ``url``, from node ``rank``.

    The rank's requests carry ``X-Client: node<rank>`` so that the server can tell the nodes
    apart. Returns the rows seen per epoch, the requests this process had sent once the dataset
    was open, after each epoch, and after reading every epoch again (a later run on the node's
    cache).
    """
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    node = f"node{rank}"
    ds = H5LazyDataset(
        url,
        "x",
        "y",
        cache_dir=os.path.join(cache_root, node),
        storage_options={"headers": {"X-Client": node}},
    )
    sampler = ChunkShuffleSampler(ds, seed=7, window_chunks=4, rank=rank, world_size=world)
    loader = batched_loader(ds, batch_size, sampler=sampler)
    remote = ds._source.byte_source().remote  # type: ignore[union-attr]  # CachedFile's store
    # the metadata and chunk index of the file: fetched once per job, not once per node
    out: dict[str, Any] = {"epochs": [], "requests": [], "opened": remote.requests}
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        xs, ys = zip(*loader, strict=True)
        out["epochs"].append((torch.cat(xs).numpy(), torch.cat(ys).numpy()))
        out["requests"].append(remote.requests)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for _batch in loader:
            pass
    out["replayed"] = remote.requests
    ds.close()
    return out
