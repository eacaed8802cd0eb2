"""Process-group start from the torchrun environment, and collectives in a world of one."""

import re

import pytest
import torch
import torch.distributed as dist

from nn_handler import NNHandler, World
from nn_handler._training.ddp import (
    backend_for,
    barrier,
    ensure_process_group,
    gather_objects,
    min_max,
)

from helpers.handler import TinyNet

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_PORT"),
    ],
)
def test_missing_torchrun_environment_names_the_fix(env, missing):
    with pytest.raises(
        RuntimeError, match=re.escape(f"the environment lacks {missing}; launch with `torchrun")
    ):
        ensure_process_group(CPU, None, env)
    assert not dist.is_initialized()


def test_handler_with_use_distributed_outside_torchrun(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="pass use_distributed=False"):
        NNHandler(TinyNet, use_distributed=True)


def test_backends_and_single_process_collectives():
    assert backend_for(CPU) == "gloo"
    assert backend_for(torch.device("cuda", 0)) == "nccl"
    assert min_max(7, World(), CPU) == (7, 7)
    assert gather_objects({"a": 1}, World()) == [{"a": 1}]
    barrier(World())
