"""The exceptions to catch: data that cannot be read correctly, checkpoints that cannot be loaded.

Every data error is an ``OSError`` (``DataFileError`` and its kinds), names the file (and the
dataset, where there is one) and says what would be valid; the same classes are exported by
``nn_handler.dataloaders``. Tracebacks and ``repr`` show them under this module's name, wherever
in the package they are raised, and they pickle by it (a DataLoader worker's error is raised
again in the main process as the same class).

| class | raised when |
|---|---|
| ``DataFileError`` | any of the below (``path``: the file) |
| ``CorruptFileError`` | the file is truncated, damaged, or contradicts its own bytes |
| ``FileChangedError`` | the file or object changed after the dataset was built |
| ``MissingFilterError`` | a dataset needs an HDF5 filter (plugin) that is not installed |
| ``ExternalDataError`` | a dataset's data lies in a file outside the data file's folder |
| ``RemoteReadError`` | an object store kept failing within the retry bound |
| ``RemoteAccessError`` | an object store refused the credentials (or found none) |
| ``CheckpointError`` | ``NNHandler.load`` was given a file that is not a valid checkpoint |
"""

from __future__ import annotations

from ._io import (
    CorruptFileError,
    DataFileError,
    ExternalDataError,
    FileChangedError,
    MissingFilterError,
    RemoteAccessError,
    RemoteReadError,
)
from ._training.checkpoint import CheckpointError

__all__ = [
    "CheckpointError",
    "CorruptFileError",
    "DataFileError",
    "ExternalDataError",
    "FileChangedError",
    "MissingFilterError",
    "RemoteAccessError",
    "RemoteReadError",
]
