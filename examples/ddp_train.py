"""Train with DDP through NNHandler: ``torchrun --nproc_per_node 2 examples/ddp_train.py``.

Runs on CPUs (``gloo``) or GPUs (``nccl``, one per process). The data is an HDF5 classification
set (``train/x``, ``train/y``, ``val/x``, ``val/y``) read by every rank through ``H5LazyDataset``.
The handler initializes ``torch.distributed`` from torchrun's environment, wraps the model in
``DistributedDataParallel``, gives each rank a disjoint, equally sized part of the training set
that is reshuffled every epoch, and evaluates every validation sample exactly once across the
ranks.

Where the data comes from:

* ``--data PATH``: your file. Every node must be able to read it at ``PATH`` (a shared file
  system, or the same copy on each machine). ``--make-data PATH`` writes the example's synthetic
  set (Gaussian blobs) there and exits.
* ``--data s3://bucket/blobs.h5`` (or ``gs://``, ``az://``, ``https://``): read where it lives,
  by byte ranges, with credentials from the environment (``docs/remote.md``) or from
  ``--storage-option KEY=VALUE`` (repeatable; VALUE is JSON when it parses, else a string:
  ``--storage-option anon=true --storage-option endpoint_url=https://minio:9000``). Add
  ``--cache-dir /local/nvme/nnh`` to cache the pieces on each node's disk: every rank and
  worker of a node shares it, each node fetches each piece at most once, and what a node has
  read once it reads locally from then on.
* no ``--data``: each node writes its own copy of the synthetic set (the same seed, so the same
  rows everywhere) to its local temporary directory, and removes it at the end.

Several machines: run on each of the ``N`` nodes (``NODE_RANK`` 0 … N-1; ``HOST0`` is node 0)::

    torchrun --nnodes N --node_rank NODE_RANK --nproc_per_node GPUS_PER_NODE \
        --master_addr HOST0 --master_port 29500 examples/ddp_train.py --data /shared/blobs.h5

Elastic: under torchrun's elastic agent the job restarts with the members that are left; with
``--checkpoint`` the script resumes from the checkpoint when it exists, whatever number of
processes saved it (the rest of the epoch is split among the new ones)::

    torchrun --nnodes 1:2 --nproc_per_node 2 --max-restarts 3 --rdzv_backend c10d \
        --rdzv_endpoint HOST0:29400 --rdzv_id job42 examples/ddp_train.py \
        --data /shared/blobs.h5 --checkpoint /shared/run.pt --checkpoint-every-steps 50

Training reads ``ChunkShuffleSampler`` order through ``batched_loader``: each chunk is read
(fetched, for a URL) and decoded once per epoch, the block order is reshuffled every epoch and
split among the ranks (the sampler detects the world), and a checkpoint resumes on any number of
processes.

Options: ``--samples 4000 --epochs 3 --batch-size 64 --workers 1 --checkpoint PATH
--checkpoint-every-steps N --cache-dir DIR --storage-option KEY=VALUE``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

import h5py
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from nn_handler import NNHandler
from nn_handler.dataloaders import (
    ChunkShuffleSampler,
    H5LazyDataset,
    batched_loader,
    h5_worker_init_fn,
)

FEATURES, CLASSES = 16, 4


class Classifier(nn.Module):
    def __init__(self, features: int = FEATURES, classes: int = CLASSES) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def write_blobs(path: str, n: int, seed: int = 0) -> None:
    """``train/x`` (80%) and ``val/x`` (20%): Gaussian blobs, one per class."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1.0, (CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, n)
    points = (centers[labels] + rng.normal(0, 1, (n, FEATURES))).astype(np.float32)
    split = int(0.8 * n)
    with h5py.File(path, "w") as f:
        for name, rows in (("train", slice(0, split)), ("val", slice(split, n))):
            chunk = max(1, min(256, len(points[rows])))  # a chunk may not exceed the data
            f.create_dataset(f"{name}/x", data=points[rows], chunks=(chunk, FEATURES))
            f.create_dataset(f"{name}/y", data=labels[rows])


