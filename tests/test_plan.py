"""The objective plan without TRL (`core.plan.build_plan`), the stage every estimator is called with (its weights),
and what the trainer checks at each step (an infinite reward, advantages that overflow) and hands TRL (the
importance-sampling level). Config-level errors and YAML/replace round trips: tests/test_config.py and
tests/test_trainer_zoo.py."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.plan_cases import BAD_SETTINGS, TRL_FIELD, case_id, expected_message
from test_estimators import DEFAULT_PARAMS, ORACLE_CASES, reward_batch
from test_maxrl import MAXRL_ORACLES
from test_trainer import G, make_trainer

from ordergrad_trl.core.advantage import lstat_advantage
from ordergrad_trl.core.estimators import ESTIMATORS, get_estimator, scale_advantages
from ordergrad_trl.core.objectives import DEFAULT_OBJECTIVE, rank_weights
from ordergrad_trl.core.plan import build_plan
from ordergrad_trl.core.schedule import ObjectiveStage


def plan(**fields):
    return build_plan(**{"num_generations": 8, **fields})  # the rest: the defaults


def test_plan_of_a_schedule_is_looked_up_by_step():
    p = plan(schedule=["0 ReMax@6", "10 TopM:2@4", "20 Mean@1"])
    assert [(s.start_step, s.objective, s.k) for s in p.stages] == [(0, "ReMax", 6), (10, "TopM:2", 4), (20, "Mean", 1)]
    assert [p.stage_index(step) for step in (0, 9, 10, 19, 20, 500)] == [0, 0, 1, 1, 2, 2]
    assert torch.equal(p.stages[1].weights, rank_weights("TopM:2", 4))
    spaced = plan(schedule=["0 ReMax @ 6", "10  TopM:2 @4 "])  # spaces around '@' are not part of the objective
    assert [(s.objective, s.k) for s in spaced.stages] == [("ReMax", 6), ("TopM:2", 4)]
    rewards = torch.rand(3, 8, dtype=torch.float64)  # (G, N)
    assert torch.equal(p.advantages(rewards, p.stages[1]), get_estimator("ordergrad")(rewards, objective="TopM:2", k=4))
    assert torch.equal(p.advantages(rewards[:, :4], p.stages[1]), torch.zeros(3, 4))  # N <= K (eval): zeros
    defaults = plan(num_generations=3)
    assert (defaults.stages[0].objective, defaults.stages[0].k) == (DEFAULT_OBJECTIVE, 2)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(k="4"), r"ordergrad_k must be a positive integer, got '4'"),
        (dict(objective="0,0,0,0", k=4), r"ordergrad_objective='0,0,0,0' has all-zero weights at ordergrad_k=4"),
        (dict(estimator="rs_grpo", estimator_kwargs={"gamma": 1}), r"no parameter\(s\) \['gamma'\]; it accepts: beta"),
        (dict(estimator="grpo", schedule=["0 Mean@2"]), r"ordergrad_schedule has no effect"),
    ],
)
def test_building_the_plan_is_the_check(fields, match):
    with pytest.raises(ValueError, match=match):
        plan(**fields)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_is_called_alike_with_one_stage(name):
    """`ESTIMATORS[name](rewards, stage)`: the stage's weights / k / options reach the function; grpo's std is left
    to `scale_advantages` (the caller's one place for scale_rewards)."""
    r = reward_batch(binary=ESTIMATORS[name].binary, seed=3)
    params = dict(DEFAULT_PARAMS[name])
    spec = ESTIMATORS[name]
    stage = ObjectiveStage(0, params.get("objective", DEFAULT_OBJECTIVE), params.get("k") or r.shape[-1],
                           options={p: v for p, v in params.items() if p in spec.options and p != "scale"})
    if "k" in spec.reads:
        params["k"] = stage.k
    if name == "grpo":
        scaled = scale_advantages(spec(r, stage), r, "group").nan_to_num(0.0)  # NaN: a group's std of one reward
        assert torch.equal(scaled, get_estimator(name)(r, **params))
        params["scale"] = "none"
    assert torch.equal(spec(r, stage), get_estimator(name)(r, **params))


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_builds_a_plan_and_is_described_in_the_config_help(name):
    k = 3 if ESTIMATORS[name].reads else None
    p = plan(estimator=name, k=k, num_generations=6)
    rewards = reward_batch(binary=ESTIMATORS[name].binary, seed=1)  # (G, 6)
    expected = ESTIMATORS[name](rewards, ObjectiveStage(0, p.stages[0].objective, p.stages[0].k))
    assert torch.equal(p.advantages(rewards, p.stages[0]), expected)
    from ordergrad_trl.core.estimators import estimator_help

    assert f"{name} (" in estimator_help()


def test_scale_rewards_is_checked_in_the_plan():
    assert plan(scale=True).scale == "group" and plan(scale=False).scale == "none"
    with pytest.raises(ValueError, match=r"scale_rewards must be 'none', 'group' or 'batch' \(or a bool\), got 'std'"):
        plan(scale="std")
    with pytest.raises(ValueError, match=r"it accepts: none"):
        plan(estimator="grpo", estimator_kwargs={"beta": 1})  # grpo's scale is scale_rewards, not an option here


def test_infinite_reward_stops_the_step_naming_the_function(tiny_model, tiny_tokenizer, cpu_training_args):
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args)
    per_func = torch.zeros(2 * G, 2)
    per_func[3, 1] = -math.inf
    name = trainer.reward_func_names[1]
    with pytest.raises(ValueError, match=rf"function '{name}' returned \+-inf for 1 of {2 * G} rollouts at step 1"):
        trainer._ordergrad_batch(per_func, G, "train").advantages


