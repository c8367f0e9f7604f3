"""The stateful prompt weight's window (CurveRL's past pass rates) kept in each checkpoint's `trainer_state.json`.

transformers saves every `ExportableState` callback's `state()` into `trainer_state.json` with each checkpoint and
loads that file when a run resumes, before `on_train_begin`; so the window needs no file of its own, is written
atomically with the rest of the checkpoint, and a resumed run's next batch is weighted exactly as the uninterrupted
run's was. Every process holds the same window: it is built from the gathered batch, identical on every rank.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ..core.prompt_weights import DEFAULT_WINDOW, PromptWindow

logger = logging.getLogger(__name__)

__all__ = ["PromptWindowState"]


class PromptWindowState(TrainerCallback, ExportableState):
    """Holds the `PromptWindow` the trainer weighs each batch against; restores it from the resumed checkpoint."""

    def __init__(self, size: int = DEFAULT_WINDOW):
        self.window = PromptWindow(size)

    def state(self) -> dict:
        return {"args": {"size": self.window.size}, "attributes": {"saved": self.window.state_dict()}}

    def on_train_begin(self, args, state, control, **kwargs):
        saved = (state.stateful_callbacks or {}).get(type(self).__name__)
        if isinstance(saved, list):  # transformers keeps a list when several callbacks share a class: ours is one
            saved = saved[-1]
        window = (saved or {}).get("attributes", {}).get("saved") if isinstance(saved, dict) else None
        if window is not None:
            self.window.load_state_dict(window)
        elif state.global_step > 0:
            logger.warning(
                "ordergrad_prompt_weight: the checkpoint resumed at step %d holds no prompt-weight window (saved "
                "without a stateful prompt weight): the window starts empty, so the next batch is its own "
                "reference.", state.global_step,
            )  # fmt: skip
