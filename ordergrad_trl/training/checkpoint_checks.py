"""A checkpoint about to be resumed, checked file by file before anything of it loads.

transformers reads a checkpoint's files where it needs them, mid-start-up: a truncated `model.safetensors` fails
there as safetensors' `incomplete metadata, file not fully covered`, and a hand-edited prompt-weight window in
`trainer_state.json` in the window's own loader, neither naming the file. `check_checkpoint` reads what it can without
loading a tensor and raises `CheckpointError` (a `RunIdentityError`: the recipe prints it as one line, exit 2) naming
the file: the trainer checks the state before `train()` resumes, the recipe the weights too, before the model loads.
A checkpoint without `optimizer.pt` resumes, as transformers does, with a fresh optimizer (Adam's moments at zero:
the first steps are larger than the run's were), which deserves a warning naming the file.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from .run_identity import TRAINER_STATE, RunIdentityError

__all__ = ["CheckpointError", "check_checkpoint", "resolve_resume"]

logger = logging.getLogger(__name__)
WINDOW_CALLBACK = "PromptWindowState"  # prompt_weights.PromptWindowState, by the name transformers saves it under


class CheckpointError(RunIdentityError):
    """A file of the checkpoint to resume is damaged or was edited into something that cannot load."""


def _window_problem(state: dict) -> str | None:
    from ..core.prompt_weights import PromptWindow

    saved = (state.get("stateful_callbacks") or {}) if isinstance(state, dict) else {}
    if not isinstance(saved, dict) or WINDOW_CALLBACK not in saved:
        return None
    entries = saved[WINDOW_CALLBACK]
    for entry in entries if isinstance(entries, list) else [entries]:
        try:
            window = entry["attributes"]["saved"]
            PromptWindow(int(window["size"]) if isinstance(window, dict) else 0).load_state_dict(window)
        except (KeyError, TypeError, ValueError) as err:
            return (f"its stateful_callbacks.{WINDOW_CALLBACK} (the prompt-weight window) cannot load: "
                    f"{' '.join(str(err).split())[:200]}")
    return None


def check_checkpoint(folder: str | os.PathLike, warn: bool = True,
                     weights_problem: Callable[[Path], str | None] | None = None) -> None:
    """CheckpointError naming the file of `folder` that cannot load (a corrupt `trainer_state.json` or its prompt-weight
    window; with `weights_problem`, e.g. the eval's `evaluation.modeling.weights_problem`, cut-short weights: passed
    in by the recipe, as the training layer does not import the eval's); with `warn`, a warning when the optimizer's
    state (`optimizer.pt`) is missing."""
    path = Path(folder)
    state_file = path / TRAINER_STATE
    try:
        state = json.loads(state_file.read_bytes())
    except (OSError, ValueError) as err:  # ValueError: not JSON, not UTF-8
        raise CheckpointError(f"resume_from_checkpoint {path}: {state_file} cannot be read ({type(err).__name__}: "
                              f"{' '.join(str(err).split())[:120]}); the file is corrupt") from None
    problem = _window_problem(state)
    if problem:
        raise CheckpointError(f"resume_from_checkpoint {path}: {state_file}: {problem}; restore the file, or resume "
                              "from another checkpoint")
    problem = weights_problem(path) if weights_problem is not None else None
    if problem:
        raise CheckpointError(f"resume_from_checkpoint {path}: {problem}")
    if warn and not (path / "optimizer.pt").is_file() and not any(path.glob("global_step*")):  # DeepSpeed keeps its own
        logger.warning("resume_from_checkpoint %s: %s is missing, so the optimizer starts fresh (Adam's moments at "
                       "zero: its first steps differ from those of the run that saved the checkpoint); restore the "
                       "file for an exact resume.", path, path / "optimizer.pt")


def resolve_resume(resume, output_dir: str) -> str | None:
    """The folder `Trainer.train(resume_from_checkpoint=resume)` resumes from, as transformers resolves it (True: the
    newest checkpoint of `output_dir`, which must exist: transformers refuses its absence itself)."""
    if resume is None or resume is False:
        return None
    if resume is True:
        from transformers.trainer_utils import get_last_checkpoint

        return get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    return str(resume)
