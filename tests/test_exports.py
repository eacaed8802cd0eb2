"""Every public package re-exports exactly its sorted ``__all__``, and the names resolve."""

import importlib
import inspect

import pytest

PACKAGES = ["nn_handler", "nn_handler.dataloaders", "nn_handler.rewrite"]
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
