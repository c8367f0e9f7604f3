"""OrderGradTrainer end to end on a tiny random Qwen2 (CPU, offline).

The oracle for "the advantage that reaches the loss" is the subset enumeration of tests/helpers/oracle.py, independent
of `ordergrad_trl.core.advantage`: for a group with n > K scorable rewards,

    A_i = K * ( mean_{S ∋ i, |S|=K} L(S)  -  mean_{S ⊆ others, |S|=K} L(S) ),   L(S) = sum_j w_j sorted(S)_j,

enumerating every subset; unscorable rollouts (all reward functions None) get 0, as does every rollout of a group
with n <= K scorable ones. Rows are recorded in `compute_loss` (after TRL's shuffle) and matched to the rewards
the reward functions returned through their completion token ids.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from helpers.estimator_cases import TRAINER_OBJECTIVE, TRAINER_WEIGHTS
from helpers.oracle import brute_advantage, brute_value
from ordergrad_trl import OrderGradConfig, OrderGradTrainer
from helpers import bounded

G, K = 6, 4
WEIGHTS = TRAINER_WEIGHTS  # ascending and asymmetric, so a reversed or shuffled order cannot pass
OBJECTIVE = TRAINER_OBJECTIVE
REWARD_WEIGHTS = [1.0, 0.5]
WORKER = Path(__file__).resolve().parent / "helpers" / "dist_worker.py"


# ----------------------------------------------------------------------------------------------- oracle


def brute_force_advantages(rewards, weights):
    """K * the enumerated leave-one-out advantage over the scorable rewards; NaN (and groups of <= K) -> 0."""
    k = len(weights)
    valid = [i for i, r in enumerate(rewards) if not math.isnan(r)]
    out = [0.0] * len(rewards)
    if len(valid) > k:
        for i, a in zip(valid, brute_advantage([rewards[i] for i in valid], weights)):
            out[i] = k * a
    return out


def brute_force_value(rewards, weights):
    valid = [r for r in rewards if not math.isnan(r)]
    return brute_value(valid, weights) if len(valid) >= len(weights) else math.nan


def combine(per_func, reward_weights):
    """TRL's sum_then_normalize sum: a None counts as 0 unless every function returned None (then NaN)."""
    if all(r is None for r in per_func):
        return math.nan
    return sum(w * r for w, r in zip(reward_weights, per_func) if r is not None)


# ----------------------------------------------------------------------------------------------- setup


def _h(ids) -> int:
    return int(hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest(), 16) % 12


def make_reward_funcs(log):
    """Two deterministic functions of the completion ids: ties everywhere, some None, some all-None rows."""

    def correct(completion_ids, **kwargs):  # None, 0 or 1
        out = [None if _h(ids) < 4 else float(_h(ids) % 2) for ids in completion_ids]
        for ids, r in zip(completion_ids, out):
            log[tuple(ids)][0] = r
        return out

    def fmt(completion_ids, **kwargs):  # None (only where `correct` is None too), 0 or 2
        out = [None if _h(ids) < 3 else (2.0 if _h(ids) % 3 == 0 else 0.0) for ids in completion_ids]
        for ids, r in zip(completion_ids, out):
            log[tuple(ids)][1] = r
        return out

    return [correct, fmt]


