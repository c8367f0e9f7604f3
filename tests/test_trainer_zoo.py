"""OrderGradTrainer with the estimator zoo (`ordergrad_estimator`), objective schedules (`ordergrad_schedule`) and
one objective per reward function (`ordergrad_reward_objectives`): config validation, TrlParser (YAML and CLI),
and, on the tiny offline model, the advantages that reach the loss.

Oracles: the zoo's estimators are checked against per-paper loops in tests/test_estimators.py; here the question is
whether the trainer applies the right one, with the right parameters, to the right groups, at the right step. So
each group's expected advantages are the registry function applied to that group's rewards, rebuilt in generation
order from what the reward functions returned (order matters: `maxk_tang` cuts the group into consecutive chunks).
Schedules and per-reward objectives are checked against the subset enumeration of tests/helpers/oracle.py.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch
from helpers.estimator_cases import CASES
from test_trainer import (
    G,
    OBJECTIVE,
    REWARD_WEIGHTS,
    WEIGHTS,
    RecordingTrainer,
    brute_force_advantages,
    brute_force_value,
    combine,
    make_trainer,
)

from ordergrad_trl import OrderGradConfig, rank_weights
from ordergrad_trl.core.estimators import ESTIMATORS, get_estimator


class OrderRecordingTrainer(RecordingTrainer):
    """Also records each generation batch's completions and per-function rewards in generation (= group) order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scored = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.scored.append(
            {
                "mode": "train" if self.model.training else "eval",
                "step": self.state.global_step,
                "completions": [tuple(ids) for ids in completion_ids_list],
                # None where the function returned None (TRL stores NaN)
                "per_func": [[None if math.isnan(v) else v for v in row] for row in rewards_per_func.tolist()],
            }
        )
        return rewards_per_func


def groups_of(trainer, group_size=G):
    """[(step, [completion ids], [[per-function rewards]])] per prompt group, in generation order."""
    out = []
    for call in trainer.scored:
        assert call["mode"] == "train"
        for start in range(0, len(call["completions"]), group_size):
            end = start + group_size
            out.append((call["step"], call["completions"][start:end], call["per_func"][start:end]))
    return out


def check_reaching_loss(trainer, expected_fn, group_size=G):
    """Every row that reached the loss carries `expected_fn(step, per_func_rows)[its index in the group]`.

    Returns the expected advantages per step, for the metric checks."""
    expected = {}
    per_step = defaultdict(list)
    for step, completions, per_func in groups_of(trainer, group_size):
        assert len(set(completions)) == len(completions), "duplicate completions: cannot map rows back"
        advantages = expected_fn(step, per_func)
        per_step[step].append((per_func, advantages))
        for ids, adv in zip(completions, advantages):
            expected[(step, ids)] = adv
    rows = trainer.loss_rows
    assert len(rows) == len(expected)
    for row in rows:
        assert row["advantage"] == pytest.approx(expected[(row["step"], row["completion"])], abs=2e-5), row
    return per_step


def logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


# ------------------------------------------------------------------------------------ estimators end to end

ZOO = {name: case.trainer for name, case in CASES.items()}  # (config overrides, parameters the trainer passes)


def test_every_registered_estimator_reaches_the_loss_in_a_test():
    assert set(ZOO) == set(ESTIMATORS)


@pytest.mark.parametrize("name", list(ZOO))
def test_each_estimator_reaches_the_loss(tiny_model, tiny_tokenizer, cpu_training_args, name):
    overrides, params = ZOO[name]
    trainer = make_trainer(
        tiny_model, tiny_tokenizer, cpu_training_args, trainer_cls=OrderRecordingTrainer, ordergrad_estimator=name,
        **overrides,
    )  # fmt: skip
    trainer.train()
    reward_weights = overrides.get("reward_weights", REWARD_WEIGHTS)
    estimator = get_estimator(name)

    def expected_fn(step, per_func):
        rewards = torch.tensor([[combine(r, reward_weights) for r in per_func]], dtype=torch.float64)  # (1, G)
        return estimator(rewards, **params)[0].tolist()

    per_step = check_reaching_loss(trainer, expected_fn)
    assert sorted(per_step) == [0, 1]
    assert any(abs(a) > 1e-6 for groups in per_step.values() for _, adv in groups for a in adv), "no signal"

    # ordergrad/objective monitors ordergrad_objective over ordergrad_k whichever estimator trains
    k = overrides.get("ordergrad_k", 4)
    objective = overrides.get("ordergrad_objective")
    weights = rank_weights(objective, k).tolist() if objective else WEIGHTS
    for value, (step, groups) in zip(logged(trainer, "ordergrad/objective"), sorted(per_step.items())):
        values = [brute_force_value([combine(r, reward_weights) for r in per_func], weights) for per_func, _ in groups]
        values = [v for v in values if not math.isnan(v)]
        assert value == pytest.approx(sum(values) / len(values), abs=1e-5)
    assert logged(trainer, "ordergrad/k") == [float(k)] * 2
    assert not logged(trainer, "ordergrad/schedule_stage")


