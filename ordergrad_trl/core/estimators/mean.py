"""Estimators centered on the group: OrderGrad, GRPO, RLOO, RS-GRPO; and `scale_advantages` (TRL's `scale_rewards`)."""

from __future__ import annotations

import math

import torch

from ..advantage import _float64_device, lstat_advantage
from ..objectives import DEFAULT_K, DEFAULT_OBJECTIVE, rank_weights
from .registry import check_k, prepare, register_estimator

__all__ = ["SCALES", "ordergrad", "grpo", "rloo", "rs_grpo", "scale_advantages"]


@register_estimator(
    "ordergrad",
    advantage="K (E[L(S) \\| i in S] - E[L(S) \\| S from the others]), S a K-subset, L the L-statistic",
    unbiased_for="grad E[sum_j w_j R_(j:K)], any objective (`ordergrad_objective`)",
    centered="exactly",
    source="this package (OrderGrad)",
    summary="default; unbiased for any L-statistic objective, centered",
    min_group=lambda p: p["k"] + 1,
    unbiased=True,
    target=lambda p, n: (p["objective"], p["k"]),
)
def ordergrad(
    rewards: torch.Tensor, *, objective: str | torch.Tensor = DEFAULT_OBJECTIVE, k: int = DEFAULT_K
) -> torch.Tensor:
    """OrderGrad (Parmas et al. 2026): `K * lstat_advantage(rewards, rank_weights(objective, K))`.

    `objective`: a preset or weights, any form `rank_weights` takes; called with a stage (`ESTIMATORS["ordergrad"]
    (rewards, stage)`, how the trainers call it), it is the stage's `(K,)` weights, which are only checked here.

    J = E[sum_j w_j R_(j:K)] over K i.i.d. rewards. With S a uniform K-subset of the group,
    A_i = K (E[L(S) | i in S] - E[L(S) | S drawn from the other n-1]): unbiased for grad J, exactly centered, tied
    rewards get identical advantages. `objective="Mean"` (any K) is `rloo`. Needs N > K; NaN rollouts get 0 and a
    group with n <= K valid rewards gets all 0 (see `ordergrad_trl.core.advantage`).
    """
    r, out = prepare(rewards, "ordergrad")
    adv = k * lstat_advantage(r, rank_weights(objective, check_k(k, "ordergrad")))
    return adv.to(out.dtype).to(out.device)


SCALES = ("none", "group", "batch")  # TRL's scale_rewards values: the vocabulary of the config, the plan and verl


def _nanstd(x: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Bessel-corrected std ignoring NaN, NaN with fewer than 2 values (what `trl.trainer.utils.nanstd` computes)."""
    dims = dim if dim is not None else tuple(range(x.dim()))
    mean = torch.nanmean(x, dim=dims, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dims, keepdim=keepdim)
    ss = torch.nansum((x - mean) ** 2, dim=dims, keepdim=keepdim)
    return torch.where(count > 1, (ss / (count - 1).clamp(min=1)).sqrt(), torch.nan)


def scale_advantages(advantages: torch.Tensor, rewards: torch.Tensor, scale: str) -> torch.Tensor:
    """TRL's `scale_rewards`: `advantages / (std + 1e-4)`, the Bessel-corrected std of each group's rewards
    (`"group"`, a group on the last axis) or of all rewards (`"batch"`), NaN rewards left out; `"none"` returns them
    unchanged. Computed in float64, returned in the advantages' dtype and device; a std of one reward gives NaN."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES} (TRL's scale_rewards), got {scale!r}")
    if scale == "none":
        return advantages
    r = rewards.to(_float64_device(rewards)).to(torch.float64)
    std = _nanstd(r, dim=-1, keepdim=True) if scale == "group" else _nanstd(r)  # (..., 1) or ()
    scaled = advantages.to(r.device).to(torch.float64) / (std + 1e-4)
    return scaled.to(advantages.dtype).to(advantages.device)


