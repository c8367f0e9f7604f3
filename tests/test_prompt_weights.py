"""Prompt weights (`ordergrad_prompt_weight`): CurveRL's published CPU cases as numbers, a brute-force histogram
oracle over runs of ragged batches (exact fractions, written from the paper's description, not from our code), the
compositions the docs state (grpo + inverse = maxrl, rloo + inverse = N/(N-1) maxrl, grpo + curverl = CurveRL),
`none` unchanged to the bit, and every refusal naming its field."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from helpers.plan_cases import weighing_settings
from helpers.prompt_weight_oracle import oracle_run
from ordergrad_trl.core.estimators import ESTIMATORS, maxrl
from ordergrad_trl.core.plan import build_plan
from ordergrad_trl.core.prompt_weights import (
    PROMPT_WEIGHTS, PromptWindow, parse_prompt_weight, prompt_weight_help, prompt_weight_table,
)  # fmt: skip

DOCS = Path(__file__).resolve().parents[1] / "docs"


def plan(n, prompt_weight, window=None, **settings):
    return build_plan(**{"estimator": "grpo", **settings}, num_generations=n, prompt_weight=prompt_weight,
                      prompt_weight_window=window)  # fmt: skip


def batch(p_hats, n):
    """CurveRL's test batches: group g holds round(p * n) ones, then zeros."""
    return torch.tensor([[1.0 if i < round(p * n) else 0.0 for i in range(n)] for p in p_hats], dtype=torch.float64)


# ------------------------------------------------------------------- CurveRL's published CPU cases, as numbers


def curverl_steps(batches, window, n=4):
    """Advantages of grpo (unscaled) + curverl over consecutive batches of the trainer's (G, N) path."""
    p, state, out = plan(n, "curverl", window), PromptWindow(window), []
    for rewards in batches:
        out.append(p.scaled_advantages(rewards, window=state))
        state.push(p.prompt_weights(rewards)[1])
    return out, state


def test_all_fail_and_all_success_get_zero_and_stay_out_of_the_pool():
    (adv,), state = curverl_steps([batch([0.0, 1.0, 0.5], 4)], window=10)
    assert adv[:2].abs().sum() == 0
    assert adv[2].tolist() == [0.5, 0.5, -0.5, -0.5]  # alone in its bin: weight 1
    assert state.batches == [[0.5]]


def test_one_bin_has_weight_one():
    (adv,), _ = curverl_steps([batch([0.5, 0.5], 4)], window=0)
    assert adv.tolist() == [[0.5, 0.5, -0.5, -0.5]] * 2


def test_two_equally_filled_bins_weigh_one_and_a_half():
    (adv,), _ = curverl_steps([batch([0.25, 0.75], 4)], window=0)
    expected = [[0.75, -0.25, -0.25, -0.25], [0.5 * 0.25] * 3 + [0.5 * -0.75]]  # mass/cdf: 0.5/0.5, 0.5/1
    assert adv.tolist() == expected


def test_the_reference_is_lagged():
    # after batch 1 the pool is {0.5} (bin 2 of 5); batch 2's p_hat 0.25 (bin 1) has no reference mass: weight 0.
    # Were the current batch in its own reference, bin 1 would hold mass and the advantages would not be 0.
    (_, second), state = curverl_steps([batch([0.5], 4), batch([0.25], 4)], window=10)
    assert second.abs().sum() == 0
    assert state.batches == [[0.5], [0.25]]


def test_window_zero_uses_the_current_batch_alone():
    (_, second), state = curverl_steps([batch([0.5], 4), batch([0.25], 4)], window=0)
    assert second.tolist() == [[0.75, -0.25, -0.25, -0.25]]
    assert state.batches == []


def test_eviction_after_window_batches_counting_empty_ones():
    state = PromptWindow(3)
    for p_hats in ([0.25, 0.5], [0.0, 1.0], [0.25, 0.5], [0.25, 0.5], [0.5, 0.75]):  # the 2nd carries none
        state.push(torch.tensor(p_hats, dtype=torch.float64))
    assert state.batches == [[0.25, 0.5], [0.25, 0.5], [0.5, 0.75]] and len(state) == 6 and state.pushed == 5
    state = PromptWindow(2)
    for p_hats in ([0.5], [0.0], [1.0]):  # an empty batch evicts like any other
        state.push(torch.tensor(p_hats, dtype=torch.float64))
    assert state.batches == [[], []] and len(state) == 0


