"""A reduced run of studies/bandit_diagnostic.py: each objective must win on its own metric, and the exact metrics
it reports must match brute-force enumeration."""

import itertools
import math
import sys
from pathlib import Path

import pytest
import torch

from helpers.oracle import lstat
from ordergrad_trl import rank_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "studies"))  # the drivers are scripts, not a package


@pytest.fixture(scope="module")
def bandit():
    import bandit_diagnostic  # studies/, on sys.path above

    return bandit_diagnostic


@pytest.mark.parametrize("objective,k", [("Mean", 1), ("ReMax", 4), ("LowerTailMean:0.25", 4), ("GMD", 3)])
def test_exact_metric_matches_enumeration(bandit, objective, k):
    support, arm_probs = bandit.arm_tables()
    policy = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    pmf = policy @ arm_probs
    w = rank_weights(objective, k)
    brute = sum(
        math.prod(pmf[i].item() for i in draw) * lstat([support[i].item() for i in draw], w.tolist())
        for draw in itertools.product(range(len(support)), repeat=k)
    )
    assert bandit.exact_lstat(pmf, support, w).item() == pytest.approx(brute, abs=1e-12)


def test_each_objective_raises_its_own_metric_most(bandit, tmp_path):
    result = bandit.main(
        ["--runs", "mean,max,lowertail", "--seeds", "2", "--steps", "80", "--no_plot", "--output_dir", str(tmp_path)]
    )
    final, start = result["final"], result["start"]
    for run, metric in [("mean", "mean"), ("max", "best_of_k"), ("lowertail", "worst_of_k")]:
        others = [final[r][metric] for r in final if r != run]
        assert final[run][metric] > max(others) + 0.02, (run, metric, final)
        assert final[run][metric] > start[metric] + 0.05
        assert final[run][metric] > result["optimum"][metric]["value"] - 0.05  # close to the best policy
    assert (tmp_path / "bandit_diagnostic.json").exists()
