"""MaxRL (Tajwar, Zeng et al. 2026) and its leave-one-out form: gradients of J_T = sum_{k<=T} pass@k / k, 0/1 rewards.

J_T is the Maclaurin truncation of log pass@1 (log p = -sum_k (1-p)^k / k, so J_T = log p + const + O((1-p)^T));
grad pass@k = k (1-p)^(k-1) grad p gives grad J_T = sum_{k<=T} (1-p)^(k-1) grad p, with p a prompt's success
probability. Both estimators refuse rewards other than 0/1 (NaN: unscorable); for other rewards the same objective,
sum_{k<=T} E[max of k] / k, is OrderGrad's preset `MaxRL:T` (docs/objectives.md).
"""

from __future__ import annotations

import functools

import torch

from .registry import check_binary, check_k, prepare, register_estimator

__all__ = ["maxrl", "maxrl_loo"]

_CONTINUOUS = "for other rewards use ordergrad with objective='MaxRL:T' (the same objective, any rewards)"


@register_estimator(
    "maxrl",
    advantage="(r_i - mean r) / mean r, i.e. n r_i / c - 1 for c successes; 0 when all fail",
    unbiased_for="grad J_(n-1), J_T = sum_{k<=T} pass@k / k (the all-fail 0 drops grad pass@n / n from J_n)",
    centered="exactly",
    source="Tajwar, Zeng et al. 2026",
    summary="MaxRL, unbiased for sum_{k<N} pass@k/k, centered, 0/1 rewards",
    binary=True,
    min_group=lambda p: 2,
    unbiased=True,
    target=lambda p, n: (f"MaxRL:{n - 1}", n - 1),
)
def maxrl(rewards: torch.Tensor) -> torch.Tensor:
    """MaxRL's advantage (arXiv:2602.02710): A_i = (r_i - mean r) / mean r over the group's n valid 0/1 rewards.

    With c successes that is n/c - 1 for a success and -1 for a failure. A group where every rollout fails
    (mean r = 0, the ratio undefined) gets 0. Exactly centered.

    What it estimates, exactly, with TRL's rollout mean (1/n) sum_i A_i grad log pi(o_i): the successes' part,
    (1/c) sum_{r_i=1} grad log pi(o_i) (0 when c = 0), has expectation grad J_n (the paper's estimator); the
    control variate -(1/n) sum_i grad log pi(o_i) would have mean 0 over all groups, but it is dropped from the
    all-fail groups, which shifts the mean by -(1-p)^(n-1) grad p = -grad pass@n / n. So the expectation is
    grad J_n - grad pass@n / n = grad J_(n-1): unbiased for J_T at T = n - 1 (no constant rescaling maps it to
    J_n: the ratio depends on p). OrderGrad with `objective="MaxRL:T"`, `k=T` is unbiased for the same J_T at
    any T < n (and for any rewards); `maxrl_loo` reaches T = n. NaN rollouts get 0 and are left out.
    """
    r, out = prepare(rewards, "maxrl")
    check_binary(r, "maxrl", _CONTINUOUS)
    valid = ~torch.isnan(r)
    n = valid.sum(-1, keepdim=True)  # (..., 1)
    c = torch.nansum(r, dim=-1, keepdim=True)  # (..., 1) successes
    adv = n * r / c.clamp(min=1) - 1.0  # (r_i - c/n) / (c/n)
    return torch.where(valid & (c > 0), adv, 0.0).to(out.dtype).to(out.device)


@functools.lru_cache(maxsize=64)
def _loo_weights(n: int, t: int) -> torch.Tensor:
    """`(n,)` float64: entry m is sum_{j<t} C(n-1-m, j) / C(n-1, j), the unbiased estimate of sum_{j<t} (1-p)^j
    from n-1 draws with m successes (a j-subset of them all fails). Needs 1 <= t <= n.

    Each ratio is a product over i < j of (n-1-m-i)/(n-1-i), in [0, 1]: cumulative products in float64 never
    overflow."""
    m = torch.arange(n, dtype=torch.float64)[:, None]  # (n, 1)
    i = torch.arange(t - 1, dtype=torch.float64)[None, :]  # (1, t-1): factor i enters from j = i+1 on
    ratios = ((n - 1 - m - i).clamp(min=0) / (n - 1 - i)).cumprod(1)  # (n, t-1), j = 1..t-1
    return 1.0 + ratios.sum(1)


@register_estimator(
    "maxrl_loo",
    advantage="(r_i - mean of the others) sum_{j<k} C(n-1-m_i, j) / C(n-1, j), m_i successes among the others",
    unbiased_for="grad J_k = grad sum_{j<=k} pass@j / j, any k <= n (k=None: J_n, MaxRL's target)",
    centered="no",
    source="this package, on MaxRL's objective",
    summary="leave-one-out MaxRL, unbiased for sum_{j<=k} pass@j/j, 0/1 rewards",
    binary=True,
    min_group=lambda p: max(2, p["k"] or 2),
    unbiased=True,
    target=lambda p, n: (f"MaxRL:{p['k'] or n}", p["k"] or n),
)
def maxrl_loo(rewards: torch.Tensor, *, k: int | None = None) -> torch.Tensor:
    """Leave-one-out MaxRL: unbiased for grad J_T, J_T = sum_{j<=T} pass@j / j, at any T = k <= n.

    A_i = (r_i - b_i) W_T(m_i), b_i = m_i / (n-1) the mean of the other n-1 rewards, m_i their successes, and
    W_T(m) = sum_{j<T} C(n-1-m, j) / C(n-1, j). Baseline and normalizer depend on the others only, so for a fixed
    rest of the group E[A_i grad log pi(o_i)] = W_T(m_i) grad p, and E[W_T(M)] over M ~ Bin(n-1, p) is
    sum_{j<T} (1-p)^j: exactly grad J_T (with TRL's rollout mean). `k=None` is T = n, where W = n / (m_i + 1):
    a success gets the same normalizer 1 / mean r as `maxrl`, and unlike `maxrl` the all-fail group needs no
    convention (every A_i is 0 by itself). T = 1 is `rloo`. Not centered (the group sum is > 0 when some but not all
    rollouts succeed). NaN rollouts get 0 and are left out; a group with fewer than max(2, T) valid rewards gets 0.
    """
    r, out = prepare(rewards, "maxrl_loo")
    size = r.shape[-1]
    if k is not None:
        check_k(k, "maxrl_loo")
        if size < k:
            raise ValueError(f"maxrl_loo: groups of N={size} rewards on the last axis, but k={k} needs N >= k")
    check_binary(r, "maxrl_loo", _CONTINUOUS)
    flat = r.reshape(-1, size)  # (G, N)
    valid = ~torch.isnan(flat)
    n = valid.sum(-1, keepdim=True)  # (G, 1)
    others = torch.nan_to_num(torch.nansum(flat, dim=-1, keepdim=True) - flat).long()  # (G, N) m_i
    if k is None:
        weight = n.to(flat.dtype) / (others + 1)  # float64: long / long would be float32
    else:
        weight = torch.zeros_like(flat)
        for group_n in n.unique().tolist():
            rows = n[:, 0] == group_n
            if group_n >= max(k, 2):
                weight[rows] = _loo_weights(group_n, k).to(flat.device)[others[rows].clamp(max=group_n - 1)]
    adv = (flat - others / (n - 1).clamp(min=1).to(flat.dtype)) * weight
    adv = torch.where(valid & (n >= max(k or 2, 2)), adv, 0.0)
    return adv.reshape(r.shape).to(out.dtype).to(out.device)
