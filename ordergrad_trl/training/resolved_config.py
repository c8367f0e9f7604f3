"""The run's resolved configuration, printed at start and saved beside every checkpoint.

A run's numbers are only as reproducible as the settings that made them, and those come from defaults, a YAML file
and flags, with the objective plan resolved from them (default K, default objective, the rank weights). So, as
nanoGPT does, `describe_settings` lists every setting a user gave and the plan that trains; `resolved_config` is
all of it as one JSON-ready dict (every field of every argument group, and the plan), and
`SaveResolvedConfig` writes it to `output_dir/ordergrad_resolved_config.json` when training starts and into
each `checkpoint-<step>/` as it is saved, so a checkpoint says what trained it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..core.plan import ObjectivePlan, ObjectiveStage

__all__ = ["RESOLVED_CONFIG", "SaveResolvedConfig", "describe_plan", "describe_settings", "resolved_config"]

RESOLVED_CONFIG = "ordergrad_resolved_config.json"


def _plain(value):
    """JSON-ready: enums by value, tensors and tuples as lists, anything else unknown by its str."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):  # tensors, numpy values
        return value.tolist()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _fields(group) -> dict:
    if hasattr(group, "to_dict"):  # TrainingArguments: tokens hidden, nested configs serialized
        return group.to_dict()
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group) if f.init}


def _stage(stage: ObjectiveStage) -> dict:
    return {"start_step": stage.start_step, "objective": stage.objective, "k": stage.k,
            "weights": stage.weights.tolist()}  # fmt: skip


def plan_dict(plan: ObjectivePlan) -> dict:
    """The plan as data: estimator, scale, N, stages (start step, objective, K, ascending weights), per-reward specs,
    the prompt weight (its setting, and the window in batches for a stateful one; None: none)."""
    weight = plan.prompt_weight
    return {
        "estimator": plan.estimator,
        "scale_rewards": plan.scale,
        "num_generations": plan.num_generations,
        "stages": [_stage(s) for s in plan.stages],
        "per_reward": None if plan.per_reward is None else [_stage(s) for s in plan.per_reward],
        "prompt_weight": None if weight is None else {"weight": str(weight),
                                                      "window": weight.window if weight.stateful else None},
    }


def resolved_config(groups: dict[str, object], plan: ObjectivePlan | None = None) -> dict:
    """`{"<group>": {field: value, ...}, ..., "ordergrad_plan": {...}}` for argument dataclasses named by `groups`
    (e.g. `{"script": script_args, "training": training_args, "model": model_args}`), JSON-ready."""
    out = {name: _plain(_fields(group)) for name, group in groups.items()}
    if plan is not None:
        out["ordergrad_plan"] = plan_dict(plan)
    return out


def describe_plan(plan: ObjectivePlan, reward_names: list[str] | None = None) -> str:
    """`estimator ordergrad, N=8: from step 0 TopM:2 @ K=4 (weights 0, 0, 0.5, 0.5)`, one line per stage or spec."""
    def line(stage: ObjectiveStage) -> str:
        weights = ", ".join(f"{w:.4g}" for w in stage.weights.tolist())
        return f"{stage.objective} @ K={stage.k} (ascending weights {weights})"

    head = f"estimator {plan.estimator}, scale_rewards={plan.scale}, N={plan.num_generations}"
    if plan.prompt_weight is not None:
        window = f" (window {plan.prompt_weight.window} batches)" if plan.prompt_weight.stateful else ""
        head += f", prompt weight {plan.prompt_weight}{window}"
    if plan.per_reward is not None:
        names = reward_names or [f"reward {i}" for i in range(len(plan.per_reward))]
        return "\n".join([head + ", one objective per reward function:"]
                         + [f"  {name}: {line(s)}" for name, s in zip(names, plan.per_reward)])  # fmt: skip
    return "\n".join([head + ":"] + [f"  from step {s.start_step}: {line(s)}" for s in plan.stages])


def describe_settings(given: dict[str, str], groups: dict[str, object]) -> list[str]:
    """`name = value  (config)` for every setting given (`given`: field name -> where it was given, e.g. "config" or
    "command line"), with the value it resolved to; names no group has are skipped."""
    values = {}
    for group in groups.values():
        values.update({f.name: getattr(group, f.name) for f in dataclasses.fields(group)})
    return [f"{name} = {_plain(values[name])!r}  ({where})" for name, where in given.items() if name in values]


class SaveResolvedConfig(TrainerCallback):
    """Writes `config` (from `resolved_config`) as `RESOLVED_CONFIG` into `output_dir` when training starts and into
    each checkpoint folder after the trainer saves it (main process only)."""

    def __init__(self, config: dict):
        self.config = config

    def write(self, folder: str | os.PathLike) -> Path:
        from ..evaluation.safe_io import write_bytes_atomic  # the eval's writer: no link followed, temp then rename

        path = Path(folder) / RESOLVED_CONFIG
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, (json.dumps(self.config, indent=2, sort_keys=True) + "\n").encode())
        return path

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.write(args.output_dir)

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if checkpoint.is_dir():  # saved by the trainer just before this call
                self.write(checkpoint)
