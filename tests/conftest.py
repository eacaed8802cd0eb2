"""Fixtures shared by every test folder (builders live in ``helpers``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from helpers.files import write_layout


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
