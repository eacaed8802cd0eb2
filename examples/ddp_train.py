"""Train with DDP through NNHandler: ``torchrun --nproc_per_node 2 examples/ddp_train.py``.

Runs on CPUs (``gloo``) or GPUs (``nccl``, one per process). Rank 0 writes a small HDF5
classification set (Gaussian blobs) to a temporary directory; every rank reads the same file
through ``H5LazyDataset``. The handler initializes ``torch.distributed`` from torchrun's
environment, wraps the model in ``DistributedDataParallel``, gives each rank a disjoint,
equally sized part of the training set that is reshuffled every epoch, and evaluates every
validation sample exactly once across the ranks.

Options: ``--samples 4000 --epochs 3 --batch-size 64 --workers 1 --checkpoint PATH``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import h5py
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from nn_handler import NNHandler
from nn_handler.dataloaders import H5LazyDataset, h5_worker_init_fn

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
            f.create_dataset(f"{name}/x", data=points[rows], chunks=(256, FEATURES))
            f.create_dataset(f"{name}/y", data=labels[rows])


def shared_data_path(n: int) -> str:
    """Rank 0 writes the data set; every rank gets its path."""
    path = [None]
    if dist.get_rank() == 0:
        path[0] = os.path.join(tempfile.mkdtemp(prefix="nn_handler_ddp_"), "blobs.h5")
        write_blobs(path[0], n)
    dist.broadcast_object_list(path, src=0)
    return str(path[0])


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(1) == targets).float().mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--checkpoint", help="save a checkpoint here after every epoch")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    handler = NNHandler(Classifier, device=device, use_distributed=True)
    path = shared_data_path(args.samples)
    loader_options = {"num_workers": args.workers, "worker_init_fn": h5_worker_init_fn}
    handler.set_train_loader(
        H5LazyDataset(path, "train/x", "train/y"), batch_size=args.batch_size, **loader_options
    )
    handler.set_val_loader(H5LazyDataset(path, "val/x", "val/y"), batch_size=256, **loader_options)
    handler.set_optimizer(torch.optim.Adam, lr=3e-3)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    handler.set_metrics({"acc": accuracy})
    handler.train(args.epochs, checkpoint_path=args.checkpoint)
    result = handler.evaluate()
    if handler.world.is_main:
        print(
            f"rank 0 of {handler.world.world_size}: validation accuracy {result['acc']:.1%} "
            f"on {int(result['samples'])} samples (chance {1 / CLASSES:.0%})"
        )
        os.remove(path)
        os.rmdir(os.path.dirname(path))
    handler.close()


if __name__ == "__main__":
    main()
