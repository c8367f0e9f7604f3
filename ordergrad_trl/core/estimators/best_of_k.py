"""Best-of-k estimators of related work: Max@k (Tang et al.), Pass@k Training (Chen et al.), PKPO."""

from __future__ import annotations

import functools
import math

import torch

from ..advantage import _order_statistic_pmf
from .registry import check_binary, check_k, prepare, register_estimator

__all__ = ["maxk_tang", "passk_chen", "pkpo"]


@register_estimator(
    "maxk_tang",
    advantage="k (max - max without i) in disjoint chunks of k; only a strict best is nonzero",
    unbiased_for="grad E[max of k]",
    centered="no (>= 0)",
    source="Tang et al. 2025",
    summary="unbiased for best@k (E[max of k]), not centered; N a multiple of k",
    min_group=lambda p: 2,  # in each chunk
    nan="chunk",
    unbiased=True,
    target=lambda p, n: ("ReMax", p["k"] or n),
)
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
    r, out = prepare(rewards, "maxk_tang")
    n = r.shape[-1]
    k = n if k is None else check_k(k, "maxk_tang", minimum=2)
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


@register_estimator(
    "passk_chen",
    advantage="(q_i - pass@k) / (sigma + 1e-6), closed form in (n, c, k)",
    unbiased_for="nothing (sigma rescales each group)",
    centered="exactly",
    source="Chen et al. 2025",
    summary="pass@k training, biased, centered, 0/1 rewards",
    binary=True,
    min_group=lambda p: p["k"] + 1,  # n = k: pass@k of the one k-subset is 0 or 1, sigma 0, every advantage 0
    unbiased=False,
    target=lambda p, n: ("ReMax", p["k"]),
)
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
    r, out = prepare(rewards, "passk_chen")
    k = check_k(k, "passk_chen")
    if r.shape[-1] < k:
        raise ValueError(f"passk_chen: groups of N={r.shape[-1]} rewards on the last axis, but k={k} needs N >= k")
    check_binary(r, "passk_chen", "use pkpo or ordergrad with objective='ReMax' for continuous rewards")
    valid = ~torch.isnan(r)
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


@register_estimator(
    "pkpo",
    advantage="n s^(loo-1)_i = k E[(r_i - max S')^+], S' a (k-1)-subset of the others",
    unbiased_for="grad E[max of k]",
    centered="no (>= 0)",
    source="Walder & Karkhanis 2025",
    summary="unbiased for best@k (E[max of k]), not centered",
    min_group=lambda p: p["k"],
    unbiased=True,
    target=lambda p, n: ("ReMax", p["k"]),
)
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
    r, out = prepare(rewards, "pkpo")
    n = r.shape[-1]
    k = check_k(k, "pkpo", minimum=2)
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
