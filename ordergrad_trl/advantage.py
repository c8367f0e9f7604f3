"""Unbiased value and leave-one-out advantage of an L-statistic objective, batched over groups.

Setting (Parmas et al. 2026, OrderGrad): a prompt has N i.i.d. rollouts with rewards r_1..r_N, and the objective
is J = E[L(S)], L(S) = sum_j w_j (S sorted ascending)_j, over K < N draws. With S a uniform K-subset of the group
and r_(1) <= ... <= r_(N) the sorted rewards:

    value          v     = E[L(S)] = sum_m c_m r_(m),   c_m = sum_j w_j C(m-1, j-1) C(N-m, K-j) / C(N, K)
    include-one    q_i   = E[L(S) | i in S]
    leave-one-out  v^-i  = E[L(S) | S drawn from the other N-1]
    advantage      a_i   = q_i - v^-i = N/(N-K) (q_i - v)           (every group sums to zero: mean_i q_i = v)

v is the U-statistic of J (unbiased) and (K/N) sum_i a_i grad log p(x_i) is an unbiased estimate of grad J;
K=1 (or `Mean` at any K, up to the factor K) is RLOO.

How q is computed. Take neighbours t and t+1 in sorted order. Pair each K-subset holding t but not t+1 with
the same subset holding t+1 instead: nothing lies strictly between them, so the swapped-in item keeps its rank
j and L changes by w_j (r_(t+1) - r_(t)); subsets holding both are common to q_t and q_(t+1). Counting the
other K-1 members among the N-2 remaining items (t-1 below, N-t-1 above):

    q_(t+1) - q_t = h_t (r_(t+1) - r_(t)),    h_t = sum_j w_j C(t-1, j-1) C(N-t-1, K-j) / C(N-1, K-1)

So all q, up to a per-group constant that centering removes, are one cumulative sum of weighted gaps after one
sort: O(N log N) per group, a handful of batched ops for all groups. Because q moves only by gaps, tied rewards
get bit-identical advantages and a constant group gets exactly 0.0 by construction (several TRL losses branch on
the advantage's sign). The O(N K) tables are exact integer combinatorics (each ratio rounded once), cached per
(N, weights, device, dtype).

Conventions: weights are ascending (w[0] weighs the smallest draw), see `ordergrad_trl.objectives`.
NaN marks an unscorable reward: it gets advantage 0 and the rest of its group is ranked as a group of its own
size n (all 0 when n <= K).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from .objectives import rank_weights

__all__ = ["rank_weights", "lstat_value", "lstat_advantage"]


@functools.lru_cache(maxsize=512)
def _coefficients(n: int, weights: tuple[float, ...]) -> torch.Tensor:
    """`(2, n)` float64 rows for a group of n >= K valid rewards: value weights c, and N/(N-K) h (h padded by 0)."""
    k, comb = len(weights), math.comb
    rows = torch.zeros(2, n, dtype=torch.float64)
    c_nk, c_n1k1 = comb(n, k), comb(n - 1, k - 1)
    scale = n / (n - k) if n > k else 0.0  # no leave-one-out advantage without K+1 rewards
    for m in range(1, n + 1):
        for j in range(1, k + 1):
            rows[0, m - 1] += weights[j - 1] * (comb(m - 1, j - 1) * comb(n - m, k - j) / c_nk)
            if m < n:
                rows[1, m - 1] += weights[j - 1] * (comb(m - 1, j - 1) * comb(n - m - 1, k - j) / c_n1k1)
    rows[1] *= scale
    return rows


@functools.lru_cache(maxsize=64)
def _table(n: int, weights: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`(2, n)` coefficients of a full group, on the compute device and dtype."""
    return _coefficients(n, weights).to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=16)
