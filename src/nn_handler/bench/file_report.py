"""What ``bench_file`` measured on a file: the strategies' names and the report.

Kept apart from the timing (``file_bench``) and the advice drawn from it (``file_advice``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .step_wait import StepWait
from .timing import Result

__all__ = [
    "BLOCKS",
    "BLOCK_CHUNKS",
    "CACHED",
    "CHUNK",
    "EPOCH",
    "GETITEMS",
    "NAIVE",
    "FileBench",
]

NAIVE = "naive per-sample h5py (baseline)"
GETITEMS = "H5LazyDataset + DataLoader(batch_size)"
EPOCH = "H5LazyDataset + batched_loader + EpochShuffleSampler"
CHUNK = "H5LazyDataset + batched_loader + ChunkShuffleSampler"
BLOCK_CHUNKS = 8  # URLs: adjacent chunks shuffled together, fetched by one request
BLOCKS = f"H5LazyDataset + batched_loader + ChunkShuffleSampler(blocks of {BLOCK_CHUNKS} chunks)"
CACHED = "RankMemCachedH5Dataset (after preload)"


@dataclass
class FileBench:
    """What ``bench_file`` measured and what it recommends.

    ``remote``: the path is a URL (every strategy read over the network). ``storage_options``
    are kept to open the URL again and never printed (they may hold secrets).
    """

    path: str
    x_key: str
    y_key: str | None
    samples: int
    sample_bytes: int
    strategy: str
    chunk_rows: int | None
    results: list[Result]
    preload_s: float | None
    skipped: list[str] = field(default_factory=list)
    recommendation: list[str] = field(default_factory=list)
    remote: bool = False
    cache_dir: str | None = None
    #: the strategy timed with ``cache_dir`` (None: not timed)
    cache_strategy: str | None = None
    storage_options: dict[str, Any] | None = field(default=None, repr=False)
    #: bytes of one decoded row of ``x_key`` (for the decoded-budget advice)
    x_row_bytes: int = 0
    #: ``--step-ms``: the simulated step, the strategy timed under it, and the wait per setting
    step_ms: float | None = None
    step_strategy: str | None = None
    step_waits: list[StepWait] = field(default_factory=list)

    @property
    def best(self) -> Result:
        """The fastest contender."""
        return max(self.results, key=lambda r: r.rate)