@pytest.mark.parametrize(
    "weights, value, match",
    [
        ([1.0, 1e38], 10.0, r"function '{name}' returned rewards up to 10, which times its reward weight 1e\+38 overflow "
                            r"float32 \(largest 3.4e\+38\) for 1 of {n} rollouts at step 1"),
        ([2e38, 2e38], 1.0, r"the weighted sum of the reward functions overflows float32 \(largest 3.4e\+38\) for 1 of "
                            r"{n} rollouts at step 1 \(rollout 5: '\w+': 2e\+38, '{name}': 2e\+38\)"),
    ],
    ids=["times_its_weight", "the_weighted_sum"],
)
def test_finite_rewards_overflowing_float32_once_weighted_stop_the_step_naming_them(
    tiny_model, tiny_tokenizer, cpu_training_args, weights, value, match
):
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, reward_weights=weights)
    per_func = torch.zeros(2 * G, 2)
    per_func[:, 0] = 1.0
    trainer._ordergrad_batch(per_func, G, "train").advantages  # finite rewards, finite weighted sums: no error
    per_func[5, 1] = value  # finite, times a finite weight; only the float32 product or sum is inf
    with pytest.raises(ValueError, match=match.format(name=trainer.reward_func_names[1], n=2 * G)):
        trainer._ordergrad_batch(per_func, G, "train").advantages


def test_trainer_hands_trl_the_resolved_importance_sampling_level(tiny_model, tiny_tokenizer, cpu_training_args):
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, loss_type="luspo")
    assert trainer.importance_sampling_level == trainer.args.importance_sampling_level == "sequence"
    assert make_trainer(tiny_model, tiny_tokenizer, cpu_training_args).importance_sampling_level == "token"


def test_huge_finite_reward_warns_naming_the_function(tiny_model, tiny_tokenizer, cpu_training_args, caplog):
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args)
    per_func = torch.zeros(2 * G, 2)
    per_func[:, 1] = torch.arange(2 * G, dtype=torch.float32)  # ordinary rewards: no warning
    with caplog.at_level("WARNING", logger="ordergrad_trl.training.trainer"):
        trainer._ordergrad_batch(per_func, G, "train").advantages
    assert "overflow" not in caplog.text
    per_func[0, 0] = 1e30  # finite in float32, but the squared advantages (the gradient norm) are not
    with caplog.at_level("WARNING", logger="ordergrad_trl.training.trainer"):
        trainer._ordergrad_batch(per_func, G, "train").advantages
    assert f"reward function '{trainer.reward_func_names[0]}' returned rewards up to 1e+30" in caplog.text


@pytest.mark.parametrize("case", BAD_SETTINGS, ids=case_id)
def test_trl_config_raises_the_plans_text(cpu_training_args, case):
    """tests/test_verl.py checks that verl's keys raise the same text for the same settings."""
    from ordergrad_trl import OrderGradConfig

    settings, n = case
    fields = {TRL_FIELD[key]: value for key, value in settings.items()}
    with pytest.raises(ValueError) as info:
        OrderGradConfig(**{**cpu_training_args, "num_generations": n, "per_device_train_batch_size": n, **fields})
    assert str(info.value) == expected_message(settings, n)


