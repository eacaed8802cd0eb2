"""Every dataset class of the package, for tests that must cover each one.

A test that builds "every dataset" keeps its factories in a dict keyed by class and checks it
against ``dataset_classes()``: a new class without a factory then fails that test instead of
being skipped by it.
"""

from __future__ import annotations

import inspect

from torch.utils.data import Dataset

from nn_handler import dataloaders
from nn_handler.dataloaders._core import FileDataset

__all__ = ["dataset_classes"]


def dataset_classes() -> set[type]:
    """The concrete classes of the dataset core and every public dataset that opens files."""
    public = _public_datasets()  # (first: it imports every public module, and so each class)
    return _concrete_below(FileDataset) | public


def _concrete_below(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("nn_handler.") and not inspect.isabstract(sub):
            found.add(sub)
        found |= _concrete_below(sub)
    return found


def _public_datasets() -> set[type]:
    found = set()
    for name in dataloaders.__all__:
        obj = getattr(dataloaders, name)
        dataset = isinstance(obj, type) and issubclass(obj, Dataset)
        if dataset and "file_options" in inspect.signature(obj).parameters:
            found.add(obj)
    return found
