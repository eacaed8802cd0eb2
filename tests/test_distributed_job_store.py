"""The job's store for remote metadata: the default process group's, never a forked child's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import torch.distributed as dist

from nn_handler._io.storage.remote import job_blocks
from nn_handler.distributed._job_store import _GroupStore


def test_the_first_claim_of_a_key_wins_and_its_value_reaches_the_others() -> None:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", server.port, is_master=False)
    first, second = _GroupStore(server), _GroupStore(client)
    assert first.claim("k") and not second.claim("k") and not first.claim("k")
    first.publish("k", b"\x01\x00\xff")
    assert second.wait_for("k", 5.0) == b"\x01\x00\xff"
    began = time.monotonic()
    assert second.wait_for("never", 0.2) is None  # a bound, then the caller fetches itself
    assert time.monotonic() - began < 5


def test_no_store_without_a_process_group() -> None:
    if dist.is_initialized():
        pytest.skip("a process group is up in this test process")
    assert job_blocks.job_store() is None


_SCRIPT = """
import datetime, os, sys
import torch.distributed as dist
from nn_handler._io.storage.remote import job_blocks

dist.init_process_group(
    "gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1,
    timeout=datetime.timedelta(seconds=30),
)
assert job_blocks.job_store() is not None, "the rank that made the group has its store"
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # a forked DataLoader worker: its parent's socket, not its own
    os.write(write, b"none" if job_blocks.job_store() is None else b"some")
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 10).decode())
dist.destroy_process_group()
"""


@pytest.mark.timeout(120)
def test_a_process_forked_from_a_rank_does_not_use_its_parents_store() -> None:
    from helpers.ddp import free_port

    script = textwrap.dedent(_SCRIPT).format(port=free_port())
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "none"
