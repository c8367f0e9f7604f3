"""Cost of `ordergrad-eval plan`'s computation: the six default candidates over 1,000 problems, at N = 16 and 64.

    OMP_NUM_THREADS=1 python benchmarks/signal_plan.py            # the docs/benchmarks.md table
    python benchmarks/signal_plan.py --repeats 2 --quick           # a smoke run (tests/test_signal.py)

`plan_signal` (every candidate's exact share and snr, the RLOO reference, the crossover p of each larger K) on 1,000
success rates, beside a baseline in the same run: one call of the trainer's advantage pipeline
(`plan.scaled_advantages`, Max@8) on a batch of 1,000 groups of N 0/1 rewards. Calls alternate within each repeat,
so load from other processes hits both alike; the plan's time is reported as its minimum in seconds (the issue's
bound: under 2 s) and as the median per-repeat ratio to the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ordergrad_trl.core.plan import build_plan  # noqa: E402
from ordergrad_trl.evaluation.signal_plan import PlanArgs, plan_signal  # noqa: E402


def measure(n: int, problems: int, repeats: int, rates_file: str) -> tuple[float, float, float]:
    """(plan min s, baseline min s, median ratio)."""
    gen = torch.Generator().manual_seed(0)
    rewards = (torch.rand(problems, n, generator=gen, dtype=torch.float64) < 0.3).to(torch.float64)
    baseline_plan = build_plan(num_generations=n, objective="ReMax", k=8)
    args = PlanArgs(success_rates=rates_file, num_generations=n, prompts_per_step=32)
    plans, bases, ratios = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        plan_signal(args)
        plans.append(time.perf_counter() - start)
        start = time.perf_counter()
        baseline_plan.scaled_advantages(rewards)
        bases.append(time.perf_counter() - start)
        ratios.append(plans[-1] / bases[-1])
    return min(plans), min(bases), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="N = 16 only")
    args = parser.parse_args()
    rates = torch.rand(args.problems, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(map(str, rates.tolist())))
    print("| N | problems | plan (min s) | baseline: one advantage batch (min ms) | plan / baseline (median) |")
    print("|---|---|---|---|---|")
    for n in (16,) if args.quick else (16, 64):
        plan_s, base_s, ratio = measure(n, args.problems, args.repeats, f.name)
        print(f"| {n} | {args.problems} | {plan_s:.3f} | {base_s * 1e3:.2f} | {ratio:.0f} |")
    Path(f.name).unlink()


if __name__ == "__main__":
    main()
