"""OrderGradTrainer without a training loop: advantages (Mean is RLOO, every `scale_rewards`) against the subset
enumeration, the model card, and the rejection of a plain GRPOConfig."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch
from test_trainer import (
    G,
    REWARD_WEIGHTS,
    WEIGHTS,
    brute_force_advantages,
    combine,
    make_reward_funcs,
    make_trainer,
    prompts_dataset,
)

from ordergrad_trl import OrderGradTrainer


@pytest.fixture
def bare_trainer(tiny_model, tiny_tokenizer, cpu_training_args):
    def build(**overrides):
        return make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, **overrides)

    return build


def test_mean_reproduces_rloo(bare_trainer):
    trainer = bare_trainer(ordergrad_objective="Mean", ordergrad_k=3)
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.5, 3.0, -2.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])  # (2, 6)
    n = rewards.shape[1]
    rloo = rewards - (rewards.sum(dim=1, keepdim=True) - rewards) / (n - 1)
    torch.testing.assert_close(trainer.compute_advantages(rewards), rloo, atol=1e-6, rtol=0)


@pytest.mark.parametrize("scale_rewards", ["none", "group", "batch", True, False])
def test_scale_rewards(bare_trainer, scale_rewards):
    trainer = bare_trainer(scale_rewards=scale_rewards)
    nan = math.nan
    per_func = torch.tensor(  # (12, 2): two groups of G=6, with a row unscorable and a row half-scored
        [[1, 2], [0, 0], [nan, nan], [1, 0], [nan, 2], [0, 2], [1, 0], [1, 0], [0, 0], [0, 2], [1, 2], [0, nan]],
        dtype=torch.float32,
    )
    rewards = [combine([None if math.isnan(v) else v for v in row], REWARD_WEIGHTS) for row in per_func.tolist()]
    groups = [rewards[:G], rewards[G:]]
    expected = [brute_force_advantages(g, WEIGHTS) for g in groups]

    def std(values):  # Bessel-corrected, NaN dropped, as TRL's nanstd
        v = [x for x in values if not math.isnan(x)]
        mean = sum(v) / len(v)
        return math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1))

    mode = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)
    if mode == "group":
        expected = [[a / (std(g) + 1e-4) for a in e] for e, g in zip(expected, groups)]
    elif mode == "batch":
        expected = [[a / (std(rewards) + 1e-4) for a in e] for e in expected]
    got = trainer._ordergrad_batch(per_func, G, "train").advantages
    assert got.tolist() == pytest.approx(sum(expected, []), abs=1e-5)
    assert got[2] == 0.0


@pytest.mark.parametrize(
    "overrides, names",
    [
        ({}, "objective TopM:2 over K=4 of N=6 rollouts per prompt, estimator ordergrad"),
        (dict(ordergrad_objective="CVaR:0.5", ordergrad_k=2, ordergrad_estimator="pkpo"),
         "objective CVaR:0.5 over K=2 of N=6 rollouts per prompt, estimator pkpo"),
        (dict(ordergrad_reward_objectives=["TopM:2@4", "Mean@1"]),
         "objectives TopM:2 over K=4 on correct, Mean over K=1 on fmt of N=6"),
        (dict(ordergrad_schedule=["0 ReMax@4", "3 Mean@1"]),
         "objective schedule ReMax over K=4 from step 0, Mean over K=1 from step 3 of N=6"),
    ],
)  # fmt: skip
def test_model_card_names_ordergrad_objective_k_and_estimator(bare_trainer, tmp_path, overrides, names):
    overrides = {"ordergrad_objective": "TopM:2", "ordergrad_k": 4, **overrides}
    trainer = bare_trainer(output_dir=str(tmp_path / "card"), **overrides)
    trainer.create_model_card(model_name="my-model", dataset_name="my-data")  # TRL's mechanism, as on save/push
    card = (tmp_path / "card" / "README.md").read_text()
    assert f"This model was trained with OrderGrad ({names}" in card
    assert "[OrderGrad](https://huggingface.co/papers/2606.06096)" in card
    assert "@article{parmas2026ordergrad" in card and "eprint       = {arXiv:2606.06096}" in card
    assert "author       = {Parmas and others}" in card and "DeepSeekMath" not in card
    assert "- ordergrad" in card and "my-data" in card


def test_trainer_rejects_a_plain_grpo_config(tiny_model, tiny_tokenizer, cpu_training_args):
    from trl import GRPOConfig

    with pytest.raises(TypeError, match="OrderGradConfig"):
        OrderGradTrainer(
            model=tiny_model,
            reward_funcs=make_reward_funcs(defaultdict(lambda: [None, None])),
            args=GRPOConfig(**cpu_training_args),
            train_dataset=prompts_dataset(),
            processing_class=tiny_tokenizer,
        )
