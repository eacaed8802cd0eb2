"""Benchmarks: the suite behind ``python benchmarks/run.py``, and helpers for single scripts.

``run_suite`` / ``main`` time every loader on every layout with ratios to a baseline and to a
limit measured in the same run; ``shuffle_quality`` puts numbers on how well an order mixes.
"""

from .contenders import NaiveH5Dataset
from .data import LAYOUTS, make_images, suite_layouts, write_images, write_layout_file
from .file_bench import FileBench, bench_file
from .quality import ShuffleQuality, shuffle_quality
from .suite import Table, main, run_suite
from .timing import (
    Result,
    batch_len,
    format_table,
    machine_line,
    print_table,
    shuffled_batches,
    timed_call,
    timed_pass,
)

__all__ = [
    "FileBench",
    "LAYOUTS",
    "NaiveH5Dataset",
    "Result",
    "ShuffleQuality",
    "Table",
    "batch_len",
    "bench_file",
    "format_table",
    "machine_line",
    "main",
    "make_images",
    "print_table",
    "run_suite",
    "shuffle_quality",
    "shuffled_batches",
    "suite_layouts",
    "timed_call",
    "timed_pass",
    "write_images",
    "write_layout_file",
]
