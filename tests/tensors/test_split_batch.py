"""The one way between a stacked batch and its samples (``_tensors.split``)."""

import pytest
import torch

from nn_handler.dataloaders._tensors.split import collect, restack, split_batch, split_samples


def test_split_batch_keeps_each_kind_and_nests():
    x = torch.arange(6).reshape(3, 2)
    y = torch.tensor([7, 8, 9])
    samples = split_batch({"x": x, "s": ["a", "b", "c"], "pair": (y, ["p", "q", "r"])})
    assert len(samples) == 3
    first = samples[0]
    assert torch.equal(first["x"], x[0]) and first["x"].data_ptr() == x.data_ptr()  # a view
    assert first["s"] == "a" and isinstance(first["s"], str)
    assert first["pair"][0].shape == () and first["pair"][0].item() == 7  # a 0-d tensor
    assert first["pair"][1] == "p"
    assert split_batch(torch.empty(0, 4)) == [] and split_batch(([], [])) == []


def test_split_batch_refuses_parts_of_different_lengths():
    with pytest.raises(ValueError, match="zip"):
        split_batch((torch.zeros(2), ["a"]))


def test_split_samples_applies_transforms_per_sample():
    x, y = torch.arange(4).reshape(2, 2), torch.tensor([5, 6])
    assert [s.tolist() for s in split_samples(x, None, lambda t: t * 10)] == [[0, 10], [20, 30]]
    pairs = split_samples(x, y, None, lambda t: t + 1)
    assert [(a.tolist(), b.item()) for a, b in pairs] == [([0, 1], 6), ([2, 3], 7)]


def test_collect_and_restack_stack_only_what_agrees():
    assert torch.equal(collect([torch.ones(2), torch.zeros(2)]), torch.tensor([[1.0, 1], [0, 0]]))
    mixed = collect([torch.ones(2), torch.ones(3)])
    assert isinstance(mixed, list) and len(mixed) == 2
    assert collect(["a", "b"]) == ["a", "b"] and collect([]) == []
    assert restack(lambda t: t.sum(), torch.ones(3, 2)).tolist() == [2.0, 2.0, 2.0]
    assert restack(str, torch.tensor([1, 2])) == ["tensor(1)", "tensor(2)"]
