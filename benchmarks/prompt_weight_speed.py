"""Cost of the prompt-weight stage: the plan's trained advantages with each weight vs without, on the same (G, N) rewards.

    OMP_NUM_THREADS=1 python benchmarks/prompt_weight_speed.py      # the docs/benchmarks.md table
    python benchmarks/prompt_weight_speed.py --repeats 3 --quick     # a smoke run (the docs test)

What the trainer runs once per generation batch, on the gathered batch: `plan.scaled_advantages` (the estimator,
then the prompt weight, then `scale_rewards`) with `TopM:2` at K=4 on 0/1 rewards, `curverl` against a full window
of 10 earlier batches of the same size. Calls alternate within each repeat (none, inverse, curverl), so load from
other processes hits all alike; each weight's ratio to `none` is taken per repeat and its median reported, beside
the min time of each in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ordergrad_trl.core.plan import build_plan  # noqa: E402
from ordergrad_trl.core.prompt_weights import PromptWindow  # noqa: E402

WEIGHTS = ("none", "inverse", "curverl")


def plans(n: int) -> dict:
    return {w: build_plan(objective="TopM:2", k=4, num_generations=n, prompt_weight=w) for w in WEIGHTS}


def measure(g: int, n: int, repeats: int) -> dict[str, tuple[float, float]]:
    """weight -> (min seconds, median ratio to `none`)."""
    gen = torch.Generator().manual_seed(0)
    rewards = (torch.rand(g, n, generator=gen) < torch.rand(g, 1, generator=gen)).float()  # (G, N) 0/1
    window = PromptWindow(10)
    for _ in range(10):  # a full window: 10 earlier batches' rates
        window.push(torch.rand(g, generator=gen, dtype=torch.float64))
    by_weight = plans(n)
    times = {w: [] for w in WEIGHTS}
    for _ in range(repeats + 1):  # the first round warms caches up and is dropped
        for w in WEIGHTS:
            start = time.perf_counter()
            by_weight[w].scaled_advantages(rewards, window=window if w == "curverl" else None)
            times[w].append(time.perf_counter() - start)
    times = {w: t[1:] for w, t in times.items()}
    return {w: (min(t), statistics.median(a / b for a, b in zip(t, times["none"]))) for w, t in times.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="one small size only")
    args = parser.parse_args(argv)
    sizes = [(64, 8)] if args.quick else [(64, 8), (256, 16), (1024, 16)]
    print("| G | N | none (us) | inverse (us) | curverl (us) | inverse / none | curverl / none |")
    print("|---|---|---|---|---|---|---|")
    for g, n in sizes:
        got = measure(g, n, args.repeats)
        us = " | ".join(f"{got[w][0] * 1e6:.0f}" for w in WEIGHTS)
        print(f"| {g} | {n} | {us} | {got['inverse'][1]:.2f}x | {got['curverl'][1]:.2f}x |")


if __name__ == "__main__":
    main()
