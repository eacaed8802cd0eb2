"""What ``WaitMeter`` costs a loop: microseconds per batch, against the same loop without it.

Both loops iterate the same prebuilt batches (a tuple of two tensors, as ``batched_loader``
yields), so the difference is the meter alone: its clock reads, the sample count and the
generator between the loop and the batches. Rounds alternate (bare, metered); medians.
Target: under 2 microseconds a batch.

Run: ``python benchmarks/bench_wait.py [--batches 200000] [--rounds 5]`` or
``python benchmarks/run.py --wait [the same options]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from nn_handler.dataloaders import WaitMeter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package

from benchmarks.harness import alternating, median

TARGET_US = 2.0


def _loop(batches: Any) -> float:
    began = time.perf_counter()
    for _batch in batches:
        pass
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    batches = [(torch.zeros(256, 4), torch.zeros(256))] * args.batches
    bare, metered = [], []
    loops = {"bare": (bare, lambda: batches), "metered": (metered, lambda: WaitMeter(batches))}
    for _, order in alternating(list(loops), args.rounds):
        for name in order:
            times, make = loops[name]
            times.append(_loop(make()))
    per_batch = [(m - b) / args.batches * 1e6 for b, m in zip(bare, metered, strict=True)]
    cost = median(per_batch)
    print(f"\n## WaitMeter's cost ({args.rounds} rounds, {args.batches:,} batches, medians)\n")
    print("| loop | µs per batch |")
    print("|---|---:|")
    print(f"| bare | {median(bare) / args.batches * 1e6:.3f} |")
    print(f"| through WaitMeter | {median(metered) / args.batches * 1e6:.3f} |")
    rounds = ", ".join(f"{c:.2f}" for c in per_batch)
    verdict = "met" if cost < TARGET_US else "MISSED"
    print(f"\n- the meter's cost: {cost:.2f} µs a batch (target < {TARGET_US:g}: {verdict}; "
          f"rounds: {rounds})")  # fmt: skip
    return 0 if cost < TARGET_US else 1


if __name__ == "__main__":
    raise SystemExit(main())
