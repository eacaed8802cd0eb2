"""Running sums and gradient-accumulation groups."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nn_handler import World
from nn_handler._training.step import Sums, accumulation_groups

CPU = torch.device("cpu")


def test_sums_weight_by_batch_size_and_round_trip():
    sums = Sums(["acc"], CPU)
    sums.add(2, torch.tensor(1.0), {"acc": 0.5})
    sums.add(6, torch.tensor([3.0]), {"acc": torch.tensor(1.0)})
    result = sums.reduced(World())
    assert result == {"samples": 8.0, "loss": pytest.approx(2.5), "acc": pytest.approx(7 / 8)}
    again = Sums(["acc"], CPU, sums.state())
    assert again.reduced(World()) == result
    assert math.isnan(Sums([], CPU).reduced(World())["loss"])
    with pytest.raises(ValueError, match=r"metrics \['acc'\], but the handler has \['f1'\]"):
        Sums(["f1"], CPU, sums.state())


@given(n=st.integers(1, 60), accumulate=st.integers(1, 8), start=st.integers(0, 60))
def test_groups_average_their_batches_and_end_exactly_once(n, accumulate, start):
    start = min(start, n)
    full = list(accumulation_groups(n, accumulate, 0))
    assert len(full) == n
    assert sum(last for _, last in full) == -(-n // accumulate)
    total, groups = 0.0, 0
    for scale, last in full:
        total += scale
        if last:
            assert total == pytest.approx(1.0)
            total, groups = 0.0, groups + 1
    assert list(accumulation_groups(n, accumulate, start)) == full[start:]


def test_groups_of_an_unknown_length_keep_going():
    groups = accumulation_groups(None, 3, 0)
    assert [next(groups) for _ in range(4)] == [
        (1 / 3, False),
        (1 / 3, False),
        (1 / 3, True),
        (1 / 3, False),
    ]
