"""Shared helpers for the benchmark scripts (kept for existing scripts).

The code lives in ``nn_handler.bench`` so the suite and the CLI can use it; this module
re-exports the same names with the same signatures.
"""

from __future__ import annotations

from nn_handler.bench.data import LAYOUTS, write_images
from nn_handler.bench.timing import (
    Result,
    batch_len,
    machine_line,
    print_table,
    shuffled_batches,
    timed_pass,
)

__all__ = [
    "LAYOUTS",
    "Result",
    "batch_len",
    "machine_line",
    "print_table",
    "shuffled_batches",
    "timed_pass",
    "write_images",
]
