"""Refuse a run whose launcher asked for a sharding engine the trainer did not build.

accelerate enables FSDP only for GPU-like distributed types (`accelerate/state.py`): on CPU (`--cpu`, `use_cpu`)
a multi-process launch is MULTI_CPU, the FSDP plugin is dropped and the Trainer wraps the model in DDP. The run
then trains unsharded and exits 0, with every rank holding the whole model, which is not what
`--config_file accelerate_configs/fsdp2.yaml` said; DeepSpeed asked for and another type built is refused alike.
A third silent case: DeepSpeed on a machine without GPUs and without `--ddp_backend gloo` joins the processes
in torch.distributed, but accelerate, finding no GPU backend, counts one process: every rank then trains on all
the data as if alone. Checked once the accelerator exists, before anything trains.
"""

from __future__ import annotations

import os

__all__ = ["EngineMismatch", "check_engine", "check_world_size"]


class EngineMismatch(ValueError):
    """The launch asked for an engine (or process count) the trainer did not build: a setting to fix, one line."""

_TRUE = ("1", "true", "yes", "on", "y", "t")


def _asked(args, name: str) -> str | None:
    """Where the run asked for engine `name` (FSDP or DeepSpeed), or None."""
    env = {"FSDP": "ACCELERATE_USE_FSDP", "DeepSpeed": "ACCELERATE_USE_DEEPSPEED"}[name]
    if os.environ.get(env, "false").strip().lower() in _TRUE:
        value = os.environ[env]
        shown = value if value == value.strip() else repr(value)  # ' yes ' as given, not as read
        return f"{env}={shown}, set by `accelerate launch` from its config file"
    field = {"FSDP": "fsdp", "DeepSpeed": "deepspeed"}[name]
    if getattr(args, field, None):
        return f"the `{field}` training argument"
    return None


def check_world_size(counted: int) -> None:
    """ValueError when torch.distributed joined more processes than accelerate counts (`counted`): the config
    calls this with its world size (before TRL's batch arithmetic makes a less clear error of it), the trainer
    with its accelerator's."""
    import torch.distributed as dist

    joined = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if joined != counted:
        raise EngineMismatch(f"{joined} processes joined torch.distributed but the trainer's accelerator counts "
                             f"{counted}: each would train on all the data as if alone. On a machine without GPUs "
                             "pass `--ddp_backend gloo` (a DeepSpeed launch on CPU needs it), or launch with torchrun "
                             "/ accelerate_configs/cpu.yaml.")


def check_engine(trainer) -> None:
    """ValueError when FSDP or DeepSpeed was asked for but the trainer's accelerator is not that engine, or when the
    accelerator counts fewer processes than torch.distributed joined."""
    check_world_size(trainer.accelerator.num_processes)
    # the distributed type, not the Trainer's is_*_enabled: a plugin can sit on the state of another type
    kind = str(getattr(trainer.accelerator, "distributed_type", "unknown")).split(".")[-1]
    for name in ("FSDP", "DeepSpeed"):
        source = _asked(trainer.args, name)
        if source is None or kind == name.upper():
            continue
        if name == "FSDP":
            fix = ("accelerate runs FSDP only on GPUs (on CPU it becomes DDP); on CPU use "
                   "accelerate_configs/zero3.yaml or zero2.yaml (DeepSpeed runs there), or accelerate_configs/ddp.yaml "
                   "to train unsharded on purpose")
        else:
            fix = ("on CPU launch accelerate_configs/zero2.yaml or zero3.yaml with `--ddp_backend gloo` "
                   "(docs/multi-gpu.md, DeepSpeed on CPU), or accelerate_configs/ddp.yaml to train unsharded on purpose")
        raise EngineMismatch(f"{name} was asked for ({source}) but the trainer's accelerator is {kind}, not {name}: "
                             f"the model would train unsharded on every process and exit as if fine. {fix}.")
