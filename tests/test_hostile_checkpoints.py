"""Issue 63, checkpoints and saves: a damaged checkpoint named by its file, a full disk as one line (exit 1), a missing
optimizer.pt warned about, and a checkpoint from before prompt weights resumable with unchanged settings.

The full disk is a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) on the recipe's process: its writes past the limit
fail as on a full disk (EFBIG for ENOSPC), through the same safetensors and torch.save code.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import pytest

from ordergrad_trl.training import run_identity
from ordergrad_trl.training.checkpoint_checks import CheckpointError, check_checkpoint
from helpers import bounded

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "math_cvar.py"


def _args(out: Path, **kw):
    from helpers.tiny_model import CPU_TRAINING_ARGS

    from ordergrad_trl import OrderGradConfig

    return OrderGradConfig(**{**CPU_TRAINING_ARGS, "output_dir": str(out), "max_steps": 1,
                              "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 4,
                              "ordergrad_k": 2, **kw})


def _data(n: int = 4):
    import datasets

    return datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}?"}], "answer": str(a)}
                                       for a in range(n)])


def ZERO(completions, **kwargs):
    return [0.0] * len(completions)


WINDOW = {"PromptWindowState": {"args": {"size": 10}, "attributes": {"saved": {
    "size": 10, "batches": [[0.25, 0.5]], "pushed": 1}}}}


def _checkpoint(root: Path, model_dir: Path, callbacks: dict | None = None) -> Path:
    """A checkpoint folder as transformers lays it out (weights, trainer_state.json, optimizer.pt), made by hand."""
    ckpt = root / "checkpoint-1"
    ckpt.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model_dir / name, ckpt / name)
    (ckpt / "optimizer.pt").write_bytes(b"")
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 1, "stateful_callbacks": callbacks or {}}))
    return ckpt


@pytest.mark.parametrize("edit", [
    {"batches": [[1.5]]},  # a rate outside (0, 1)
    {"batches": "0.3"},
    {"pushed": "many"},
    None,  # the window's whole entry replaced by a list
])
def test_a_hand_edited_prompt_weight_window_is_named_by_its_file(tmp_path, tiny_model_dir, edit):
    """Issue 63: this failed in the window's loader at on_train_begin, as `the saved prompt-weight window is
    malformed`, naming no file (or as an AttributeError for a list)."""
    callbacks = json.loads(json.dumps(WINDOW))
    if edit is None:
        callbacks["PromptWindowState"]["attributes"] = [1, 2]
    else:
        callbacks["PromptWindowState"]["attributes"]["saved"].update(edit)
    ckpt = _checkpoint(tmp_path / "out", tiny_model_dir, callbacks)
    with pytest.raises(CheckpointError) as err:
        check_checkpoint(ckpt)
    assert str(ckpt / "trainer_state.json") in str(err.value) and "prompt-weight window" in str(err.value)
    check_checkpoint(_checkpoint(tmp_path / "good", tiny_model_dir, WINDOW))  # the window as saved loads


def test_the_trainer_checks_the_checkpoint_state_before_it_resumes(tmp_path, tiny_model_dir):
    """Through `OrderGradTrainer.train`: an edited window is named before anything of the checkpoint loads."""
    from ordergrad_trl import OrderGradTrainer

    args = _args(tmp_path / "out", ordergrad_prompt_weight="curverl")
    trainer = OrderGradTrainer(model=str(tiny_model_dir), reward_funcs=[ZERO], args=args, train_dataset=_data())
    edited = json.loads(json.dumps(WINDOW))
    edited["PromptWindowState"]["attributes"]["saved"]["batches"] = [[2.0]]
    bad = _checkpoint(tmp_path / "edited", tiny_model_dir, edited)
    with pytest.raises(CheckpointError, match="trainer_state.json"):
        trainer.train(resume_from_checkpoint=str(bad))


def test_the_recipe_names_a_cut_short_model_safetensors_before_it_resumes(tmp_path, tiny_model_dir):
    """Issue 63: a truncated checkpoint-1/model.safetensors failed mid-start-up in safetensors (`incomplete metadata,
    file not fully covered`), naming no file. Now the recipe names it, one line (InputError: exit 2), before loading."""
    import importlib.util

    from trl import ModelConfig

    spec = importlib.util.spec_from_file_location("math_cvar_hostile63_ckpt", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    out = tmp_path / "out"
    script = recipe.MathScriptArguments(dataset_name="arithmetic", max_eval_samples=0)
    model = ModelConfig(model_name_or_path=str(tiny_model_dir))
    recipe.main(script, _args(out, save_strategy="steps", save_steps=1), model, data=(_data(), None))
    weights = out / "checkpoint-1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(recipe.InputError, match="checkpoint-1: model.safetensors is cut short"):
        recipe.main(script, _args(out, max_steps=2, resume_from_checkpoint="true"), model, data=(_data(), None))
    assert check_checkpoint(out / "checkpoint-1") is None  # the trainer's own check reads no weights (layering)


def test_a_checkpoint_without_optimizer_state_resumes_with_a_warning_naming_it(tmp_path, tiny_model_dir, caplog):
    """Issue 63: transformers resumes such a checkpoint with a fresh Adam and says nothing."""
    from ordergrad_trl import OrderGradTrainer

    out = tmp_path / "out"
    OrderGradTrainer(model=str(tiny_model_dir), reward_funcs=[ZERO], train_dataset=_data(),
                     args=_args(out, save_strategy="steps", save_steps=1)).train()
    (out / "checkpoint-1" / "optimizer.pt").unlink()
    trainer = OrderGradTrainer(model=str(tiny_model_dir), reward_funcs=[ZERO], train_dataset=_data(),
                               args=_args(out, max_steps=2, save_strategy="no"))
    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.training.checkpoint_checks"):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 2
    assert any("optimizer.pt is missing" in r.getMessage() for r in caplog.records), caplog.text


def test_a_checkpoint_from_before_prompt_weights_resumes_with_unchanged_settings(tmp_path):
    """Issue 63: its record lacks the plan's `prompt_weight` entry, which no default covered, so an unchanged run
    was refused as `ordergrad_plan.prompt_weight: (not in the checkpoint's record) -> null`."""
    from trl import ModelConfig

    from ordergrad_trl.training.resolved_config import resolved_config

    training = _args(tmp_path / "o")
    groups = {"training": training, "model": ModelConfig(model_name_or_path="m")}
    new = json.loads(json.dumps(resolved_config(groups, training.ordergrad_plan), default=str))
    old = json.loads(json.dumps(new))
    del old["ordergrad_plan"]["prompt_weight"]
    del old["training"]["ordergrad_prompt_weight"], old["training"]["ordergrad_prompt_weight_window"]
    defaults = run_identity.field_defaults(type(training), ModelConfig)
    assert run_identity.differences(old, new, defaults) == []
    weighted = _args(tmp_path / "o", ordergrad_prompt_weight="curverl")  # a prompt weight now: another run
    changed = json.loads(json.dumps(resolved_config({**groups, "training": weighted}, weighted.ordergrad_plan),
                                    default=str))
    assert any(d.startswith("ordergrad_plan.prompt_weight") for d in run_identity.differences(old, changed, defaults))


@pytest.mark.parametrize("limit, save", [(40_000, "no"), (70_000, "steps")])
def test_a_full_disk_while_saving_is_one_line_and_exit_1(tmp_path, tiny_model_dir, limit, save):
    """40 kB: the final model.safetensors fails (safetensors' own SafetensorError); 70 kB: a checkpoint's
    optimizer.pt (torch.save's RuntimeError). Before, each was a traceback."""
    import resource
    import signal

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(8)))

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "out"
    proc = bounded.run(
        [sys.executable, str(RECIPE), "--model_name_or_path", str(tiny_model_dir), "--dataset_name", str(data),
         "--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "4",
         "--max_completion_length", "4", "--ordergrad_k", "2", "--max_eval_samples", "0", "--use_cpu", "true",
         "--bf16", "false", "--report_to", "none", "--save_strategy", save, "--save_steps", "1",
         "--output_dir", str(out)],
        preexec_fn=small_disk, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and str(out) in errors[0] and "while saving" in errors[0], proc.stderr[-2000:]
