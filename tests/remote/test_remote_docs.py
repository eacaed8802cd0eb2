"""The Python blocks of docs/remote.md run, in order, against moto's S3 server on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch.distributed as dist

from helpers.ddp import free_port
from helpers.doc_files import write_doc_files
from helpers.object_servers import put_object

DOC = Path(__file__).resolve().parents[2] / "docs" / "remote.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.timeout(240)
def test_doc_snippets_run(s3, tmp_path, monkeypatch):
    write_doc_files(tmp_path)
    put_object(s3, "my-bucket", "data.h5", (tmp_path / "data.h5").read_bytes())
    # what a user's environment holds: credentials, and (here) the endpoint of the local server
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3["endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # what torchrun sets (the block that starts a process group: a group of one rank)
    group = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "1"}
    for name, value in {**group, "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    blocks = BLOCK.findall(DOC.read_text())
    assert blocks
    namespace: dict[str, object] = {"__name__": "docs_remote"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert any(p.name == "pieces.npy" for p in (tmp_path / "nnh-cache").rglob("*"))
    assert not dist.is_initialized()  # the block that started a group ended it
