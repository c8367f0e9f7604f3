"""Training stops where it cannot go on: rewards that overflow, a non-finite loss, weights that are not finite.

Each check names what to change (the reward function, the step, the likely setting) and runs where every process
reaches it, agreeing across processes (a gathered flag) so that no rank waits for one that stopped: `OrderGradTrainer`
calls `check_reward_magnitudes` on the gathered rewards, `check_finite_loss` after every micro-step's backward pass
(before the optimizer steps on it), and `check_finite_weights` after every optimizer step (`StopOnNonFiniteWeights`)
and before it saves a checkpoint or the final model.
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

__all__ = ["StopOnNonFiniteWeights", "check_finite_loss", "check_finite_weights", "check_reward_magnitudes",
           "warn_if_overflowing"]

logger = logging.getLogger("ordergrad_trl.training.trainer")  # the trainer's: its warnings keep their name

# what makes a loss or the weights non-finite, most likely first (the reward checks name their own cause)
LIKELY = ("learning_rate (too large for this model; lower it or warm up), beta and the reference model, "
          "loss_type and its epsilon settings, max_grad_norm=0 (no clipping), or NaN in the model's weights to start")


def _anywhere(trainer, bad: bool, device) -> bool:
    """Whether `bad` holds on any process (one small gather: every process calls this at the same point)."""
    flag = torch.tensor([float(bad)], device=device)
    return bool(trainer.accelerator.gather(flag).max() > 0)


def check_finite_loss(trainer, loss: torch.Tensor) -> None:
    """`FloatingPointError` naming the step when this micro-step's loss is inf or NaN on any process."""
    bad = not bool(torch.isfinite(loss.detach()).all())
    if _anywhere(trainer, bad, loss.device):
        raise FloatingPointError(
            f"the training loss is not finite at step {trainer.state.global_step + 1} (on at least one process; here "
            f"{loss.detach().float().mean().item():.3g}): training stopped before the optimizer step, and no model "
            f"is saved. Likely: {LIKELY}."
        )


def _first_non_finite(model) -> str | None:
    """The name of the first parameter (this process's part of it) holding inf or NaN, else None; one sync per
    device."""
    # FSDP2 holds DTensors (this rank's shard: to_local); ZeRO-3 leaves empty placeholders (skipped)
    local = {name: p.to_local() if hasattr(p, "to_local") else p for name, p in model.named_parameters()}
    by_device: dict = {}
    for name, p in local.items():
        if p.numel():  # a sum is inf or NaN if any entry is (10x cheaper than isfinite().all() on 135M weights)
            by_device.setdefault(p.device, []).append((name, p.detach().sum()))
    for sums in by_device.values():
        finite = torch.isfinite(torch.stack([total for _, total in sums])).cpu()  # one sync per device
        for i in (~finite).nonzero().flatten().tolist():  # confirmed entry by entry: a huge finite sum may overflow
            if not bool(torch.isfinite(local[sums[i][0]].detach()).all()):
                return sums[i][0]
    return None


def check_finite_weights(trainer, where: str) -> None:
    """`FloatingPointError` when a parameter holds inf or NaN on any process (`where`: what is refused, e.g.
    "not saving to out/")."""
    bad = _first_non_finite(trainer.model)
    if _anywhere(trainer, bad is not None, trainer.accelerator.device):
        raise FloatingPointError(
            f"{where}: the model's weights are not finite after step {trainer.state.global_step}"
            + (f" (first: {bad})" if bad else " (on another process)") + f": training diverged. Likely: {LIKELY}."
        )


class StopOnNonFiniteWeights(TrainerCallback):
    """After every optimizer step: weights that turned inf or NaN stop training there, before the next generation
    samples from them and before that step's checkpoint is saved."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        check_finite_weights(self.trainer, "training stopped, nothing saved")


def check_reward_magnitudes(rewards_per_func: torch.Tensor, weighted: torch.Tensor, names: list[str],
                            reward_weights: torch.Tensor, step: int) -> None:
    """+-inf stops training at this step, naming the reward function it comes from: returned by it (None marks
    an unscorable rollout), or reached in float32 once multiplied by its reward weight or summed with the others.
    """
    n = rewards_per_func.shape[0]
    for f in torch.isinf(rewards_per_func).any(dim=0).nonzero().flatten().tolist():
        count = int(torch.isinf(rewards_per_func[:, f]).sum())
        raise ValueError(
            f"reward function {names[f]!r} returned +-inf for {count} of {n} rollouts at step "
            f"{step}: return a finite reward, or None for a rollout it cannot score."
        )
    for f in torch.isinf(weighted).any(dim=0).nonzero().flatten().tolist():
        largest = torch.nan_to_num(rewards_per_func[:, f].abs(), nan=0.0).max().item()
        raise ValueError(
            f"reward function {names[f]!r} returned rewards up to {largest:.3g}, which times its "
            f"reward weight {reward_weights[f].item():.3g} overflow float32 (largest "
            f"{torch.finfo(torch.float32).max:.3g}) for {int(torch.isinf(weighted[:, f]).sum())} of {n} rollouts "
            f"at step {step}: rescale that reward or lower its reward_weights."
        )
    total = weighted.nansum(dim=1)  # (N_global,)
    if torch.isinf(total).any():
        row = int(torch.isinf(total).nonzero()[0])
        parts = ", ".join(f"{name!r}: {value:.3g}" for name, value in zip(names, weighted[row].tolist()))
        raise ValueError(
            f"the weighted sum of the reward functions overflows float32 (largest "
            f"{torch.finfo(torch.float32).max:.3g}) for {int(torch.isinf(total).sum())} of {n} rollouts at step "
            f"{step} (rollout {row}: {parts}): rescale those rewards or lower their reward_weights."
        )


def warn_if_overflowing(advantages: torch.Tensor, weighted: torch.Tensor, names: list[str]) -> None:
    """A warning naming the reward function when advantages are so large that squaring them overflows float32:
    the gradient norm, a sum of squares of gradients that scale with them, is then likely inf (or nan), and
    clipping cannot save that step."""
    if torch.isfinite(advantages.double().square().sum().float()):
        return
    largest = torch.nan_to_num(weighted.double().abs(), nan=0.0).amax(dim=0)  # (num_funcs,)
    f = int(largest.argmax())
    logger.warning(
        "reward function %r returned rewards up to %.3g (times its reward weight): the advantages (up to %.3g) "
        "overflow float32 when squared, so the gradient norm is likely inf or nan and the model's weights can "
        "turn nan. Rescale that reward or lower its reward_weights.",
        names[f], largest[f].item(), advantages.abs().max().item(),
    )
