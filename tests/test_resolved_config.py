"""The resolved configuration (issue 31): printed at start (every setting given, the plan) and saved as
`ordergrad_resolved_config.json` in `output_dir` and beside each checkpoint."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from datasets import Dataset

from ordergrad_trl.training.resolved_config import (
    RESOLVED_CONFIG, SaveResolvedConfig, describe_plan, describe_settings, plan_dict, resolved_config,
)  # fmt: skip
from helpers import bounded

REPO = Path(__file__).resolve().parents[1]


def _config(cpu_training_args, **overrides):
    from ordergrad_trl import OrderGradConfig

    settings = dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=4, max_steps=2)
    return OrderGradConfig(**{**cpu_training_args, **settings, **overrides})


def test_resolved_config_holds_every_field_and_the_plan(cpu_training_args):
    from trl import ModelConfig

    args = _config(cpu_training_args, ordergrad_schedule=["0 ReMax@3", "1 CVaR:0.5@2"], hub_token="secret")
    model = ModelConfig(model_name_or_path="m")
    config = resolved_config({"training": args, "model": model}, args.ordergrad_plan)
    assert json.loads(json.dumps(config)) == config  # JSON as it is
    assert set(config["training"]) == {f for f in args.to_dict()}
    assert config["training"]["hub_token"] == "<HUB_TOKEN>"  # TrainingArguments.to_dict hides tokens
    assert config["model"]["model_name_or_path"] == "m"
    stages = config["ordergrad_plan"]["stages"]
    assert [(s["start_step"], s["objective"], s["k"]) for s in stages] == [(0, "ReMax", 3), (1, "CVaR:0.5", 2)]
    assert stages[0]["weights"] == [0.0, 0.0, 1.0] and stages[1]["weights"] == [1.0, 0.0]  # ascending, recomputed
    assert config["ordergrad_plan"] == plan_dict(args.ordergrad_plan)
    assert config["ordergrad_plan"]["num_generations"] == 4 and config["ordergrad_plan"]["per_reward"] is None
    text = describe_plan(args.ordergrad_plan)
    assert text.splitlines() == ["estimator ordergrad, scale_rewards=none, N=4:",
                                 "  from step 0: ReMax @ K=3 (ascending weights 0, 0, 1)",
                                 "  from step 1: CVaR:0.5 @ K=2 (ascending weights 1, 0)"]  # fmt: skip


def test_describe_settings_shows_the_resolved_value_of_each_given_setting(cpu_training_args):
    args = _config(cpu_training_args, learning_rate=3e-4, ordergrad_objective="TopM:2", ordergrad_k=2,
                   lr_scheduler_type="constant")
    given = {"learning_rate": "config", "ordergrad_k": "command line", "not_a_field": "config",
             "lr_scheduler_type": "config"}  # fmt: skip
    lines = describe_settings(given, {"training": args})
    assert lines == ["learning_rate = 0.0003  (config)", "ordergrad_k = 2  (command line)",
                     "lr_scheduler_type = 'constant'  (config)"]  # an enum by its value, as written


def test_saved_in_output_dir_and_beside_each_checkpoint(tiny_model, tiny_tokenizer, cpu_training_args, tmp_path):
    from ordergrad_trl import OrderGradTrainer

    args = _config(cpu_training_args, ordergrad_k=2, save_strategy="steps", save_steps=1)
    config = resolved_config({"training": args}, args.ordergrad_plan)

    def reward(completions, **kwargs):
        return [float(len(c) % 2) for c in completions]

    trainer = OrderGradTrainer(model=tiny_model, reward_funcs=reward, args=args, processing_class=tiny_tokenizer,
                               train_dataset=Dataset.from_dict({"prompt": [f"Q{i}?" for i in range(4)]}),
                               callbacks=[SaveResolvedConfig(config)])  # fmt: skip
    trainer.train()
    out = Path(args.output_dir)
    saved = [out / RESOLVED_CONFIG, out / "checkpoint-1" / RESOLVED_CONFIG, out / "checkpoint-2" / RESOLVED_CONFIG]
    for path in saved:
        assert json.loads(path.read_text()) == config, path
    assert not list(out.rglob("*.tmp"))


def test_the_recipe_prints_the_given_settings_and_saves_them(tiny_model_dir, tmp_path):
    """One real run of the recipe from another directory: 2 steps, a checkpoint each, the tiny model."""
    out = tmp_path / "out"
    argv = ["--model_name_or_path", str(tiny_model_dir), "--max_steps", "2", "--max_completion_length", "8",
            "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1", "--max_eval_samples", "0",
            "--save_strategy", "steps", "--save_steps", "1", "--output_dir", str(out),
            "--reward_funcs", "math", "length", "--reward_weights", "1.0", "0.1"]  # fmt: skip
    proc = bounded.run([sys.executable, str(REPO / "recipes" / "math_cvar.py"), *argv], cwd=tmp_path,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}, capture_output=True,
                       text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "  learning_rate = 2e-05  (config)" in proc.stdout  # from the default quickstart YAML
    assert "  max_steps = 2  (command line)" in proc.stdout  # the flag beats the YAML's 10
    assert "  reward_weights = [1.0, 0.1]  (command line)" in proc.stdout
    assert "Objective plan: estimator ordergrad, scale_rewards=none, N=8:\n  from step 0: TopM:2 @ K=4 " in proc.stdout
    saved = json.loads((out / RESOLVED_CONFIG).read_text())
    for step in (1, 2):
        assert json.loads((out / f"checkpoint-{step}" / RESOLVED_CONFIG).read_text()) == saved
    assert saved["training"]["max_steps"] == 2 and saved["script"]["reward_funcs"] == ["math", "length"]
    assert saved["model"]["model_name_or_path"] == str(tiny_model_dir)
    assert saved["ordergrad_plan"]["stages"][0]["weights"] == [0.0, 0.0, 0.5, 0.5]
    # TRL logged each reward under its function's name (the registry keeps names through functools.partial)
    state = json.loads((out / "trainer_state.json").read_text())
    assert {"rewards/math_reward/mean", "rewards/length_penalty/mean"} <= set(state["log_history"][0])


def test_a_library_trainer_saves_the_plan_beside_each_checkpoint_and_the_final_model(
    tiny_model, tiny_tokenizer, cpu_training_args, tmp_path
):
    """No recipe, no callback passed: OrderGradTrainer itself writes every setting and the plan that trains."""
    from ordergrad_trl import OrderGradTrainer

    args = _config(cpu_training_args, ordergrad_k=3, ordergrad_objective="ReMax", save_strategy="steps", save_steps=1)

    def reward(completions, **kwargs):
        return [float(len(c) % 2) for c in completions]

    trainer = OrderGradTrainer(model=tiny_model, reward_funcs=reward, args=args, processing_class=tiny_tokenizer,
                               train_dataset=Dataset.from_dict({"prompt": [f"Q{i}?" for i in range(4)]}))  # fmt: skip
    trainer.train()
    final = tmp_path / "final"
    trainer.save_model(str(final))
    out = Path(args.output_dir)
    expected = json.loads(json.dumps(resolved_config({"training": trainer.args}, args.ordergrad_plan)))
    for folder in (out, out / "checkpoint-1", out / "checkpoint-2", final):
        saved = json.loads((folder / RESOLVED_CONFIG).read_text())
        assert saved["ordergrad_plan"] == plan_dict(args.ordergrad_plan) and saved == expected, folder
    assert saved["ordergrad_plan"]["stages"][0] == {"start_step": 0, "objective": "ReMax", "k": 3,
                                                     "weights": [0.0, 0.0, 1.0]}  # fmt: skip
    assert (final / "config.json").is_file() and [type(c).__name__ for c in trainer.callback_handler.callbacks].count(
        "SaveResolvedConfig") == 1  # fmt: skip
