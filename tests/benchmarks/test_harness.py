"""``benchmarks.harness``: alternating rounds, medians, targets."""

import math

from benchmarks.harness import (
    Check,
    Rates,
    alternating,
    best_of,
    format_targets,
    median,
    ratios,
    round_order,
)


def test_round_order_reverses_odd_rounds():
    assert round_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert round_order(["a", "b", "c"], 1) == ["c", "b", "a"]
    assert round_order(["a", "b", "c"], 2) == ["a", "b", "c"]


def test_rounds_alternate_forward_and_backward():
    rounds = list(alternating(["a", "b", "c"], 3))
    assert rounds == [(0, ["a", "b", "c"]), (1, ["c", "b", "a"]), (2, ["a", "b", "c"])]
    assert list(alternating(["a"], 0)) == []


def test_ratios_within_rounds_and_medians_of_what_was_measured():
    assert ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    assert math.isnan(ratios([1.0], [0.0])[0])
    assert median([3.0, float("nan"), 1.0, 2.0]) == 2.0
    assert math.isnan(median([])) and math.isnan(median([float("nan")]))
    r = Rates("x", [5.0, 1.0])
    assert r.rate == 3.0 and math.isnan(Rates("y").rate)


def test_best_of_keeps_the_fastest_round_in_call_order():
    calls = iter([1, 4, 2, 3])  # a's rounds: 1 then 2 samples; b's: 4 then 3
    results = best_of([("a", lambda: next(calls)), ("b", lambda: next(calls))], 8, rounds=2)
    assert [r.name for r in results] == ["a", "b"]
    assert next(calls, None) is None  # every call ran once per round
    assert results[0].samples in (1, 2) and results[1].samples in (3, 4)


def test_targets_say_met_not_met_or_not_measured():
    lines = format_targets(
        [Check("up", 2.0, 1.5), Check("down", 1.0, 1.5), Check("nan", math.nan, 1.0)]
    )
    assert lines == ["- up: 2.00 (met)", "- down: 1.00 (NOT met)", "- nan: nan (not measured)"]
    assert Check("gone", None, 1.0).line() == "- gone: not measured"
