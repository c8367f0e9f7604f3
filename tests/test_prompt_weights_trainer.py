"""`ordergrad_prompt_weight` in `OrderGradTrainer` on a tiny random Qwen2 (CPU, offline): every generation batch's
advantages equal the brute-force oracle (subset enumeration for the estimator, tests/test_prompt_weights.py's
exact-fraction histogram for CurveRL's window, run over the batches in order), the metrics are logged, a resumed
run continues the window exactly, and two processes hold the same window (tests/helpers/dist_worker.py, mode
`curverl`)."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
from datasets import Dataset
from transformers import AutoModelForCausalLM

from helpers.prompt_weight_oracle import oracle_weights
from test_trainer import WORKER, _h, brute_force_advantages, combine
from ordergrad_trl import OrderGradConfig, OrderGradTrainer
from helpers import bounded

G, WEIGHTS = 6, [0.2, 0.3, 0.5]


class Recorder(OrderGradTrainer):
    """Records each generation call's gathered rewards and the advantages it returned (one process: all of them)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.calls.append({"rewards": rewards.view(-1).tolist()})
        return rewards

    def _generate_and_score_completions(self, inputs):
        window = self.ordergrad_prompt_window
        before = window.state_dict() if window is not None else None
        output = super()._generate_and_score_completions(inputs)
        self.calls[-1].update(advantages=output["advantages"].tolist(), window_before=before)
        return output


def correct(completion_ids, **kwargs):  # None, 0 or 1, deterministic in the completion
    return [None if _h(ids) < 2 else float(_h(ids) % 2) for ids in completion_ids]


def make(model_dir, tokenizer, output_dir, prompt_weight, window=1, max_steps=3, reward=correct, **extra):
    rewards = reward if isinstance(reward, list) else [reward]
    args = OrderGradConfig(
        output_dir=str(output_dir), per_device_train_batch_size=4 * G, num_generations=G, ordergrad_k=len(WEIGHTS),
        ordergrad_objective=",".join(map(str, WEIGHTS)), ordergrad_prompt_weight=prompt_weight,
        ordergrad_prompt_weight_window=window, max_completion_length=4, max_steps=max_steps, learning_rate=0.05,
        **{**dict(bf16=False, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
                  dataloader_num_workers=0, seed=0), **extra},
    )  # fmt: skip
    dataset = Dataset.from_dict({"prompt": [f"Question {i}: what is {i} plus {2 * i}?" for i in range(16)]})
    return Recorder(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=rewards, args=args,
                    train_dataset=dataset, processing_class=tokenizer)  # fmt: skip


def expected_advantages(calls, setting, window):
    batches = [[c["rewards"][s : s + G] for s in range(0, len(c["rewards"]), G)] for c in calls]
    weights = oracle_weights(batches, setting, window)
    return [[a * w for g, w in zip(groups, ws) for a in brute_force_advantages(g, WEIGHTS)]
            for groups, ws in zip(batches, weights)], weights  # fmt: skip


@pytest.mark.parametrize("setting", ["inverse", "curverl", "gaussian:0.5,0.3"])
def test_each_prompt_weight_trains_with_the_oracles_advantages(tiny_model_dir, tiny_tokenizer, tmp_path, setting):
    trainer = make(tiny_model_dir, tiny_tokenizer, tmp_path / "out", setting)
    trainer.train()
    expected, weights = expected_advantages(trainer.calls, setting, window=1)
    assert len(trainer.calls) == 3
    for call, want in zip(trainer.calls, expected):
        assert call["advantages"] == pytest.approx(want, abs=1e-5)
    flat = [w for ws in weights for w in ws]
    assert any(w > 0 for w in flat) and len(set(flat)) > 1, "the batches must exercise the weight"
    logged = [h for h in trainer.state.log_history if "ordergrad/prompt_weight/mean" in h]
    assert len(logged) == 3
    for h, ws in zip(logged, weights):
        assert h["ordergrad/prompt_weight/mean"] == pytest.approx(sum(ws) / len(ws), abs=1e-6)
        assert h["ordergrad/prompt_weight/max"] == pytest.approx(max(ws), abs=1e-6)
        assert h["ordergrad/prompt_weight/frac_zero"] == pytest.approx(sum(w == 0 for w in ws) / len(ws))
        assert ("ordergrad/prompt_weight/window" in h) == (setting == "curverl")
    if setting == "curverl":  # the rates held before each batch: none, then the previous batch's (window 1)
        assert [h["ordergrad/prompt_weight/window"] for h in logged][0] == 0
    resolved = json.loads((tmp_path / "out" / "ordergrad_resolved_config.json").read_text())
    assert resolved["ordergrad_plan"]["prompt_weight"]["weight"] == setting


