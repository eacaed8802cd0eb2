"""A package's public names, imported when first asked for (PEP 562).

A spawn or forkserver DataLoader worker imports the package afresh to unpickle its dataset. When
a package's ``__init__`` imported every public name, each worker paid for every dataset class,
sampler and loader (and what they import) to use one of them. With ``exports``, importing the
package imports none of them: ``from nn_handler.dataloaders import H5LazyDataset`` imports
``h5_dataloader`` and what it needs, on that line; ``pkg.name`` and ``pkg.submodule`` work as
before, for every public name and every submodule.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["declared", "exports", "exports_declared"]


class _Package(types.ModuleType):
    """A package whose public names are imported on first use (``exports``).

    A public name may also be a submodule's name (``wait_advice``: the function, and the module
    of the old import path). Python sets a submodule on its package as it is first imported,
    which here (the package's ``__init__`` imported nothing) would hide the name: the package
    keeps the name instead.
    """

    _where: Mapping[str, str] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        submodule = isinstance(value, types.ModuleType) and value.__name__.endswith(f".{name}")
        if submodule and name in self._where:
            value = getattr(importlib.import_module(self._where[name], self.__name__), name)
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
    vars(module).update(__getattr__=getattr_, __dir__=dir_, _where=where)


def _submodule(package: str, name: str) -> Any:
    """``package.name`` imported, as when the package's ``__init__`` imported it."""
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.{name}":  # the submodule is there; something it imports is not
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None


def declared(init_file: str) -> dict[str, tuple[str, ...]]:
    """Module -> names, read from the ``if TYPE_CHECKING:`` block of a package's ``__init__``.

    The block is where type checkers see the package's names; reading the lazy table from it
    keeps one list of them (beside ``__all__``) instead of two that can drift apart.

    Args:
        init_file: The package's ``__init__.py`` (its ``__file__``).

    Returns:
        Each ``from MODULE import A, B`` of the block as ``{".MODULE": ("A", "B")}``
        (relative, as ``exports`` takes it).
    """
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for item in node.body:
                if not isinstance(item, ast.ImportFrom) or not item.level:
                    raise TypeError(
                        f"{init_file}: the TYPE_CHECKING block holds only relative "
                        f"'from .module import name' lines (line {item.lineno})"
                    )
                module = "." * item.level + (item.module or "")
                found[module] = found.get(module, ()) + tuple(a.name for a in item.names)
    return found


def exports_declared(package: str) -> None:
    """``exports`` with the table ``declared`` reads from ``package``'s ``__init__``."""
    init_file = sys.modules[package].__file__
    if init_file is None:  # (a namespace package has no __init__ to read)
        raise TypeError(f"package {package!r} has no __init__.py to read its names from")
    exports(package, declared(init_file))


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
