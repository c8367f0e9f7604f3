"""docs/prompt_weight_bias.py (the bias table of docs/estimators.md) against independent oracles: every one of the
2^N outcome tuples enumerated with the estimators called on explicit groups, and MaxRL's closed form."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import pytest
import torch

from helpers.plan_cases import weighing_settings

from ordergrad_trl.core.estimators import get_estimator, ordergrad
from ordergrad_trl.core.prompt_weights import parse_prompt_weight

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "prompt_weight_bias.py"
_spec = importlib.util.spec_from_file_location("prompt_weight_bias", SCRIPT)
bias = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bias)


def enumerated(estimator, weight: str, n: int, p: float) -> float:
    """The relative bias from all 2^n tuples: each tuple is its own group, p_hat its mean, weighted by p^c (1-p)^(n-c)."""
    spec = parse_prompt_weight(weight)
    reference = torch.arange(1, n, dtype=torch.float64) / n
    tuples = torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=torch.float64)  # (2^n, n)
    c = tuples.sum(-1)
    prob = p**c * (1 - p) ** (n - c)
    score = tuples / p - (1 - tuples) / (1 - p)
    adv = estimator(tuples)  # (2^n, n)
    w = spec.weights(tuples.mean(-1), n + 1, reference)
    got = (prob * (w[:, None] * adv * score).sum(-1)).sum() / n
    plain = (prob * (adv * score).sum(-1)).sum() / n
    w_true = spec.weights(torch.tensor([p], dtype=torch.float64), n + 1, reference).item()
    return (got / (w_true * plain) - 1).item()


@pytest.mark.parametrize("weight", weighing_settings())  # every registered weight
@pytest.mark.parametrize("p", [0.3, 0.5, 0.7])
def test_the_count_formula_equals_the_enumeration_of_every_tuple(weight, p):
    n = 6
    cases = [
        ("rloo", {"estimator": "rloo"}, get_estimator("rloo")),
        ("ReMax@3", {"objective": "ReMax", "k": 3}, lambda r: ordergrad(r, objective="ReMax", k=3)),
        ("TopM:2@4", {"objective": "TopM:2", "k": 4}, lambda r: ordergrad(r, objective="TopM:2", k=4)),
    ]
    for _, settings, fn in cases:
        assert bias.relative_bias(weight, settings, n, p) == pytest.approx(enumerated(fn, weight, n, p), abs=1e-12)


@pytest.mark.parametrize("n", [4, 8, 16])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_inverse_with_the_mean_is_maxrls_truncation(n, p):
    # MaxRL's expected update is sum_{k<n} (1-p)^(k-1) = (1 - (1-p)^(n-1)) / p; rloo's times w(p) = 1/p; the ratio of
    # their scales is n/(n-1) (rloo = n/(n-1) grpo)
    closed = n / (n - 1) * (1 - (1 - p) ** (n - 1)) - 1
    assert bias.relative_bias("inverse", {"estimator": "rloo"}, n, p) == pytest.approx(closed, abs=1e-12)
    assert bias.relative_bias("inverse", {"estimator": "grpo"}, n, p) == pytest.approx(closed, abs=1e-12)


def test_a_weight_of_one_has_no_bias():
    assert bias.relative_bias("gaussian:0.5,1e9", {"objective": "ReMax", "k": 4}, 8, 0.3) == pytest.approx(0, abs=1e-9)


def test_docs_hold_the_table():
    assert bias.main(["--check"]) == 0, "docs/estimators.md's bias table is stale: run python docs/prompt_weight_bias.py"
    assert not math.isnan(bias.relative_bias("curverl", {"estimator": "rloo"}, 8, 0.5))