def _ragged_table(n: int, weights: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`(n + 1, 2, n)`: entry v holds the coefficients for v valid rewards, zero-padded (all zero for v < K)."""
    table = torch.zeros(n + 1, 2, n, dtype=torch.float64)
    for valid in range(len(weights), n + 1):
        table[valid, :, :valid] = _coefficients(valid, weights)
    return table.to(device=device, dtype=dtype)


def _prepare(rewards, weights, need_more_than_k: bool):
    """Validate and sort: (sorted (G, N), order (G, N), weights tuple, valid counts (G,) or None if no NaN)."""
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.as_tensor(rewards)
    if rewards.dim() == 0:
        raise ValueError("rewards must have shape (..., N) with each group on the last axis, got a scalar")
    weights = torch.as_tensor(weights, dtype=torch.float64)
    if weights.dim() != 1 or weights.numel() == 0:
        raise ValueError(f"weights must be a non-empty 1-D sequence of K numbers, got shape {tuple(weights.shape)}")
    w = tuple(weights.tolist())
    if not all(math.isfinite(x) for x in w):
        raise ValueError(f"weights must be finite, got {w}")
    k, n = len(w), rewards.shape[-1]
    if n <= k if need_more_than_k else n < k:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} hold groups of N={n} on the last axis, but K={k} weights "
            f"need N {'>' if need_more_than_k else '>='} K (N rollouts per prompt, K draws per objective)"
        )
    # half types compute in float32: cumulative sums in bfloat16 would drown the signal
    compute = rewards.dtype if rewards.dtype in (torch.float32, torch.float64) else torch.float32
    if not rewards.is_floating_point():
        compute = torch.float64
    xs, order = rewards.reshape(-1, n).to(compute).sort(dim=-1)  # (G, N) ascending, NaN last
    valid = None
    # after sorting, -inf sits first and NaN/+inf last, so two columns decide the common all-finite case
    if not bool(torch.isfinite(xs[:, 0]).all() & torch.isfinite(xs[:, -1]).all()):
        if bool(torch.isinf(xs).any()):
            raise ValueError(f"rewards of shape {tuple(rewards.shape)} contain +-inf; use NaN to mark unscorable")
        valid = (~torch.isnan(xs)).sum(-1)  # (G,)
    return xs, order, w, valid


def _out_dtype(rewards) -> torch.dtype:
    dtype = getattr(rewards, "dtype", None)
    return dtype if dtype is not None and dtype.is_floating_point else torch.float64


def lstat_value(rewards: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Unbiased estimate (U-statistic) of J = E[sum_j w_j R_(j:K)] from each group of N >= K rewards.

    Args:
        rewards: `(..., N)`; NaN entries are left out (a group with fewer than K others gives NaN).
        weights: `(K,)` ascending rank weights, e.g. `rank_weights("ReMax", 4)`.

    Returns:
        `(...)` in the rewards' floating dtype. For 0/1 rewards ReMax gives pass@K and ReMin pass^K.
    """
    xs, _, w, valid = _prepare(rewards, weights, need_more_than_k=False)
    n = xs.shape[-1]
    if valid is None:
        value = xs @ _table(n, w, xs.device, xs.dtype)[0]  # (G,)
    else:
        coef = _ragged_table(n, w, xs.device, xs.dtype)[valid, 0]  # (G, N)
        value = (torch.nan_to_num(xs) * coef).sum(-1)
        value = torch.where(valid >= len(w), value, torch.nan)
    return value.reshape(rewards.shape[:-1]).to(_out_dtype(rewards))


def lstat_advantage(rewards: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Leave-one-out advantage a_i = E[L(S) | i in S] - E[L(S) | S from the others] of every rollout.

    Not multiplied by K: the unbiased policy-gradient estimate is (K/N) sum_i a_i grad log p(x_i), so a
    trainer whose loss averages over rollouts uses K * a_i (with K=1 or `Mean` that is RLOO).

    Args:
        rewards: `(..., N)` with N > K; NaN marks an unscorable rollout (advantage 0; the rest of its group is
            ranked as a smaller group, all 0 when K or fewer remain). +-inf raises.
        weights: `(K,)` ascending rank weights, e.g. `rank_weights("TopM:2", 4)`.

    Returns:
        `(..., N)` in the rewards' floating dtype; every group sums to zero and tied rewards get identical values.
    """
    # 1. sort; the gaps between sorted neighbours are all the advantage depends on
    xs, order, w, valid = _prepare(rewards, weights, need_more_than_k=True)
    n = xs.shape[-1]
    gaps = xs[:, 1:] - xs[:, :-1]  # (G, N-1), >= 0; NaN after the last valid reward
    if valid is None:
        h = _table(n, w, xs.device, xs.dtype)[1, :-1]  # (N-1,)
    else:
        gaps = torch.nan_to_num(gaps)  # padded h is 0 there, and NaN * 0 would still be NaN
        h = _ragged_table(n, w, xs.device, xs.dtype)[valid, 1, :-1]  # (G, N-1)

    # 2. include-one values up to a per-group constant, already scaled by N/(N-K): q_1 = 0, q_(t+1) = q_t + h_t gap_t
    q = torch.nn.functional.pad(torch.cumsum(gaps * h, dim=-1), (1, 0))  # (G, N)

    # 3. center: mean_i q_i = v in exact arithmetic, so a = N/(N-K) (q - v) is q minus its group mean
    if valid is None:
        adv = q - q.mean(dim=-1, keepdim=True)  # (G, N)
    else:
        in_group = torch.arange(n, device=xs.device) < valid[:, None]  # (G, N)
        mean = (q * in_group).sum(-1, keepdim=True) / valid.clamp(min=1)[:, None]
        adv = torch.where(in_group & (valid[:, None] > len(w)), q - mean, 0.0)

    # 4. back to the input order
    out = torch.empty_like(adv).scatter_(-1, order, adv)
    return out.reshape(rewards.shape).to(_out_dtype(rewards))
