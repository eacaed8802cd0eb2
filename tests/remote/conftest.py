"""Servers for the remote tests: an HTTP Range server per test, moto's S3 server per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.object_servers import RangeServer, range_server, s3_server


@pytest.fixture
def http(tmp_path: Path) -> Iterator[RangeServer]:
    """An HTTP server for ``tmp_path / "www"``."""
    root = tmp_path / "www"
    root.mkdir()
    with range_server(root) as server:
        yield server


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """moto's S3 server; the ``storage_options`` that reach it."""
    with s3_server() as options:
        yield options
