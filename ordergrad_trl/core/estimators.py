"""Group advantage estimators behind one signature, for comparing OrderGrad with the estimators of related work.

Every estimator maps groups of rewards (one group per prompt, its rollouts on the last axis) to advantages:

    fn(rewards: Tensor (G, N), **params) -> Tensor (G, N)        # leading dims (..., N) work the same way

Conventions shared by all of them:

- **Advantages as they reach the loss.** TRL's losses average over rollouts, so per group the policy-gradient
  estimate is `(1/N) sum_i A_i grad log p(x_i)`. "Unbiased for J" below means that the expectation of exactly
  this, over N i.i.d. rollouts, is `grad J` at every finite N. That is why `ordergrad` carries the factor K, `pkpo`
  the factor N of the paper's summed-loss transform and `maxk_tang` the factor k. Biased estimators are returned
  with their paper's scale.
- **NaN marks an unscorable rollout:** its advantage is 0 and it is left out of its group's statistics, so the rest
  of the group is treated as a group of its own size n (per-estimator minimum n below; smaller groups get all 0).
  `+-inf` raises `ValueError`.
- Computed in float64 (on the CPU for devices without float64, such as Apple MPS), returned on the rewards' device
  in their floating dtype (float64 for integer rewards, float32 on devices without float64).

| name        | A_i (group of n valid rewards)                          | unbiased for            | centered | rewards |
|-------------|---------------------------------------------------------|-------------------------|----------|---------|
| `ordergrad` | K (q_i - v^-i) of the L-statistic, see `advantage`      | grad E[sum w_j R_(j:K)] | exactly  | any     |
| `grpo`      | (r_i - mean) / (std + 1e-4)                             | nothing (std rescales)  | exactly  | any     |
| `rloo`      | r_i - mean of the other n-1                             | grad E[R]               | exactly  | any     |
| `maxk_tang` | k (max - max without i), in disjoint chunks of k        | grad E[max of k]        | no, >= 0 | any     |
| `passk_chen`| (q_i - pass@k) / (sigma + 1e-6), closed form in n, c, k | nothing (sigma rescale) | exactly  | 0/1     |
| `pkpo`      | k E[(r_i - max S')^+], S' a (k-1)-subset of the others  | grad E[max of k]        | no, >= 0 | any     |
| `rs_grpo`   | (exp(beta r_i) / mean_j exp(beta r_j) - 1) / beta       | nothing (a ratio)       | exactly  | any     |

"Exactly centered" means every group's advantages sum to zero (the tests check it, and check that the others are
not). `grpo` with `scale="none"` is `(n-1)/n` times `rloo`, so unbiased for `(n-1)/n grad E[R]`. `rs_grpo` is a
consistent (N -> infinity) but finite-N biased estimate of `grad (1/beta) log E[exp(beta R)]`.

Use `get_estimator(name)` (or `ESTIMATORS`) to look one up, `bind_estimator(name, **params)` to fix its parameters
and check them once. Trainers call each one alike, `ESTIMATOR_SPECS[name](rewards, context)` with one shared
`EstimatorContext` (as verl's estimators share one signature); the std of `scale_rewards` is `scale_advantages`,
applied once after any of them (TRL's GRPO is `grpo` then `scale_advantages(..., "group")`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from .advantage import _float64_device, _order_statistic_pmf, _out_dtype, lstat_advantage
from .objectives import rank_weights

__all__ = [
    "EstimatorContext",
    "EstimatorSpec",
    "ESTIMATOR_SPECS",
    "scale_advantages",
    "ESTIMATORS",
    "get_estimator",
    "estimator_params",
    "bind_estimator",
    "ordergrad",
    "grpo",
    "rloo",
    "maxk_tang",
    "passk_chen",
    "pkpo",
    "rs_grpo",
]


def _prepare(rewards, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 `(..., N)` copy of the rewards, and an empty tensor with the device and dtype to return (for
    `.to(out.dtype).to(out.device)`, cast first: MPS cannot hold float64); raises on a scalar or +-inf."""
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.as_tensor(rewards)
    if rewards.dim() == 0:
        raise ValueError(f"{name}: rewards must have shape (G, N) with each group on the last axis, got a scalar")
    if rewards.is_complex() or rewards.dtype == torch.bool:
        raise ValueError(f"{name}: rewards must be real numbers, got dtype {rewards.dtype}")
    out = torch.empty(0, dtype=_out_dtype(rewards), device=rewards.device)
    r = rewards.to(_float64_device(rewards)).to(torch.float64)
    if bool(torch.isinf(r).any()):
        raise ValueError(f"{name}: rewards of shape {tuple(r.shape)} contain +-inf; use NaN to mark unscorable")
    return r, out