def node_local_copy(n: int) -> str:
    """Each node's local rank 0 writes the synthetic set to this node's temp dir; all wait.

    The directory names the job and the node, so nodes that share a file system (or one host
    running several "nodes") never write the same file.
    """
    job = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}_{os.environ.get('MASTER_PORT', '0')}"
    node = os.environ.get("GROUP_RANK", "0")  # torchrun's node rank
    folder = os.path.join(tempfile.gettempdir(), f"nn_handler_ddp_{job}_node{node}")
    path = os.path.join(folder, "blobs.h5")
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        os.makedirs(folder, exist_ok=True)
        write_blobs(path, n)
    dist.barrier()  # every node's copy is complete before anyone opens it
    return path


def remove_local_copy(path: str) -> None:
    dist.barrier()  # nobody reads it any more
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        os.remove(path)
        os.rmdir(os.path.dirname(path))


def storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line: VALUE as JSON when it parses, else the string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(1) == targets).float().mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--checkpoint", help="save a checkpoint here after every epoch; resume from it if present"
    )
    parser.add_argument(
        "--checkpoint-every-steps", type=int, help="also save every N steps (with --checkpoint)"
    )
    parser.add_argument("--data", help="HDF5 file at this path on every node, or a URL")
    parser.add_argument("--cache-dir", help="for a URL: node-local directory caching its bytes")
    parser.add_argument(
        "--storage-option",
        action="append",
        type=storage_option,
        default=[],
        metavar="KEY=VALUE",
        help="for a URL: one fsspec storage option (repeatable; VALUE is JSON when it parses)",
    )
    parser.add_argument("--make-data", metavar="PATH", help="write the synthetic set and exit")
    args = parser.parse_args()
    if args.make_data:
        write_blobs(args.make_data, args.samples)
        return
    remote = bool(args.data) and "://" in args.data
    if args.data and not remote and not os.path.isfile(args.data):
        parser.error(f"--data {args.data!r} is not a file on this node")
    if not remote and (args.cache_dir or args.storage_option):
        parser.error("--cache-dir and --storage-option apply to a URL given as --data")
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    handler = NNHandler(Classifier, device=device, use_distributed=True)
    path = args.data or node_local_copy(args.samples)
    loader_options = {"num_workers": args.workers, "worker_init_fn": h5_worker_init_fn}
    where = {"cache_dir": args.cache_dir, "storage_options": dict(args.storage_option)}
    where = where if remote else {}
    train = H5LazyDataset(path, "train/x", "train/y", **where)
    sampler = ChunkShuffleSampler(
        train, seed=0, batch_size=args.batch_size, num_workers=args.workers
    )
    handler.set_train_loader(
        batched_loader(train, args.batch_size, sampler=sampler, **loader_options)
    )
    val = H5LazyDataset(path, "val/x", "val/y", **where)
    handler.set_val_loader(val, batch_size=256, **loader_options)
    handler.set_optimizer(torch.optim.Adam, lr=3e-3)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    handler.set_metrics({"acc": accuracy})
    if args.checkpoint and os.path.isfile(args.checkpoint):
        handler.load(args.checkpoint)  # saved by any number of processes (elastic restarts)
    handler.train(
        args.epochs,
        checkpoint_path=args.checkpoint,
        checkpoint_every_steps=args.checkpoint_every_steps if args.checkpoint else None,
    )
    result = handler.evaluate()
    if handler.world.is_main:
        print(
            f"rank 0 of {handler.world.world_size}: validation accuracy {result['acc']:.1%} "
            f"on {int(result['samples'])} samples (chance {1 / CLASSES:.0%})"
        )
    if not args.data:
        remove_local_copy(path)
    handler.close()


if __name__ == "__main__":
    main()
