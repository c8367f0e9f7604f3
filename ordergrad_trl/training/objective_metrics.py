"""`ordergrad/objective/<name>` metrics of `OrderGradTrainer` with one objective per reward function."""

from __future__ import annotations

import torch

from ..core.advantage import _float64_device, lstat_value


def log_objective_per_reward(trainer, per_func: torch.Tensor, metrics) -> None:
    """`ordergrad/objective/<name>` (J_f, unweighted) per function of `(num_groups, N, num_funcs)` rewards, and their
    weighted sum `ordergrad/objective` when all are defined (a function whose K_f exceeds the group size is not)."""
    group_size = per_func.shape[1]
    total = 0.0
    for f, (spec, name) in enumerate(zip(trainer.ordergrad_plan.per_reward, trainer.reward_func_names)):
        if group_size < spec.k:
            total = None
            continue
        exact = per_func[..., f].to(_float64_device(per_func)).double()  # the CPU where there is no float64
        values = lstat_value(exact, spec.weights)  # (num_groups,)
        value = torch.nanmean(values).item()
        metrics[f"ordergrad/objective/{name}"].append(value)
        if total is not None:
            total += trainer.reward_weights[f].item() * value
    if total is not None:
        metrics["ordergrad/objective"].append(total)
