"""A torchrun worker for the elastic-agent test: one epoch, a checkpoint every step, a log.

Run as ``torchrun … elastic_worker.py DATA CHECKPOINT LOGDIR DELAY``. Each process appends one
JSON line per batch (the rows and the optimizer steps taken before it) to its own file, named
after torchrun's restart count, the world size and the rank, so the test can tell which batches
a checkpoint covered. ``DELAY`` seconds per batch keep the epoch long enough to kill an agent
in the middle of it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nn_handler import NNHandler
from nn_handler.dataloaders import H5LazyDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def main(data: str, checkpoint: str, logdir: str, delay: float) -> None:
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    name = f"restart{restart}_world{os.environ['WORLD_SIZE']}_rank{os.environ['RANK']}.jsonl"
    log = (Path(logdir) / name).open("a")
    handler: NNHandler

    def record(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        rows = x[:, 0].long().tolist()
        log.write(json.dumps({"before_step": handler.global_step, "rows": rows}) + "\n")
        log.flush()
        time.sleep(delay)
        return x[:, 1:], y

    torch.manual_seed(0)
    handler = NNHandler(Net, use_distributed=True, batch_fn=record, progress=False, log_fn=None)
    handler.set_train_loader(H5LazyDataset(data, "x", "y"), batch_size=4)
    handler.set_optimizer(torch.optim.SGD, lr=0.01)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    if os.path.exists(checkpoint):
        handler.load(checkpoint)
    # the agent's pid: the test kills one agent together with its worker, as a lost node
    start = {"start_step": handler.global_step, "pid": os.getpid(), "agent": os.getppid()}
    log.write(json.dumps(start) + "\n")
    log.flush()
    handler.train(1, checkpoint_path=checkpoint, checkpoint_every_steps=1)
    log.write(json.dumps({"done_step": handler.global_step}) + "\n")
    log.close()
    handler.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