def test_zero_and_one_stay_out_of_the_pool():
    state = PromptWindow(10)
    state.push(torch.tensor([0.0, 0.5, 1.0, 0.75], dtype=torch.float64))
    assert sorted(state.batches[0]) == [0.5, 0.75]


# ------------------------------------------------------------------- brute-force histogram oracle


def ragged_batches(seed, steps=6):
    rng = random.Random(seed)
    out = []
    for _ in range(steps):
        groups = []
        for _ in range(rng.randint(1, 7)):
            n = rng.choice([3, 4, 5, 6])
            p = rng.random()
            groups.append([math.nan if rng.random() < 0.1 else float(rng.random() < p) for _ in range(n)])
        out.append(groups)
    return out


@pytest.mark.parametrize("window", [0, 1, 3, 10])
@pytest.mark.parametrize("seed", range(4))
def test_ragged_batches_through_the_engines_path_equal_the_oracle(seed, window):
    """`plan.grouped_advantages` (verl's and SkyRL's rows by uid, in shuffled order) over consecutive batches."""
    batches = ragged_batches(seed)
    expected = oracle_run(batches, window)
    p, state, rng = plan(6, "curverl", window), PromptWindow(window), random.Random(seed)
    for groups, weights in zip(batches, expected):
        rows = [(g, r) for g, members in enumerate(groups) for r in members]
        rng.shuffle(rows)
        scores = torch.tensor([r for _, r in rows], dtype=torch.float64)
        adv, _ = p.grouped_advantages(scores, torch.tensor([g for g, _ in rows]), window=state)
        for (g, r), a in zip(rows, adv.tolist()):
            valid = [x for x in groups[g] if not math.isnan(x)]
            want = 0.0 if math.isnan(r) else float(weights[g]) * (r - sum(valid) / len(valid))
            assert a == pytest.approx(want, abs=1e-12), (g, groups[g], weights[g])


@pytest.mark.parametrize("seed,n,groups,steps,window", [(0, 5, 8, 5, 2), (1, 5, 8, 5, 2), (2, 5, 8, 5, 2),
                                                          (3, 16, 128, 14, 10), (4, 8, 64, 12, 10)])  # fmt: skip
def test_the_trainers_path_equals_the_oracle_with_unscorable_rollouts(seed, n, groups, steps, window):
    """The (G, N) view the trainer uses, N fixed: B = N + 1, NaN rows left out of p_hat (so rates such as 1/3
    with B = 6 fall on a bin's edge); also at the sizes users run (N = 16, 128 prompts, CurveRL's window of 10)."""
    rng = random.Random(seed)
    batches = [[[math.nan if rng.random() < 0.25 else float(rng.random() < q) for _ in range(n)]
                for q in (rng.random() for _ in range(groups))] for _ in range(steps)]  # fmt: skip
    expected = oracle_run(batches, window)
    p, state = plan(n, "curverl", window), PromptWindow(window)
    for groups, weights in zip(batches, expected):
        rewards = torch.tensor(groups, dtype=torch.float64)
        got, p_hat = p.prompt_weights(rewards, state)
        assert got.tolist() == pytest.approx([float(w) for w in weights], abs=1e-15)
        state.push(p_hat)
    assert any(0 < w < 1 for ws in expected for w in ws) and any(w == 0 for ws in expected for w in ws)


def test_edge_rates_fall_in_the_upper_bin():
    # 1/3 with B = 6 bins is exactly bin 2; 1/3 * 6 rounds to 1.999... in floating point
    w = parse_prompt_weight("curverl").weights(torch.tensor([1 / 3, 0.34]), 6, torch.tensor([1 / 3, 0.1]))
    assert w.tolist() == [0.5, 0.5]


# ------------------------------------------------------------------- compositions the docs state


