"""Model outputs into HDF5: one file, complete or absent, the same bytes from any number of writers.

``H5OutputWriter`` takes rows keyed by sample index from any loop, ranks and DataLoader workers
included; ``NNHandler.predict`` and Lightning's ``H5PredictionWriter``
(``nn_handler.integrations.lightning``) are built on it. How it works: each writer process
appends checksummed records to a part of its own (whole chunks encoded where they were made,
other rows raw) in ``PATH + ".parts"``; one assembly makes the file from them in chunk order and
moves it onto ``PATH``. See docs/training.md, "Predictions into a file".
"""

from .layout import CHUNK_BYTES, OutputLayout, OutputSpec
from .plan import block_rows, rank_batches, rank_span
from .writer import H5OutputWriter

__all__ = [
    "CHUNK_BYTES",
    "H5OutputWriter",
    "OutputLayout",
    "OutputSpec",
    "block_rows",
    "rank_batches",
    "rank_span",
]