@pytest.mark.parametrize("scale", ["none", "group", "batch"])
@pytest.mark.parametrize("name", ["ordergrad", "grpo", "maxrl"])
def test_grouped_advantages_of_ragged_shuffled_groups_equal_scaled_advantages_group_by_group(name, scale):
    """The plan's one call for engines (verl, SkyRL): rows of interleaved groups of unequal sizes, NaN rewards, give
    each group what `scaled_advantages` gives it as a `(1, n)` batch (a simple loop), and "batch" scales by the std of
    every valid reward; sizes where the estimator is undefined (ordergrad: n <= K) get 0 and are reported."""
    from ordergrad_trl.core.estimators import scale_advantages as scale_by

    gen = torch.Generator().manual_seed(7)
    p = plan(estimator=name, scale=scale, k=None if name == "maxrl" else 3, num_generations=8)
    sizes = [8, 5, 8, 3, 6, 2]  # group 3 (n=3) and 5 (n=2) are <= K=3 for ordergrad
    group = torch.cat([torch.full((n,), g) for g, n in enumerate(sizes)])
    group = group[torch.randperm(len(group), generator=gen)]  # interleaved
    scores = torch.randint(0, 2, (len(group),), generator=gen).double()
    scores[torch.rand(len(group), generator=gen) < 0.15] = torch.nan
    got, undefined = p.grouped_advantages(scores, group)
    expected = torch.zeros_like(scores)
    for g, n in enumerate(sizes):
        rows = torch.nonzero(group == g).flatten()
        if p.is_defined(p.stages[0], n):
            block = p.advantages(scores[rows][None], p.stages[0])  # (1, n), the estimator alone
            expected[rows] = (scale_by(block, scores[rows][None], "group") if scale == "group" else block)[0]
    if scale == "batch":
        expected = scale_by(expected, scores, "batch")
    expected = torch.nan_to_num(expected).masked_fill(torch.isnan(scores), 0.0)
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert sorted(undefined) == [n for n in sorted(set(sizes)) if not p.is_defined(p.stages[0], n)]
    assert name != "ordergrad" or sorted(undefined) == [2, 3]
    if scale != "batch":  # a (G, N) batch of equal groups: the same as the trainer's path
        same = torch.nonzero(torch.tensor(sizes) == 8).flatten()
        rows = torch.stack([torch.nonzero(group == g).flatten() for g in same])  # (2, 8)
        assert torch.allclose(got[rows], torch.nan_to_num(p.scaled_advantages(scores[rows])).masked_fill(
            torch.isnan(scores[rows]), 0.0), rtol=1e-12, atol=1e-12)  # fmt: skip


def test_an_objective_string_is_parsed_once_per_stage_and_never_at_a_step(monkeypatch):
    """Building the plan (checks, the estimator's dry run, the stage's weights) parses each stage's string once, with
    no cache; every step's estimator is handed the stage's weights: with the parser gone, advantages still come."""
    from ordergrad_trl.core import objectives

    parsed = []
    monkeypatch.setattr(objectives, "_parse", lambda text, k, parse=objectives._parse: parsed.append(text) or
                        parse(text, k))  # fmt: skip
    p = plan(objective="TopM:3", k=5, num_generations=8)
    scheduled = plan(schedule=["0 ReMax@6", "10 TopM:2@4"], num_generations=8)
    # one per stage; with a schedule the (unused) default objective is checked too, first
    assert parsed == ["TopM:3", DEFAULT_OBJECTIVE, "ReMax", "TopM:2"]
    assert torch.equal(p.stages[0].weights, rank_weights("TopM:3", 5))
    monkeypatch.setattr(objectives, "_parse", None)  # a step that parsed would raise TypeError
    rewards = torch.rand(4, 8, dtype=torch.float64)
    for _ in range(3):  # steps
        p.scaled_advantages(rewards)
        scheduled.grouped_advantages(rewards.flatten(), torch.arange(4).repeat_interleave(8), scheduled.stage_at(10))
        assert p.is_defined(p.stages[0], 6) and not p.is_defined(p.stages[0], 5)  # eval group sizes, new ones
    assert torch.equal(p.scaled_advantages(rewards), 5 * lstat_advantage(rewards, p.stages[0].weights))


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("name,params,oracle", ORACLE_CASES + MAXRL_ORACLES,
                         ids=lambda v: v if isinstance(v, str) else None)  # fmt: skip
def test_the_plans_advantages_match_each_papers_loop_oracle(name, params, oracle, binary):
    """The route that trains (the plan's stage handed to the estimator, then scale_rewards) against per-group loops
    written from each paper's formula (tests/test_estimators.py, test_maxrl.py): the weights the stage carries are
    the objective's."""
    if (ESTIMATORS[name].binary and not binary) or ("k" in ESTIMATORS[name].reads and params.get("k") in (None, 6)):
        pytest.skip("not a plan setting at N = 6")
    fields = {"objective": params.get("objective"), "k": params.get("k"), "scale": params.get("scale", "none"),
              "estimator_kwargs": {p: v for p, v in params.items() if p not in ("objective", "k", "scale")}}
    p = plan(estimator=name, num_generations=6, **fields)
    r = reward_batch(binary, seed=len(str(params)))
    assert torch.allclose(p.scaled_advantages(r).nan_to_num(0.0), oracle(r), rtol=1e-9, atol=1e-9)
