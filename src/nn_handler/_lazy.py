"""A package's public names, imported when first asked for (PEP 562).

A spawn or forkserver DataLoader worker imports the package afresh to unpickle its dataset. When
a package's ``__init__`` imported every public name, each worker paid for every dataset class,
sampler and loader (and what they import) to use one of them. With ``exports``, importing the
package imports none of them: ``from nn_handler.dataloaders import H5LazyDataset`` imports
``h5_dataloader`` and what it needs, on that line; ``pkg.name`` and ``pkg.submodule`` work as
before, for every public name and every submodule.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["exports"]


class _Package(types.ModuleType):
    """A package whose public names are imported on first use (``exports``).

    A name may be defined by a submodule of the same name
    (``dataloaders.wait_advice.wait_advice``). Python sets a submodule on its package as it is
    first imported, which here (the package's ``__init__`` imported nothing) would hide the
    name: the package keeps the name instead.
    """

    _same_name: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        submodule = isinstance(value, types.ModuleType) and value.__name__.endswith(f".{name}")
        if submodule and name in self._same_name:
            value = getattr(value, name)
        super().__setattr__(name, value)


def exports(package: str, modules: Mapping[str, Iterable[str]]) -> None:
    """Give ``package`` its public names, each imported with its module on first use.

    Sets the package's ``__getattr__`` (a name's module is imported on first use and the name
    kept on the package; any other name imports the submodule of that name, as when the
    ``__init__`` imported it) and ``__dir__`` (the public names and what the package holds).

    Args:
        package: The package's ``__name__`` (its ``__init__`` is running).
        modules: Module (relative to ``package``, e.g. ``".loader"``) -> the public names it
            defines.
    """
    where = {name: module for module, names in modules.items() for name in names}

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module, package), name)
        elif name.startswith("__"):  # (dunders others probe for: never a submodule)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            value = _submodule(package, name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    module = sys.modules[package]
    module.__class__ = _Package
    same_name = frozenset(n for n, m in where.items() if m == f".{n}")
    vars(module).update(__getattr__=getattr_, __dir__=dir_, _same_name=same_name)


def _submodule(package: str, name: str) -> Any:
    """``package.name`` imported, as when the package's ``__init__`` imported it."""
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.{name}":  # the submodule is there; something it imports is not
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