def _check_k(k, name: str, minimum: int = 1) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < minimum:
        raise ValueError(f"{name}: k must be an integer >= {minimum}, got {k!r}")
    return k


def ordergrad(rewards: torch.Tensor, *, objective: str = "TopM:2", k: int = 4) -> torch.Tensor:
    """OrderGrad (Parmas et al. 2026): `K * lstat_advantage(rewards, rank_weights(objective, K))`.

    J = E[sum_j w_j R_(j:K)] over K i.i.d. rewards. With S a uniform K-subset of the group,
    A_i = K (E[L(S) | i in S] - E[L(S) | S drawn from the other n-1]): unbiased for grad J, exactly centered, tied
    rewards get identical advantages. `objective="Mean"` (any K) is `rloo`. Needs N > K; NaN rollouts get 0 and a
    group with n <= K valid rewards gets all 0 (see `ordergrad_trl.core.advantage`).
    """
    r, out = _prepare(rewards, "ordergrad")
    adv = k * lstat_advantage(r, rank_weights(objective, _check_k(k, "ordergrad")))
    return adv.to(out.dtype).to(out.device)


_GRPO_SCALES = ("group", "batch", "none")


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
    if scale not in _GRPO_SCALES:
        raise ValueError(f"scale must be one of {_GRPO_SCALES} (TRL's scale_rewards), got {scale!r}")
    if scale == "none":
        return advantages
    r = rewards.to(_float64_device(rewards)).to(torch.float64)
    std = _nanstd(r, dim=-1, keepdim=True) if scale == "group" else _nanstd(r)  # (..., 1) or ()
    scaled = advantages.to(r.device).to(torch.float64) / (std + 1e-4)
    return scaled.to(advantages.dtype).to(advantages.device)