def test_estimator_undefined_for_a_small_eval_group_gives_zeros(bare_zoo_trainer):
    # groups of 3 in evaluation: passk_chen with k=4 needs N >= 4 (zeros); maxk_tang with k=3 is defined
    rewards = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 1.0]])  # (2, 3)
    trainer = bare_zoo_trainer(ordergrad_estimator="passk_chen", ordergrad_objective="ReMax")
    assert torch.equal(trainer.compute_advantages(rewards), torch.zeros_like(rewards))
    trainer = bare_zoo_trainer(ordergrad_estimator="maxk_tang", ordergrad_k=3, ordergrad_objective="ReMax")
    # the strict best gets k x its gap to the runner-up; a tie at the top gives zeros
    assert torch.equal(trainer.compute_advantages(rewards), torch.tensor([[1.5, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert torch.equal(trainer.compute_advantages(rewards[:, :2]), torch.zeros(2, 2))  # 2 is no multiple of 3


def test_grpo_scale_rewards_is_applied_once(bare_zoo_trainer):
    nan = math.nan
    per_func = torch.tensor([[1, 2], [0, 0], [nan, nan], [1, 0], [nan, 2], [0, 2]] * 2, dtype=torch.float32)
    per_func[6:, 0] = torch.tensor([0.0, 1, 1, 1, 0, 1])
    rewards = [combine([None if math.isnan(v) else v for v in row], REWARD_WEIGHTS) for row in per_func.tolist()]
    for scale in ("group", "batch", "none"):
        trainer = bare_zoo_trainer(ordergrad_estimator="grpo", scale_rewards=scale, ordergrad_objective="Mean")
        got = trainer._ordergrad_batch(per_func, G, "train").advantages
        valid = [r for r in rewards if not math.isnan(r)]
        expected = []
        for group in (rewards[:G], rewards[G:]):
            v = [r for r in group if not math.isnan(r)]
            mean = sum(v) / len(v)
            spread = {"group": v, "batch": valid, "none": None}[scale]
            std = 1.0 if spread is None else math.sqrt(
                sum((x - sum(spread) / len(spread)) ** 2 for x in spread) / (len(spread) - 1)
            ) + 1e-4  # fmt: skip
            expected += [0.0 if math.isnan(r) else (r - mean) / std for r in group]
        assert got.tolist() == pytest.approx(expected, abs=1e-5), scale


# ------------------------------------------------------------------------------------ schedule


def test_schedule_switches_objective_and_k_at_the_right_step(tiny_model, tiny_tokenizer, cpu_training_args):
    # step 0: OBJECTIVE over 4; step 1: the mean of the best 2 of 3; step 2 on: the mean of 2 (weights written out)
    stages = {0: WEIGHTS, 1: [0.0, 0.5, 0.5], 2: [0.5, 0.5]}
    trainer = make_trainer(
        tiny_model, tiny_tokenizer, cpu_training_args, trainer_cls=OrderRecordingTrainer, max_steps=3,
        ordergrad_schedule=[f"0 {OBJECTIVE}@4", "1 TopM:2@3", "2 Mean@2"],
    )  # fmt: skip
    assert (trainer.ordergrad_objective, trainer.ordergrad_k) == (OBJECTIVE, 4)  # the first stage
    trainer.train()

    def expected_fn(step, per_func):
        return brute_force_advantages([combine(r, REWARD_WEIGHTS) for r in per_func], stages[step])

    per_step = check_reaching_loss(trainer, expected_fn)
    assert sorted(per_step) == [0, 1, 2]
    for step, groups in per_step.items():
        # a trainer that switched at the wrong step (or never) gives different advantages on this batch
        for other in set(stages) - {step}:
            assert any(
                brute_force_advantages([combine(r, REWARD_WEIGHTS) for r in per_func], stages[other])
                != pytest.approx(adv, abs=1e-4)
                for per_func, adv in groups
            ), (step, other)
    assert logged(trainer, "ordergrad/k") == [4.0, 3.0, 2.0]
    assert logged(trainer, "ordergrad/schedule_stage") == [0.0, 1.0, 2.0]
    for value, (step, groups) in zip(logged(trainer, "ordergrad/objective"), sorted(per_step.items())):
        values = [brute_force_value([combine(r, REWARD_WEIGHTS) for r in f], stages[step]) for f, _ in groups]
        values = [v for v in values if not math.isnan(v)]
        assert value == pytest.approx(sum(values) / len(values), abs=1e-5)
    assert (trainer.ordergrad_objective, trainer.ordergrad_k) == ("Mean", 2)  # global_step is 3 now


def test_schedule_stage_is_a_function_of_the_global_step(bare_zoo_trainer):
    trainer = bare_zoo_trainer(ordergrad_schedule=["0 ReMax@4", "10 TopM:2@3", "25 Mean@1"])
    for step, (stage, objective, k) in {
        0: (0, "ReMax", 4), 9: (0, "ReMax", 4), 10: (1, "TopM:2", 3), 24: (1, "TopM:2", 3), 25: (2, "Mean", 1),
        10**6: (2, "Mean", 1),
    }.items():  # fmt: skip
        trainer.state.global_step = step
        assert (trainer.ordergrad_stage, trainer.ordergrad_objective, trainer.ordergrad_k) == (stage, objective, k)
    trainer.state.global_step = 5  # back to the first stage, e.g. a resume: nothing remembered
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0, 1.0, 0.0]])  # (1, 6): Max@4 of 2 successes in 6
    torch.testing.assert_close(
        trainer.compute_advantages(rewards),
        torch.tensor([brute_force_advantages(rewards[0].tolist(), [0, 0, 0, 1.0])], dtype=torch.float32),
    )


# ------------------------------------------------------------------------------------ per-reward objectives

PER_REWARD = {"correct": ("TopM:2@4", [0.0, 0.0, 0.5, 0.5]), "fmt": ("ReMin@3", [1.0, 0.0, 0.0])}


def test_per_reward_objectives_reach_the_loss(tiny_model, tiny_tokenizer, cpu_training_args):
    trainer = make_trainer(
        tiny_model, tiny_tokenizer, cpu_training_args, trainer_cls=OrderRecordingTrainer,
        ordergrad_reward_objectives=[spec for spec, _ in PER_REWARD.values()],
    )  # fmt: skip
    trainer.train()
    weights = [w for _, w in PER_REWARD.values()]

    def expected_fn(step, per_func):
        total = [0.0] * len(per_func)
        for f, (rw, w) in enumerate(zip(REWARD_WEIGHTS, weights)):
            rewards = [math.nan if row[f] is None else row[f] for row in per_func]  # None: left out of f's ranking
            total = [t + rw * a for t, a in zip(total, brute_force_advantages(rewards, w))]
        return total

    per_step = check_reaching_loss(trainer, expected_fn)
    # the batch must hold what makes the per-function semantics differ from the summed reward's
    partial = [
        (row, a) for groups in per_step.values() for per_func, adv in groups for row, a in zip(per_func, adv)
        if (row[0] is None) != (row[1] is None)
    ]  # fmt: skip
    assert partial and any(abs(a) > 1e-6 for _, a in partial), "no half-scored rollout with a non-zero advantage"

    names = trainer.reward_func_names
    assert names == list(PER_REWARD)
    for step_index, (step, groups) in enumerate(sorted(per_step.items())):
        total = 0.0
        for f, (name, w) in enumerate(zip(names, weights)):
            values = [brute_force_value([math.nan if r[f] is None else r[f] for r in pf], w) for pf, _ in groups]
            values = [v for v in values if not math.isnan(v)]
            value = logged(trainer, f"ordergrad/objective/{name}")[step_index]
            assert value == pytest.approx(sum(values) / len(values), abs=1e-5)
            total += REWARD_WEIGHTS[f] * value
        assert logged(trainer, "ordergrad/objective")[step_index] == pytest.approx(total, abs=1e-5)
    assert not logged(trainer, "ordergrad/k")


def test_per_reward_objectives_must_match_the_reward_functions(tiny_model, tiny_tokenizer, cpu_training_args):
    with pytest.raises(ValueError, match=r"ordergrad_reward_objectives has 1 entries.*2 reward functions"):
        make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, ordergrad_reward_objectives=["TopM:2@4"])


