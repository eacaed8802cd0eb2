"""``torchrun --nproc_per_node 2 examples/ddp_train.py`` runs on CPU, and its checkpoint loads."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nn_handler import NNHandler

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_train.py"


def _torchrun() -> list[str]:
    script = Path(sys.executable).with_name("torchrun")
    return [str(script)] if script.exists() else [sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.slow
def test_ddp_example_under_torchrun(tmp_path):
    checkpoint = tmp_path / "ddp.pt"
    command = [*_torchrun(), "--standalone", "--nproc_per_node", "2", str(EXAMPLE)]
    command += ["--samples", "2000", "--epochs", "2", "--checkpoint", str(checkpoint)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
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