class RecordingTrainer(OrderGradTrainer):
    """Records, for every row that reaches the loss, its prompt and completion ids and its advantage."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_rows = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        p_ids, p_mask = inputs["prompt_ids"], inputs["prompt_mask"].bool()
        c_ids, c_mask = inputs["completion_ids"], inputs["completion_mask"].bool()
        for i, adv in enumerate(inputs["advantages"].tolist()):
            self.loss_rows.append(
                {
                    "mode": mode,
                    "step": self.state.global_step,
                    "prompt": tuple(p_ids[i][p_mask[i]].tolist()),
                    "completion": tuple(c_ids[i][c_mask[i]].tolist()),
                    "advantage": adv,
                }
            )
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def prompts_dataset(n=8, offset=0):
    return Dataset.from_dict({"prompt": [f"Question {offset + i}: what is {i} plus {i + 1}?" for i in range(n)]})


def make_trainer(model, tokenizer, training_args, trainer_cls=RecordingTrainer, reward_log=None, **overrides):
    reward_log = defaultdict(lambda: [None, None]) if reward_log is None else reward_log
    config = dict(
        training_args,
        per_device_train_batch_size=2 * G,
        num_generations=G,
        ordergrad_k=K,
        ordergrad_objective=OBJECTIVE,
        reward_weights=REWARD_WEIGHTS,
        max_completion_length=8,
        max_steps=2,
        learning_rate=0.1,
    )
    config.update({k: v for k, v in overrides.items() if k not in ("eval_dataset", "peft_config")})
    trainer = trainer_cls(
        model=model,
        reward_funcs=make_reward_funcs(reward_log),
        args=OrderGradConfig(**config),
        train_dataset=prompts_dataset(),
        eval_dataset=overrides.get("eval_dataset"),
        processing_class=tokenizer,
        peft_config=overrides.get("peft_config"),
    )
    trainer.reward_log = reward_log
    return trainer


def check_loss_rows(rows, reward_log, group_size, weights=WEIGHTS, transform=None):
    """Assert every recorded advantage equals the oracle; returns per-step expectations and coverage counts."""
    groups = defaultdict(list)
    for row in rows:
        groups[(row["mode"], row["step"], row["prompt"])].append(row)
    per_step = defaultdict(lambda: {"adv": [], "values": [], "zero_groups": 0, "groups": 0})
    cover = defaultdict(int)
    for (mode, step, _), members in groups.items():
        assert len(members) == group_size, "a prompt's group must reach the loss whole"
        per_func = [reward_log[m["completion"]] for m in members]
        rewards = [combine(r, REWARD_WEIGHTS) for r in per_func]
        if transform is not None:
            rewards = [transform(r) for r in rewards]
        expected = brute_force_advantages(rewards, weights)
        got = [m["advantage"] for m in members]
        assert got == pytest.approx(expected, abs=1e-5), (rewards, got, expected)

        stats = per_step[(mode, step)]
        stats["adv"] += expected
        stats["values"].append(brute_force_value(rewards, weights))
        stats["groups"] += 1
        stats["zero_groups"] += all(abs(e) < 1e-9 for e in expected)
        valid = [r for r in rewards if not math.isnan(r)]
        cover["unscorable"] += len(rewards) - len(valid)
        cover["partial_none"] += sum(any(r is None for r in f) and not all(r is None for r in f) for f in per_func)
        signal = any(abs(e) > 1e-6 for e in expected)
        cover["nonzero_groups"] += signal
        cover["tied_groups_with_signal"] += signal and len(set(valid)) < len(valid)
        cover["groups_with_signal_and_unscorable"] += signal and len(valid) < len(rewards)
        cover["groups_too_few_scorable"] += len(valid) <= len(weights)
    return per_step, cover


def check_metrics(log_history, per_step, mode="train"):
    """ordergrad/* metrics equal the oracle's batch statistics."""
    logged = [h for h in log_history if "ordergrad/adv_abs_mean" in h]
    assert len(logged) == len(per_step)
    for h, (_, stats) in zip(logged, sorted(per_step.items())):
        assert h["ordergrad/adv_abs_mean"] == pytest.approx(
            sum(abs(a) for a in stats["adv"]) / len(stats["adv"]), abs=1e-5
        )
        assert h["ordergrad/frac_zero_adv_groups"] == pytest.approx(stats["zero_groups"] / stats["groups"])
        values = [v for v in stats["values"] if not math.isnan(v)]
        assert h["ordergrad/objective"] == pytest.approx(sum(values) / len(values), abs=1e-5)


# ----------------------------------------------------------------------------------------------- tests


def test_train_two_steps_advantages_reach_loss_and_every_parameter_changes(
    tiny_model, tiny_tokenizer, cpu_training_args
):
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, log_completions=True)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    rows = trainer.loss_rows
    assert len(rows) == 2 * 2 * G and {r["step"] for r in rows} == {0, 1}
    per_step, cover = check_loss_rows(rows, trainer.reward_log, G)
    # the batch must exercise what the test claims to cover, or the oracle comparison proves little
    assert cover["unscorable"] and cover["partial_none"] and cover["tied_groups_with_signal"], cover
    assert cover["groups_with_signal_and_unscorable"] and cover["groups_too_few_scorable"], cover
    check_metrics(trainer.state.log_history, per_step)

    # the completions table shows our advantages (the last generation batch), not GRPO's
    last_step = [r["advantage"] for r in rows if r["step"] == 1]
    assert sorted(trainer._logs["advantages"]) == pytest.approx(sorted(last_step), abs=1e-6)

    for name, param in before.items():
        assert not torch.equal(param, trainer.model.get_parameter(name)), f"{name} did not change"


def test_two_processes_each_rank_gets_its_slice(tiny_model_dir, tmp_path):
    out = tmp_path / "dist"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [str(WORKER), str(tiny_model_dir), str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    check_two_ranks(ranks)


def check_two_ranks(ranks: list[dict]) -> None:
    """The two ranks' records of tests/helpers/dist_worker.py (any engine): every rank's advantages equal the
    brute-force oracle on the gathered rewards, a group straddles the ranks, and the rows reaching each loss carry
    them."""
    cfg = ranks[0]["config"]
    group_size, weights = cfg["num_generations"], cfg["weights"]
    n_steps = len(ranks[0]["calls"])
    assert n_steps == 2 and all(len(r["calls"]) == n_steps for r in ranks)
    straddled = 0
    for step in range(n_steps):
        calls = [r["calls"][step] for r in ranks]
        n_local = len(calls[0]["prompts"])
        prompts = sum((c["prompts"] for c in calls), [])
        rewards = [combine(f, cfg["reward_weights"]) for c in calls for f in c["rewards"]]
        expected = []
        for start in range(0, len(prompts), group_size):
            assert len(set(prompts[start : start + group_size])) == 1, "groups must be contiguous"
            group = brute_force_advantages(rewards[start : start + group_size], weights)
            expected += group
            # a group split between the ranks, with a learning signal, must come out right
            straddled += start < n_local < start + group_size and any(abs(a) > 1e-6 for a in group)
        assert len(set(prompts[::group_size])) == len(prompts) // group_size
        for rank, call in enumerate(calls):
            local = expected[rank * n_local : (rank + 1) * n_local]
            assert call["advantages"] == pytest.approx(local, abs=1e-5), (rank, step, rewards)
            # the rows that reached this rank's loss carry the same advantages, whatever TRL's shuffle did
            by_completion = dict(zip(map(tuple, call["completion_ids"]), local))
            reached = [r for r in ranks[rank]["loss_rows"] if r["step"] == step]
            assert len(reached) == n_local
            for row in reached:
                assert row["advantage"] == pytest.approx(by_completion[tuple(row["completion"])], abs=1e-5)
        assert any(abs(a) > 1e-6 for a in expected)
    assert straddled, "the batch layout was meant to split a group across the two processes"
    # metrics come from gathered tensors: identical on every rank
    metrics = [[{k: v for k, v in h.items() if k.startswith("ordergrad/")} for h in r["log_history"]] for r in ranks]
    assert metrics[0] == metrics[1] and any(metrics[0])


@pytest.mark.parametrize("num_generations_eval", [G, 1])
def test_eval_mode(tiny_model, tiny_tokenizer, cpu_training_args, num_generations_eval):
    n_prompts = 2
    trainer = make_trainer(
        tiny_model,
        tiny_tokenizer,
        cpu_training_args,
        num_generations_eval=num_generations_eval,
        per_device_eval_batch_size=n_prompts * num_generations_eval,
        eval_dataset=prompts_dataset(n_prompts, offset=100),
    )
    metrics = trainer.evaluate()

    rows = [r for r in trainer.loss_rows if r["mode"] == "eval"]
    assert len(rows) == n_prompts * num_generations_eval
    per_step, _ = check_loss_rows(rows, trainer.reward_log, num_generations_eval)
    if num_generations_eval > K:
        assert metrics["eval_ordergrad/objective"] == pytest.approx(
            sum(v for v in per_step[("eval", 0)]["values"] if not math.isnan(v)) / n_prompts, abs=1e-5
        )
        assert metrics["eval_ordergrad/adv_abs_mean"] > 0
    else:
        # undefined with N <= K: zeros, no crash, and no objective value logged
        assert all(r["advantage"] == 0.0 for r in rows)
        assert "eval_ordergrad/objective" not in metrics
        assert metrics["eval_ordergrad/adv_abs_mean"] == 0.0
        assert metrics["eval_ordergrad/frac_zero_adv_groups"] == 1.0


def test_lora(tiny_model, tiny_tokenizer, cpu_training_args):
    from peft import LoraConfig

    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, peft_config=peft_config, max_steps=3)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    check_loss_rows(trainer.loss_rows, trainer.reward_log, G)
    lora = [n for n in before if "lora_" in n]
    assert lora
    for name, param in before.items():
        changed = not torch.equal(param, trainer.model.get_parameter(name))
        assert changed == (name in lora), f"{name}: changed={changed}"


def test_save_checkpoint_and_resume(tiny_model_dir, tiny_tokenizer, cpu_training_args):
    from transformers import AutoModelForCausalLM

    args = dict(cpu_training_args, save_strategy="steps", save_steps=2)
    first = make_trainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tiny_tokenizer, args)
    first.train()
    checkpoint = Path(args["output_dir"]) / "checkpoint-2"
    assert (checkpoint / "trainer_state.json").is_file()

    resumed = make_trainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tiny_tokenizer, args, max_steps=3)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 3
    assert {r["step"] for r in resumed.loss_rows} == {2}  # only the new step ran
    per_step, _ = check_loss_rows(resumed.loss_rows, resumed.reward_log, G)
    assert any(h.get("step") == 3 and "ordergrad/adv_abs_mean" in h for h in resumed.state.log_history)


def test_documented_subclass_override_reaches_the_loss(tiny_model, tiny_tokenizer, cpu_training_args):
    class SolvedAtKTrainer(RecordingTrainer):  # the compute_advantages docstring example
        def compute_advantages(self, rewards):  # (num_groups, N)
            assert rewards.shape == (2, G)
            solved = torch.where(rewards.isnan(), rewards, (rewards >= 1.0).to(rewards.dtype))
            return super().compute_advantages(solved)

    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, trainer_cls=SolvedAtKTrainer)
    trainer.train()
    _, cover = check_loss_rows(
        trainer.loss_rows, trainer.reward_log, G, transform=lambda r: r if math.isnan(r) else float(r >= 1.0)
    )
    assert cover["nonzero_groups"]
