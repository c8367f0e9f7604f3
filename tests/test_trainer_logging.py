"""pass@k / pass^k (best@k / worst@k) logged while training and in evaluate(), against brute force over k-subsets.

The oracle enumerates every k-subset of each group's scorable rewards (itertools.combinations) and averages the
subset's best (pass@k, best@k) or worst (pass^k, worst@k) reward: it shares nothing with `lstat_value`. Rewards are
recorded where the reward function returns them, grouped by prompt per call, and the logged metric must equal the
mean of the oracle over every group of the logging window (or of the whole evaluate()).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import defaultdict
from contextlib import contextmanager

import pytest
import torch
from datasets import Dataset

from ordergrad_trl import OrderGradConfig, OrderGradTrainer
from ordergrad_trl.training import trainer as trainer_module
from ordergrad_trl.training.passk import group_passk
from helpers import bounded

G = 4


# ----------------------------------------------------------------------------------------------- oracle


def brute_best_worst(rewards, k):
    """(mean best, mean worst) of k over every k-subset of the non-NaN rewards; None with fewer than k of them."""
    valid = [r for r in rewards if not math.isnan(r)]
    if len(valid) < k:
        return None
    subsets = list(itertools.combinations(valid, k))
    return sum(map(max, subsets)) / len(subsets), sum(map(min, subsets)) / len(subsets)


def expected_metrics(groups, ks, prefix=""):
    """{logged name: mean over groups} of the oracle, named pass@/pass^ for 0/1 rewards, else best@/worst@."""
    binary = all(r in (0.0, 1.0) for g in groups for r in g if not math.isnan(r))
    best, worst = ("pass@", "pass^") if binary else ("best@", "worst@")
    sums = defaultdict(list)
    for group in groups:
        for k in ks:
            got = brute_best_worst(group, k)
            if got is not None:
                sums[f"{prefix}ordergrad/{best}{k}"].append(got[0])
                sums[f"{prefix}ordergrad/{worst}{k}"].append(got[1])
    return {name: sum(v) / len(v) for name, v in sums.items()}


def logged_passk(entry):
    return {k: v for k, v in entry.items() if any(f"/{p}" in k for p in ("pass@", "pass^", "best@", "worst@"))}


# ----------------------------------------------------------------------------------------------- unit


@pytest.mark.parametrize("binary", [True, False])
def test_group_passk_matches_brute_force_and_the_closed_form(binary):
    gen = torch.Generator().manual_seed(0)
    n = 6
    rewards = torch.randint(0, 2, (40, n), generator=gen).double()
    if not binary:
        rewards = rewards * torch.randint(1, 4, (40, n), generator=gen) / 2  # 0, 0.5, 1, 1.5: ties included
    rewards[torch.rand(40, n, generator=gen) < 0.2] = math.nan  # some groups keep fewer than k scorable
    got = group_passk(rewards.float(), [1, 2, 3, 4, 6, 7])
    assert not any(name.endswith("@7") for name in got), "k > N is skipped"
    best, worst = ("pass@", "pass^") if binary else ("best@", "worst@")
    for k in (1, 2, 3, 4, 6):
        oracle = [brute_best_worst(row.tolist(), k) for row in rewards]
        kept = [o for o in oracle if o is not None]
        assert len(kept) < len(oracle) or k < 6  # the NaN rule is exercised
        torch.testing.assert_close(got[f"ordergrad/{best}{k}"], torch.tensor([o[0] for o in kept], dtype=torch.float64))
        torch.testing.assert_close(got[f"ordergrad/{worst}{k}"], torch.tensor([o[1] for o in kept], dtype=torch.float64))
        if binary:  # pass@k = 1 - C(n-c,k)/C(n,k), pass^k = C(c,k)/C(n,k) over the n scorable of each group
            for row, value in zip([r for r, o in zip(rewards, oracle) if o is not None], got[f"ordergrad/pass@{k}"]):
                m, c = int((~row.isnan()).sum()), int(row.nan_to_num().sum())
                assert value.item() == pytest.approx(1 - math.comb(m - c, k) / math.comb(m, k))


def test_default_ks_and_refusals(cpu_training_args):
    args = OrderGradConfig(**cpu_training_args, num_generations=8, num_generations_eval=3)
    assert args.ordergrad_ks(8) == [1, 2, 4, 8] and args.ordergrad_ks(3) == [1, 2] and args.ordergrad_ks(1) == [1]
    args = OrderGradConfig(**cpu_training_args, num_generations=4, num_generations_eval=16, ordergrad_log_ks=[16, 1, 3])
    assert args.ordergrad_ks(4) == [1, 3] and args.ordergrad_ks(16) == [1, 3, 16]  # k=16 only in evaluation
    assert OrderGradConfig(**cpu_training_args, num_generations=4, ordergrad_log_ks=[]).ordergrad_ks(4) == []
    for bad in ([5], [0], [2, 9], ["4"], [2.0], 4, [True]):
        with pytest.raises(ValueError, match="ordergrad_log_ks"):
            OrderGradConfig(**cpu_training_args, num_generations=4, ordergrad_log_ks=bad)


def test_log_ks_from_the_command_line(cpu_training_args):
    from trl import TrlParser

    argv = ["--output_dir", cpu_training_args["output_dir"], "--use_cpu", "--bf16", "false", "--num_generations", "4"]
    (args,) = TrlParser((OrderGradConfig,)).parse_args_and_config([*argv, "--ordergrad_log_ks", "1", "3"])
    assert args.ordergrad_log_ks == [1, 3]


# ----------------------------------------------------------------------------------------------- trainer


def _h(ids) -> int:
    return int(hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest(), 16) % 12


def make_reward(calls, graded):
    """0/1 (or graded 0..2) from the completion ids, None for a quarter; records (prompt, reward) per call."""

    def reward(prompts, completion_ids, **kwargs):
        out = [None if _h(ids) < 3 else (_h(ids) % 5) / 2 if graded else float(_h(ids) % 2) for ids in completion_ids]
        calls.append(list(zip(map(str, prompts), [math.nan if r is None else r for r in out])))
        return out

    return reward


def groups_of(call):
    by_prompt = defaultdict(list)
    for prompt, reward in call:
        by_prompt[prompt].append(reward)
    return list(by_prompt.values())


def make_trainer(model, tokenizer, training_args, calls, graded=False, eval_prompts=0, **overrides):
    config = dict(training_args, per_device_train_batch_size=3 * G, num_generations=G, max_completion_length=6,
                  max_steps=2, learning_rate=0.1, logging_steps=2)  # fmt: skip
    config.update(overrides)
    prompts = [f"Question {i}: what is {i} plus {i + 1}?" for i in range(12 + eval_prompts)]
    return OrderGradTrainer(
        model=model, reward_funcs=make_reward(calls, graded), args=OrderGradConfig(**config),
        train_dataset=Dataset.from_dict({"prompt": prompts[:12]}), processing_class=tokenizer,
        eval_dataset=Dataset.from_dict({"prompt": prompts[12:]}) if eval_prompts else None,
    )  # fmt: skip


@pytest.mark.parametrize("graded", [False, True], ids=["binary", "graded"])
def test_two_steps_log_the_brute_force_mean_over_the_window(tiny_model, tiny_tokenizer, cpu_training_args, graded):
    calls = []
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, calls, graded=graded)
    trainer.train()
    assert len(calls) == 2  # one generation batch per step, both in one logging window (logging_steps=2)
    groups = [g for call in calls for g in groups_of(call)]
    assert len(groups) == 6 and all(len(g) == G for g in groups)
    assert any(sum(not math.isnan(r) for r in g) < G for g in groups), "no unscorable rollout: the NaN rule untested"
    (entry,) = [h for h in trainer.state.log_history if "ordergrad/adv_abs_mean" in h]
    expected = expected_metrics(groups, [1, 2, 4])
    assert set(logged_passk(entry)) == set(expected) and len(expected) == 6
    assert logged_passk(entry) == pytest.approx(expected, abs=1e-6)
    assert any(name.startswith("ordergrad/best@") for name in expected) == graded


@pytest.mark.parametrize("num_generations_eval, ks", [(G, None), (1, None), (8, [1, 3, 8]), (1, [1, 3])])
def test_evaluate_logs_the_brute_force_mean_over_all_eval_groups(
    tiny_model, tiny_tokenizer, cpu_training_args, num_generations_eval, ks
):
    calls = []
    # 3 eval prompts in batches of 2 and 1: the logged value is the mean over the 3 groups, not over the 2 batches
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, calls, eval_prompts=3,
                           num_generations_eval=num_generations_eval, ordergrad_log_ks=ks,
                           per_device_eval_batch_size=2 * num_generations_eval)  # fmt: skip
    metrics = trainer.evaluate()
    assert len(calls) == 2
    groups = [g for call in calls for g in groups_of(call)]
    assert sorted(map(len, groups)) == [num_generations_eval] * 3
    want_ks = [k for k in (ks or [1, 2, 4, 8]) if k <= num_generations_eval]  # k > N is skipped
    expected = expected_metrics(groups, want_ks, prefix="eval_")
    assert logged_passk(metrics) == pytest.approx(expected, abs=1e-6)
    assert {n.rpartition("@")[2].rpartition("^")[2] for n in expected} <= {str(k) for k in want_ks}
    if num_generations_eval == 1:
        assert set(expected) == {"eval_ordergrad/pass@1", "eval_ordergrad/pass^1"}


def test_empty_log_ks_logs_none(tiny_model, tiny_tokenizer, cpu_training_args):
    trainer = make_trainer(tiny_model, tiny_tokenizer, cpu_training_args, [], ordergrad_log_ks=[], max_steps=1,
                           logging_steps=1)  # fmt: skip
    trainer.train()
    entry = next(h for h in trainer.state.log_history if "ordergrad/adv_abs_mean" in h)
    assert not logged_passk(entry)


def test_advantage_stage_runs_inside_trl_profiling_context(tiny_model, tiny_tokenizer, cpu_training_args, monkeypatch):
    """TRL's profiling_context(trainer, name) wraps the OrderGrad stage, so it shows in TRL's profiling/ metrics."""
    inside, seen = [], []
    real = trainer_module.profiling_context

    @contextmanager
    def recording(trainer, name):
        with real(trainer, name):
            inside.append(name)
            yield
            inside.pop()

    class Spy(OrderGradTrainer):
        def compute_advantages(self, rewards):
            seen.append(list(inside))
            return super().compute_advantages(rewards)

    monkeypatch.setattr(trainer_module, "profiling_context", recording)
    calls = []
    trainer = Spy(model=tiny_model, reward_funcs=make_reward(calls, False),
                  args=OrderGradConfig(**cpu_training_args, per_device_train_batch_size=G, num_generations=G,
                                       max_completion_length=4, max_steps=1),
                  train_dataset=Dataset.from_dict({"prompt": ["What is 1 plus 2?"] * 4}),
                  processing_class=tiny_tokenizer)  # fmt: skip
    trainer.train()
    assert seen == [["ordergrad_advantages"]]


# ----------------------------------------------------------------------------------------------- two processes


def test_two_processes_log_the_same_brute_force_values(tiny_model_dir, tmp_path):
    """torchrun, 2 ranks (tests/helpers/dist_worker.py binary): 2 steps in one logging window, then evaluate(); groups
    straddle the ranks. Every rank logs the brute force of the gathered rewards recorded by both ranks."""
    import json
    import os
    import sys
    from pathlib import Path

    from test_trainer import combine

    out = tmp_path / "dist"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    worker = Path(__file__).resolve().parent / "helpers" / "dist_worker.py"
    cmd += [str(worker), str(tiny_model_dir), str(out), "binary"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = bounded.run(cmd, env=env, check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    group_size, weights = ranks[0]["config"]["num_generations"], ranks[0]["config"]["reward_weights"]

    def groups(step):  # the gathered batch: rank 0's rows, then rank 1's; each prompt's rollouts contiguous
        calls = [r["calls"][step] for r in ranks]
        prompts = [p for c in calls for p in c["prompts"]]
        rewards = [combine(f, weights) for c in calls for f in c["rewards"]]
        n_local = len(calls[0]["prompts"])
        starts = range(0, len(prompts), group_size)
        assert all(len(set(prompts[s : s + group_size])) == 1 for s in starts)
        assert any(s < n_local < s + group_size for s in starts), "no group straddles the two ranks"
        return [rewards[s : s + group_size] for s in starts]

    assert [len(r["calls"]) for r in ranks] == [3, 3]  # 2 training steps, 1 evaluation batch
    train, evaluation = groups(0) + groups(1), groups(2)
    assert any(any(math.isnan(x) for x in g) for g in train + evaluation) and len(evaluation) == 3
    for rank in ranks:
        history = rank["log_history"]
        (entry,) = [h for h in history if "ordergrad/adv_abs_mean" in h]  # one window for both steps
        (eval_entry,) = [h for h in history if "eval_ordergrad/adv_abs_mean" in h]
        expected = expected_metrics(train, [1, 2, 4])
        assert "ordergrad/pass@4" in expected and logged_passk(entry) == pytest.approx(expected, abs=1e-6)
        expected = expected_metrics(evaluation, [1, 2, 4], prefix="eval_")
        assert "eval_ordergrad/pass^2" in expected and logged_passk(eval_entry) == pytest.approx(expected, abs=1e-6)


def test_training_logs_and_eval_reports_name_each_statistic_alike():
    """One vocabulary: the names the trainer logs (pass@k, pass^k; best@k, worst@k for other rewards) are the keys
    `ordergrad-eval` reports the same U-statistics under."""
    from ordergrad_trl.evaluation.metrics import METRICS
    from ordergrad_trl.training.passk import FAMILIES

    reported = {m.key.split("{")[0]: m for m in METRICS.values() if m.per_k}
    for binary_name, other_name, preset in FAMILIES:
        assert reported[binary_name].on == "correct" and reported[other_name].on == "reward", (binary_name, other_name)
        assert preset in reported[other_name].as_lstat
