"""Every row of `PROMPT_WEIGHTS` against the properties a weight must have, so a new weight is tested by being
registered: finite, non-negative float64 weights, one per group, 0 for a group without a scorable reward, for every
rate a group of 1..16 rollouts can have, against its own batch, an empty and a full reference; a weight without a
window ignores the reference; through the plan, finite advantages. A row that breaks one fails (shown below)."""

from __future__ import annotations

import math

import pytest
import torch

from ordergrad_trl.core import prompt_weights
from ordergrad_trl.core.plan import build_plan
from ordergrad_trl.core.prompt_weights import PROMPT_WEIGHTS, PromptWeightSpec, inner


def rates() -> torch.Tensor:
    """`(G,)` every success rate c/n of a group of n = 1..16 scorable rollouts, and NaN (no scorable reward)."""
    grid = sorted({c / n for n in range(1, 17) for c in range(n + 1)})
    return torch.tensor(grid + [math.nan], dtype=torch.float64)


REFERENCES = {  # what a stateful weight measures against: none held yet (the batch's own rates), empty, a full window
    "own": None,
    "empty": torch.empty(0, dtype=torch.float64),
    "window": torch.rand(200, generator=torch.Generator().manual_seed(0), dtype=torch.float64).clamp(0.01, 0.99),
}


def check_weight_row(name: str) -> None:
    """The properties every prompt weight has (the statement of this module), asserted for the row `name`."""
    row = PROMPT_WEIGHTS[name]
    spec = PromptWeightSpec(name, row.example)
    p_hat = rates()
    for bins in (2, 5, 17):
        for where, reference in REFERENCES.items():
            w = spec.weights(p_hat, bins, reference)
            assert w.dtype == torch.float64 and w.shape == p_hat.shape, f"{name}: one float64 weight per group"
            assert bool(torch.isfinite(w).all()), f"{name}: non-finite weights {w[~torch.isfinite(w)]} ({where})"
            assert bool((w >= 0).all()), f"{name}: negative weights {w[w < 0]} ({where}): it would reverse a gradient"
            assert w[-1].item() == 0.0, f"{name}: a group without a scorable reward must weigh 0"
            if not row.stateful:  # only a weight with a window reads the reference
                assert torch.equal(w, spec.weights(p_hat, bins, inner(p_hat))), f"{name} reads the reference"
    rewards = (torch.arange(9)[None, :] < torch.arange(9)[:, None]).to(torch.float64)  # (9, 8) c ones: every count
    plan = build_plan(num_generations=8, estimator="rloo", prompt_weight=row.setting)
    assert bool(torch.isfinite(plan.scaled_advantages(rewards)).all()), f"{name}: non-finite advantages"


@pytest.mark.parametrize("name", list(PROMPT_WEIGHTS))
def test_every_registered_weight_is_finite_non_negative_and_zero_without_a_rate(name):
    check_weight_row(name)


def test_none_is_one_everywhere():
    assert torch.equal(PromptWeightSpec("none").weights(rates()[:-1], 9), torch.ones(len(rates()) - 1,
                                                                                       dtype=torch.float64))


@pytest.mark.parametrize("bad, returns", [
    (lambda p_hat, *, bins, reference: p_hat - 0.5, "negative"),
    (lambda p_hat, *, bins, reference: 1.0 / p_hat, "non-finite"),
    (lambda p_hat, *, bins, reference: torch.full_like(p_hat, math.nan), "non-finite"),
    (lambda p_hat, *, bins, reference: torch.ones(3, dtype=torch.float64), "one float64 weight per group"),
])  # fmt: skip
def test_a_row_that_breaks_a_property_fails_the_shared_check(bad, returns):
    """A weight registered with such a function fails the parametrized test above without an edit to it: the check
    is the same function, run here on a row put in the registry for this test only."""
    row = prompt_weights.PromptWeight("bad", bad, (), "", False, "[0, 1]", "", "", "")
    with prompt_weights._ROWS.registered("bad", row), pytest.raises(
            (AssertionError, RuntimeError), match=returns if returns != "one float64 weight per group" else None):
        check_weight_row("bad")
    assert "bad" not in PROMPT_WEIGHTS


def test_a_weight_with_parameters_needs_an_example():
    with pytest.raises(ValueError, match=r"example must give one value per parameter \('mu',\)"):
        prompt_weights.register_prompt_weight("centred", params=("mu",), formula="", objective="", source="",
                                              summary="")(lambda p_hat, *, bins, reference, mu: p_hat)
    assert "centred" not in PROMPT_WEIGHTS
