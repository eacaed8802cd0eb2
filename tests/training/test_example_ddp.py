"""``torchrun examples/ddp_train.py`` runs on CPU (one node, or two "nodes" on this host)."""

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nn_handler import NNHandler

from helpers.ddp import run_nodes, torchrun

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_train.py"


@pytest.mark.slow
def test_ddp_example_under_torchrun(tmp_path):
    checkpoint, data = tmp_path / "ddp.pt", tmp_path / "blobs.h5"
    make = [sys.executable, str(EXAMPLE), "--make-data", str(data), "--samples", "2000"]
    subprocess.run(make, check=True, timeout=120)
    command = [*torchrun(), "--standalone", "--nproc_per_node", "2", str(EXAMPLE)]
    command += ["--data", str(data), "--epochs", "2", "--checkpoint", str(checkpoint)]
    # a rank that aborts at teardown (seen once under load: SIGABRT after its last line) prints
    # its Python stack into the failure
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert (
        "initialized torch.distributed (gloo) from the torchrun environment: 2 processes" in output
    )
    assert (
        len(re.findall(r"^epoch \d/2: train_loss", done.stdout, re.MULTILINE)) == 2
    )  # rank 0 only
    found = re.search(r"rank 0 of 2: validation accuracy ([\d.]+)% on 400 samples", done.stdout)
    assert found, output
    assert float(found.group(1)) > 60  # chance is 25%
    spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    single = NNHandler(module.Classifier, log_fn=None)  # a 2-rank epoch-end checkpoint, 1 process
    single.load(checkpoint)
    assert (single.epoch, len(single.history)) == (2, 2)
    assert single.global_step == 2 * 13  # 1600 train samples / 2 ranks / 64 per batch


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ddp_example_on_two_nodes_writes_a_copy_per_node():
    """``torchrun --nnodes 2``, once per node, without ``--data``: each node writes its own copy.

    Both "nodes" run on this host and share /tmp, as two containers on one machine might: their
    copies must not collide, and each is removed at the end.
    """
    outputs, port = run_nodes(EXAMPLE, lambda node: ["--samples", "1000", "--epochs", "1"], ROOT)
    found = re.search(r"rank 0 of 2: validation accuracy [\d.]+% on 200 samples", outputs[0])
    assert found, outputs
    assert not list(Path(tempfile.gettempdir()).glob(f"nn_handler_ddp_*_{port}_node*"))
