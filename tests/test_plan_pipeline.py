"""`ObjectivePlan.grouped_advantages`, the one composition of what trains: its record holds what the callers log and
select on (p_hat computed once per batch, the weights, the empty groups), its hooks are checked by name, and which
group sizes the estimator is defined on comes from the registry's `min_group`."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ordergrad_trl.core import plan as plan_module
from ordergrad_trl.core.estimators import ESTIMATORS
from ordergrad_trl.core.estimators import registry
from ordergrad_trl.core.plan import build_plan
from ordergrad_trl.core.prompt_weights import PROMPT_WEIGHTS, PromptWindow, success_rates


def ragged(seed: int = 0):
    """Shuffled rows of groups of sizes 8, 5, 8, 3, 8 with 0/1 rewards and a few NaN: `(scores, group)`."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [8, 5, 8, 3, 8]
    group = torch.cat([torch.full((n,), g) for g, n in enumerate(sizes)])
    group = group[torch.randperm(len(group), generator=gen)]
    scores = torch.randint(0, 2, (len(group),), generator=gen).double()
    scores[torch.rand(len(group), generator=gen) < 0.1] = torch.nan
    return scores, group


@pytest.mark.parametrize("weight", [None, *(row.setting for row in PROMPT_WEIGHTS.values())])  # every weight
def test_the_record_holds_what_the_callers_read(weight):
    p = build_plan(num_generations=8, estimator="rloo", prompt_weight=weight, scale="group")
    scores, group = ragged()
    window = PromptWindow(3) if p.prompt_weight is not None and p.prompt_weight.stateful else None
    batch = p.grouped_advantages(scores, group, window=window)
    adv, undefined = batch  # the pair the method returned before the record
    assert adv is batch.advantages and undefined == batch.undefined_sizes == ()
    assert batch.rewards is scores and batch.group is group
    for g in range(5):
        rows = group == g
        assert batch.empty[g].item() == bool((batch.advantages[rows] == 0).all())
        if p.prompt_weight is not None:
            want = success_rates(scores[rows][None], p.prompt_weight)[0]
            assert batch.p_hat[g].item() == pytest.approx(want.item(), nan_ok=True)
    if p.prompt_weight is None:  # no weight, or `none`
        assert batch.p_hat is None and batch.prompt_weights is None
    else:
        want = p.prompt_weight.weights(batch.p_hat, 9, None)  # an empty window: the batch is its own reference
        assert torch.equal(batch.prompt_weights, want)
    if window is not None:  # the engines' call: the batch joins the window once
        assert window.pushed == 1


def test_p_hat_is_computed_once_per_batch(monkeypatch):
    """One `success_rates` call per group size: the weights, the window and the record share it."""
    calls = []
    monkeypatch.setattr(plan_module, "success_rates", lambda r, spec: calls.append(r.shape) or success_rates(r, spec))
    p = build_plan(num_generations=8, estimator="grpo", prompt_weight="curverl")
    rewards = torch.randint(0, 2, (6, 8), generator=torch.Generator().manual_seed(1)).double()
    window = PromptWindow(2)
    p.grouped_advantages(rewards.flatten(), torch.arange(6).repeat_interleave(8), window=window)
    assert calls == [(6, 8)] and window.pushed == 1
    calls.clear()
    p.scaled_advantages(rewards, window=window)
    assert calls == [(6, 8)] and window.pushed == 1  # scaled_advantages measures against the window, never feeds it


def test_hooks_are_checked_by_name():
    p = build_plan(num_generations=4, estimator="rloo", prompt_weight="inverse")
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    group = torch.arange(2).repeat_interleave(4)
    with pytest.raises(ValueError, match=r"compute_advantages returned shape \(2, 3\), expected \(2, 4\)"):
        p.grouped_advantages(rewards.flatten(), group, compute_advantages=lambda r: r[:, :3])
    with pytest.raises(ValueError, match=r"compute_prompt_weights returned shape \(3,\), expected \(2,\)"):
        p.grouped_advantages(rewards.flatten(), group, compute_prompt_weights=lambda r: torch.ones(3))
    with pytest.raises(ValueError, match=r"every group must have the same size, got sizes \[3, 5\]"):
        p.grouped_advantages(torch.zeros(8, dtype=torch.float64), torch.tensor([0] * 5 + [1] * 3),
                             compute_prompt_weights=lambda r: torch.ones(2))  # fmt: skip
    # a hook's weights replace the plan's: weight 0 for the first group empties it
    batch = p.grouped_advantages(rewards.flatten(), group, compute_prompt_weights=lambda r: torch.tensor([0.0, 2.0]))
    assert batch.empty.tolist() == [True, False] and batch.p_hat is None  # no window: the hook's reading alone


def test_the_plan_reads_min_group_from_the_registry():
    """A group below the row's `min_group` gets 0 and is reported undefined, though the estimator would run on it;
    a `num_generations` below it is refused when the plan is built."""
    row = dataclasses.replace(ESTIMATORS["rloo"], min_group=lambda params: 5)
    with registry._ROWS.registered("rloo", row):  # the row for this test only; the package's comes back after
        p = build_plan(num_generations=8, estimator="rloo")
        assert not p.is_defined(p.stages[0], 4) and p.is_defined(p.stages[0], 5)
        scores = torch.tensor([0.0, 1.0, 1.0, 0.0] + [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
        batch = p.grouped_advantages(scores, torch.tensor([0] * 4 + [1] * 6))
        assert batch.undefined_sizes == (4,) and bool((batch.advantages[:4] == 0).all())
        assert bool((batch.advantages[4:] != 0).any())
        with pytest.raises(ValueError, match=r"it needs groups of at least 5 rollouts"):
            build_plan(num_generations=4, estimator="rloo")
    assert ESTIMATORS["rloo"].min_group({}) != 5


def test_min_group_comes_with_the_stage_parameters():
    """`ordergrad`'s minimum is K + 1 of the stage: groups of K rollouts are undefined, K + 1 defined."""
    p = build_plan(num_generations=8, objective="ReMax", k=3)
    assert [p.is_defined(p.stages[0], n) for n in (3, 4)] == [False, True]