# ------------------------------------------------------------------------------------ config


@pytest.fixture
def bare_zoo_trainer(tiny_model, tiny_tokenizer, cpu_training_args):
    def build(**overrides):
        return make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, **overrides)

    return build


def config(args, **overrides):
    return OrderGradConfig(**dict(args, num_generations=8, per_device_train_batch_size=8, **overrides))


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(ordergrad_estimator="ppo"), r"ordergrad_estimator='ppo' is unknown; valid names: ordergrad, grpo, rloo"),
        (dict(ordergrad_estimator="rs_grpo", ordergrad_estimator_kwargs={"gamma": 1}), r"gamma.*accepts: beta"),
        (dict(ordergrad_estimator="rs_grpo", ordergrad_estimator_kwargs={"beta": "x"}), r"rs_grpo.*beta"),
        (dict(ordergrad_estimator_kwargs={"k": 2}), r"must not set \['k'\]: set ordergrad_k"),
        (dict(ordergrad_estimator="grpo", ordergrad_estimator_kwargs={"scale": "group"}), r"set scale_rewards"),
        (dict(ordergrad_estimator_kwargs="beta=2"), r"ordergrad_estimator_kwargs must be a dict"),
        (dict(ordergrad_estimator="maxk_tang", ordergrad_k=3), r"maxk_tang.*ordergrad_k=3.*multiple of k=3"),
        (dict(ordergrad_estimator="pkpo", ordergrad_k=1, ordergrad_objective="Mean"), r"pkpo.*ordergrad_k=1"),
        (dict(ordergrad_schedule=["5 ReMax@4"]), r"ordergrad_schedule must start at step 0"),
        (dict(ordergrad_schedule=["0 ReMax@4", "10 Mean@2", "10 Mean@1"]), r"increase strictly.*10 after 10"),
        (dict(ordergrad_schedule=["0 ReMax@4", "10 Mean@2", "5 Mean@1"]), r"increase strictly.*5 after 10"),
        (dict(ordergrad_schedule=["0 ReMax@4", "10 ReMax@8"]), r"schedule\[1\]='10 ReMax@8': K \(8\).*num_gen"),
        (dict(ordergrad_schedule=["0 ReMax@4", "10 TopM:5@4"]), r"\[1\]='10 TopM:5@4': objective='TopM:5'.*K=4"),
        (dict(ordergrad_schedule=["0 ReMax"]), r"entry '0 ReMax' needs '@K'"),
        (dict(ordergrad_schedule=["0 ReMax@4,3 Mean@1"]), r"more than one 'OBJECTIVE@K'.*one argument each"),
        (dict(ordergrad_schedule=["0 ReMax@four"]), r"entry '0 ReMax@four': K must be a positive integer"),
        (dict(ordergrad_schedule=["zero ReMax@4"]), r"'STEP OBJECTIVE@K'"),
        (dict(ordergrad_schedule=["-1 ReMax@4"]), r"'STEP OBJECTIVE@K'"),
        (dict(ordergrad_schedule="0 ReMax@4"), r"ordergrad_schedule must be a non-empty list"),
        (dict(ordergrad_schedule=[]), r"ordergrad_schedule must be a non-empty list"),
        (dict(ordergrad_schedule=["0 Mean@2"], ordergrad_estimator="rloo"), r"no effect.*'rloo'"),
        (dict(ordergrad_schedule=["0 ReMax@2", "3 ReMax@1"], ordergrad_estimator="pkpo"), r"\[1\]='3 ReMax@1'.*k"),
        (dict(ordergrad_reward_objectives=["TopM:2@8", "Mean"]), r"ordergrad_reward_objectives\[0\].*K \(8\)"),
        (dict(ordergrad_reward_objectives=["TopM:5", "Mean"]), r"\[0\]='TopM:5': objective='TopM:5'.*K=4"),
        (dict(ordergrad_reward_objectives=["Mean@0"]), r"ordergrad_reward_objectives: entry 'Mean@0'"),
        (dict(ordergrad_reward_objectives=["Mean"], ordergrad_estimator="pkpo"), r"needs ordergrad_estimator='ordergr"),
        (dict(ordergrad_reward_objectives=["Mean"], ordergrad_schedule=["0 Mean@2"]), r"cannot be combined"),
    ],
)
def test_bad_zoo_config_raises_at_construction(cpu_training_args, overrides, match):
    with pytest.raises(ValueError, match=match):
        config(cpu_training_args, **overrides)


