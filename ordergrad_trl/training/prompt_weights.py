"""The trainer's prompt-weight bookkeeping: the weights logged, and CurveRL's window fed and kept in checkpoints.

The plan weighs the groups (`ObjectivePlan.grouped_advantages`); here its record's weights are logged
(`log_prompt_weights`) and a trained batch joins the window once (`join_window`). The stateful weight's
window (CurveRL's past pass rates) lives in each checkpoint's `trainer_state.json`: transformers saves every
`ExportableState` callback's `state()` there and loads the file when a run resumes, before `on_train_begin`; so the
window needs no file of its own, is written atomically with the rest of the checkpoint, and a resumed run's next
batch is weighted exactly as the uninterrupted run's was. Every process holds the same window: it is built from the
gathered batch, identical on every rank.
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ..core.prompt_weights import DEFAULT_WINDOW, PromptWindow

logger = logging.getLogger(__name__)

__all__ = ["PromptWindowState", "attach_window", "join_window", "log_prompt_weights", "window_of"]


def attach_window(trainer) -> None:
    """Give the trainer a `PromptWindowState` callback when its plan's prompt weight is stateful."""
    weight = trainer.ordergrad_plan.prompt_weight
    if weight is not None and weight.stateful:
        trainer.add_callback(PromptWindowState(weight.window))


def window_of(trainer) -> PromptWindow | None:
    """The trainer's window of past pass rates (None without a stateful weight): looked up in its callbacks, where
    transformers may replace the holder (`restore_callback_states_from_checkpoint`)."""
    held = [c.window for c in trainer.callback_handler.callbacks if isinstance(c, PromptWindowState)]
    return held[0] if held else None


def log_prompt_weights(weights: torch.Tensor, window: PromptWindow | None, metrics) -> None:
    """`ordergrad/prompt_weight/*` of one batch's `(G,)` weights, and the rates the window held before it."""
    metrics["ordergrad/prompt_weight/mean"].append(weights.mean().item())
    metrics["ordergrad/prompt_weight/max"].append(weights.max().item())
    metrics["ordergrad/prompt_weight/frac_zero"].append((weights == 0).double().mean().item())
    if window is not None:
        metrics["ordergrad/prompt_weight/window"].append(float(len(window)))


def join_window(window: PromptWindow | None, batches) -> None:
    """One push per trained batch: the p_hat of every round generated for it (`GroupedBatch`es; dynamic sampling's
    refill has several), after all of them were weighed against the window as it stood before the batch, so no round
    is weighed against an earlier round of its own batch. The rates are the gathered batch's, the same on every
    rank."""
    if window is not None:
        window.push(torch.cat([batch.p_hat for batch in batches]))  # the window keeps the rates inside (0, 1)


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
