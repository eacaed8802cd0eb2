"""Splitting batches into (inputs, targets), moving them to the device, calling the model."""

import re

import pytest
import torch

from nn_handler._training.batches import BatchSplitter, call_model, count_samples, to_device


def test_tuples_dicts_and_batch_fn():
    x, y = torch.zeros(4, 2), torch.arange(4)
    assert BatchSplitter()((x, y)) == (x, y)
    assert BatchSplitter()([x, y]) == (x, y)
    batch = {"img": x, "label": y, "meta": [1, 2]}
    assert BatchSplitter("img", "label")(batch) == (x, y)
    assert BatchSplitter(batch_fn=lambda b: (b["img"], b["img"]))(batch) == (x, x)


@pytest.mark.parametrize(
    ("splitter", "batch", "error", "message"),
    [
        (
            BatchSplitter(),
            {"b": 1, "a": 2},
            ValueError,
            "batches are dicts with keys 'a', 'b'; tell",
        ),
        (
            BatchSplitter("a", "c"),
            {"b": 1, "a": 2},
            KeyError,
            "target_key='c' is not in the batch; its keys are 'a', 'b'",
        ),
        (BatchSplitter(), (1, 2, 3), ValueError, "a batch of 3 items is ambiguous"),
        (BatchSplitter(), torch.zeros(3), ValueError, "a batch of type Tensor has no targets"),
        (
            BatchSplitter(batch_fn=lambda b: b),
            torch.zeros(3),
            TypeError,
            "batch_fn must return (inputs, targets), got Tensor",
        ),
    ],
)
def test_unsplittable_batches_say_what_to_pass(splitter, batch, error, message):
    with pytest.raises(error, match=re.escape(message)):
        splitter(batch)


def test_bad_splitter_arguments():
    with pytest.raises(TypeError, match="target_key must be a string or None, got 1"):
        BatchSplitter("x", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="batch_fn must be callable or None, got 'f'"):
        BatchSplitter(batch_fn="f")  # type: ignore[arg-type]


def test_to_device_walks_nested_containers_and_keeps_the_rest():
    x = torch.ones(2)
    moved = to_device({"a": (x, [x, 3]), "b": "s"}, torch.device("cpu"))
    assert moved == {"a": (x, [x, 3]), "b": "s"}
    assert isinstance(moved["a"], tuple)
    assert isinstance(moved["a"][1], list)


def test_call_model_spreads_tuples_and_dicts():
    def model(*args, **kwargs):
        return args, kwargs

    assert call_model(model, 1) == ((1,), {})
    assert call_model(model, (1, 2)) == ((1, 2), {})
    assert call_model(model, {"a": 1}) == ((), {"a": 1})


def test_count_samples():
    assert count_samples(torch.zeros(5, 2), torch.zeros(5)) == 5
    assert count_samples({"a": [torch.zeros(3, 1)]}, {"t": torch.zeros(7)}) == 7
    assert count_samples(torch.zeros(4), None) == 4
    assert count_samples(torch.zeros(4), torch.tensor(1.0)) == 1
    with pytest.raises(TypeError, match="cannot count the samples of a batch without tensors"):
        count_samples([1, 2], "y")


def test_inputs_for_prediction_need_no_targets():
    x, y = torch.zeros(3, 2), torch.ones(3)
    assert BatchSplitter().inputs((x, y)) is x
    assert BatchSplitter().inputs(x) is x  # a dataset without targets
    assert BatchSplitter(input_key="a").inputs({"a": x}) is x
    assert BatchSplitter(input_key="a", target_key="b").inputs({"a": x, "b": y}) is x
    assert BatchSplitter(batch_fn=lambda b: (b["a"], None)).inputs({"a": x}) is x
    with pytest.raises(KeyError, match="input_key='z' is not in the batch"):
        BatchSplitter(input_key="z").inputs({"a": x})
    with pytest.raises(ValueError, match="a batch of 3 items is ambiguous"):
        BatchSplitter().inputs((x, y, y))
