"""nn_handler: fast, correct HDF5 data for PyTorch training, on one process or many."""

from importlib import metadata as _metadata

from . import (
    _job_store,  # noqa: F401  (registers the job's store with the I/O layer)
    dataloaders,
    errors,
)
from ._training.checkpoint import CheckpointError
from .distributed import World
from .handler import NNHandler

try:
    __version__ = _metadata.version("nn-handler")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["CheckpointError", "NNHandler", "World", "__version__", "dataloaders", "errors"]
