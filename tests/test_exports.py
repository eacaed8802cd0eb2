"""Every public package re-exports exactly its sorted ``__all__``, and the names resolve."""

import importlib
import inspect
import os
import sys
from pathlib import Path

import pytest

from helpers.damage import run_python

PACKAGES = ["nn_handler", "nn_handler.dataloaders", "nn_handler.outputs", "nn_handler.rewrite"]
MODULES = [
    "nn_handler.dataloaders.chunk_sampler",
    "nn_handler.dataloaders.combined_h5_dataset",
    "nn_handler.dataloaders.h5_dataloader",
    "nn_handler.dataloaders.h5_sample_dataset",
    "nn_handler.dataloaders.h5_sparse_dataset",
    "nn_handler.dataloaders.loader",
    "nn_handler.dataloaders.prefetch",
    "nn_handler.dataloaders.rank_cached_h5_dataloader",
    "nn_handler.dataloaders.samplers",
    "nn_handler.dataloaders.transforms",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_matches_public_names(name):
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__)
    public = {
        n
        for n, obj in vars(module).items()
        if not n.startswith("_") and not inspect.ismodule(obj) and n != "annotations"
    }
    assert public <= set(module.__all__)
    for n in module.__all__:
        assert hasattr(module, n), n


@pytest.mark.parametrize("name", MODULES)
def test_module_names_are_reexported(name):
    module = importlib.import_module(name)
    package = importlib.import_module("nn_handler.dataloaders")
    for n in module.__all__:
        assert getattr(package, n) is getattr(module, n)


def test_seed_signature_of_h5_lazy_dataset():
    from nn_handler.dataloaders.h5_dataloader import H5LazyDataset, h5_worker_init_fn

    params = inspect.signature(H5LazyDataset).parameters
    expected = {
        "x_key": inspect.Parameter.empty,
        "y_key": None,
        "x_dtype": None,
        "y_dtype": None,
        "transform": None,
        "target_transform": None,
        "rdcc_nbytes": 256 * 1024**2,
        "rdcc_nslots": 1_000_003,
        "rdcc_w0": 0.75,
        "swmr": True,
    }
    names = list(params)
    assert names[: len(expected) + 1] == ["path", *expected]
    for key, default in expected.items():
        assert params[key].default == default
    assert list(inspect.signature(h5_worker_init_fn).parameters) == ["_worker_id"]


def test_handler_is_reexported_from_the_package():
    import nn_handler
    from nn_handler import handler

    for n in handler.__all__:
        assert getattr(nn_handler, n) is getattr(handler, n)


@pytest.mark.parametrize("package", ["nn_handler.dataloaders", "nn_handler._io"])
def test_lazy_names_are_the_ones_type_checkers_see(package: str):
    """A package that imports its names on first use reads them from its ``TYPE_CHECKING``
    block (``_lazy.declared``): that block, ``__all__`` and what the names resolve to agree."""
    from nn_handler import _lazy

    module = importlib.import_module(package)
    table = _lazy.declared(module.__file__)
    lazy = [name for names in table.values() for name in names]
    assert sorted(lazy) == sorted(set(lazy)) == sorted(module.__all__)
    assert set(module.__all__) <= set(dir(module))
    for where, names in table.items():
        defined = importlib.import_module(where, package)
        assert all(getattr(module, n) is getattr(defined, n) for n in names), where


def test_the_lazy_table_takes_only_relative_imports(tmp_path: Path):
    from nn_handler import _lazy

    init = tmp_path / "__init__.py"
    block = "    from .a import X, Y\n    from .b import Z\n"
    init.write_text("import typing\nif typing.TYPE_CHECKING:\n" + block)
    assert _lazy.declared(str(init)) == {".a": ("X", "Y"), ".b": ("Z",)}
    init.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import os\n")
    with pytest.raises(TypeError, match="line 3"):
        _lazy.declared(str(init))
    assert _lazy.declared(sys.modules["nn_handler"].__file__) == {".handler": ("NNHandler",)}


def test_a_name_its_own_submodule_defines_is_not_hidden_by_importing_the_submodule():
    done = run_python(
        """
        import nn_handler.dataloaders.wait_advice  # the submodule first, then the name
        import nn_handler.dataloaders as d
        from nn_handler.dataloaders import wait_advice
        assert callable(d.wait_advice) and wait_advice is d.wait_advice, d.wait_advice
        assert d.samplers.EpochShuffleSampler is d.EpochShuffleSampler  # submodules resolve
        try:
            d.no_such_name
        except AttributeError:
            pass
        else:
            raise AssertionError("no AttributeError")
        """,
        PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]
        ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