def test_config_resolution(cpu_training_args):
    c = config(cpu_training_args, ordergrad_estimator=" RS_GRPO ", ordergrad_estimator_kwargs='{"beta": "3"}')
    assert c.ordergrad_estimator == "rs_grpo" and c.ordergrad_estimator_kwargs == {"beta": 3}  # JSON from the CLI
    assert c.ordergrad_plan.stages[0].options == {"beta": 3}

    # the std is scale_rewards' alone, applied by the trainer after any estimator (grpo included)
    c = config(cpu_training_args, ordergrad_estimator="grpo", scale_rewards=True)
    assert c.ordergrad_plan.scale == "group" and c.ordergrad_plan.stages[0].options == {}
    assert config(cpu_training_args).ordergrad_plan.scale == "none"

    c = config(cpu_training_args, ordergrad_estimator="pkpo", ordergrad_schedule=["0 ReMax@6", "50 ReMax@2"])
    assert (c.ordergrad_objective, c.ordergrad_k) == (None, None)  # the fields keep what was set; the plan trains
    stages = c.ordergrad_plan.stages
    assert [(s.start_step, s.objective, s.k) for s in stages] == [(0, "ReMax", 6), (50, "ReMax", 2)]
    assert [(s.start_step, s.k) for s in c.ordergrad_stages()] == [(0, 6), (50, 2)]

    c = config(cpu_training_args, ordergrad_k=3, ordergrad_reward_objectives=["0,0,0.5,0.5@4", " Mean "])
    assert c.ordergrad_reward_specs() == [("0,0,0.5,0.5", 4), ("Mean", 3)]  # K defaults to ordergrad_k