def test_a_resumed_run_continues_the_window_exactly(tiny_model_dir, tiny_tokenizer, tmp_path):
    whole = make(tiny_model_dir, tiny_tokenizer, tmp_path / "whole", "curverl", window=2, max_steps=3,
                 save_strategy="steps", save_steps=1)  # fmt: skip
    whole.train()
    saved = json.loads((tmp_path / "whole" / "checkpoint-2" / "trainer_state.json").read_text())
    assert saved["stateful_callbacks"]["PromptWindowState"]["attributes"]["saved"] == whole.calls[2]["window_before"]

    resumed = make(tiny_model_dir, tiny_tokenizer, tmp_path / "whole", "curverl", window=2, max_steps=3,
                   save_strategy="steps", save_steps=1)  # fmt: skip
    resumed.train(resume_from_checkpoint=str(tmp_path / "whole" / "checkpoint-2"))
    assert len(resumed.calls) == 1  # only step 3 ran
    step3, uninterrupted = resumed.calls[0], whole.calls[2]
    assert step3["window_before"] == uninterrupted["window_before"] and step3["window_before"]["batches"]
    # the same batch (data order and sampling RNG restored) gets the same advantages, to the bit
    assert json.dumps(step3["rewards"]) == json.dumps(uninterrupted["rewards"])  # NaN (unscorable) compares equal
    assert step3["advantages"] == uninterrupted["advantages"]
    # and both equal the oracle run over all three batches
    expected, _ = expected_advantages(whole.calls, "curverl", window=2)
    assert step3["advantages"] == pytest.approx(expected[2], abs=1e-5)