def binary_groups(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = (torch.rand(64, n, generator=g, dtype=torch.float64) < torch.rand(64, 1, generator=g, dtype=torch.float64))
    r = r.to(torch.float64)
    r[0], r[1] = 0.0, 1.0  # all fail, all succeed
    return r


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_grpo_unscaled_with_inverse_is_maxrl(n):
    r = binary_groups(n)
    got = plan(n, "inverse").scaled_advantages(r)
    assert torch.allclose(got, maxrl(r), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("n", [3, 8])
def test_rloo_with_inverse_is_maxrl_times_n_over_n_minus_1(n):
    r = binary_groups(n, seed=1)
    got = plan(n, "inverse", estimator="rloo").scaled_advantages(r)
    assert torch.allclose(got, n / (n - 1) * maxrl(r), rtol=1e-13, atol=1e-13)
    assert torch.allclose(plan(n, "inverse", estimator="ordergrad", objective="Mean", k=1).scaled_advantages(r), got,
                          rtol=1e-13, atol=1e-13)  # fmt: skip


def test_gaussian_multiplies_any_estimator_and_precedes_the_scale():
    r = binary_groups(8, seed=2)
    p_hat = r.mean(-1, keepdim=True)
    w = torch.exp(-((p_hat - 0.4) ** 2) / (2 * 0.15**2))
    for settings in ({"estimator": "ordergrad", "objective": "ReMax", "k": 4}, {"estimator": "rs_grpo"}):
        for scale in ("none", "group", "batch"):
            base = plan(8, "none", **settings, scale=scale)
            weighted = plan(8, "gaussian:0.4,0.15", **settings, scale=scale)
            want = base.scale_advantages(base.advantages(r, base.stages[0]) * w, r)
            assert torch.allclose(weighted.scaled_advantages(r), want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_none_leaves_every_estimator_unchanged_to_the_bit(name):
    n = 8
    r = binary_groups(n, seed=3)
    r[2, 3] = math.nan
    settings = {"estimator": name, "k": 4 if name != "maxk_tang" else 2}
    a, b = plan(n, None, **settings), plan(n, "none", **settings)
    assert a.prompt_weight is None and b.prompt_weight is None
    assert torch.equal(a.scaled_advantages(r), b.scaled_advantages(r))
    assert b == plan(n, "NONE", **settings)


# ------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "setting,window,needle",
    [
        ("bogus", None, "ordergrad_prompt_weight='bogus' is unknown; valid forms: none | inverse | curverl | gaussian:MU,SIGMA"),
        ("gaussian", None, "'gaussian' takes 2 parameter(s) gaussian:MU,SIGMA"),
        ("gaussian:0.5", None, "takes 2 parameter(s)"),
        ("gaussian:a,b", None, "parameters must be numbers"),
        ("gaussian:1.5,0.2", None, "MU (the pass rate weighted most) must be in [0, 1]"),
        ("gaussian:0.5,0", None, "SIGMA must be a finite number > 0"),
        ("gaussian:0.5,nan", None, "SIGMA must be a finite number > 0"),
        ("gaussian:0.5,0.001", None, "SIGMA must be at least 0.01"),
        ("inverse:2", None, "'inverse' takes no parameters"),
        (3, None, "ordergrad_prompt_weight must be a string"),
        ("curverl", -1, "ordergrad_prompt_weight_window must be an integer >= 0"),
        ("curverl", True, "ordergrad_prompt_weight_window must be an integer >= 0"),
        ("curverl", 2.5, "ordergrad_prompt_weight_window must be an integer >= 0"),
    ],
)  # fmt: skip
def test_bad_settings_name_the_field(setting, window, needle):
    with pytest.raises(ValueError) as info:
        plan(8, setting, window)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "weight,rewards,needle",
    [
        ("inverse", [[0.0, 0.5, 1.0, 1.0]], "rewards must be 0 or 1"),
        ("curverl", [[0.0, 1.5, 1.0, 1.0]], "rewards must be in [0, 1]"),
        ("gaussian:0.5,0.2", [[-0.1, 0.5, 1.0, 1.0]], "rewards must be in [0, 1]"),
    ],
)
def test_rewards_the_weight_cannot_read_are_refused_by_name(weight, rewards, needle):
    with pytest.raises(ValueError) as info:
        plan(4, weight).scaled_advantages(torch.tensor(rewards, dtype=torch.float64))
    assert needle in str(info.value) and f"ordergrad_prompt_weight={weight!r}" in str(info.value)


def test_continuous_rewards_in_range_use_their_mean():
    r = torch.tensor([[0.2, 0.4, math.nan, 0.9]], dtype=torch.float64)
    w, p_hat = plan(4, "gaussian:0.5,0.1").prompt_weights(r)
    assert p_hat.item() == pytest.approx(0.5) and w.item() == pytest.approx(1.0)
    all_nan = torch.full((1, 4), math.nan, dtype=torch.float64)
    assert plan(4, "gaussian:0.5,0.1").prompt_weights(all_nan)[0].item() == 0.0  # no scorable reward: weight 0


def test_the_window_round_trips_and_refuses_a_hand_edited_state():
    state = PromptWindow(3)
    for p_hats in ([0.25, 0.5], [0.75], [0.5]):
        state.push(torch.tensor(p_hats, dtype=torch.float64))
    copy = PromptWindow(3)
    copy.load_state_dict(state.state_dict())
    assert copy == state
    smaller = PromptWindow(2)
    smaller.load_state_dict(state.state_dict())
    assert smaller.batches == [[0.75], [0.5]]  # the newest batches kept
    for bad in ({"batches": [[1.5]], "pushed": 1}, {"batches": "x", "pushed": 1}, {"pushed": 1}, {"batches": [[0.5]]},
                {"batches": [[0.5], [0.5]], "pushed": 1}):  # fmt: skip
        with pytest.raises(ValueError, match="prompt-weight window is malformed"):
            PromptWindow(3).load_state_dict(bad)


# ------------------------------------------------------------------- the registry drives the docs


def test_docs_and_help_derive_from_the_registry():
    from ordergrad_trl import OrderGradConfig

    assert prompt_weight_table() in (DOCS / "estimators.md").read_text(), (
        "docs/estimators.md's prompt-weight table is stale: paste prompt_weight_table() there"
    )
    help_text = OrderGradConfig.__dataclass_fields__["ordergrad_prompt_weight"].metadata["help"]
    assert prompt_weight_help() in help_text
    for name in PROMPT_WEIGHTS:
        assert name in help_text and f"`{name}" in prompt_weight_table()


# ------------------------------------------------------------------- the engines' path (verl, SkyRL)


@pytest.mark.parametrize("weight", weighing_settings())  # every registered weight
def test_consecutive_engine_batches_equal_the_oracle(weight):
    """`engine.outcome_advantages` (what verl's and SkyRL's estimators return) over three batches of shuffled,
    ragged rows by uid with unscorable ones: the estimator per group times the oracle's weight, the window carried
    by the engine's driver from one call to the next."""
    from helpers.prompt_weight_oracle import engine_expected

    from ordergrad_trl.integrations import engine

    engine._windows.clear()
    rng, batches = random.Random(7), []
    for step in range(3):
        rows = [(f"u{step}-{g}", float(rng.random() < q)) for g, q in enumerate([0.2, 0.5, 0.7, 0.4, 0.9])
                for _ in range(rng.choice([4, 6, 8]))]  # fmt: skip
        rows += [(f"u{step}-nan", math.nan), (f"u{step}-nan", 1.0), (f"u{step}-nan", 0.0)]
        rng.shuffle(rows)
        batches.append(rows)
    settings = {"objective": "TopM:2", "k": 2, "prompt_weight": weight, "prompt_weight_window": 1}
    p = build_plan(**settings, num_generations=8)
    plain = {k: v for k, v in settings.items() if not k.startswith("prompt_weight")}
    expected = engine_expected(batches, plain, weight, 1, n=8)
    for rows, want in zip(batches, expected):
        scores = torch.tensor([[s] for _, s in rows], dtype=torch.float64)
        group = engine.group_ids([u for u, _ in rows], scores.device)
        got = engine.outcome_advantages(scores, torch.ones_like(scores), group, p, p.stages[0], engine="test",
                                        fix="")[:, 0]  # fmt: skip
        assert torch.allclose(got, want, atol=1e-12), (rows, got, want)
    assert any((w != 0).any() for w in expected)
    assert (engine._windows.get("test") is not None) == (weight == "curverl")
    engine._windows.clear()


def test_a_schedule_composes_with_a_prompt_weight():
    r = binary_groups(6, seed=4)
    p = plan(6, "gaussian:0.5,0.2", estimator="ordergrad", schedule=["0 ReMax@3", "2 Mean@1"])
    w = torch.exp(-((r.mean(-1, keepdim=True) - 0.5) ** 2) / (2 * 0.2**2))
    for stage in p.stages:
        assert torch.allclose(p.scaled_advantages(r, stage), p.advantages(r, stage) * w, rtol=1e-13, atol=1e-15)
    assert not torch.allclose(p.scaled_advantages(r, p.stages[0]), p.scaled_advantages(r, p.stages[1]))
