"""What ``nn-handler bench`` needs: timing a file, the synthetic suite, shuffle quality.

``bench_file`` times every loader strategy on a file and recommends one; ``run_suite`` times our
loaders on every synthetic layout with ratios to a baseline; ``shuffle_quality`` puts numbers on
how well an order mixes. The comparisons with other libraries and with the machine's limits live
in the repository's ``benchmarks/``, which builds on the timing primitives here.
"""

from .contenders import NaiveH5Dataset
from .data import LAYOUTS, make_images, suite_layouts, write_images, write_layout_file
from .file_bench import FileBench, bench_file
from .quality import ShuffleQuality, shuffle_quality
from .suite import Table, run_suite
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
