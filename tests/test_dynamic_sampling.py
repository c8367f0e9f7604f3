"""`ordergrad_dynamic_sampling` on a tiny random Qwen2 (CPU, offline): the empty groups are the subset-enumeration
oracle's for every estimator; `filter`'s gradient is that of the batch with the empty groups removed by hand, for
each supported loss type; `refill` fills the batch or stops at its round bound; a batch without empty groups trains
bit for bit as `off`; a step without any group skips the update; two processes
(tests/helpers/dynamic_sampling_worker.py) keep the oracle's groups of the gathered batch."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset, IterableDataset
from helpers.oracle import lstat, subset_mean
from test_trainer import brute_force_advantages
from transformers import AutoModelForCausalLM, TrainerCallback

from ordergrad_trl import OrderGradConfig, OrderGradTrainer
from ordergrad_trl.training.dynamic_sampling import DYNAMIC_SAMPLING, empty_groups
from helpers import bounded

WORKER = Path(__file__).resolve().parent / "helpers" / "dynamic_sampling_worker.py"


def prompt_index(prompt: str) -> int:
    return int(prompt.split()[1].rstrip(":"))


def distinct_rewards(varied=lambda i, state: True):
    """A reward function: a fresh value for every rollout of the prompts `varied(index, state)` picks (their group
    is never empty), 1.0 for the others (all equal: empty under every centered estimator)."""
    counter = itertools.count()

    def reward(prompts, completion_ids, trainer_state=None, **kwargs):
        return [float(next(counter)) if varied(prompt_index(p), trainer_state) else 1.0 for p in prompts]

    return reward


def build(model_dir, tokenizer, tmp_path, reward, mode="filter", n_prompts=24, dataset=None, cls=OrderGradTrainer,
          **overrides):  # fmt: skip
    config = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4, ordergrad_k=2,
                  ordergrad_objective="Mean", max_completion_length=4, max_steps=2, learning_rate=0.05,
                  gradient_accumulation_steps=2, ordergrad_dynamic_sampling=mode, bf16=False, use_cpu=True,
                  report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
                  dataloader_num_workers=0)  # fmt: skip
    config.update(overrides)
    if dataset is None:
        dataset = Dataset.from_dict({"prompt": [f"Question {i}: what is {i} plus 1?" for i in range(n_prompts)]})
    return cls(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward,
               args=OrderGradConfig(**config), train_dataset=dataset, processing_class=tokenizer)  # fmt: skip


def logged(trainer, name):
    return [h[name] for h in trainer.state.log_history if name in h]


# ------------------------------------------------------------------------------------------ the empty set


def _groups(n, successes, nan=0):
    """A group of `n` 0/1 rewards with `successes` ones and `nan` unscorable rows, in a fixed shuffled order."""
    values = [1.0] * successes + [0.0] * (n - successes - nan) + [math.nan] * nan
    order = torch.randperm(n, generator=torch.Generator().manual_seed(successes * 31 + nan)).tolist()
    return [values[i] for i in order]


CASES = {  # estimator, objective, K, N, groups (the oracle decides which are empty)
    "remax8_few_failures": ("ordergrad", "ReMax", 8, 16, [_groups(16, s) for s in (0, 7, 8, 9, 12, 15, 16)]),
    "remin4_few_successes": ("ordergrad", "ReMin", 4, 16, [_groups(16, s) for s in (0, 1, 3, 4, 8, 16)]),
    "topm2_4": ("ordergrad", "TopM:2", 4, 16, [_groups(16, s) for s in (1, 8, 13, 14, 15)]),
    "nan_rows": ("ordergrad", "ReMax", 2, 8, [_groups(8, 3, nan=2), _groups(8, 6, nan=2), _groups(8, 2, nan=5),
                                             [math.nan] * 8]),  # fmt: skip
    "rloo_all_equal": ("rloo", "Mean", 2, 8, [[0.5] * 8, [0.5] * 7 + [0.25], _groups(8, 4), [1.0] * 8]),
    "grpo_all_equal": ("grpo", "Mean", 2, 8, [[2.0] * 8, _groups(8, 1), [0.0] * 8]),
}


def oracle_empty(estimator, weights, groups):
    """Empty when every enumerated advantage is 0: subset enumeration for L-statistics, the leave-one-out / group
    mean baseline for rloo / grpo (exact here: all-equal groups are the only ones)."""
    out = []
    for g in groups:
        if estimator == "ordergrad":
            adv = brute_force_advantages(g, weights)
        else:
            valid = [r for r in g if not math.isnan(r)]
            adv = [0.0 if math.isnan(r) else r - sum(valid) / len(valid) for r in g]
        out.append(all(abs(a) < 1e-9 for a in adv))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_empty_groups_are_the_oracles(tiny_model_dir, tiny_tokenizer, tmp_path, case):
    estimator, objective, k, n, groups = CASES[case]
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(), num_generations=n,
                    per_device_train_batch_size=n, ordergrad_objective=objective, ordergrad_k=k,
                    ordergrad_estimator=estimator)  # fmt: skip
    weights = trainer.ordergrad_weights.tolist()
    rewards = torch.tensor(sum(groups, []), dtype=torch.float32).unsqueeze(1)
    got = empty_groups(trainer._ordergrad_batch(rewards, n, "train").advantages.view(-1, n)).tolist()
    want = oracle_empty(estimator, weights, groups)
    assert got == want and any(want) and not all(want)
    if case == "remax8_few_failures":  # 9-15 successes of 16 carry nothing under Max@8 although the rewards vary
        assert want == [True, False, False, True, True, True, True]


# docs/training.md's table: the success counts of 16 whose group is empty although its rewards differ
DOCUMENTED_EMPTY = {("ReMax", 8): [0, *range(9, 17)], ("ReMin", 4): [0, 1, 2, 3, 16], ("TopM:2", 4): [0, 14, 15, 16]}


def _enumerated(rewards, weights, i):
    """Rollout i's leave-one-out advantage by enumerating the K-subsets (tests/helpers/oracle.py's definitions)."""
    others = rewards[:i] + rewards[i + 1 :]
    include = [lstat((rewards[i],) + s, weights) for s in itertools.combinations(others, len(weights) - 1)]
    return sum(include) / len(include) - subset_mean(others, weights)


@pytest.mark.parametrize("objective, k", sorted(DOCUMENTED_EMPTY))
def test_the_documented_empty_counts(tiny_model_dir, tiny_tokenizer, tmp_path, objective, k):
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(), num_generations=16,
                    per_device_train_batch_size=16, ordergrad_objective=objective, ordergrad_k=k)  # fmt: skip
    weights = trainer.ordergrad_weights.tolist()
    groups = [[1.0] * s + [0.0] * (16 - s) for s in range(17)]
    # 0/1 rewards: one success and one failure row give every advantage of the group
    oracle = [s for s, g in enumerate(groups)
              if all(abs(_enumerated(g, weights, i)) < 1e-9 for i in (0, 15))]  # fmt: skip
    rewards = torch.tensor(sum(groups, [])).unsqueeze(1)
    got = empty_groups(trainer._ordergrad_batch(rewards, 16, "train").advantages.view(-1, 16)).nonzero().view(-1).tolist()
    assert got == oracle == DOCUMENTED_EMPTY[(objective, k)]


class Weighted(OrderGradTrainer):
    def compute_prompt_weights(self, rewards):  # the second group weighs 0: varied rewards, no signal
        return torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)


def test_a_prompt_weight_of_zero_makes_a_varied_group_empty(tiny_model_dir, tiny_tokenizer, tmp_path):
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(), cls=Weighted,
                    ordergrad_prompt_weight="inverse", ordergrad_objective="ReMax", ordergrad_k=2)  # fmt: skip
    groups = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0]]
    rewards = torch.tensor(sum(groups, [])).unsqueeze(1)
    got = empty_groups(trainer._ordergrad_batch(rewards, 4, "train").advantages.view(-1, 4)).tolist()
    assert got == [False, True, False] and oracle_empty("ordergrad", [0.0, 1.0], groups) == [False] * 3


# ------------------------------------------------------------------------------------------ filter's loss


def _grads(model):
    return torch.cat([p.grad.reshape(-1).clone() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type, beta", [("dr_grpo", 0.0), ("dr_grpo", 0.1), ("luspo", 0.0), ("dapo", 0.0),
                                             ("dapo", 0.1)])  # fmt: skip
def test_filter_gives_the_gradient_without_the_empty_groups(tiny_model_dir, tiny_tokenizer, tmp_path, loss_type, beta):
    """One generation batch (4 groups, 2 empty) split into the 2 accumulated micro-batches of a step against TRL's
    loss on the kept rows alone as one batch (the hand-removed oracle): the same gradient."""
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(lambda i, s: i % 2 == 1),
                    loss_type=loss_type, beta=beta)  # fmt: skip
    model = trainer.model
    model.train()
    inputs = [{"prompt": f"Question {i}: what is {i} plus 1?"} for i in range(4) for _ in range(4)]
    out = trainer._generate_and_score_completions(inputs)
    assert trainer._metrics["train"]["ordergrad/dynamic_sampling/groups_trained"] == [2.0]
    kept = torch.tensor([prompt_index(x["prompt"]) % 2 == 1 for x in inputs])
    assert (out["advantages"][~kept] == 0).all() and (out["advantages"][kept] != 0).any()

    model.zero_grad()
    trainer.current_gradient_accumulation_steps = 2
    order = torch.randperm(16, generator=torch.Generator().manual_seed(1))  # TRL shuffles before splitting
    for half in order.view(2, 8):
        micro = {k: v[half] if torch.is_tensor(v) and v.dim() else v for k, v in out.items()}
        trainer._compute_loss(model, micro).backward()
    got = _grads(model)

    model.zero_grad()
    by_hand = {k: v[kept] if torch.is_tensor(v) and v.dim() else v for k, v in out.items() if k != "tool_mask"}
    by_hand["num_items_in_batch"] = by_hand["completion_mask"].sum()  # what TRL counts for this batch
    trainer.current_gradient_accumulation_steps, trainer.args.steps_per_generation = 1, 1
    trainer._compute_loss(model, by_hand).backward()
    want = _grads(model)
    assert want.abs().max() > 0
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6 * want.abs().max().item())


# ------------------------------------------------------------------------------------------ training


class Params(TrainerCallback):
    def __init__(self):
        self.after_step = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.after_step.append([p.detach().clone() for p in model.parameters()])


def test_without_empty_groups_every_mode_trains_as_off(tiny_model_dir, tiny_tokenizer, tmp_path):
    finals = {}
    for mode, row in DYNAMIC_SAMPLING.items():  # every registered mode
        trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path / mode, distinct_rewards(), mode=mode)
        trainer.train()
        finals[mode] = [p.detach().clone() for p in trainer.model.parameters()]
        if row.leaves_out is None:  # `off`: no dynamic sampling at all
            assert trainer.ordergrad_dynamic_sampling is None and not logged(trainer, "ordergrad/dynamic_sampling/rounds")
        else:
            assert logged(trainer, "ordergrad/dynamic_sampling/groups_trained") == [4.0, 4.0]
            assert logged(trainer, "ordergrad/dynamic_sampling/rounds") == [1.0, 1.0]
    for mode in DYNAMIC_SAMPLING:
        assert all(torch.equal(a, b) for a, b in zip(finals["off"], finals[mode]))


class Batches(OrderGradTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.batches.append({k: v.clone() for k, v in output.items() if torch.is_tensor(v)})
        return output


def test_refill_fills_the_batch_with_groups_that_carry_a_gradient(tiny_model_dir, tiny_tokenizer, tmp_path):
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(lambda i, s: i % 3 == 0),
                    mode="refill", cls=Batches, ordergrad_dynamic_sampling_max_rounds=20)  # fmt: skip
    trainer.train()
    rounds = logged(trainer, "ordergrad/dynamic_sampling/rounds")
    assert logged(trainer, "ordergrad/dynamic_sampling/groups_trained") == [4.0, 4.0] and max(rounds) > 1
    for batch in trainer.batches:  # every group of the trained batch has a nonzero advantage, all weigh 1
        assert not empty_groups(batch["advantages"].view(-1, 4)).any() and "tool_mask" not in batch
        assert batch["completion_ids"].shape[0] == 8 * 2


def test_refill_stops_at_its_round_bound(tiny_model_dir, tiny_tokenizer, tmp_path, caplog):
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(lambda i, s: i == 5), mode="refill",
                    cls=Batches, ordergrad_dynamic_sampling_max_rounds=2, max_steps=1)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.training.dynamic_sampling"):
        trainer.train()
    assert logged(trainer, "ordergrad/dynamic_sampling/rounds") == [3.0]
    trained = logged(trainer, "ordergrad/dynamic_sampling/groups_trained")[0]
    assert trained < 4 and "after 2 extra rounds" in caplog.text
    weight = trainer.batches[0]["tool_mask"][:, 0]
    empty = empty_groups(trainer.batches[0]["advantages"].view(-1, 4)).repeat_interleave(4)
    assert (weight[empty] == 0).all() and int((weight > 0).sum()) == 4 * trained
    if trained:
        assert torch.allclose(weight[~empty], torch.tensor(4 / trained))


def test_a_step_without_any_group_skips_the_update(tiny_model_dir, tiny_tokenizer, tmp_path, caplog):
    params = Params()
    trainer = build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(lambda i, s: s.global_step == 0),
                    weight_decay=0.1)  # fmt: skip
    trainer.add_callback(params)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.training.dynamic_sampling"):
        trainer.train()
    first, second = params.after_step
    assert not all(torch.equal(a, b) for a, b in zip(before, first))  # step 1 trained (Adam now has momentum)
    assert all(torch.equal(a, b) for a, b in zip(first, second))  # step 2 had no group: nothing moved
    assert logged(trainer, "ordergrad/dynamic_sampling/groups_trained") == [4.0, 0.0]
    assert logged(trainer, "loss")[1] == 0.0 and "optimizer step is skipped" in caplog.text


# ------------------------------------------------------------------------------------------ refused


@pytest.mark.parametrize("overrides, match", [
    (dict(ordergrad_dynamic_sampling="drop"), r"ordergrad_dynamic_sampling must be one of 'off', 'filter', 'refill'"),
    (dict(ordergrad_dynamic_sampling="filter", loss_type="grpo"), r"needs loss_type in 'dr_grpo'.*got 'grpo'"),
    (dict(ordergrad_dynamic_sampling="refill", loss_type="bnpo"), r"needs loss_type in .*got 'bnpo'"),
    (dict(ordergrad_dynamic_sampling="refill", ordergrad_dynamic_sampling_max_rounds=0),
     r"ordergrad_dynamic_sampling_max_rounds must be"),
    (dict(ordergrad_dynamic_sampling="refill", use_vllm=True, vllm_mode="server"), r"vllm_mode='colocate'"),
])  # fmt: skip
def test_unsupported_settings_are_refused_by_name(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        OrderGradConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=4, ordergrad_k=2,
                        per_device_train_batch_size=4, report_to="none", **overrides)  # fmt: skip


def test_refill_refuses_an_iterable_dataset(tiny_model_dir, tiny_tokenizer, tmp_path):
    stream = IterableDataset.from_generator(lambda: ({"prompt": f"Question {i}: hi"} for i in range(8)))
    with pytest.raises(ValueError, match=r"refill' needs a train_dataset with len\(\) and indexing"):
        build(tiny_model_dir, tiny_tokenizer, tmp_path, distinct_rewards(), mode="refill", dataset=stream)


# ------------------------------------------------------------------------------------------ two processes


@pytest.mark.parametrize("mode", ["filter", "refill"])
def test_two_processes_keep_the_oracles_groups(tiny_model_dir, tmp_path, mode):
    out = tmp_path / "dist"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [str(WORKER), str(tiny_model_dir), str(out), mode]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["log_history"] == ranks[1]["log_history"]
    n, n_local = 4, 6  # groups of 4 over 6 rows a process: the second group straddles the processes
    for step, calls in enumerate(zip(*(r["calls"] for r in ranks))):
        for round_index, rewards in enumerate(calls[0]["rewards"]):  # gathered, the same on both ranks
            assert rewards == calls[1]["rewards"][round_index]
        first = calls[0]["rewards"][0]
        empty = oracle_empty("ordergrad", [0.0, 1.0], [first[s : s + n] for s in range(0, len(first), n)])
        weights = calls[0]["weights"] + calls[1]["weights"]  # the trained batch, gathered
        kept = sum(w > 0 for w in weights)
        if mode == "filter":  # the oracle's empty groups weigh 0, the others n / n_kept, on both processes
            assert [w == 0 for w in weights] == [e for e in empty for _ in range(n)]
            assert all(w == pytest.approx(len(weights) / kept) for w in weights if w > 0)
        else:  # refill: round 0's non-empty groups are all kept, the batch holds whole groups
            assert kept >= n * (len(empty) - sum(empty)) and kept % n == 0
    assert any(any(c["weights"]) for c in ranks[0]["calls"])
    if mode == "refill":  # some batch needed an extra round, and its prompts were drawn alike on both ranks
        assert any(len(c["rewards"]) > 1 for c in ranks[0]["calls"])
