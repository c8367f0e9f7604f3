"""Refuse, in seconds and by name, a launch environment that cannot train, before accelerate starts up.

- A stale distributed environment: `WORLD_SIZE=2 RANK=0 ...` left exported in a shell, with no launcher running
  the other ranks. torch.distributed's start-up then waits for ranks that never come (rank 0 listens for them; a
  rank > 0 retries its connection), with no message, for its whole timeout. A launcher leaves its own marks, and
  always the same set of them, agreeing with `WORLD_SIZE` / `RANK` (`LAUNCHERS`: torchrun / `accelerate launch`,
  the DeepSpeed launcher, MPI, Slurm). A world size above 1 is refused naming the variables unless one launcher's
  marks are all there and agree; a lone mark (a stale `TORCHELASTIC_RUN_ID` or `SLURM_PROCID`) is no launch, and is
  named as the stale one. A launcher of your own that sets only the torch variables: set `ORDERGRAD_TRUST_DIST_ENV=1`.
- A stale `LOCAL_RANK` with no world size and no launcher: transformers then starts torch.distributed, which fails
  on the absent `MASTER_ADDR`; the variable to blame is `LOCAL_RANK` (and `RANK` beside it).
- `fsdp` asked for in a process no launcher started (FSDP shards over the processes of a distributed launch).
- DeepSpeed asked for (`deepspeed`, or `ACCELERATE_USE_DEEPSPEED`) where the `deepspeed` package is not installed.

Each is a ValueError, which both CLIs print as one line (exit 2).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

__all__ = ["LAUNCHERS", "LAUNCHER_MARKS", "check_launch_environment"]

DIST_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_TRUE = ("1", "true", "yes", "on", "y", "t")

# name -> (the variables it always sets, (its world-size variable, its rank variable) that must equal WORLD_SIZE and
# RANK, None where it has none). Read from the launchers: torch's elastic agent (torchrun and accelerate launch) sets
# all of its list for every worker since torch 1.9; DeepSpeed's launch.py its CROSS_* pair; mpirun and srun start each
# rank themselves, so their size and rank are the torch ones.
LAUNCHERS: dict[str, tuple[tuple[str, ...], tuple[str | None, str | None]]] = {
    "torchrun / accelerate launch": (("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                                      "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR", "MASTER_PORT"), ("ROLE_WORLD_SIZE", None)),
    "deepspeed": (("CROSS_RANK", "CROSS_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"), (None, None)),
    "Open MPI": (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")),
    "MPICH / Intel MPI (PMI)": (("PMI_RANK", "PMI_SIZE"), ("PMI_SIZE", "PMI_RANK")),
    "PMIx": (("PMIX_RANK",), (None, "PMIX_RANK")),
    "MVAPICH": (("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"), ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK")),
    "Slurm (srun)": (("SLURM_PROCID", "SLURM_NTASKS"), ("SLURM_NTASKS", "SLURM_PROCID")),
}
# the marks that say "a launcher was here" (any one of them; `LAUNCHERS` says whether it really started this process)
LAUNCHER_MARKS = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "GROUP_RANK", "CROSS_RANK", "CROSS_SIZE",
                  "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK")


def _trusted(env: Mapping[str, str]) -> bool:
    return env.get("ORDERGRAD_TRUST_DIST_ENV", "").strip().lower() in _TRUE


def _launcher_problems(env: Mapping[str, str]) -> tuple[bool, list[str]]:
    """(whether one launcher's variables are all set and agree with WORLD_SIZE / RANK, what is wrong with each
    launcher whose mark is set but which did not start this process)."""
    problems = []
    for name, (needs, (world, rank)) in LAUNCHERS.items():
        present = [v for v in needs if env.get(v, "").strip()]
        if not present or (name == "torchrun / accelerate launch" and not set(present) & set(LAUNCHER_MARKS)):
            continue  # no mark of it (LOCAL_RANK, MASTER_ADDR alone are no launcher's mark)
        missing = [v for v in needs if v not in present]
        disagree = [f"{mine}={env[mine]} but {torch_var}={env[torch_var]}"
                    for mine, torch_var in ((world, "WORLD_SIZE"), (rank, "RANK"))
                    if mine and mine in present and env.get(torch_var, "").strip()
                    and env[mine].strip() != env[torch_var].strip()]  # fmt: skip
        if not missing and not disagree:
            return True, []
        given = " ".join(f"{v}={env[v]}" for v in present)
        why = f"without {', '.join(missing)}" if missing else "; ".join(disagree)
        problems.append(f"{given} ({name}'s, {why}: stale, not set by {name} for this process)")
    return False, problems


def _check_world(env: Mapping[str, str]) -> None:
    world = env.get("WORLD_SIZE", "").strip()
    if world:
        try:
            size = int(world)
        except ValueError:
            raise ValueError(f"WORLD_SIZE={world!r} is not an integer; unset it (a launcher sets it for the processes "
                             "it starts)") from None
    else:
        size = None
    if _trusted(env):
        return
    launched, stale = _launcher_problems(env)
    if launched:
        return
    unset = " ".join(n for n in DIST_VARS if n in env)
    if size is not None and size > 1:
        given = " ".join(f"{name}={env[name]}" for name in DIST_VARS if name in env)
        marks = f"; the launcher variables {'; '.join(stale)}" if stale else \
            " (no torchrun / accelerate launch / deepspeed / MPI / Slurm variables)"
        raise ValueError(
            f"the environment says this is one of {size} distributed processes ({given}) but no launcher started "
            f"it{marks}: the other ranks never come and start-up would wait for them. Unset them (unset {unset}) for "
            "one process, or start the run with a launcher (accelerate launch, torchrun); a launcher of your own: "
            "ORDERGRAD_TRUST_DIST_ENV=1")
    local = env.get("LOCAL_RANK", "").strip()
    if local not in ("", "-1") and not env.get("MASTER_ADDR", "").strip():
        given = " ".join(f"{name}={env[name]}" for name in ("LOCAL_RANK", "RANK") if name in env)
        raise ValueError(
            f"{given}: set, but no launcher started this process (no MASTER_ADDR, no launcher's variables): stale, "
            "and with it transformers would start torch.distributed and fail for want of MASTER_ADDR. Unset it "
            f"(unset {unset}) for one process, or start the run with a launcher (accelerate launch, torchrun)")


def check_launch_environment(args=None, env: Mapping[str, str] | None = None) -> None:
    """ValueError naming the variables or the field, for the cases in the module docstring; `args` is the training
    config (its `fsdp` and `deepspeed` fields), `env` the process environment (default `os.environ`)."""
    env = os.environ if env is None else env
    _check_world(env)
    if args is None:
        return
    fsdp = getattr(args, "fsdp", None)
    launched = _trusted(env) or _launcher_problems(env)[0]
    if fsdp and not env.get("WORLD_SIZE", "").strip() and not env.get("LOCAL_RANK") and not launched:
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