def grpo(rewards: torch.Tensor, *, scale: str = "group") -> torch.Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath), as TRL 1.16's `GRPOTrainer` computes it (`scale_rewards`).

    A_i = (r_i - group mean) / (std + 1e-4), std the Bessel-corrected std of the group (`scale="group"`) or of all
    rewards passed in (`"batch"`), or A_i = r_i - group mean (`"none"`). Exactly centered per group. Biased for every
    objective whenever it divides by a std (a data-dependent per-group scale); with `"none"` it equals
    `(n-1)/n * rloo`. NaN rollouts are left out of means and stds (TRL's nan-aware statistics) and get 0; a group
    with one valid reward gets 0.
    """
    if scale not in _GRPO_SCALES:
        raise ValueError(f"grpo: scale must be one of {_GRPO_SCALES} (TRL's scale_rewards), got {scale!r}")
    r, out = _prepare(rewards, "grpo")
    adv = scale_advantages(r - torch.nanmean(r, dim=-1, keepdim=True), r, scale)  # (..., N)
    return torch.nan_to_num(adv, nan=0.0).to(out.dtype).to(out.device)  # NaN: unscorable, or a std of one reward


def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024): A_i = r_i - mean of the other valid rewards of the group.

    Unbiased for grad E[R] and exactly centered; equals `ordergrad(objective="Mean")` at any K (on groups of more
    than K valid rewards). NaN rollouts get 0 and are left out of the others' baselines; a group with one valid
    reward gets 0.
    """
    r, out = _prepare(rewards, "rloo")
    valid = ~torch.isnan(r)
    n = valid.sum(-1, keepdim=True)  # (..., 1)
    total = torch.nansum(r, dim=-1, keepdim=True)
    # r_i - (total - r_i)/(n-1) = (n r_i - total)/(n-1)
    adv = (n * r - total) / (n - 1).clamp(min=1)
    return torch.where(valid & (n > 1), adv, 0.0).to(out.dtype).to(out.device)


def maxk_tang(rewards: torch.Tensor, *, k: int | None = None) -> torch.Tensor:
    """Leave-one-out max@k gradient of Tang et al. 2025 ("Optimizing language models for inference-time objectives
    using reinforcement learning", ICML 2025, arXiv:2503.19595), their unbiased estimator for f = max.

    The group is cut into N/k disjoint chunks of k consecutive rollouts (`k=None`: one chunk, k = N). Within a
    chunk, A_i = k (max_j r_j - max_{j != i} r_j): only the strictly best rollout is nonzero, with k times the gap
    to the runner-up. Ties at the top give 0 to everyone; that is the leave-one-out formula itself (removing one of
    several tied best does not change the max), not a convention. Unbiased for grad E[max of k] (the factor k turns
    the paper's summed loss into TRL's rollout mean); never negative, so not centered. The paper's biased variant
    that centers these advantages is not implemented here. NaN rollouts get 0 and are left out of their chunk's
    max; a chunk with fewer than 2 valid rewards gets 0.
    """
    r, out = _prepare(rewards, "maxk_tang")
    n = r.shape[-1]
    k = n if k is None else _check_k(k, "maxk_tang", minimum=2)
    if n % k:
        raise ValueError(f"maxk_tang: group size N={n} must be a multiple of k={k} (disjoint chunks of k rollouts)")
    chunks = r.reshape(*r.shape[:-1], n // k, k)  # (..., N/k, k)
    if k == 1:  # a one-rollout group has no leave-one-out baseline
        return torch.zeros_like(r).to(out.dtype).to(out.device)
    top2 = torch.nan_to_num(chunks, nan=-math.inf).topk(2, dim=-1).values  # (..., N/k, 2), NaN as -inf
    best, second = top2[..., :1], top2[..., 1:]
    is_best = (chunks == best) & (best > second)  # a unique best with a valid runner-up (second > -inf)
    adv = torch.where(is_best & (second > -math.inf), k * (best - second), 0.0)
    return adv.reshape(r.shape).to(out.dtype).to(out.device)


@functools.lru_cache(maxsize=64)
def _passk_table(n_max: int, k: int) -> torch.Tensor:
    """`(n_max+1, n_max+1, 2)`: for n valid, c correct: [C(n-c, k)/C(n, k), C(n-c-1, k-1)/C(n-1, k-1)], 0 if n < k.

    Both are products over i < c of (n-k-i)/(n-i) and (n-k-i)/(n-1-i) (the chance that c draws without replacement
    all miss a k-subset): float64 cumulative products of exactly represented ratios, each in [0, 1], so no overflow
    at any n and underflow only below 1e-308."""
    n = torch.arange(n_max + 1, dtype=torch.float64)[:, None]  # (n_max+1, 1)
    i = torch.arange(n_max, dtype=torch.float64)[None, :]  # (1, n_max): factor i enters from c = i+1 on
    free = (n - k - i).clamp(min=0)  # hits 0 once c > n-k: C(n-c, k) = 0
    table = torch.ones(n_max + 1, n_max + 1, 2, dtype=torch.float64)
    table[:, 1:, 0] = (free / (n - i).clamp(min=1)).cumprod(1)
    table[:, 1:, 1] = (free / (n - 1 - i).clamp(min=1)).cumprod(1)
    table[:k] = 0.0  # rows n < k
    table[:, :, 1] *= torch.arange(n_max + 1)[:, None] > torch.arange(n_max + 1)[None, :]  # c = n: no term
    return table


def passk_chen(rewards: torch.Tensor, *, k: int = 4) -> torch.Tensor:
    """Analytic Pass@k-training advantage of Chen et al. 2025 ("Pass@k Training for Adaptively Balancing
    Exploration and Exploitation of Large Reasoning Models", arXiv:2508.10751, github.com/RUCAIBox/Passk_Training).

    For binary rewards with n valid rollouts of which c are correct (N_neg = n - c):

        R = 1 - C(N_neg, k) / C(n, k),   sigma = sqrt(R (1 - R))
        A_pos = (1 - R) / (sigma + 1e-6),   A_neg = (1 - R - C(N_neg - 1, k - 1) / C(n - 1, k - 1)) / (sigma + 1e-6)

    (the 1e-6 is from their released code/passk_adv.py; the formula in their README has none). This is GRPO on the
    pass@k of all k-subsets: A_i = (q_i - R) / sigma with q_i = E[max over a k-subset | i in it], so it equals
    `ordergrad(objective="ReMax")` times (n - k) / (n k (sigma + 1e-6)) on every group: exactly centered, biased
    (sigma rescales each group). Rewards must be 0/1 (NaN allowed: advantage 0, left out of n and c); a group with
    n < k valid rewards gets 0.
    """
    r, out = _prepare(rewards, "passk_chen")
    k = _check_k(k, "passk_chen")
    if r.shape[-1] < k:
        raise ValueError(f"passk_chen: groups of N={r.shape[-1]} rewards on the last axis, but k={k} needs N >= k")
    valid = ~torch.isnan(r)
    if not bool(((r[valid] == 0) | (r[valid] == 1)).all()):
        raise ValueError("passk_chen: rewards must be binary (0 or 1, NaN for unscorable); use pkpo or ordergrad "
                         "with objective='ReMax' for continuous rewards")
    n = valid.sum(-1)  # (...,)
    c = torch.nansum(r, dim=-1).long()  # (...,)
    ratios = _passk_table(r.shape[-1], k).to(r.device)[n, c]  # (..., 2)
    pass_k = 1.0 - ratios[..., 0]
    sigma = (pass_k * (1.0 - pass_k)).sqrt() + 1e-6
    pos = (1.0 - pass_k) / sigma
    neg = (1.0 - pass_k - ratios[..., 1]) / sigma
    adv = torch.where(r == 1, pos[..., None], neg[..., None])
    return torch.where(valid & (n >= k)[..., None], adv, 0.0).to(out.dtype).to(out.device)


@functools.lru_cache(maxsize=64)
def _pkpo_table(n_max: int, k: int) -> torch.Tensor:
    """`(n_max+1, n_max-1)`: row n holds k P(max S' <= x_(s)) for s = 1..n-1, S' a uniform (k-1)-subset of n-1.

    P(max S' = x_(m)) = C(m-1, k-2) / C(n-1, k-1) for the m-th smallest of the others, the distribution of the
    (k-1)-th order statistic (`_order_statistic_pmf`); rows n < k are zero.
    """
    table = torch.zeros(n_max + 1, max(n_max - 1, 0), dtype=torch.float64)
    for n in range(k, n_max + 1):  # the row's pmf starts at m = k-1: no (k-1)-subset has a smaller max
        pmf = _order_statistic_pmf(n - 1, k - 1, torch.tensor([k - 1]))[0]  # (n-k+1,): m = k-1 .. n-1
        table[n, k - 2 : n - 1] = k * pmf.cumsum(0)
    return table


def pkpo(rewards: torch.Tensor, *, k: int = 4) -> torch.Tensor:
    """PKPO (Walder & Karkhanis 2025, "Pass@K Policy Optimization: Solving Harder Reinforcement Learning Problems",
    arXiv:2505.15201): the leave-one-out-minus-one reward transform s^(loo-1) the paper recommends, for the unbiased
    max@k (binary rewards: pass@k) gradient, times n for TRL's rollout-mean loss.

    s_i = (k/n) E[max(S) | S a k-subset holding i] minus the baseline (k/n) E[max S'] over (k-1)-subsets S' of the
    other n-1, which simplifies to

        A_i = n s^(loo-1)_i = k E_{S'}[(r_i - max S')^+]

    i.e. k times the expected improvement of rollout i over the best of k-1 others. Unbiased for grad E[max of k];
    never negative, so not centered. With binary rewards, failures get exactly 0 and successes
    k (1 - pass@(k-1) estimate of the others). Tied rewards get identical advantages. Its group mean is
    k (max@k - max@(k-1) estimates), and the rest is a mix of OrderGrad advantages:
    A - mean(A) = (n-k)/n ordergrad(ReMax, k) + k/n ordergrad(ReMax, k-1) (subtracting that mean would bias it).
    Needs 2 <= k <= N; NaN rollouts get 0 and are left out; a group with n < k valid rewards gets 0.
    """
    r, out = _prepare(rewards, "pkpo")
    n = r.shape[-1]
    k = _check_k(k, "pkpo", minimum=2)
    if n < k:
        raise ValueError(f"pkpo: groups of N={n} rewards on the last axis, but k={k} needs N >= k")
    flat = r.reshape(-1, n)
    xs, order = flat.sort(dim=-1)  # (G, N) ascending, NaN last
    valid = (~torch.isnan(xs)).sum(-1)  # (G,)
    gaps = torch.nan_to_num(xs[:, 1:] - xs[:, :-1])  # (G, N-1), table is 0 past the last valid gap
    coef = _pkpo_table(n, k).to(r.device)[valid]  # (G, N-1)
    # x_(t) - x_(m) is a sum of gaps, so A_(t) = sum_{s<t} gap_s * k P(max S' <= x_(s)); tied rewards share it exactly
    adv = torch.nn.functional.pad(torch.cumsum(gaps * coef, dim=-1), (1, 0))  # (G, N)
    adv = torch.where(torch.arange(n, device=r.device) < valid[:, None], adv, 0.0)
    return torch.empty_like(adv).scatter_(-1, order, adv).reshape(r.shape).to(out.dtype).to(out.device)


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
    r, out = _prepare(rewards, "rs_grpo")
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


@dataclass(frozen=True)
class EstimatorContext:
    """Everything an estimator is called with besides the rewards: one signature for all of them."""

    objective: str = "TopM:2"  # the L-statistic objective (read by `ordergrad` only)
    k: int = 4  # K, the rollouts the objective is defined over
    options: Mapping[str, Any] = field(default_factory=dict)  # the estimator's own, e.g. {"beta": 2.0}


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator: its function, its keyword parameters with defaults, and which of them the context's
    `objective` / `k` fill (the rest are its own options, e.g. `rs_grpo`'s beta)."""

    fn: Callable[..., torch.Tensor]
    params: Mapping[str, Any]
    reads: tuple[str, ...] = ()

    @property
    def options(self) -> dict[str, Any]:
        return {name: value for name, value in self.params.items() if name not in self.reads}

    def __call__(self, rewards: torch.Tensor, context: EstimatorContext) -> torch.Tensor:
        """`(..., N)` rewards -> `(..., N)` advantages."""
        return self.fn(rewards, **{name: getattr(context, name) for name in self.reads}, **context.options)


ESTIMATOR_SPECS: Mapping[str, EstimatorSpec] = MappingProxyType({
    "ordergrad": EstimatorSpec(ordergrad, {"objective": "TopM:2", "k": 4}, ("objective", "k")),
    "grpo": EstimatorSpec(functools.partial(grpo, scale="none"), {}),  # its std: `scale_advantages`, by the caller
    "rloo": EstimatorSpec(rloo, {}),
    "maxk_tang": EstimatorSpec(maxk_tang, {"k": None}, ("k",)),
    "passk_chen": EstimatorSpec(passk_chen, {"k": 4}, ("k",)),
    "pkpo": EstimatorSpec(pkpo, {"k": 4}, ("k",)),
    "rs_grpo": EstimatorSpec(rs_grpo, {"beta": 2.0}),
})  # fmt: skip

# name -> the function itself (with its own keyword parameters, e.g. `grpo(rewards, scale="group")`)
ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    fn.__name__: fn for fn in (ordergrad, grpo, rloo, maxk_tang, passk_chen, pkpo, rs_grpo)
}


def get_estimator(name: str) -> Callable[..., torch.Tensor]:
    """The estimator registered under `name` (case-insensitive); `ValueError` listing the valid names otherwise."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in ESTIMATORS:
        raise ValueError(f"Unknown advantage estimator {name!r}; valid names: {', '.join(ESTIMATORS)}")
    return ESTIMATORS[key]


def estimator_params(name: str) -> dict[str, object]:
    """The keyword parameters of estimator `name` and their defaults (`grpo`'s std is `scale_advantages`')."""
    get_estimator(name)
    return dict(ESTIMATOR_SPECS[name.strip().lower()].params)


def bind_estimator(name: str, *, num_generations: int | None = None, **params) -> Callable[..., torch.Tensor]:
    """`rewards (G, N) -> advantages (G, N)` with `params` fixed, checked now rather than at the first batch.

    Args:
        name: a key of `ESTIMATORS`.
        num_generations: the group size N, if known: the estimator is then run once on a zero group of that size,
            so that a bad parameter or an N that does not fit (e.g. `ordergrad` with N <= K) raises here.
        **params: the estimator's keyword parameters (see `estimator_params(name)`); unknown names raise.

    Raises:
        ValueError: unknown estimator or parameter name, or a bad parameter value.
    """
    fn = ESTIMATOR_SPECS[get_estimator(name).__name__].fn
    accepted = estimator_params(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"Estimator {name!r} takes no parameter(s) {unknown}; it accepts: {', '.join(accepted) or 'none'}"
        )
    bound = functools.partial(fn, **params)
    if num_generations is not None:
        bound(torch.zeros(1, num_generations, dtype=torch.float64))
    return bound
