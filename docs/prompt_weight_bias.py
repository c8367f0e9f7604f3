"""The measured bias of each prompt weight composed with an estimator: docs/estimators.md's bias table.

    python docs/prompt_weight_bias.py           # print the table
    python docs/prompt_weight_bias.py --check   # exit 1 if docs/estimators.md does not hold it (run by the tests)

One prompt whose rollouts succeed with probability p (0/1 rewards), N of them per group. A prompt weight aims to
multiply the estimator's expected update by w(p), so that the trained objective G has dG/dp = w(p) J'(p); it can only
use the group's p_hat. The table gives, by exact enumeration over the N+1 success counts (each weighted by its
binomial probability; the advantages of a group depend only on its count, rollouts being exchangeable),

    relative bias(p) = E[(1/N) sum_i w(p_hat) A_i s_i] / (w(p) E[(1/N) sum_i A_i s_i]) - 1,

with s_i = d log pi(r_i)/dp = r_i/p - (1 - r_i)/(1 - p). 0 means the weight reaches its intended objective exactly;
the ratio does not depend on the estimator's own scale (grpo unscaled and rloo give the same row). `curverl` is
measured against a fixed reference whose rates fill bins 1..N-1 evenly (its continuous form is w = 1/p, like
`inverse`), and compared with its own weight at p's bin, floor(p (N+1)); its window and binning are not measured.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's package, from any directory
from ordergrad_trl.core.plan import build_plan  # noqa: E402

DOCS = REPO / "docs" / "estimators.md"
BEGIN, END = "<!-- prompt-weight bias: begin -->", "<!-- prompt-weight bias: end -->"
PS = (0.1, 0.3, 0.5, 0.7, 0.9)
ESTIMATORS = (("rloo", {"estimator": "rloo"}), ("ReMax@4", {"objective": "ReMax", "k": 4}),
              ("TopM:2@4", {"objective": "TopM:2", "k": 4}))  # fmt: skip
WEIGHTS = ("inverse", "curverl", "gaussian:0.5,0.2")


def _plan(n: int, weight: str | None, settings: dict):
    return build_plan(**settings, num_generations=n, prompt_weight=weight)


def uniform_reference(n: int) -> torch.Tensor:
    """Rates c/N for c = 1..N-1: with N+1 bins, one in each of bins 1..N-1."""
    return torch.arange(1, n, dtype=torch.float64) / n


def expected_update(advantages, n: int, p: float) -> float:
    """E[(1/N) sum_i A_i s_i] for `advantages((N+1, N) groups) -> (N+1, N)`, group c holding c successes."""
    groups = (torch.arange(n)[None, :] < torch.arange(n + 1)[:, None]).to(torch.float64)  # (N+1, N)
    adv = advantages(groups)
    score = groups / p - (1 - groups) / (1 - p)  # (N+1, N)
    c = torch.arange(n + 1, dtype=torch.float64)
    prob = torch.tensor([math.comb(n, int(k)) for k in c], dtype=torch.float64) * p**c * (1 - p) ** (n - c)
    return float((prob * (adv * score).sum(-1)).sum() / n)


def weight_at(plan, n: int, p: float) -> float:
    """w(p): the weight at the true success rate (curverl: its bin's, against `uniform_reference`)."""
    return plan.prompt_weight.weights(torch.tensor([p], dtype=torch.float64), n + 1, uniform_reference(n)).item()


def relative_bias(weight: str, settings: dict, n: int, p: float) -> float:
    """The relative bias of `weight` on the estimator of `settings` at N = n, success probability p (NaN where the
    intended update is 0)."""
    plain, weighted = _plan(n, None, settings), _plan(n, weight, settings)
    stage = plain.stages[0]

    def with_weight(groups):
        w = weighted.prompt_weight.weights(groups.mean(-1), n + 1, uniform_reference(n))  # (N+1,)
        return plain.advantages(groups, stage) * w[:, None]

    intended = weight_at(weighted, n, p) * expected_update(lambda g: plain.advantages(g, stage), n, p)
    got = expected_update(with_weight, n, p)
    return got / intended - 1 if intended != 0 else math.nan


def table() -> str:
    head = "| prompt weight | estimator | N | " + " | ".join(f"p = {p}" for p in PS) + " |"
    rows = [head, "|---|---|---|" + "---|" * len(PS)]
    for weight in WEIGHTS:
        for name, settings in ESTIMATORS:
            for n in (8, 16):
                cells = [relative_bias(weight, settings, n, p) for p in PS]
                shown = ["n/a" if math.isnan(c) else f"{c:+.3f}" for c in cells]  # n/a: w(p) = 0, nothing intended
                rows.append(f"| `{weight}` | {name} | {n} | " + " | ".join(shown) + " |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/estimators.md's table is stale")
    args = parser.parse_args(argv)
    text = table()
    if not args.check:
        print(text)
        return 0
    docs = DOCS.read_text()
    if f"{BEGIN}\n{text}\n{END}" not in docs:
        print(f"{DOCS} is stale: paste the output of `python docs/prompt_weight_bias.py` between {BEGIN} and {END}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