@register_estimator(
    "grpo",
    advantage="r_i - mean; `scale_rewards` (the trainer's, or `scale=`) divides by a std after it",
    unbiased_for="nothing with a std (it rescales each group); `(n-1)/n` grad E[R] without",
    centered="exactly",
    source="Shao et al. 2024; TRL 1.16",
    summary="TRL's GRPO with scale_rewards='group', centered",
    min_group=lambda p: 2,
    unbiased=False,
    target=lambda p, n: ("Mean", 1),  # the expected reward, its std weighting aside
)
def grpo(rewards: torch.Tensor, *, scale: str = "none") -> torch.Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath), as TRL 1.16's `GRPOTrainer` computes it (`scale_rewards`).

    A_i = r_i - group mean (`scale="none"`, the default: how the registry and the trainers call it, applying their
    `scale_rewards` afterwards with `scale_advantages`), or (r_i - group mean) / (std + 1e-4) with the
    Bessel-corrected std of the group (`"group"`: TRL's default GRPO) or of all rewards passed in (`"batch"`).
    Exactly centered per group. Biased for every objective whenever it divides by a std (a data-dependent per-group
    scale); with `"none"` it equals `(n-1)/n * rloo`. NaN rollouts are left out of means and stds (TRL's nan-aware
    statistics) and get 0; a group with one valid reward gets 0.
    """
    if scale not in SCALES:
        raise ValueError(f"grpo: scale must be one of {SCALES} (TRL's scale_rewards), got {scale!r}")
    r, out = prepare(rewards, "grpo")
    adv = scale_advantages(r - torch.nanmean(r, dim=-1, keepdim=True), r, scale)  # (..., N)
    return torch.nan_to_num(adv, nan=0.0).to(out.dtype).to(out.device)  # NaN: unscorable, or a std of one reward


@register_estimator(
    "rloo",
    advantage="r_i - mean of the other n-1",
    unbiased_for="grad E[R]",
    centered="exactly",
    source="Kool et al. 2019; Ahmadian et al. 2024",
    summary="unbiased for the mean, centered",
    min_group=lambda p: 2,
    unbiased=True,
    target=lambda p, n: ("Mean", 1),
)
def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024): A_i = r_i - mean of the other valid rewards of the group.

    Unbiased for grad E[R] and exactly centered; equals `ordergrad(objective="Mean")` at any K (on groups of more
    than K valid rewards). NaN rollouts get 0 and are left out of the others' baselines; a group with one valid
    reward gets 0.
    """
    r, out = prepare(rewards, "rloo")
    valid = ~torch.isnan(r)
    n = valid.sum(-1, keepdim=True)  # (..., 1)
    total = torch.nansum(r, dim=-1, keepdim=True)
    # r_i - (total - r_i)/(n-1) = (n r_i - total)/(n-1)
    adv = (n * r - total) / (n - 1).clamp(min=1)
    return torch.where(valid & (n > 1), adv, 0.0).to(out.dtype).to(out.device)


@register_estimator(
    "rs_grpo",
    advantage="(exp(beta r_i) / mean_j exp(beta r_j) - 1) / beta",
    unbiased_for="nothing (a ratio; consistent for grad (1/beta) log E[exp(beta R)] as N grows)",
    centered="exactly",
    source="Jiang et al. 2025",
    summary="risk-seeking (beta > 0) or averse, biased, centered",
    min_group=lambda p: 2,
    unbiased=False,  # its objective, (1/beta) log E[exp(beta R)], is no L-statistic: no target
)
def rs_grpo(rewards: torch.Tensor, *, beta: float = 2.0) -> torch.Tensor:
    """Risk-sensitive GRPO advantage of Jiang et al. 2025 ("Risk-Sensitive RL for Alleviating Exploration Dilemmas
    in Large Language Models", arXiv:2509.24261, github.com/Jackory/RS-GRPO `compute_rs_grpo_advantage`).

    Objective J_beta = (1/beta) log E[exp(beta R)] (beta > 0 leans to the max, < 0 to the min, -> 0 the mean);
    A_i = (exp(beta r_i) / mean_j exp(beta r_j) - 1) / beta over the group (i included), computed stably as
    expm1(beta (r_i - soft)) / beta with soft = (1/beta) log mean_j exp(beta r_j). beta = 0 gives r_i - mean.
    Exactly centered; a ratio estimate, so biased for grad J_beta at finite N (consistent as N grows). NaN rollouts
    get 0 and are left out; a group with one valid reward gets 0 (the reference code instead gives it
    (exp(beta r) - 1) / beta, treating a missing group as soft = 0).
    """
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta):
        raise ValueError(f"rs_grpo: beta must be a finite number, got {beta!r}")
    r, out = prepare(rewards, "rs_grpo")
    valid = ~torch.isnan(r)
    n = valid.sum(-1, keepdim=True)  # (..., 1)
    if beta == 0:
        adv = r - torch.nanmean(r, dim=-1, keepdim=True)
    else:
        # shift by the max (beta > 0) or min so that beta * d <= 0: no overflow; expm1/log1p keep small beta exact
        pivot = torch.nan_to_num(r, nan=-math.inf if beta > 0 else math.inf)
        pivot = pivot.amax(-1, keepdim=True) if beta > 0 else pivot.amin(-1, keepdim=True)  # (..., 1)
        d = r - pivot
        log_mean = torch.log1p(torch.nansum(torch.expm1(beta * d), dim=-1, keepdim=True) / n.clamp(min=1))
        adv = torch.expm1(beta * d - log_mean) / beta  # beta (r_i - soft) = beta d_i - log mean_j exp(beta d_j)
    return torch.where(valid & (n > 1), adv, 0.0).to(out.dtype).to(out.device)
