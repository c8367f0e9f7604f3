"""Refuse, in seconds and by name, a launch environment that cannot train, before accelerate starts up.

- A stale distributed environment: `WORLD_SIZE=2 RANK=0 ...` left exported in a shell, with no launcher running
  the other ranks. torch.distributed's start-up then waits for ranks that never come (rank 0 listens for them; a
  rank > 0 retries its connection), with no message, for its whole timeout. A launcher leaves its own marks
  (torchrun / `accelerate launch`: `TORCHELASTIC_RUN_ID`; the DeepSpeed launcher: `CROSS_RANK`; MPI: `OMPI_*`,
  `PMI_RANK`, `PMIX_RANK`; Slurm: `SLURM_PROCID`): without any of them, a world size above 1 is refused naming the
  variables. A launcher of your own that sets only the torch variables: set `ORDERGRAD_TRUST_DIST_ENV=1`.
- `fsdp` asked for in a process no launcher started (FSDP shards over the processes of a distributed launch).
- DeepSpeed asked for (`deepspeed`, or `ACCELERATE_USE_DEEPSPEED`) where the `deepspeed` package is not installed.

Each is a ValueError, which both CLIs print as one line (exit 2).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

__all__ = ["LAUNCHER_MARKS", "check_launch_environment"]

DIST_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LAUNCHER_MARKS = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "GROUP_RANK", "CROSS_RANK", "CROSS_SIZE",
                  "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK")
_TRUE = ("1", "true", "yes", "on", "y", "t")


def _launched(env: Mapping[str, str]) -> bool:
    return any(env.get(mark) for mark in LAUNCHER_MARKS) or env.get("ORDERGRAD_TRUST_DIST_ENV", "").strip().lower() \
        in _TRUE


def check_launch_environment(args=None, env: Mapping[str, str] | None = None) -> None:
    """ValueError naming the variables or the field, for the cases in the module docstring; `args` is the training
    config (its `fsdp` and `deepspeed` fields), `env` the process environment (default `os.environ`)."""
    env = os.environ if env is None else env
    world = env.get("WORLD_SIZE", "").strip()
    if world:
        try:
            size = int(world)
        except ValueError:
            raise ValueError(f"WORLD_SIZE={world!r} is not an integer; unset it (a launcher sets it for the processes "
                             "it starts)") from None
        if size > 1 and not _launched(env):
            given = " ".join(f"{name}={env[name]}" for name in DIST_VARS if name in env)
            raise ValueError(
                f"the environment says this is one of {size} distributed processes ({given}) but no launcher started "
                "it (no torchrun / accelerate launch / deepspeed / MPI / Slurm variables): the other ranks never come "
                f"and start-up would wait for them. Unset them (unset {' '.join(n for n in DIST_VARS if n in env)}) "
                "for one process, or start the run with a launcher (accelerate launch, torchrun); a launcher of your "
                "own: ORDERGRAD_TRUST_DIST_ENV=1")
    if args is None:
        return
    fsdp = getattr(args, "fsdp", None)
    if fsdp and not world and not env.get("LOCAL_RANK") and not _launched(env):
        raise ValueError(f"fsdp={fsdp!r} asks for FSDP, which shards the model over the processes of a distributed "
                         "launch, but no launcher started this process: run it with accelerate launch --config_file "
                         "accelerate_configs/fsdp2.yaml (or torchrun), or leave fsdp unset")
    deepspeed = getattr(args, "deepspeed", None)
    from_env = env.get("ACCELERATE_USE_DEEPSPEED", "").strip().lower() in _TRUE
    if (deepspeed or from_env) and importlib.util.find_spec("deepspeed") is None:
        source = f"deepspeed={deepspeed!r}" if deepspeed else \
            f"ACCELERATE_USE_DEEPSPEED={env.get('ACCELERATE_USE_DEEPSPEED')!r}"
        raise ValueError(f"{source} asks for DeepSpeed, but the deepspeed package is not installed: pip install "
                         "deepspeed (docs/multi-gpu.md), or launch without it")