def test_a_checkpoint_without_a_window_starts_empty_with_a_warning(tiny_model_dir, tiny_tokenizer, tmp_path, caplog):
    first = make(tiny_model_dir, tiny_tokenizer, tmp_path / "run", "none", max_steps=1, save_strategy="steps",
                 save_steps=1)  # fmt: skip
    first.train()
    resumed = make(tiny_model_dir, tiny_tokenizer, tmp_path / "run", "curverl", max_steps=2)
    with caplog.at_level("WARNING"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    assert resumed.calls[0]["window_before"]["batches"] == []
    assert "holds no prompt-weight window" in caplog.text


def test_a_hand_edited_window_is_refused_by_name(tiny_model_dir, tiny_tokenizer, tmp_path):
    first = make(tiny_model_dir, tiny_tokenizer, tmp_path / "run", "curverl", max_steps=1, save_strategy="steps",
                 save_steps=1)  # fmt: skip
    first.train()
    path = tmp_path / "run" / "checkpoint-1" / "trainer_state.json"
    state = json.loads(path.read_text())
    state["stateful_callbacks"]["PromptWindowState"]["attributes"]["saved"]["batches"] = [[2.0]]
    path.write_text(json.dumps(state))
    resumed = make(tiny_model_dir, tiny_tokenizer, tmp_path / "run", "curverl", max_steps=2)
    with pytest.raises(ValueError, match="prompt-weight window is malformed"):
        resumed.train(resume_from_checkpoint=str(path.parent))


def test_rewards_outside_the_range_are_refused_at_the_first_batch(tiny_model_dir, tiny_tokenizer, tmp_path):
    def half(completion_ids, **kwargs):
        return [0.5] * len(completion_ids)

    trainer = make(tiny_model_dir, tiny_tokenizer, tmp_path / "out", "inverse", max_steps=1, reward=half)
    with pytest.raises(ValueError, match=r"ordergrad_prompt_weight='inverse': rewards must be 0 or 1"):
        trainer.train()


def test_two_processes_hold_the_same_window(tiny_model_dir, tmp_path):
    out = tmp_path / "dist"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [str(WORKER), str(tiny_model_dir), str(out), "curverl"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    check_curverl_ranks(ranks)


def check_curverl_ranks(ranks: list[dict]) -> None:
    """Both ranks of tests/helpers/dist_worker.py's `curverl` modes (DDP, ZeRO): every rank's advantages equal the
    oracle on the gathered batch, steps in order through one window, and both ranks hold the same window after each
    step."""
    cfg = ranks[0]["config"]
    group, weights = cfg["num_generations"], cfg["weights"]
    batches, gathered = [], []
    for step in range(len(ranks[0]["calls"])):
        calls = [r["calls"][step] for r in ranks]
        rewards = [combine(f, cfg["reward_weights"]) for c in calls for f in c["rewards"]]
        batches.append([rewards[s : s + group] for s in range(0, len(rewards), group)])
        gathered.append(calls)
    expected = oracle_weights(batches, "curverl", cfg["prompt_weight_window"])
    assert any(0 < w for ws in expected for w in ws)
    for calls, groups, ws in zip(gathered, batches, expected):
        want = [a * w for g, w in zip(groups, ws) for a in brute_force_advantages(g, weights)]
        n_local = len(calls[0]["prompts"])
        for rank, call in enumerate(calls):
            assert call["advantages"] == pytest.approx(want[rank * n_local : (rank + 1) * n_local], abs=1e-5)
    assert ranks[0]["windows"] == ranks[1]["windows"] and ranks[0]["windows"][-1]["pushed"] == len(batches)


def test_per_reward_objectives_compose_with_a_prompt_weight(tiny_model_dir, tiny_tokenizer, tmp_path):
    """p_hat is read from the weighted sum of the reward functions (a None counting 0, as TRL sums them); the weight
    multiplies the per-function advantages' sum."""

    def zero(completion_ids, **kwargs):  # weight 0: the sum is `correct` with its None as 0
        return [0.0] * len(completion_ids)

    trainer = make(tiny_model_dir, tiny_tokenizer, tmp_path / "out", "inverse", max_steps=2, reward=[correct, zero],
                   ordergrad_reward_objectives=["0.2,0.3,0.5@3", "Mean@1"], reward_weights=[1.0, 0.0])
    trainer.train()
    for call in trainer.calls:
        per_func = call["rewards"]  # (N_global * 2,) flattened rows of (correct, zero)
        first = per_func[0::2]
        want = []
        for s in range(0, len(first), G):
            group = first[s : s + G]
            summed = [0.0 if math.isnan(r) else r for r in group]
            p_hat = sum(summed) / G
            w = 1 / p_hat if p_hat > 0 else 0.0
            want += [a * w for a in brute_force_advantages(group, WEIGHTS)]
        assert call["advantages"] == pytest.approx(want, abs=1e-5)
    assert any(abs(a) > 0 for c in trainer.calls for a in c["advantages"])


@pytest.mark.parametrize("window,steps,batch,warned", [(10, 8, 64, True), (10, 40, 64, False), (4, 100, 128, False),
                                                        (2, 100, 64, True)])  # fmt: skip
def test_curverl_warns_when_its_window_cannot_fill_its_bins(tmp_path, caplog, window, steps, batch, warned):
    """The rule: min(W, max_steps - 1) x B < 2 (N - 1) = 30 at N = 16, B = generation batch / N prompts: 4 with a
    batch of 64 (the digits20 crossover: min(10, 7) x 4 = 28, warned), 8 with 128 (4 x 8 = 32, not)."""
    import logging

    from ordergrad_trl import OrderGradConfig

    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.training.config"):
        OrderGradConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", num_generations=16,
                        per_device_train_batch_size=batch, max_steps=steps, ordergrad_objective="Mean",
                        ordergrad_k=1, ordergrad_prompt_weight="curverl",
                        ordergrad_prompt_weight_window=window)  # fmt: skip
    said = [r.getMessage() for r in caplog.records if "weight 0" in r.getMessage()]
    assert bool(said) == warned, said
    if warned:
        assert "ordergrad_prompt_weight_window" in said[0] and "max_steps" in said[0]