def test_trl_parser_yaml_and_cli(tmp_path, cpu_training_args):
    from trl import TrlParser

    cli = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--report_to", "none",
           "--per_device_train_batch_size", "16"]  # fmt: skip

    def parse(argv):  # a fresh parser each time: a --config file sets the parser's defaults for good
        return TrlParser((OrderGradConfig,)).parse_args_and_config(cli + argv)

    (args,) = parse(
        ["--num_generations", "16", "--ordergrad_schedule", "0 ReMax@8", "100 TopM:2@4", "200 Mean@1",
               "--ordergrad_estimator", "ordergrad"]
    )  # fmt: skip
    assert args.ordergrad_schedule == ["0 ReMax@8", "100 TopM:2@4", "200 Mean@1"]
    assert [(s.start_step, s.objective, s.k) for s in args.ordergrad_stages()] == [
        (0, "ReMax", 8), (100, "TopM:2", 4), (200, "Mean", 1)
    ]  # fmt: skip
    (args,) = parse(
        ["--ordergrad_estimator", "rs_grpo", "--ordergrad_estimator_kwargs", '{"beta": 0.5}']
    )
    assert args.ordergrad_estimator_kwargs == {"beta": 0.5}
    (args,) = parse(["--ordergrad_reward_objectives", "TopM:2@4", "Mean"])
    assert args.ordergrad_reward_specs() == [("TopM:2", 4), ("Mean", 4)]

    yaml_file = tmp_path / "zoo.yaml"
    yaml_file.write_text(
        "num_generations: 16\n"
        "ordergrad_schedule: ['0 ReMax@8', '100 ReMax@4', '200 ReMax@2']\n"
        "ordergrad_estimator: pkpo\n"
    )
    (args,) = parse(["--config", str(yaml_file)])
    assert [s.k for s in args.ordergrad_stages()] == [8, 4, 2] and args.ordergrad_estimator == "pkpo"
    yaml_file.write_text(
        "ordergrad_estimator: rs_grpo\nordergrad_estimator_kwargs: {beta: 4.0}\n"
    )
    with pytest.raises(ValueError, match=r"pkpo: k must be an integer >= 2, got 1"):
        parse(["--config", str(yaml_file), "--ordergrad_estimator", "pkpo",
                                            "--ordergrad_estimator_kwargs", "{}", "--num_generations", "16",
                                            "--ordergrad_schedule", "0 ReMax@4", "9 Mean@1"])  # fmt: skip
    (args,) = parse(["--config", str(yaml_file)])
    assert args.ordergrad_estimator_kwargs == {"beta": 4.0}
    # a YAML value for a dict field given as a JSON string works too (as for TRL's model_init_kwargs)
    yaml_file.write_text("ordergrad_estimator: rs_grpo\nordergrad_estimator_kwargs: '{\"beta\": 4.0}'\n")
    (args,) = parse(["--config", str(yaml_file)])
    assert args.ordergrad_estimator_kwargs == {"beta": 4.0}
