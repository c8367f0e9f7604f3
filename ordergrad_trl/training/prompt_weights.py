"""The trainer's prompt-weight stage: groups weighted and logged, and CurveRL's window kept in checkpoints.

Each group's advantages are multiplied by its weight and the weights logged (`weigh_groups`). The stateful weight's
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

from ..core.advantage import _float64_device
from ..core.prompt_weights import DEFAULT_WINDOW, PromptWeightSpec, PromptWindow, success_rates

logger = logging.getLogger(__name__)

__all__ = ["PromptWindowState", "attach_window", "weigh_groups", "window_of"]


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


def weigh_groups(advantages: torch.Tensor, weights: torch.Tensor, grouped: torch.Tensor, spec: PromptWeightSpec,
                 window: PromptWindow | None, train: bool, metrics) -> torch.Tensor:  # fmt: skip
    """`(G, N)` advantages times each group's `(G,)` weight, in float64; logs `ordergrad/prompt_weight/*`; in training
    the batch (`grouped`, the gathered `(G, N)` rewards, identical on every rank) then joins a stateful weight's
    window."""
    if weights.shape != grouped.shape[:1]:
        raise ValueError(f"compute_prompt_weights returned shape {tuple(weights.shape)}, expected "
                         f"({grouped.shape[0]},): one weight per group")  # fmt: skip
    metrics["ordergrad/prompt_weight/mean"].append(weights.mean().item())
    metrics["ordergrad/prompt_weight/max"].append(weights.max().item())
    metrics["ordergrad/prompt_weight/frac_zero"].append((weights == 0).double().mean().item())
    if window is not None:
        metrics["ordergrad/prompt_weight/window"].append(float(len(window)))
        if train:
            window.push(success_rates(grouped, spec))  # the window keeps the rates inside (0, 1)
    device = _float64_device(advantages)  # the CPU where there is no float64 (MPS)
    weighted = advantages.to(device).double() * weights.to(device).double()[:, None]
    return weighted.to(advantages.dtype).to(advantages.device)


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
