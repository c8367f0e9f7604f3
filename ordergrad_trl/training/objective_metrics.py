"""`ordergrad/objective` (and `/<name>`, `/k`, `/schedule_stage`) metrics of `OrderGradTrainer`, for each batch."""

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


def log_objective(trainer, grouped: torch.Tensor, per_func: torch.Tensor, metrics) -> None:
    """The active objective's unbiased estimate on `(num_groups, N)` rewards (`ordergrad/objective`, when N >= K), its
    K and schedule stage; with one objective per reward function, `log_objective_per_reward` on `per_func`."""
    if trainer.ordergrad_plan.per_reward is not None:
        return log_objective_per_reward(trainer, per_func, metrics)
    if grouped.shape[-1] >= trainer.ordergrad_k:
        exact = grouped.to(_float64_device(grouped)).double()  # MPS has no float64: the CPU there
        values = lstat_value(exact, trainer.ordergrad_weights)  # (num_groups,), NaN if < K scorable
        metrics["ordergrad/objective"].append(torch.nanmean(values).item())
    metrics["ordergrad/k"].append(float(trainer.ordergrad_k))
    if trainer.ordergrad_plan.scheduled:
        metrics["ordergrad/schedule_stage"].append(float(trainer.ordergrad_stage))
