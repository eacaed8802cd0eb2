"""nn_handler: fast, correct HDF5 data for PyTorch training, on one process or many.

``NNHandler`` (and the training loop under it) is imported when first asked for
(``nn_handler/_lazy.py``): a DataLoader worker that imports the package to unpickle its dataset
never needs it.
"""

import typing
from importlib import metadata as _metadata

from . import _lazy, dataloaders, errors
from ._training.checkpoint import CheckpointError
from .distributed import World

if typing.TYPE_CHECKING:  # (read by _lazy.exports_declared: the table of names to modules)
    from .handler import NNHandler

_lazy.exports_declared(__name__)

try:
    __version__ = _metadata.version("nn-handler")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["CheckpointError", "NNHandler", "World", "__version__", "dataloaders", "errors"]
