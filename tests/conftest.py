"""Fixtures shared by every test folder (builders live in ``helpers``)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from helpers.files import write_layout
from helpers.snippets import START_METHOD_ENV

# Property tests check what an example gives, not how long it takes: hypothesis' per-example
# deadline (200 ms) and its too-slow health check fail on a busy 2-core CI machine (an example
# that once took 41 s under load was reported as "flaky"). Hangs are pytest-timeout's job.
settings.register_profile("nn_handler", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("nn_handler")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--start-method",
        choices=("fork", "spawn", "forkserver"),
        default=None,
        help="multiprocessing's default start method for the whole run, as a user's Python "
        "has it (forkserver: Linux on Python 3.14+); tests that name a method keep theirs",
    )


def pytest_configure(config: pytest.Config) -> None:
    method = config.getoption("--start-method")
    if method is not None:  # torch.multiprocessing and DataLoader follow this default
        multiprocessing.set_start_method(method, force=True)
        os.environ[START_METHOD_ENV] = method  # for DDP ranks, which start as spawn children


@pytest.fixture
def make_h5(tmp_path: Path) -> Callable[..., Path]:
    """Return ``make(datasets, name="data.h5", **file_kwargs) -> path``.

    ``datasets`` maps a key (nested paths allowed) to an array, or to ``(array, layout)``.
    """
    counter = iter(range(10_000))

    def make(datasets: dict[str, Any], name: str | None = None, **file_kwargs: Any) -> Path:
        path = tmp_path / (name or f"data{next(counter)}.h5")
        with h5py.File(path, "w", **file_kwargs) as f:
            for key, spec in datasets.items():
                data, layout = spec if isinstance(spec, tuple) else (spec, "contiguous")
                write_layout(f, key, np.asarray(data), layout)
        return path

    return make
