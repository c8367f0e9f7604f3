"""Let accelerate run FSDP on CPU processes, for tests: keep the launcher's FSDP plugin when the state is MULTI_CPU.

accelerate (1.16) turns FSDP on only for GPU-like distributed types (`AcceleratorState.__init__` in
`accelerate/state.py`); with `use_cpu` a `fsdp2.yaml` launch is MULTI_CPU, the plugin is dropped and the Trainer
wraps DDP, which `OrderGradTrainer` refuses (`ordergrad_trl.training.engine_guard`). torch's `fully_shard` itself
runs on CPU over gloo, so this shim, applied in the training processes only, makes the state FSDP when the launcher
asked for it (ACCELERATE_USE_FSDP=true) and a plugin was built: the FSDP2 code path the GPUs take (sharded DTensor
parameters, the FSDP state dict on save and resume) then runs in CI. It is not part of the library.

Usage: `sitecustomize(dir)` writes a `sitecustomize.py` applying `keep_fsdp_on_cpu` at interpreter start-up in
processes with `dir` on PYTHONPATH (the launcher passes its environment to the workers).
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.startup_hook import write_startup_hook


def keep_fsdp_on_cpu() -> None:
    from accelerate import state
    from accelerate.utils import DistributedType

    original = state.AcceleratorState.__init__

    def init(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
        if asked and fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            # as accelerate does for its own types: every later AcceleratorState() copies PartialState's over
            state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    state.AcceleratorState.__init__ = init


def sitecustomize(directory: Path) -> Path:
    """Write `directory/sitecustomize.py` applying `keep_fsdp_on_cpu` (`startup_hook`); returns `directory`."""
    return write_startup_hook(directory, "fsdp_cpu_shim", "keep_fsdp_on_cpu")
